"""The TA pipeline end to end on hostile Task 1 submissions: collect -> autograde -> export -> feedback,
through the command line, on a Task-1-only course. One batch (two workers) grades every fixture in
tests/fixtures/hostile.py; each test then checks one expected outcome, the gradebook and the
feedback. Every autograded point comes from the judge (grader/judge.py), outside the student's
kernel; the full run only decides the status. Runs in about five to six minutes on two cores."""

from __future__ import annotations

import copy
import csv
import json
import sqlite3
import time

import pytest

from conftest import SOLUTIONS
from fixtures.hostile import (CELL_TIMEOUT, EXPECTED, FULL, HONEST_CONTROLS, MEM_GB, SANDBOX_ONLY, build, grader_cli,
                              write_inbox)

STEM = "task1_infonce"


@pytest.fixture(scope="session")
def batch(tmp_path_factory):
    """Collect, autograde (2 workers), export and feedback for every hostile fixture."""
    tmp = tmp_path_factory.mktemp("grader-batch")
    from fixtures import scratch_course
    from grader.sandbox import protections

    course, release, solution = scratch_course(tmp, SOLUTIONS / f"{STEM}.ipynb")
    source, grading = course.source, course.grading

    subs = build(release, solution)
    if not protections()["filesystem"]:
        # without bubblewrap snoop WOULD vandalise this test's gradebook (and the summary says so), and
        # the others would fill this machine's /tmp or write into other processes' descriptors
        for student in SANDBOX_ONLY:
            del subs[student]
    write_inbox(tmp / "inbox", subs, STEM)

    runs = {"collect": grader_cli(grading, source, "collect", str(tmp / "inbox"))}
    started = time.monotonic()
    runs["autograde"] = grader_cli(grading, source, "autograde", "--workers=2", f"--timeout={CELL_TIMEOUT}",
                                   f"--mem-gb={MEM_GB}", "--notebook-timeout=180")
    seconds = time.monotonic() - started
    runs["export"] = grader_cli(grading, source, "export")
    runs["feedback"] = grader_cli(grading, source, "feedback")
    if not (grading / "grades.csv").exists():
        pytest.fail("no grades.csv:\n" + "\n".join(f"{verb}: rc={p.returncode}\n{p.stdout[-1500:]}\n{p.stderr[-3000:]}"
                                                   for verb, p in runs.items()))
    with open(grading / "grades.csv", newline="") as f:
        grades = {row["student_id"]: row for row in csv.DictReader(f)}
    print(f"\nautograde of {len(subs)} fixtures took {seconds:.0f} s")
    return {"course": course, "runs": runs, "grades": grades, "release": release, "seconds": seconds}


def _outputs(course, student: str) -> str:
    path = course.folder("autograded", student) / f"{STEM}.ipynb"
    nb = json.loads(path.read_text())
    return "".join("".join(o.get("text", "")) for c in nb["cells"] for o in c.get("outputs", []))


def test_every_verb_succeeds_and_prints_a_summary(batch):
    for verb, proc in batch["runs"].items():
        assert proc.returncode == 0, f"{verb} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        assert any(line.startswith("student ") for line in proc.stdout.splitlines()), \
            f"{verb} printed no summary table:\n{proc.stdout[:500]}"
    assert "broken_zip" in batch["runs"]["collect"].stdout and "UNREADABLE" in batch["runs"]["collect"].stdout


@pytest.mark.parametrize("student", sorted(EXPECTED))
def test_fixture_outcome(batch, student):
    if student not in batch["grades"]:
        pytest.skip(f"{student} needs filesystem isolation (bubblewrap), which this machine lacks")
    status, points = EXPECTED[student]
    row = batch["grades"][student]
    allowed = status if isinstance(status, tuple) else (status,)  # a tuple: the full run's timing decides
    if row["status"] not in allowed:
        notebooks = batch["course"].read_json("status", student).get("notebooks", {})
        pytest.fail(f"{student}: {row['status']} ({row['reason']}), expected {status}; the full run's log ends:\n"
                    + "\n".join(nb.get("full_run_log", "") for nb in notebooks.values()))
    assert float(row["autograded_score"]) == pytest.approx(points), f"{student}: {row['reason']}"
    assert float(row["autograded_max"]) == pytest.approx(FULL)
    if row["status"] != "graded":
        assert row["reason"], f"{student} has status {row['status']} but no reason"


def test_csv_has_one_row_per_student_and_reasons(batch):
    grades = batch["grades"]
    assert set(grades) | set(SANDBOX_ONLY) == set(EXPECTED) | {"broken_zip"}
    assert grades["broken_zip"]["status"] == "unreadable" and "cannot open" in grades["broken_zip"]["reason"]
    assert "memory cap" in grades["memory_bomb"]["reason"]
    # the light full run calls no function (test cells show the judge's report): the judge's cases time out
    assert "ran past their time limit" in grades["infinite_loop"]["reason"]
    assert "test_n_pair_loss" in grades["loop_in_function"]["reason"]
    assert "test_info_nce_loss" in grades["edited_test"]["reason"]
    assert "test_nce_loss" in grades["deleted_test"]["reason"]
    assert "info_nce_loss appears 2 times" in grades["duplicated_cell"]["reason"]
    assert "torch.allclose" in grades["monkeypatch"]["reason"]
    assert "not a valid notebook" in grades["corrupt"]["reason"]
    assert "kernel died" in grades["os_exit"]["reason"]
    for student, (status, _) in EXPECTED.items():
        if "review" in (status if isinstance(status, tuple) else (status,)) and student in grades:
            assert grades[student]["reason"], f"{student} is marked for review without saying why"
    assert "IPython hook" in grades["custom_exc"]["reason"]
    assert "monkeypatch" in grades["patch_at_definition"]["reason"]


def test_no_unearned_points_and_honest_controls_keep_full_marks(batch):
    """No submission gets more than EXPECTED says (attacks on the release earn 0), and the honest
    controls (stderr, warnings, prints, helper cells, other styles) keep every point."""
    unearned, lost = [], []
    for student, (_, points) in EXPECTED.items():
        row = batch["grades"].get(student)
        if row is None:
            continue
        got = float(row["autograded_score"])
        if got > points + 1e-6:
            unearned.append(f"{student}: {got:g} > {points:g} ({row['status']}: {row['reason'][:300]})")
        if student in HONEST_CONTROLS and got < FULL - 1e-6:
            lost.append(f"{student}: {got:g} / {FULL:g} ({row['reason'][:300]})")
    assert not unearned, "unearned points:\n" + "\n".join(unearned)
    assert not lost, "honest controls lost points:\n" + "\n".join(lost)


def test_gradebook_intact(batch):
    course = batch["course"]
    with sqlite3.connect(course.db_path) as db:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        students = {r[0] for r in db.execute("SELECT student_id FROM submitted_assignment")}
    assert set(batch["grades"]) - {"broken_zip"} <= students


def test_sandbox_hid_the_gradebook_solutions_and_network(batch):
    if "snoop" not in batch["grades"]:
        pytest.skip("bubblewrap is not available here: filesystem isolation is off (and reported)")
    out = _outputs(batch["course"], "snoop")
    found = json.loads(out.split("SNOOP-RESULT:", 1)[1].splitlines()[0])
    assert found["seen"] > 0
    assert found["gradebook"] == [], found
    assert found["hidden"] == [], found
    assert found["solutions"] == [], found
    assert found["network"].startswith("unreachable"), found


def test_huge_output_is_truncated(batch):
    path = batch["course"].folder("autograded", "huge_output") / f"{STEM}.ipynb"
    assert path.stat().st_size < 2_000_000
    assert "Output truncated" in path.read_text()


def test_feedback_never_shows_hidden_tests(batch):
    """Neither the judge's cases and references (grader/checks/) nor its probes' inputs
    (grader/probes/) appear in any feedback page: the guard's own lines, checked on every page."""
    from grader.pageclean import judge_lines, leaks_in

    course = batch["course"]
    lines = judge_lines(STEM)
    assert len(lines) > 20
    pages = sorted(course.grading.glob(f"feedback/*/ex01/{STEM}.html"))
    assert len(pages) >= 10
    for page in pages:
        text = page.read_text()
        assert not leaks_in(text, lines), f"{page}: hidden test source in feedback"
        # (a page may quote the student's own code, which can name grader/checks; what must never appear
        # is the judge's code itself, checked through `lines` above)
        assert "_ref_info_nce" not in text, f"{page}: judge code in a page"
        assert "generator=gen" not in text and "judge-seed" not in text, f"{page}: the judge's inputs"


def test_autograde_one_student_keeps_the_others(batch, tmp_path):
    """--student regrades one submission; everyone else's grade is untouched."""
    course = batch["course"]
    before = {s: r["autograded_score"] for s, r in batch["grades"].items()}
    proc = grader_cli(course.grading, course.source, "autograde", "--student=corrupt")
    assert proc.returncode == 0, proc.stderr[-2000:]
    proc = grader_cli(course.grading, course.source, "export", f"--to={tmp_path / 'g.csv'}")
    with open(tmp_path / "g.csv", newline="") as f:
        after = {row["student_id"]: row["autograded_score"] for row in csv.DictReader(f)}
    assert after == before


def test_unknown_student_is_a_run_failure(batch):
    course = batch["course"]
    proc = grader_cli(course.grading, course.source, "autograde", "--student=nobody")
    assert proc.returncode != 0 and "nobody" in proc.stderr


def _split_streams(nb: dict) -> dict:
    """Every stream output cut into one-character messages (as a kernel flushing per character would)."""
    out = copy.deepcopy(nb)
    for cell in out["cells"]:
        outputs = []
        for o in cell.get("outputs", []):
            if o.get("output_type") == "stream":
                text = "".join(o["text"]) if isinstance(o["text"], list) else o["text"]
                outputs += [{"output_type": "stream", "name": o["name"], "text": ch} for ch in text]
            else:
                outputs.append(o)
        cell["outputs"] = outputs
    return out


def _inspected(path):
    from grader.results import NotebookResult, Settings
    from grader.fullrun import inspect_outputs

    result = NotebookResult("x", STEM)
    nb = json.loads(path.read_text())
    outputs = {i: cell.get("outputs", []) for i, cell in enumerate(nb["cells"])}
    inspect_outputs(nb, outputs, [], result, Settings(cell_timeout=CELL_TIMEOUT, mem_gb=MEM_GB))
    return result.status, result.reasons


@pytest.mark.parametrize("student", ["correct", "memory_bomb", "infinite_loop"])
def test_outputs_split_into_characters_change_nothing(batch, student, tmp_path):
    """The judge reads no output: the gradebook holds the judge's score, and reading an autograded
    notebook whose streams arrive one character at a time gives the same status and reasons."""
    course = batch["course"]
    status = course.read_json("status", student)
    judged = status["notebooks"][STEM]["judge"]
    assert float(batch["grades"][student]["autograded_score"]) == pytest.approx(judged["score"])
    assert judged["score"] == pytest.approx(EXPECTED[student][1])
    path = course.folder("autograded", student) / f"{STEM}.ipynb"
    nb = json.loads(path.read_text())
    split = _split_streams(nb)
    assert sum(len(c.get("outputs", [])) for c in split["cells"]) > sum(len(c.get("outputs", [])) for c in nb["cells"])
    (tmp_path / "split.ipynb").write_text(json.dumps(split))
    assert _inspected(tmp_path / "split.ipynb") == _inspected(path)


def test_regrading_a_split_notebook_gives_the_same_score(batch):
    """Submit the autograded `correct` notebook, its streams split into characters, and regrade it."""
    course = batch["course"]
    path = course.folder("autograded", "correct") / f"{STEM}.ipynb"
    split = _split_streams(json.loads(path.read_text()))
    submitted = course.folder("submitted", "correct") / f"{STEM}.ipynb"
    original = submitted.read_bytes()
    try:
        submitted.write_text(json.dumps(split))
        proc = grader_cli(course.grading, course.source, "autograde", "--student=correct",
                          f"--timeout={CELL_TIMEOUT}", f"--mem-gb={MEM_GB}")
        assert proc.returncode == 0, proc.stderr[-2000:]
        status = course.read_json("status", "correct")
        assert status["score"] == pytest.approx(FULL), status["reason"]
        assert status["notebooks"][STEM]["judge"]["score"] == pytest.approx(FULL)
    finally:
        submitted.write_bytes(original)


def test_feedback_lists_the_cases_of_a_partly_wrong_answer(batch):
    """wrong_cosine: its cosine cases are listed by name with PASS/FAIL, the others all PASS; no
    inputs of the judge, no reference code."""
    course = batch["course"]
    page = course.grading / "feedback" / "wrong_cosine" / "ex01" / f"{STEM}.html"
    text = page.read_text()
    assert "[PASS]" in text and "[FAIL]" in text
    assert "cosine similarity over the temperature" in text            # a failed case, named
    assert "a ValueError for a temperature &lt;= 0" in text or "a ValueError for a temperature <= 0" in text
    assert "equal scores give log(K+1)" in text                         # a passed case of another cell
    assert "checks passed" in text
    assert "grader/checks" not in text and "grader.checks" not in text
    assert "generator=gen" not in text and "case_seed" not in text
    seed = (course.grading / "judge-seed.txt").read_text().strip()
    assert f"seed {seed}" not in text and f"seed={seed}" not in text
    status = course.read_json("status", "wrong_cosine")
    cases = status["notebooks"][STEM]["judge"]["cases"]
    failed = {c["case"] for c in cases if not c["passed"]}
    assert failed and all(c["cell"] == "test_cosine_scores" for c in cases if not c["passed"])


# ----------------------------------------------------------------------------- what the student ran
def test_everyday_styles_are_graded_as_the_student_ran_them(batch):
    """Loss modules, partial, lambdas, device, seeds and a helper in a later cell: full marks, and
    nothing reported as not run (tests/fixtures/ran_as_run.py)."""
    for student in ("everyday_modules", "everyday_later_helper"):
        row = batch["grades"][student]
        assert float(row["autograded_score"]) == pytest.approx(FULL), row["reason"]
        assert "could not run" not in row["reason"], row["reason"]
        judged = batch["course"].read_json("status", student)["notebooks"][STEM]["judge"]
        assert judged["not_run"] == [], judged["not_run"]


def test_a_slow_statement_and_a_looping_function_are_named_within_the_budget(batch):
    """slow_top_level: the sleeping top-level line is named (cell, line, limit), the looping
    n_pair_loss loses only its own point, and the whole notebook job stays within its bounds."""
    status = batch["course"].read_json("status", "slow_top_level")
    nb = status["notebooks"][STEM]
    assert "`time.sleep(40)`" in status["reason"] and "ran past its time limit" in status["reason"], status["reason"]
    assert "test_n_pair_loss" in status["reason"], status["reason"]
    assert nb["seconds"] < 240, f"one notebook held a worker for {nb['seconds']} s"
    page = (batch["course"].grading / "feedback" / "slow_top_level" / "ex01" / f"{STEM}.html").read_text()
    assert "time.sleep(40)" in page and "could not run" in page


def test_no_seed_or_host_path_reaches_a_page(batch):
    """leak_seed raises exceptions that carry everything it can find in the grading process: the
    batch's seed, the per-case seeds and the grader's host paths never reach its feedback, the CSV
    or its status file."""
    from grader.judge import case_runs

    course = batch["course"]
    seed = int((course.grading / "judge-seed.txt").read_text().strip())
    secrets = {str(seed), *(str(v) for v in case_runs([seed], STEM)[0]["case_seeds"].values())}
    page = (course.grading / "feedback" / "leak_seed" / "ex01" / f"{STEM}.html").read_text()
    status = json.dumps(course.read_json("status", "leak_seed"))
    row = json.dumps(batch["grades"]["leak_seed"])
    assert "ValueError" in page, "the student's message should still be shown (scrubbed)"
    for where, text in (("feedback", page), ("status", status), ("grades.csv", row)):
        assert not [s for s in secrets if s in text], f"{where} shows a grading seed"
        assert "las-autograde" not in text and str(course.grading) not in text, f"{where} shows a host path"


# ----------------------------------------------------------------------------- the grader's own pages and processes
def _page_text(page: str) -> str:
    import html
    import re

    return html.unescape(re.sub(r"<[^>]+>", "", page))


def test_feedback_runs_no_student_html_or_javascript(batch):
    """active_content: <script>, onerror, javascript: URLs, iframes... in its written answer, and
    display(Javascript(...)), display(HTML('<script>...')) outputs: every page holds no active student
    content (the template's MathJax aside), and what is honest in them is still shown."""
    from test_feedback_safety import active_content

    course = batch["course"]
    pages = sorted(course.grading.glob(f"feedback/*/ex01/{STEM}.html"))
    assert pages
    for page in pages:
        assert active_content(page.read_text()) == [], page
    page = (course.grading / "feedback" / "active_content" / "ex01" / f"{STEM}.html").read_text()
    assert "<b>html shown</b>" in page and "cdnjs.cloudflare.com/ajax/libs/mathjax" in page
    text = _page_text(page)
    assert "My answer: InfoNCE is cross-entropy" in text and "Javascript object" in text
    assert "checks passed" in text


def test_an_nbformat_3_notebook_is_upgraded_and_graded(batch):
    row = batch["grades"]["nbformat3"]
    assert "nbformat 3" in row["reason"] and "upgraded" in row["reason"], row["reason"]
    assert (batch["course"].grading / "feedback" / "nbformat3" / "ex01" / f"{STEM}.html").exists()


def test_the_audit_bomb_is_audited_within_its_caps(batch):
    """audit_bomb: 11 kB of nested joins inside __import__ (once 5 GiB and 43 s in the grader's own
    process): the audit finishes, flags the __import__, and the functions keep their points."""
    status = batch["course"].read_json("status", "audit_bomb")
    assert "import machinery" in status["reason"] and "could not finish" not in status["reason"], status["reason"]
    assert status["notebooks"][STEM]["seconds"] < 240


def test_ignoring_sigint_does_not_stop_the_grader_interrupt(batch):
    """The full run interrupts a cell with its own timer (KeyboardInterrupt from SIGALRM), so a loop that
    ignores SIGINT is still interrupted, and the cells after it run."""
    executed = json.loads((batch["course"].folder("autograded", "ignores_interrupt") / f"{STEM}.ipynb").read_text())
    errors = [o for c in executed["cells"] for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert [o["ename"] for o in errors] == ["KeyboardInterrupt"], errors
    answers = [c for c in executed["cells"] if c["cell_type"] == "code" and c.get("execution_count")]
    assert len(answers) >= 5, "the cells after the interrupted one must run"


@pytest.mark.parametrize("student", ["os_exit"])
def test_a_failed_full_run_still_gets_feedback(batch, student):
    """A full run that stopped part-way (kernel died, timed out): the page shows the cells that ran, the
    judge's report under each test cell and a note on top that says why it could not be run to the end."""
    course = batch["course"]
    executed = json.loads((course.folder("autograded", student) / f"{STEM}.ipynb").read_text())
    assert any(c.get("outputs") for c in executed["cells"]), "the cells that ran keep their outputs"
    status = course.read_json("status", student)["notebooks"][STEM]
    text = _page_text((course.grading / "feedback" / student / "ex01" / f"{STEM}.html").read_text())
    assert "could not be run to the end" in text and f"({status['status']}:" in text
    assert text.count("checks passed") == 5 and "[PASS]" in text


def test_every_graded_notebook_gets_a_feedback_page(batch):
    course = batch["course"]
    for student, row in batch["grades"].items():
        status = course.read_json("status", student).get("notebooks", {}).get(STEM) or {}
        if status.get("judge"):
            assert (course.grading / "feedback" / student / "ex01" / f"{STEM}.html").exists(), \
                f"{student} ({row['status']}): no feedback page; {batch['runs']['feedback'].stdout[-2000:]}"
