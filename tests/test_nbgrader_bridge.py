"""nbgrader's own commands with the pack's configuration (grader/nbgrader_config.py, what formgrader's
buttons run) give the same release and the same grades as ``python -m grader``."""

from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
from functools import partial
from pathlib import Path

import pytest

from fixtures import at_once
from fixtures.hostile import build, grader_cli, write_inbox
from grader import GRADER_DIR, ROOT
from grader.course import nbgrader_env

STEM = "task1_infonce"
NOTEBOOKS = sorted(p.stem for p in (ROOT / "solutions" / "ex01").glob("*.ipynb"))


def _plain_nbgrader(grading: Path, *args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    """``nbgrader ARGS`` exactly as a TA (or formgrader) runs it: from grader/, reading its config."""
    env = nbgrader_env({"LAS_GRADING_DIR": str(grading)})
    return subprocess.run([sys.executable, "-m", "nbgrader", *args], cwd=GRADER_DIR, env=env,
                          capture_output=True, text=True, timeout=timeout)


def _sources(path: Path) -> list[tuple[str, str]]:
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    return [(c["cell_type"], "".join(c["source"]) if isinstance(c["source"], list) else c["source"]) for c in cells]


def test_generate_assignment_gives_the_committed_release(tmp_path):
    """`nbgrader generate_assignment` (formgrader's Generate) on a fresh clone: no database error, and
    the release it writes equals `python -m grader release` in every cell's source: no rubric."""
    grading = tmp_path / "grading"     # does not exist yet: the config creates it
    out = tmp_path / "release"
    proc = _plain_nbgrader(grading, "generate_assignment", "ex01", "--force",
                           f"--CourseDirectory.release_directory={out}")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    for stem in NOTEBOOKS:
        got, want = _sources(out / "ex01" / f"{stem}.ipynb"), _sources(ROOT / "notebooks" / "ex01" / f"{stem}.ipynb")
        assert got == want, f"{stem}: plain nbgrader's release differs from the committed one"
        assert "**Rubric" not in json.dumps(got)


DISPLAYHOOK_STUB = '''
import sys
def {sig}:
    sys.displayhook("ok")
    raise NotImplementedError()
'''


def _scores(grading: Path, students) -> dict[str, float]:
    """student -> autograded (code) points of Task 1 in the gradebook."""
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{grading / 'gradebook.db'}") as gb:
        return {s: float(gb.find_submission_notebook(STEM, "ex01", s).code_score) for s in students}


@pytest.mark.slow
def test_plain_nbgrader_autograde_gives_the_judges_points(tmp_path):
    """Hostile and honest Task 1 submissions graded twice, by `nbgrader autograde` through the pack's
    config and by `python -m grader autograde`: the same points for every student, the judge's report
    under each test cell of nbgrader's autograded copy, and a stub that calls sys.displayhook gets 0."""
    from grader.mutants import student_copy

    release = json.loads((ROOT / "notebooks" / "ex01" / f"{STEM}.ipynb").read_text())
    solution = json.loads((ROOT / "solutions" / "ex01" / f"{STEM}.ipynb").read_text())
    everything = build(release, solution)
    subs = {k: everything[k] for k in ("wrong_nce", "everyday_modules")}
    hooked = copy.deepcopy(release)
    for cell in hooked["cells"]:
        gid = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        if gid == "info_nce_loss":
            cell["source"] = DISPLAYHOOK_STUB.format(sig="info_nce_loss(scores, positive_index=0)")
    subs["displayhook_stub"] = hooked
    assert student_copy  # the fixtures above are built from the solution the same way
    write_inbox(tmp_path / "inbox", subs, STEM)

    def grade(way: str) -> dict[str, float]:
        grading = tmp_path / way
        proc = grader_cli(grading, ROOT / "solutions" / "ex01", "collect", str(tmp_path / "inbox"))
        assert proc.returncode == 0, proc.stderr[-2000:]
        if way == "nbgrader":   # formgrader's Generate, then its Autograde button (one student at a time)
            proc = _plain_nbgrader(grading, "generate_assignment", "ex01", "--force",
                                   f"--CourseDirectory.release_directory={tmp_path / 'release'}")
            assert proc.returncode == 0, proc.stderr[-3000:]
            proc = _plain_nbgrader(grading, "autograde", "ex01", "--force")
        else:
            proc = grader_cli(grading, ROOT / "solutions" / "ex01", "autograde", "--workers=2")
        assert proc.returncode == 0, f"{way}: {proc.stdout[-2000:]}{proc.stderr[-3000:]}"
        if way == "pack":   # a course of five notebooks, submissions of Task 1 only: its reference values alone
            computed = re.findall(r"judge: reference values of (\w+)", proc.stdout)
            assert computed == [STEM], f"reference values of {computed}"
        return _scores(grading, sorted(subs))

    # both ways at once, each in its own grading folder: plain nbgrader grades one student at a time
    results = at_once({way: partial(grade, way) for way in ("nbgrader", "pack")})
    assert results["nbgrader"] == pytest.approx(results["pack"]), results
    assert results["nbgrader"]["displayhook_stub"] == 0.0
    assert results["nbgrader"]["everyday_modules"] == pytest.approx(11.0)
    assert 0 < results["nbgrader"]["wrong_nce"] < 11.0   # partial credit, as the judge gives it
    graded = json.loads((tmp_path / "nbgrader" / "autograded" / "wrong_nce" / "ex01" / f"{STEM}.ipynb").read_text())
    reports = ["".join(o.get("text", "")) for c in graded["cells"] for o in c.get("outputs", [])
               if o.get("output_type") == "stream"]
    assert any("Autograder:" in r and "[FAIL]" in r for r in reports), "no per-case report in nbgrader's copy"
    status = json.loads((tmp_path / "nbgrader" / "status" / "displayhook_stub.json").read_text())
    assert status["notebooks"][STEM]["judge"]["score"] == 0.0


# ----------------------------------------------------------------------------- the Validate button
#: nbgrader's Validate button posts the notebook's path to its server extension, whose handler
#: (``ValidateAssignmentHandler.validate_notebook``) loads nbgrader's configuration from the server's working
#: folder and Jupyter's config path, runs nbgrader's Validator and returns its results; this runs that handler.
BUTTON = '''
import json, logging, sys
from nbgrader.server_extensions.validate_assignment.handlers import ValidateAssignmentHandler

class Handler(ValidateAssignmentHandler):   # the handler without a running server: its root and a log
    root_dir = sys.argv[1]
    log = logging.getLogger("validate")

    def __init__(self):
        pass

print(json.dumps(Handler().validate_notebook(sys.argv[2])))
'''


def _validate_button(root: Path, path: str, grading: Path) -> dict:
    """The server extension's reply to the Validate button for ``root/path``, the server started in grader/."""
    proc = subprocess.run([sys.executable, "-c", BUTTON, str(root), path], cwd=GRADER_DIR, capture_output=True,
                          text=True, timeout=600, env=nbgrader_env({"LAS_GRADING_DIR": str(grading)}))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.splitlines()[-1])


def _dialog(reply: dict) -> list[str]:
    """The lines of the dialog nbgrader's labextension opens for ``reply`` (a failed cell: a heading, the
    cell's ``source`` and its ``error``)."""
    assert reply["success"], reply["value"]
    lines = []
    for cell in reply["value"].get("failed", []):
        lines += ["The following cell failed:", *cell["source"].splitlines(), *cell["error"].splitlines()]
    return lines or ["Success! Your notebook passes all the tests."]


def test_the_validate_button_names_each_failing_cell_in_one_line(tmp_path):
    """A half-done Task 1 (two answers not filled in): the button's dialog names the two test cells that fail
    as the student sees them, with `./pack.sh validate`'s own lines, instead of their whole sources and
    tracebacks (80 lines here, about 180 with more cells failing)."""
    from grader.mutants import student_copy
    from utils.notebook_cells import grade_id
    from utils.validate import nbgrader_problems

    release = json.loads((ROOT / "notebooks" / "ex01" / f"{STEM}.ipynb").read_text())
    solution = json.loads((ROOT / "solutions" / "ex01" / f"{STEM}.ipynb").read_text())
    half_done = student_copy(release, solution)
    stubs = {grade_id(c): c["source"] for c in release["cells"]}
    for cell in half_done["cells"]:
        if grade_id(cell) in ("nce_loss", "n_pair_loss"):
            cell["source"] = stubs[grade_id(cell)]
    path = tmp_path / "root" / "ex01" / f"{STEM}.ipynb"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(half_done))

    lines = _dialog(_validate_button(tmp_path / "root", f"ex01/{STEM}.ipynb", tmp_path / "grading"))
    assert len(lines) == 6, "\n".join(lines)
    pack_lines = nbgrader_problems(str(path))   # what ./pack.sh validate prints for nbgrader's check
    assert len(pack_lines) == 2 and all(line in lines for line in pack_lines), (pack_lines, lines)
    assert "the test cell of `nce_loss`" in lines[1] and "stops at NotImplementedError" in lines[2]
    assert "the test cell of `n_pair_loss`" in lines[4]


def test_the_short_report_leaves_edited_cells_and_other_runs_alone(monkeypatch):
    """The hook rewrites only a graded cell as released, and only under nbgrader's validation: an edited test
    cell keeps its source for nbgrader to report as changed, and autograde's cells are never touched."""
    from nbformat import from_dict
    from nbgrader.utils import compute_checksum

    from utils.validate import short_failure

    def failing_cell(source: str):
        cell = from_dict({"cell_type": "code", "source": "assert f() == 1", "execution_count": 1, "outputs": [
            {"output_type": "error", "ename": "AssertionError", "evalue": "", "traceback": ["AssertionError"]}],
            "metadata": {"nbgrader": {"grade": True, "grade_id": "test_f", "locked": True, "points": 1,
                                      "solution": False}}})
        cell.metadata.nbgrader.checksum = compute_checksum(cell)
        cell.source = source
        return cell

    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    cell = failing_cell("assert f() == 1")
    short_failure(cell=cell, cell_index=0)
    assert cell.source == "assert f() == 1" and cell.outputs[0].traceback == ["AssertionError"]
    monkeypatch.setenv("NBGRADER_EXECUTION", "validate")
    edited = failing_cell("pass  # the student emptied the test")
    short_failure(cell=edited, cell_index=0)
    assert edited.source.startswith("pass") and edited.metadata.nbgrader.checksum != compute_checksum(edited)
    monkeypatch.chdir(Path(__file__).parent)   # no notebook with this cell here: a plain name
    short_failure(cell=cell, cell_index=0)
    assert cell.source == "a test cell" and cell.outputs[0].traceback == ["a test cell fails: AssertionError"]
    assert cell.metadata.nbgrader.checksum == compute_checksum(cell)
