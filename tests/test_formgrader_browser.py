"""formgrader, clicked in a real browser as a TA would.

JupyterLab runs from grader/ with the pack's nbgrader_config.py, exactly as a TA starts it; headless
Chromium, driven by Playwright, opens Nbgrader > Formgrader, presses *Generate* for ex01, then the
*Autograde* button of each student of a small class, reads the scores formgrader shows and opens
the manual-grading view. The points must be the judge's (the same pipeline as ``python -m grader
autograde``; tests/test_nbgrader_bridge.py proves the two agree point for point), the judge's
per-case report must show under each test cell and each written answer's rubric under it.

Screenshots of every step land in build/test-output/formgrader/ (git-ignored), so a TA or reviewer
can look at what the browser saw. The test needs Debian's ``chromium`` (``.ci/run`` installs it) and
the ``playwright`` package (requirements.txt); without them it is skipped and says why.
"""

from __future__ import annotations

import copy
import json
import os
import secrets
import shutil
import sys
import time
from pathlib import Path

import pytest

from browser import CHROMIUM, CHROMIUM_ARGS, Server, free_port, lab_settings, playwright_or_skip
from fixtures.hostile import grader_cli
from test_nbgrader_bridge import _sources   # (cell type, source) of each cell: the release comparison there
from grader import GRADER_DIR, ROOT
from grader.course import nbgrader_env

STEM = "task1_infonce"
SHOTS = ROOT / "build" / "test-output" / "formgrader"
AUTOGRADE_SECONDS = 400     # one student's Task 1 under the judge: ~30 s idle, more on a busy runner

playwright_api = playwright_or_skip()
pytestmark = pytest.mark.slow

DISPLAYHOOK_STUB = '''
import sys
def info_nce_loss(scores, positive_index=0):
    sys.displayhook("ok")
    raise NotImplementedError()
'''


#: markup in a written answer that would run in the TA's browser if formgrader rendered it raw
XSS = ('\n\n<img src="x" onerror="window.top.__las_pwned = 1">'
       '<script>window.top.__las_pwned = 1</script>'
       '<a href="javascript:window.top.__las_pwned=1" id="las-js-link">click</a>\n')


def _class(tmp_path: Path) -> dict[str, dict]:
    """A small class, as folders an LMS would hand over: a correct answer in everyday style, a
    wrong NCE loss (partial credit) and a stub that fools the visible tests (0 from the judge)."""
    from fixtures.hostile import build

    release = json.loads((ROOT / "notebooks" / "ex01" / f"{STEM}.ipynb").read_text(encoding="utf-8"))
    solution = json.loads((ROOT / "solutions" / "ex01" / f"{STEM}.ipynb").read_text(encoding="utf-8"))
    everything = build(release, solution)
    students = {"alice": everything["everyday_modules"], "bob": everything["wrong_nce"]}
    stub = copy.deepcopy(release)
    for cell in stub["cells"]:
        if (cell.get("metadata", {}).get("nbgrader") or {}).get("grade_id") == "info_nce_loss":
            cell["source"] = DISPLAYHOOK_STUB
    students["carol"] = stub
    # bob's written answer also tries to run script in the TA's browser: the manual-grading view must not
    for cell in students["bob"]["cells"]:
        if (cell.get("metadata", {}).get("nbgrader") or {}).get("grade_id") == "answer_a":
            cell["source"] = "".join(cell["source"]) + XSS
    for student, nb in students.items():
        folder = tmp_path / "inbox" / student / "ex01"
        folder.mkdir(parents=True)
        (folder / f"{STEM}.ipynb").write_text(json.dumps(nb), encoding="utf-8")
    return students


def _lab(tmp_path: Path, grading: Path, release: Path) -> Server:
    """JupyterLab started from grader/ as a TA starts it, on a scratch grading folder and release."""
    port, token = free_port(), secrets.token_hex(16)
    env = nbgrader_env({**os.environ, "LAS_GRADING_DIR": str(grading), "LAS_RELEASE_DIR": str(release),
                        "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime")})
    cmd = [sys.executable, "-m", "jupyterlab", "--no-browser", "--allow-root", f"--port={port}",
           "--ServerApp.ip=127.0.0.1", f"--ServerApp.root_dir={ROOT}", f"--IdentityProvider.token={token}",
           f"--LabApp.user_settings_dir={lab_settings(tmp_path / 'lab-settings')}",
           f"--LabApp.workspaces_dir={tmp_path / 'lab-workspaces'}"]
    return Server(cmd, cwd=GRADER_DIR, env=env, log=tmp_path / "lab.log", port=port, token=token)


def _close_modal(frame, modal_id: str, timeout_s: float) -> str:
    """Wait for formgrader's log modal ``modal_id`` (or its error modal), return its text, close it."""
    modal = frame.locator(f"#{modal_id}, #error-modal").first
    modal.wait_for(state="visible", timeout=timeout_s * 1000)
    text = modal.inner_text()
    modal.locator(".modal-footer button", has_text="OK").click()
    modal.wait_for(state="hidden", timeout=10_000)
    return text


def test_formgrader_buttons_in_a_browser_give_the_judges_grades(tmp_path):
    students = _class(tmp_path)
    grading, release = tmp_path / "grading", tmp_path / "release"
    proc = grader_cli(grading, ROOT / "solutions" / "ex01", "collect", str(tmp_path / "inbox"))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    if SHOTS.exists():
        shutil.rmtree(SHOTS)
    SHOTS.mkdir(parents=True)
    lab = _lab(tmp_path, grading, release)
    try:
        with playwright_api.sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            try:
                _drive(page, lab, students, grading, release)
            except Exception:
                page.screenshot(path=str(SHOTS / "failure.png"))
                raise
            finally:
                browser.close()
    except Exception as exc:
        raise AssertionError(f"{exc}\n--- JupyterLab log ---\n{lab.tail()}") from exc
    finally:
        lab.stop()
    print(f"formgrader screenshots: {SHOTS}")


def _drive(page, lab: Server, students: dict, grading: Path, release: Path) -> None:
    # 1. JupyterLab, menu Nbgrader > Formgrader: the TA's entry point
    page.goto(f"{lab.url}/lab?token={lab.token}")
    page.wait_for_selector("#jp-main-dock-panel", timeout=90_000)
    page.get_by_text("Nbgrader", exact=True).click()
    page.locator(".lm-Menu-itemLabel", has_text="Formgrader").first.click()
    frame = page.frame_locator("iframe").first
    frame.locator("#main-table td.name", has_text="ex01").wait_for(timeout=60_000)
    page.screenshot(path=str(SHOTS / "01-formgrader-in-jupyterlab.png"))
    body = frame.locator("body").inner_text()
    assert "not a subdirectory of the notebook server root" not in body

    # 2. Generate: nbgrader's generate_assignment through the pack's config, into the scratch release
    frame.locator("#main-table td.assign a").first.click()
    text = _close_modal(frame, "success-modal", 300)
    assert "Successfully created the student version" in text, text
    page.screenshot(path=str(SHOTS / "02-generated.png"))
    for committed in sorted((ROOT / "notebooks" / "ex01").glob("*.ipynb")):
        generated = release / "ex01" / committed.name
        assert _sources(generated) == _sources(committed), f"Generate: {committed.name} differs from the committed release"
        assert "**Rubric" not in generated.read_text(encoding="utf-8")

    # 3. Autograde, one student at a time, from Manage Submissions
    frame.locator("#main-table td.num-submissions a").first.click()
    rows = frame.locator("#main-table tr")
    rows.first.wait_for(timeout=30_000)
    for student in sorted(students):
        row = frame.locator("#main-table tr", has=frame.locator("td.student-id", has_text=student))
        row.locator("td.autograde a").click()
        text = _close_modal(frame, "success-modal", AUTOGRADE_SECONDS)
        assert f"Successfully autograded 'ex01' for student '{student}'" in text, text
    time.sleep(1)   # the table re-fetches its rows after each modal
    page.screenshot(path=str(SHOTS / "03-autograded.png"))
    shown = {}
    for student in students:
        row = frame.locator("#main-table tr", has=frame.locator("td.student-id", has_text=student))
        shown[student] = row.locator("td.score").inner_text().strip()

    # the points formgrader shows are the judge's: 0 for the stub, full for the everyday answer
    gradebook, totals = _scores(grading, students)
    for student, text in shown.items():
        score = float(text.split("/")[0])
        assert score == pytest.approx(totals[student], abs=0.01), (student, text, totals)
    assert gradebook["carol"] == 0.0, "a stub that calls sys.displayhook fooled the formgrader autograde"
    assert gradebook["alice"] == pytest.approx(11.0), "a correct everyday answer lost points in formgrader"
    assert 0 < gradebook["bob"] < 11.0, "the wrong NCE loss should get partial credit"

    # 4. Manual grading of bob's Task 1 (his name in Manage Submissions, then the notebook): the judge's
    #    report under each test cell, each written answer's rubric under it
    bob = frame.locator("#main-table tr", has=frame.locator("td.student-id", has_text="bob"))
    bob.locator("td.student-name a").click()
    frame.locator("#main-table a", has_text=STEM).first.click()
    frame.locator("#notebook-container, .container").first.wait_for(timeout=60_000)
    view = frame.locator("body")
    view.get_by_text("Autograder:").first.wait_for(timeout=60_000)
    text = view.inner_text()
    assert "[FAIL]" in text and "[PASS]" in text, "no per-case report in formgrader's manual-grading view"
    assert "Rubric: answer_a" in text, "the rubric is not under the written answer"
    page.screenshot(path=str(SHOTS / "04-manual-grading.png"), full_page=True)
    assert page.evaluate("window.__las_pwned") is None, "a student's markup ran script in the TA's browser"
    assert frame.locator("a[href^='javascript:']").count() == 0, "a javascript: link survived in formgrader"
    frame.get_by_text("Rubric: ").first.scroll_into_view_if_needed()
    page.screenshot(path=str(SHOTS / "05-rubric-under-answer.png"))
    frame.get_by_text("[FAIL]").first.scroll_into_view_if_needed()
    page.screenshot(path=str(SHOTS / "06-judge-report-under-test-cell.png"))


def _scores(grading: Path, students) -> tuple[dict[str, float], dict[str, float]]:
    """(student -> Task 1's autograded points, student -> the assignment's total) from the gradebook."""
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{grading / 'gradebook.db'}") as gb:
        code = {s: float(gb.find_submission_notebook(STEM, "ex01", s).code_score) for s in students}
        total = {s: float(gb.find_submission("ex01", s).score) for s in students}
    return code, total
