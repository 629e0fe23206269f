"""Grades into Canvas and Moodle (grader/lms.py): each LMS's import CSV, students matched through the
LMS's own roster export, and nobody silently dropped (graded but not in the roster; in the roster
without a submission)."""

from __future__ import annotations

import csv
import shutil

import pytest

from fixtures.hostile import grader_cli
from grader import ROOT

CANVAS_ROSTER = """Student,ID,SIS User ID,SIS Login ID,Section,Exercise 1 (4242),Quiz (77)
    Points Possible,,,,,19.00,5.00
"Doe, Jane",12345,S001,jdoe,Group A,,3
"Smith, Bob",23456,S002,bsmith,Group A,,4
"Lee, Ann",34567,S003,alee,Group B,,5
"Student, Test",99999,,,Group A,,
"""
MOODLE_ROSTER = """Identifier,Full name,Email address,ID number,Status,Grade
Participant 1234567,Jane Roe,jane.roe@uni.example,M001,Submitted,
Participant 2345678,Max Mustermann,max@uni.example,M002,Submitted,
Participant 3456789,Eva Nosub,eva@uni.example,M003,No submission,
"""


def _course(tmp_path):
    from grader.course import Course

    source = tmp_path / "source"
    source.mkdir()
    shutil.copy(ROOT / "solutions" / "ex01" / "task1_infonce.ipynb", source)
    return Course(grading=tmp_path / "grading", source=source)


def _rows(path):
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.reader(f))


def test_canvas_gradebook_import(tmp_path):
    from grader.lms import CANVAS_DOCS, export_lms

    course = _course(tmp_path)
    roster = tmp_path / "canvas.csv"
    roster.write_text(CANVAS_ROSTER)
    course.write_json("collect", "doejane", {"lms": {"system": "canvas", "user_id": "12345"}})   # by Canvas user id
    grades = [{"student_id": "doejane", "status": "graded", "score": 17.5},
              {"student_id": "bsmith", "status": "graded", "score": 12.0},         # by SIS Login ID
              {"student_id": "ghost", "status": "graded", "score": 3.0}]           # not in Canvas
    out = tmp_path / "canvas-import.csv"
    done = export_lms(course, grades, "canvas", roster, out, assignment="Exercise 1")
    rows = _rows(out)
    assert rows[0] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", "Exercise 1 (4242)"]
    body = {r[1]: r for r in rows[1:]}
    assert body["12345"][5] == "17.5" and body["23456"][5] == "12.0" and body["34567"][5] == ""
    assert "99999" not in body, "Canvas's test student is not graded"
    assert done.not_in_roster == ["ghost"]
    assert done.no_submission == ["Lee, Ann (ID 34567)"]
    assert CANVAS_DOCS.startswith("https://community.canvaslms.com/")
    # an assignment the roster lacks: a new column, and the TA is told
    done = export_lms(course, grades, "canvas", roster, out, assignment="ex01")
    assert _rows(out)[0][-1] == "ex01" and "creates a new assignment" in done.notes[0]


def test_moodle_grade_import(tmp_path):
    from grader.lms import export_lms

    course = _course(tmp_path)
    roster = tmp_path / "moodle.csv"
    roster.write_text(MOODLE_ROSTER)
    course.write_json("collect", "Jane_Roe_1234567", {"lms": {"system": "moodle", "participant_id": "1234567",
                                                             "full_name": "Jane Roe"}})
    grades = [{"student_id": "Jane_Roe_1234567", "status": "graded", "score": 15.0},
              {"student_id": "max@uni.example", "status": "review", "score": 9.0},
              {"student_id": "nobody", "status": "graded", "score": 1.0}]
    out = tmp_path / "moodle-import.csv"
    done = export_lms(course, grades, "moodle", roster, out, assignment="Exercise 1")
    rows = _rows(out)
    assert rows == [["Email address", "Full name", "Exercise 1"], ["jane.roe@uni.example", "Jane Roe", "15.0"],
                    ["max@uni.example", "Max Mustermann", "9.0"]]
    assert done.not_in_roster == ["nobody"] and done.no_submission == ["Eva Nosub (eva@uni.example)"]
    export_lms(course, grades, "moodle", roster, out, assignment="Exercise 1", moodle_key="idnumber")
    assert _rows(out)[1][0] == "M001"
    with pytest.raises(ValueError, match="no 'Username' column"):
        export_lms(course, grades, "moodle", roster, out, moodle_key="username")


def test_export_command_writes_grades_csv_and_the_lms_file(tmp_path):
    course = _course(tmp_path)
    (course.grading / "submitted" / "jdoe" / "ex01").mkdir(parents=True)
    roster = tmp_path / "canvas.csv"
    roster.write_text(CANVAS_ROSTER)
    out = tmp_path / "to-canvas.csv"
    proc = grader_cli(course.grading, course.source, "export", "--lms", "canvas", "--roster", str(roster),
                      "--to", str(out), "--assignment", "Exercise 1")
    assert proc.returncode == 0, proc.stderr
    assert (course.grading / "grades.csv").exists() and out.exists()
    assert "in the roster without a submission" in proc.stdout and "Smith, Bob" in proc.stdout
    # --to alone still means the grades CSV's path (as before --lms existed)
    plain = tmp_path / "grades-copy.csv"
    assert grader_cli(course.grading, course.source, "export", "--to", str(plain)).returncode == 0
    assert _rows(plain)[0][0] == "student_id"
    proc = grader_cli(course.grading, course.source, "export", "--lms", "moodle", "--to", str(out))
    assert proc.returncode == 1 and "--lms needs --roster" in proc.stderr
