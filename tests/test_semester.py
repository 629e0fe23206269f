"""The README's two semester walk-throughs (the ``<!-- semester: canvas -->`` and ``<!-- semester: moodle -->``
blocks), run as written on downloads built to each LMS's own naming (tests/fixtures/lms_downloads.py): collect
with the LMS's times, autograde, the TA's manual grading, backup, export for the LMS (read back by a
re-implementation of its importer), feedback zipped for the LMS's upload. Only ``~/Downloads`` is replaced by
the test's folder, and the grading folder and Task 1's source are given before the verb. The two runs are
two assignments of one course: Canvas grades ``ex01`` into the course's grading folder, Moodle ``ex02`` into
its ``ex02/`` sub-folder, side by side."""

from __future__ import annotations

import csv
import os
import re
import shlex
import shutil
import subprocess
import sys
import zipfile
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from fixtures.lms_downloads import (Student, canvas_download, canvas_gradebook_export, canvas_submissions_json,
                                    moodle_download, moodle_grading_worksheet)
from fixtures.lms_importers import canvas_import, moodle_import
from grader import ROOT

STEM = "task1_infonce"
DUE = datetime.fromisoformat("2026-11-20T23:59:00+01:00")


def walkthrough(lms: str) -> list[str]:
    """The ``python -m grader`` lines of the README's block for ``lms``."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = re.search(rf"<!-- semester: {lms} -->\s*```bash\n(.*?)```", text, re.S)
    assert block, f"README.md has no '<!-- semester: {lms} -->' bash block"
    return [line for line in block.group(1).splitlines() if line.startswith("python -m grader ")]


def _class(nb: dict[str, bytes]) -> list[Student]:
    return [Student("Jane Doe", "Doe, Jane", 1001, 1234567, "jd1@uni.example", "+491701234",
                    {f"{STEM}.ipynb": nb["good"]}, DUE - timedelta(hours=2), sis_user_id="S1", sis_login_id="jdoe1"),
            Student("Jane Doe", "Doe, Jane", 1008, 1234568, "jd2@uni.example", "-0042",
                    {f"{STEM}.ipynb": nb["stub"]}, DUE + timedelta(minutes=150), late=True, sis_user_id="S8",
                    sis_login_id="jdoe2"),
            Student("王小明", "王, 小明", 1007, 3456789, "wang@uni.example", "M007", {f"{STEM}.ipynb": nb["good"]},
                    DUE - timedelta(minutes=3), as_zip=True, sis_user_id="S7", sis_login_id="xwang",
                    zip_name="work.zip"),     # a zip upload holding the notebook
            Student("Seán O'Brien", "O'Brien, Seán", 1012, 4567890, "sean@uni.example", "0008",
                    {f"{STEM}.ipynb": nb["good"]}, DUE + timedelta(minutes=150), late=True, sis_user_id="S12",
                    sis_login_id="sobrien")]


def _notebooks() -> dict[str, bytes]:
    import json

    from grader.mutants import student_copy

    release = json.loads((ROOT / "notebooks" / "ex01" / f"{STEM}.ipynb").read_text())
    solution = json.loads((ROOT / "solutions" / "ex01" / f"{STEM}.ipynb").read_text())
    return {"good": json.dumps(student_copy(release, solution)).encode(), "stub": json.dumps(release).encode()}


def _grade_written_answers(grading: Path, assignment: str) -> int:
    """What a TA does in formgrader's Manual Grading: every written answer gets half its points."""
    from nbgrader.api import Gradebook

    graded = 0
    with Gradebook(f"sqlite:///{grading / 'gradebook.db'}", "learning-at-scale") as gb:
        for submission in gb.find_assignment(assignment).submissions:
            for notebook in submission.notebooks:
                for grade in notebook.grades:
                    if grade.needs_manual_grade:
                        grade.manual_score, grade.needs_manual_grade = grade.max_score / 2, False
                        graded += 1
        gb.db.commit()
    return graded


def _run(line: str, downloads: Path, grading: Path, source: Path, assignment: str) -> subprocess.CompletedProcess:
    args = shlex.split(line.replace("~/Downloads", str(downloads)))
    assert args[:3] == ["python", "-m", "grader"], line
    from grader.course import nbgrader_env

    command = [sys.executable, "-m", "grader", f"--grading-dir={grading}", f"--source={source}",
               f"--assignment={assignment}", *args[3:]]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=1500, env=nbgrader_env())


@pytest.mark.slow
def test_a_semester_on_canvas_and_on_moodle_runs_as_the_readme_says(tmp_path):
    klass = _class(_notebooks())
    source = tmp_path / "source"
    source.mkdir()
    shutil.copy(ROOT / "solutions" / "ex01" / f"{STEM}.ipynb", source)
    course = tmp_path / "grading"
    zone = DUE.tzinfo

    # the LMS files, named as the README names them
    canvas_files = tmp_path / "canvas"
    canvas_download(canvas_files / "submissions", klass, built_at=DUE + timedelta(days=2))
    canvas_submissions_json(canvas_files / "submissions.json", klass, due_at=DUE)
    canvas_gradebook_export(canvas_files / "gradebook.csv", klass, points_possible=100.0)
    moodle_files = tmp_path / "moodle"
    moodle_download(moodle_files / "moodle", klass, version="4.1")
    moodle_grading_worksheet(moodle_files / "worksheet.csv", klass, zone=zone)

    for lms, downloads, assignment, grading in (("canvas", canvas_files, "ex01", course),
                                                ("moodle", moodle_files, "ex02", course / "ex02")):
        lines = walkthrough(lms)
        verbs = [shlex.split(line)[3] for line in lines]
        assert verbs == ["collect", "autograde", "backup", "export", "feedback"], verbs
        for line in lines:
            if line.split()[3] == "export":
                refused = _run(line, downloads, grading, source, assignment)
                assert refused.returncode == 1 and "not graded yet" in refused.stderr, refused.stderr[-2000:]
                assert _grade_written_answers(grading, assignment) > 0
            proc = _run(line, downloads, grading, source, assignment)
            assert proc.returncode == 0, f"{lms}: {line}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
            if lms == "canvas" and line.split()[3] == "autograde":   # feedback before export: the same penalty
                early = _run("python -m grader feedback", downloads, grading, source, assignment)
                assert early.returncode == 0, early.stderr[-2000:]
                page = (grading / "feedback" / "canvas_1012" / "ex01" / f"{STEM}.html").read_text(encoding="utf-8")
                assert "Late submission penalty (Score: -2.0)" in page
                assert "Written response</a> (Score: to be graded / " in page, "not 0 before the TA grades it"
        with open(grading / "grades.csv", newline="", encoding="utf-8") as f:
            rows = {r["student_id"]: r for r in csv.DictReader(f)}
        prefix, key = ("canvas_", "user_id") if lms == "canvas" else ("moodle_", "participant_id")
        ids = [prefix + str(getattr(s, key)) for s in klass]
        assert set(rows) == set(ids), "every student of the download, and only they"
        good, stub, zipped, late = (rows[i] for i in ids)
        assert float(good["score"]) > float(stub["score"]) and float(zipped["score"]) == float(good["score"])
        assert good["minutes_late"] == "0" and stub["minutes_late"] == "150" and zipped["minutes_late"] == "0"
        assert late["minutes_late"] == "150" and float(late["late_penalty"]) == 2.0, "per-hour:1, round(2.5 h)"
        assert float(late["score"]) == float(good["score"]) - 2.0
        assert list((grading / "backups").glob("gradebook-*.db")), "backup wrote a copy"
        if lms == "canvas":
            got = canvas_import(downloads / "canvas-import.csv", downloads / "gradebook.csv")
            assert set(got["grades"]) == {"1001", "1008", "1007", "1012"} and not got["unknown_students"]
        else:
            got = moodle_import(downloads / "moodle-import.csv", downloads / "worksheet.csv", key="email",
                                grade_column="Exercise 1")
            assert set(got["grades"]) == {s.email for s in klass}
        for s, student in zip(klass, ids):
            value = got["grades"][str(s.user_id)] if lms == "canvas" else got["grades"][s.email]
            scaled = round(float(rows[student]["score"]) / float(rows[student]["max_score"]) * 100, 2)
            assert float(value) == pytest.approx(scaled), (lms, s.name)
        with zipfile.ZipFile(grading / f"feedback-{lms}.zip") as zf:
            assert len(zf.namelist()) == 4, zf.namelist()
        if lms == "moodle":   # a regrade keeps the TA's finished manual grades: export needs no --provisional
            regrade = _run("python -m grader autograde --workers 2 --regrade", downloads, grading, source, assignment)
            assert regrade.returncode == 0, regrade.stderr[-2000:]
            export = next(line for line in lines if line.split()[3] == "export")
            again = _run(export, downloads, grading, source, assignment)
            assert again.returncode == 0, again.stderr[-2000:]
            with open(grading / "grades.csv", newline="", encoding="utf-8") as f:
                assert {r["student_id"]: r["score"] for r in csv.DictReader(f)} == \
                    {i: rows[i]["score"] for i in ids}, "the same grades after the regrade"
    assert (course / "gradebook.db").exists() and (course / "ex02" / "gradebook.db").exists()
    assert os.path.isdir(course / "submitted" / "canvas_1001" / "ex01")
    assert os.path.isdir(course / "ex02" / "submitted" / "moodle_1234567" / "ex02")
