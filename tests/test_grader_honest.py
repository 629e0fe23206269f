"""Correct answers in everyday styles (tests/fixtures/honest/, the entries after the "everyday styles"
mark: loss modules and layers at the top of a cell, partial, lambdas, device selection, seeds, helpers
in a later cell, loop-built tables, definitions inside if/else, cached constants), graded through the
real command line (collect, autograde with two workers, export, feedback) on the whole assignment:
every one keeps full marks. A student hands in the notebooks their entries are in, nothing else (the
solution's own answers are graded in tests/test_judge.py and the round trips)."""

from __future__ import annotations

import csv
import json

import pytest

from fixtures import honest
from fixtures.hostile import grader_cli
from grader import ROOT
from grader.mutants import student_copy

STEMS = sorted(p.stem for p in (ROOT / "solutions" / "ex01").glob("*.ipynb"))


def _students() -> dict[str, dict[str, dict]]:
    """student -> {stem: notebook}: every everyday entry once, as few students as the entries allow
    (one entry per answer cell and student; the other cells of that notebook hold the solution's answers)."""
    students: dict[str, dict[str, dict]] = {}
    for stem in STEMS:
        release = json.loads((ROOT / "notebooks" / "ex01" / f"{stem}.ipynb").read_text())
        solution = json.loads((ROOT / "solutions" / "ex01" / f"{stem}.ipynb").read_text())
        taken: dict[str, int] = {}
        for entry in honest.everyday(stem):
            k = taken.get(entry.cell, 0)
            taken[entry.cell] = k + 1
            name = f"everyday{k + 1:02d}"
            book = students.setdefault(name, {})
            book[stem] = honest.apply(book.get(stem) or student_copy(release, solution), entry)
    return students


@pytest.mark.slow
def test_everyday_styles_keep_full_marks_through_the_command_line(tmp_path):
    students = _students()
    assert sum(len(honest.everyday(s)) for s in STEMS) >= 30, "the set promises at least 30 everyday answers"
    inbox = tmp_path / "inbox"
    for student, books in students.items():
        for stem, nb in books.items():
            path = inbox / student / "ex01" / f"{stem}.ipynb"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(nb))
    grading, source = tmp_path / "grading", ROOT / "solutions" / "ex01"
    runs = [grader_cli(grading, source, "collect", str(inbox)),
            grader_cli(grading, source, "autograde", "--workers=2"),
            grader_cli(grading, source, "export"),
            grader_cli(grading, source, "feedback")]
    for proc in runs:
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    with open(grading / "grades.csv", newline="") as f:
        rows = {r["student_id"]: r for r in csv.DictReader(f)}
    lost = []
    for student, books in students.items():
        row = rows[student]
        status = json.loads((grading / "status" / f"{student}.json").read_text())
        assert set(books) <= set(status["notebooks"]), f"{student}: handed in {sorted(books)}, graded {sorted(status['notebooks'])}"
        for stem in books:
            judged = status["notebooks"][stem].get("judge") or {}
            # (a demo line that needs a given experiment's data may be reported as not run: it costs nothing)
            if judged.get("score", -1) < judged.get("max_score", 0) - 1e-9:
                failed = [f"{c['case']}: {c['message'][:200]}" for c in judged.get("cases", []) if not c["passed"]]
                lost.append(f"{student} {stem}: {judged.get('score')}/{judged.get('max_score')} {failed} "
                            f"not run: {judged.get('not_run')}")
            assert float(row[stem]) == pytest.approx(judged.get("max_score", -1)) or lost, (stem, row)
    assert not lost, "everyday answers lost points:\n" + "\n".join(lost)
    for student, books in students.items():
        for stem in books:
            assert (grading / "feedback" / student / "ex01" / f"{stem}.html").exists(), (student, stem)
