"""Grades into Canvas and Moodle (grader/extras/lms/): each LMS's import CSV, students matched through the LMS's
own roster export by the ids their download carried, nobody silently dropped (graded but not in the roster;
in the roster without a submission; unreadable), no provisional grade sent by accident, identifiers
written verbatim, points checked against the LMS's points possible."""

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
"Doe, Jane",45678,+0042,jdoe2,Group B,,5
"Student, Test",99999,,,Group A,,
"""
MOODLE_ROSTER = """Identifier,Full name,Email address,ID number,Status,Grade,Maximum Grade
Participant 1234567,Jane Roe,jane.roe@uni.example,+491701234,Submitted,,20.00
Participant 2345678,Max Mustermann,max@uni.example,-0042,Submitted,,20.00
Participant 3456789,Eva Nosub,eva@uni.example,M003,No submission,,20.00
"""


def _course(tmp_path):
    from grader.course import Course

    source = tmp_path / "source"
    source.mkdir(parents=True)
    shutil.copy(ROOT / "solutions" / "ex01" / "task1_infonce.ipynb", source)
    return Course(grading=tmp_path / "grading", source=source)


def _rows(path):
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.reader(f))


def _row(student, score, **extra):
    return {"student_id": student, "status": "graded", "score": score, "max_score": 19.0, "core_score": score,
            "core_max": 19.0, "late_penalty": 0.0, "needs_manual_grade": False, **extra}


def test_canvas_gradebook_import(tmp_path):
    from grader.extras.lms import ExportOptions, export_lms
    from grader.extras.lms.canvas import DOCS

    course = _course(tmp_path)
    roster = tmp_path / "canvas.csv"
    roster.write_text(CANVAS_ROSTER)
    course.write_json("collect", "canvas_12345", {"lms": {"system": "canvas", "user_id": "12345"}})
    course.write_json("collect", "canvas_45678", {"lms": {"system": "canvas", "user_id": "45678"}})
    grades = [_row("canvas_12345", 17.5), _row("canvas_45678", 11.0),   # two Jane Does, told apart by the id
              _row("bsmith", 12.0),                                       # the plain layout, by SIS Login ID
              _row("doejane", 3.0),                                       # by name: two rows fit, refused
              _row("ghost", 3.0)]                                         # not in Canvas
    out = tmp_path / "canvas-import.csv"
    done = export_lms(course, grades, "canvas", roster, out, ExportOptions(column="Exercise 1"))
    rows = _rows(out)
    assert rows[0] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", "Exercise 1 (4242)"]
    assert rows[1][0].strip() == "Points Possible" and rows[1][5] == "19.0"
    body = {r[1]: r for r in rows[2:]}
    assert body["12345"][5] == "17.5" and body["45678"][5] == "11.0" and body["23456"][5] == "12.0"
    assert "34567" not in body, "no row: a blank cell would remove a grade Canvas holds"
    assert body["45678"][2] == "+0042", "an identifier is never formula-escaped"
    assert "99999" not in body, "Canvas's test student is not graded"
    assert done.not_in_roster[0].startswith("doejane (matches several roster rows") and done.not_in_roster[1] == "ghost"
    assert done.no_submission == ["Lee, Ann (ID 34567)"]
    assert DOCS.startswith("https://community.canvaslms.com/")
    # an assignment the roster lacks: a new column, and the TA is told
    done = export_lms(course, grades, "canvas", roster, out, ExportOptions(column="ex01"))
    assert _rows(out)[0][-1] == "ex01" and "creates a new assignment" in done.notes[0]


def test_moodle_grade_import(tmp_path):
    from grader.extras.lms import ExportOptions, export_lms

    course = _course(tmp_path)
    roster = tmp_path / "moodle.csv"
    roster.write_text(MOODLE_ROSTER)
    course.write_json("collect", "moodle_1234567", {"lms": {"system": "moodle", "participant_id": "1234567",
                                                           "name": "Jane Roe"}})
    grades = [_row("moodle_1234567", 15.0), _row("max@uni.example", 9.0, status="review"), _row("nobody", 1.0)]
    out = tmp_path / "moodle-import.csv"
    done = export_lms(course, grades, "moodle", roster, out, ExportOptions(column="Exercise 1"))
    assert _rows(out) == [["Email address", "Full name", "Exercise 1"], ["jane.roe@uni.example", "Jane Roe", "15.0"],
                          ["max@uni.example", "Max Mustermann", "9.0"]]
    assert done.not_in_roster == ["nobody"] and done.no_submission == ["Eva Nosub (eva@uni.example)"]
    export_lms(course, grades, "moodle", roster, out, ExportOptions(column="Exercise 1", key="idnumber"))
    assert [r[0] for r in _rows(out)[1:]] == ["+491701234", "-0042"], "ID numbers reach Moodle verbatim"
    with pytest.raises(ValueError, match="no 'Username' column"):
        export_lms(course, grades, "moodle", roster, out, ExportOptions(key="username"))


def test_moodle_twins_are_never_matched_by_name(tmp_path):
    """Two participants called Jane Doe in a roster without participant ids: neither gets the other's
    grade; with the grading worksheet (participant ids) both are matched."""
    from grader.extras.lms import ExportOptions, export_lms

    course = _course(tmp_path)
    for pid in ("1111111", "2222222"):
        course.write_json("collect", f"moodle_{pid}", {"lms": {"system": "moodle", "participant_id": pid,
                                                              "name": "Jane Doe"}})
    grades = [_row("moodle_1111111", 18.0), _row("moodle_2222222", 2.0)]
    participants = tmp_path / "participants.csv"
    participants.write_text("First name,Surname,ID number,Email address\nJane,Doe,,jd1@uni.example\n"
                            "Jane,Doe,,jd2@uni.example\n")
    out = tmp_path / "m.csv"
    done = export_lms(course, grades, "moodle", participants, out, ExportOptions(column="Exercise 1"))
    assert _rows(out) == [["Email address", "Full name", "Exercise 1"]]
    assert all("ambiguous" in line for line in done.not_in_roster) and len(done.not_in_roster) == 2
    worksheet = tmp_path / "worksheet.csv"
    worksheet.write_text("Identifier,Full name,Email address,Status,Grade,Maximum Grade\n"
                         "Participant 1111111,Jane Doe,jd1@uni.example,Submitted,,20.00\n"
                         "Participant 2222222,Jane Doe,jd2@uni.example,Submitted,,20.00\n")
    export_lms(course, grades, "moodle", worksheet, out, ExportOptions(column="Exercise 1"))
    assert _rows(out)[1:] == [["jd1@uni.example", "Jane Doe", "18.0"], ["jd2@uni.example", "Jane Doe", "2.0"]]


def test_provisional_unreadable_and_over_the_maximum_are_never_sent_by_accident(tmp_path):
    from grader.extras.lms import ExportOptions, ExportRefused, export_lms

    course = _course(tmp_path)
    roster = tmp_path / "canvas.csv"
    roster.write_text(CANVAS_ROSTER)
    for uid in ("12345", "23456", "34567"):
        course.write_json("collect", f"canvas_{uid}", {"lms": {"system": "canvas", "user_id": uid}})
    grades = [_row("canvas_12345", 17.0), _row("canvas_23456", 10.0, needs_manual_grade=True),
              _row("canvas_34567", 0.0, status="unreadable", reason="cannot open x.zip")]
    out = tmp_path / "canvas-import.csv"
    with pytest.raises(ExportRefused, match="not graded yet: canvas_23456"):
        export_lms(course, grades, "canvas", roster, out, ExportOptions(column="Exercise 1"))
    assert not out.exists(), "nothing written"
    done = export_lms(course, grades, "canvas", roster, out, ExportOptions(column="Exercise 1", provisional="skip"))
    body = {r[1]: r[5] for r in _rows(out)[2:]}
    assert body == {"12345": "17.0"}, "unreadable and provisional: not in the file, never 0"
    assert any(s.startswith("canvas_34567 (unreadable") for s in done.left_out)
    export_lms(course, grades, "canvas", roster, out, ExportOptions(column="Exercise 1", provisional="include"))
    assert {r[1]: r[5] for r in _rows(out)[2:]}["23456"] == "10.0"
    # points above the LMS's points possible (19) are refused unless scaled on purpose
    over = [_row("canvas_12345", 21.5, max_score=23.0)]
    with pytest.raises(ExportRefused, match="above the LMS's 19 points possible"):
        export_lms(course, over, "canvas", roster, out, ExportOptions(column="Exercise 1"))
    export_lms(course, over, "canvas", roster, out, ExportOptions(column="Exercise 1", scale_to=19.0))
    assert {r[1]: r[5] for r in _rows(out)[2:]}["12345"] == str(round(21.5 / 23 * 19, 2))
    core = [_row("canvas_12345", 21.5, max_score=23.0, core_score=15.0, core_max=19.0, late_penalty=1.0)]
    export_lms(course, core, "canvas", roster, out, ExportOptions(column="Exercise 1", score="core"))
    assert {r[1]: r[5] for r in _rows(out)[2:]}["12345"] == "14.0", "the core less the late penalty"


def test_export_command_writes_grades_csv_and_the_lms_file(tmp_path):
    course = _course(tmp_path)
    (course.grading / "submitted" / "jdoe" / "ex01").mkdir(parents=True)
    roster = tmp_path / "canvas.csv"
    roster.write_text(CANVAS_ROSTER)
    out = tmp_path / "to-canvas.csv"
    proc = grader_cli(course.grading, course.source, "export", "--lms", "canvas", "--roster", str(roster),
                      "--to", str(out), "--lms-column", "Exercise 1")
    assert proc.returncode == 0, proc.stderr
    assert (course.grading / "grades.csv").exists() and out.exists()
    assert "LEFT OUT" in proc.stdout and "jdoe (not graded" in proc.stdout
    # --to alone still means the grades CSV's path (as before --lms existed)
    plain = tmp_path / "plain.csv"
    assert grader_cli(course.grading, course.source, "export", "--to", str(plain)).returncode == 0
    assert plain.exists()
    proc = grader_cli(course.grading, course.source, "export", "--lms", "moodle", "--to", str(out))
    assert proc.returncode == 1 and "--lms needs --roster" in proc.stderr


def test_every_collected_students_grade_arrives_through_each_lms_importer(tmp_path):
    """The round trip a TA makes: the LMS's download collected, grades exported for the LMS, and the file
    read back by a re-implementation of the LMS's own importer (tests/fixtures/lms_importers.py, from
    Canvas's gradebook_importer.rb and Moodle's grade/import/csv): every collected student's grade arrives,
    none provisional, nobody unknown, no grade removed, identifiers matched as they are."""
    from datetime import datetime, timezone

    from fixtures.lms_downloads import (Student, canvas_download, canvas_gradebook_export, moodle_download,
                                        moodle_grading_worksheet)
    from fixtures.lms_importers import canvas_import, moodle_import

    from grader.collect import collect
    from grader.extras.lms import ExportOptions, export_lms

    when = datetime(2026, 11, 20, 20, 0, tzinfo=timezone.utc)
    nb = (ROOT / "notebooks" / "ex01" / "task1_infonce.ipynb").read_bytes()
    klass = [Student("Jane Doe", "Doe, Jane", 1001, 1234567, "jd1@uni.example", "+491701234",
                     {"task1_infonce.ipynb": nb}, when, sis_user_id="+0042", sis_login_id="jdoe", score=12.0),
             Student("Jane Doe", "Doe, Jane", 1008, 1234568, "jd2@uni.example", "-0042", {"task1_infonce.ipynb": nb},
                     when, sis_user_id="S008", sis_login_id="jdoe2"),
             Student("王小明", "王, 小明", 1007, 3456789, "wang@uni.example", "M007", {"task1_infonce.ipynb": nb}, when,
                     sis_user_id="S007", sis_login_id="xwang", score=50.0),
             Student("Eva Nosub", "Nosub, Eva", 1009, 5678901, "eva@uni.example", "M009", score=40.0,
                     sis_user_id="S009", sis_login_id="enosub")]
    points = {1001: 93.5, 1008: 41.25, 1007: 100.0}

    def graded(course):
        rows = []
        for student in course.students():
            info = course.read_json("collect", student)["lms"]
            key = int(info.get("user_id") or 0) or {s.participant_id: s.user_id for s in klass}[int(info["participant_id"])]
            rows.append(_row(student, points[key], max_score=100.0))
        return rows

    # Canvas
    course = _course(tmp_path / "c")
    collect(course, canvas_download(tmp_path / "c" / "download", klass, built_at=when))
    roster = canvas_gradebook_export(tmp_path / "c" / "gradebook.csv", klass, points_possible=100.0)
    out = tmp_path / "c" / "import.csv"
    export_lms(course, graded(course), "canvas", roster, out, ExportOptions(column="Exercise 1"))
    got = canvas_import(out, roster)
    assert got["grades"] == {"1001": "93.5", "1008": "41.25", "1007": "100.0"}
    assert not got["unknown_students"] and not got["new_assignments"]
    assert not [w for w in got["warnings"] if "REMOVES" in w or "not in the course" in w], got["warnings"]

    # Moodle, matched by ID number: "+491701234" and "-0042" must arrive as they are
    course = _course(tmp_path / "m")
    collect(course, moodle_download(tmp_path / "m" / "download", klass, version="4.1"))
    worksheet = moodle_grading_worksheet(tmp_path / "m" / "worksheet.csv", klass, zone=timezone.utc)
    participants = tmp_path / "m" / "participants.csv"
    participants.write_text("Identifier,Full name,Email address,ID number,Maximum Grade\n" + "".join(
        f'Participant {s.participant_id},{s.name},{s.email},{s.idnumber},100.00\n' for s in klass), encoding="utf-8")
    for roster, key in ((worksheet, "email"), (participants, "idnumber")):
        out = tmp_path / "m" / f"import-{key}.csv"
        export_lms(course, graded(course), "moodle", roster, out, ExportOptions(column="Exercise 1", key=key))
        got = moodle_import(out, participants, key=key, grade_column="Exercise 1")
        by_key = {s.email if key == "email" else s.idnumber: points[s.user_id] for s in klass if s.user_id in points}
        assert got["grades"] == pytest.approx(by_key), (key, got)
