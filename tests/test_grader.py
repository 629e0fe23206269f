"""The TA pipeline end to end on hostile Task 1 submissions: collect -> autograde -> export -> feedback,
through the command line, on a Task-1-only course. One batch (two workers) grades every fixture in
tests/fixtures/hostile.py; each test then checks one expected outcome, the gradebook and the
feedback. Runs in about two to four minutes on two cores."""

from __future__ import annotations

import csv
import json
import sqlite3

import pytest

from conftest import SOLUTIONS
from fixtures.hostile import CELL_TIMEOUT, EXPECTED, FULL, MEM_GB, build, grader_cli, write_inbox

STEM = "task1_infonce"


@pytest.fixture(scope="session")
def batch(tmp_path_factory):
    """Collect, autograde (2 workers), export and feedback for every hostile fixture."""
    tmp = tmp_path_factory.mktemp("grader-batch")
    from grader.course import scratch_course
    from grader.sandbox import protections

    course, release, solution = scratch_course(tmp, SOLUTIONS / f"{STEM}.ipynb")
    source, grading = course.source, course.grading

    subs = build(release, solution)
    if not protections()["filesystem"]:
        del subs["snoop"]  # without bubblewrap it WOULD vandalise this test's gradebook (and the summary says so)
    write_inbox(tmp / "inbox", subs, STEM)

    runs = {"collect": grader_cli(grading, source, "collect", str(tmp / "inbox"))}
    runs["autograde"] = grader_cli(grading, source, "autograde", "--workers=2", f"--timeout={CELL_TIMEOUT}",
                                   f"--mem-gb={MEM_GB}", "--notebook-timeout=600")
    runs["export"] = grader_cli(grading, source, "export")
    runs["feedback"] = grader_cli(grading, source, "feedback")
    if not (grading / "grades.csv").exists():
        pytest.fail("no grades.csv:\n" + "\n".join(f"{verb}: rc={p.returncode}\n{p.stdout[-1500:]}\n{p.stderr[-3000:]}"
                                                   for verb, p in runs.items()))
    with open(grading / "grades.csv", newline="") as f:
        grades = {row["student_id"]: row for row in csv.DictReader(f)}
    return {"course": course, "runs": runs, "grades": grades, "release": release}


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
    assert row["status"] == status, f"{student}: {row['status']} ({row['reason']}), expected {status}"
    assert float(row["autograded_score"]) == pytest.approx(points), f"{student}: {row['reason']}"
    assert float(row["autograded_max"]) == pytest.approx(FULL)
    if status != "graded":
        assert row["reason"], f"{student} has status {status} but no reason"


def test_csv_has_one_row_per_student_and_reasons(batch):
    grades = batch["grades"]
    assert set(grades) | {"snoop"} == set(EXPECTED) | {"broken_zip"}
    assert grades["broken_zip"]["status"] == "unreadable" and "cannot open" in grades["broken_zip"]["reason"]
    assert "memory cap" in grades["memory_bomb"]["reason"]
    assert "interrupted" in grades["infinite_loop"]["reason"]
    assert "test_info_nce_loss" in grades["edited_test"]["reason"]
    assert "deleted test cell test_nce_loss" in grades["deleted_test"]["reason"]
    assert "info_nce_loss appears 2 times" in grades["duplicated_cell"]["reason"]
    assert "torch.allclose" in grades["monkeypatch"]["reason"] and "builtins.abs" in grades["monkeypatch"]["reason"]
    assert "not a valid notebook" in grades["corrupt"]["reason"]


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
    from grader.feedback import hidden_lines, leaks_in

    course = batch["course"]
    lines = hidden_lines(course)[STEM]
    assert lines, "the Task 1 source has hidden tests to look for"
    pages = sorted(course.grading.glob(f"feedback/*/ex01/{STEM}.html"))
    assert len(pages) >= 10
    for page in pages:
        text = page.read_text()
        assert not leaks_in(text, lines), f"{page}: hidden test source in feedback"
        assert "grader/checks" not in text and "_ref_info_nce" not in text, f"{page}: reference code in a traceback"
        assert "LAS-INTEGRITY" not in text


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
