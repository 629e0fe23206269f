"""Submission times from LMS downloads and ``--times``, the deadline, and nbgrader's late-penalty rules
(grader/extras/deadlines.py, grader/collect.py, the late columns of grades.csv)."""

from __future__ import annotations

import csv
import json
import os
import shutil
from datetime import datetime, timezone
from pathlib import Path

import pytest

from fixtures.hostile import grader_cli
from grader import ROOT

STEM = "task1_infonce"
DEADLINE = "2026-11-20T23:59:00+01:00"
DUE = datetime.fromisoformat(DEADLINE).timestamp()


def _course(tmp_path):
    from grader.course import Course

    source = tmp_path / "source"
    source.mkdir()
    shutil.copy(ROOT / "solutions" / "ex01" / f"{STEM}.ipynb", source)
    return Course(grading=tmp_path / "grading", source=source)


def _put(path: Path, when: float) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes((ROOT / "notebooks" / "ex01" / f"{STEM}.ipynb").read_bytes())
    os.utime(path, (when, when))


def test_lms_download_names():
    """The student id comes from the LMS's own id (grader/extras/lms/): Canvas's user id or anonymous id, Moodle's
    participant id; the name is kept for the TA, in any script."""
    from grader.extras.lms import parse_download_name

    c = parse_download_name("doejane_12345_67890_task1_infonce.ipynb", False)
    assert (c.student, c.file) == ("canvas_12345", "task1_infonce.ipynb")
    assert c.info == {"system": "canvas", "user_id": "12345", "attachment_id": "67890", "late": False, "name": "doejane"}
    late = parse_download_name("smithbob_LATE_23456_78901_task1_infonce-1.ipynb", False)
    assert late.student == "canvas_23456" and late.info["late"] and late.file == "task1_infonce-1.ipynb"
    assert parse_download_name("smithbob_late_23456_78901_task1_infonce.ipynb", False).info["late"]   # older Canvas
    assert parse_download_name("王小明_1007_55517_task1_infonce.ipynb", False).student == "canvas_1007"
    anon = parse_download_name("LATE_anon_Ab3dE_55531_task1_infonce.ipynb", False)
    assert anon.student == "canvas_anon_Ab3dE" and anon.info["late"] and anon.info["anonymous_id"] == "Ab3dE"
    m = parse_download_name("José Núñez_1234567_assignsubmission_file_", True)          # Moodle 3.1-4.0
    assert (m.student, m.file) == ("moodle_1234567", "")
    assert m.info["participant_id"] == "1234567" and m.info["name"] == "José Núñez"
    assert parse_download_name("José Núñez_1234567_assignsubmission_file", True).student == "moodle_1234567"  # 4.1+
    flat = parse_download_name("Jane Doe_7654321_assignsubmission_file_task1_infonce.ipynb", False)
    assert flat.student == "moodle_7654321" and flat.file == "task1_infonce.ipynb"
    for name in ("alice", "alice.zip", "alice__task1_infonce.ipynb", "notes_1.txt", "doejane_1001.html"):
        assert parse_download_name(name, False) is None, name
    text = parse_download_name("doejane_1001_text.html", False)   # an online text entry: the student's, no notebook
    assert text.student == "canvas_1001" and text.file == "online text.html"
    assert parse_download_name("alice", True) is None


def test_lms_downloads_charge_no_penalty_without_the_lms_times(tmp_path):
    """Canvas stamps every entry of its zip with the time the zip was built: those are never submission
    times. Without --times nobody is charged, everyone is named, and the TA is told where the times are;
    the plain layout keeps its file times."""
    from grader.collect import collect

    course = _course(tmp_path)
    inbox = tmp_path / "inbox"
    built = DUE + 2 * 86400          # the download, two days after the deadline
    _put(inbox / "doejane_12345_67890_task1_infonce.ipynb", built)
    _put(inbox / "smithbob_LATE_23456_78901_task1_infonce.ipynb", built)
    _put(inbox / "Jane Roe_7654321_assignsubmission_file" / "task1_infonce.ipynb", built)
    _put(inbox / "plainpat" / "task1_infonce.ipynb", DUE + 3600)
    results = {r.student: r for r in collect(course, inbox, deadline=DEADLINE, late_penalty="per-hour:2")}
    assert sorted(results) == ["canvas_12345", "canvas_23456", "moodle_7654321", "plainpat"]
    assert all(not r.unreadable for r in results.values()), {s: r.problems for s, r in results.items()}
    report = course.read_json("collect", "canvas_23456")
    assert report["lms"]["late"] is True and report["lms"]["user_id"] == "23456" and report["lms"]["name"] == "smithbob"
    assert report["submitted_at"] == "" and report["time_source"].startswith("none (canvas download")
    assert any("--times" in p for p in results["canvas_12345"].problems)
    assert course.read_json("collect", "plainpat")["time_source"] == "file time"
    assert json.loads((course.grading / "deadline.json").read_text()) == {"deadline": DEADLINE, "late_penalty": "per-hour:2"}

    proc = grader_cli(course.grading, course.source, "export")
    assert proc.returncode == 0, proc.stderr
    rows = {r["student_id"]: r for r in csv.DictReader(open(course.grading / "grades.csv", newline=""))}
    for student in ("canvas_12345", "canvas_23456", "moodle_7654321"):
        assert rows[student]["minutes_late"] == "unknown" and rows[student]["late_penalty"] == "0.0", rows[student]
    assert "Canvas marked it LATE" in rows["canvas_23456"]["reason"]
    assert rows["canvas_23456"]["name"] == "smithbob"
    assert rows["plainpat"]["minutes_late"] == "60"
    assert "NO SUBMISSION TIME" in proc.stdout and "canvas_12345" in proc.stdout


def test_canvas_api_times_give_the_minutes_and_its_late_flag_is_cross_checked(tmp_path):
    """--times with Canvas's Submissions API list (JSON): matched by user id; Canvas's late flag is checked
    against the time both ways (a LATE marker on an on-time time, no marker on a late time)."""
    from grader.collect import collect

    course = _course(tmp_path)
    inbox = tmp_path / "inbox"
    for name in ("doejane_12345_67890", "smithbob_LATE_23456_78901", "leeann_34567_78902"):
        _put(inbox / f"{name}_task1_infonce.ipynb", DUE + 2 * 86400)
    api = tmp_path / "submissions.json"
    api.write_text(json.dumps([
        {"user_id": 12345, "submitted_at": "2026-11-20T21:00:00Z", "late": False, "workflow_state": "submitted"},
        {"user_id": 23456, "submitted_at": "2026-11-21T01:29:00Z", "late": True, "workflow_state": "submitted"},
        {"user_id": 34567, "submitted_at": "2026-11-21T03:00:00Z", "late": False, "workflow_state": "submitted"},
        {"user_id": 99999, "submitted_at": None, "late": False, "workflow_state": "unsubmitted"}]))
    collect(course, inbox, times=api, deadline=DEADLINE, late_penalty="per-hour:1")
    assert course.read_json("collect", "canvas_23456")["submitted_at"] == "2026-11-21T01:29:00+00:00"
    proc = grader_cli(course.grading, course.source, "export")
    assert proc.returncode == 0, proc.stderr
    rows = {r["student_id"]: r for r in csv.DictReader(open(course.grading / "grades.csv", newline=""))}
    assert rows["canvas_12345"]["minutes_late"] == "0" and rows["canvas_23456"]["minutes_late"] == "150"
    assert "did not mark this submission late" in rows["canvas_34567"]["reason"]
    assert "check it" not in rows["canvas_23456"]["reason"]


def test_extensions_from_the_gradebook_or_a_csv_and_a_grace_period(tmp_path):
    """Lateness counts from the deadline plus the student's extension (nbgrader's gradebook, or --extensions),
    and --grace minutes are on time: a 4-hour extension set in nbgrader is 0 s late there and here."""
    from nbgrader.api import Gradebook

    from grader import ASSIGNMENT
    from grader.course import COURSE_ID
    from grader.extras.deadlines import apply_to_rows, save_settings

    course = _course(tmp_path)
    _gradebook(course, {"alice": [5.0], "bob": [5.0], "carol": [5.0], "dave": [5.0]})
    with Gradebook(course.db_url, COURSE_ID) as gb:
        from datetime import timedelta

        gb.find_submission(ASSIGNMENT, "alice").extension = timedelta(hours=4)
        gb.db.commit()
    for student, minutes in (("alice", 3 * 60), ("bob", 2 * 60), ("carol", 4), ("dave", 20)):
        when = datetime.fromtimestamp(DUE + minutes * 60, timezone.utc).isoformat(timespec="seconds")
        course.write_json("collect", student, {"submitted_at": when, "time_source": "--times t.csv"})
    extensions = tmp_path / "extensions.csv"
    extensions.write_text("student,hours\nbob,2.5\n")
    save_settings(course, DEADLINE, "per-hour:1", grace=5, extensions=extensions)
    rows = [{"student_id": s, "score": 5.0, "reason": ""} for s in ("alice", "bob", "carol", "dave")]
    apply_to_rows(course, rows)
    late = {r["student_id"]: (r["minutes_late"], r["late_penalty"]) for r in rows}
    assert late == {"alice": (0, 0.0), "bob": (0, 0.0), "carol": (0, 0.0), "dave": (20, 0.0)}
    assert "extension of 4 h" in rows[0]["reason"] and "extension of 2.5 h" in rows[1]["reason"]


def test_times_csv_wins_and_a_student_missing_from_it_is_named(tmp_path):
    from grader.collect import collect

    course = _course(tmp_path)
    inbox = tmp_path / "inbox"
    _put(inbox / "alice" / f"{STEM}.ipynb", DUE + 7 * 86400)   # the file's time says a week late...
    _put(inbox / "bob" / f"{STEM}.ipynb", DUE)
    times = tmp_path / "times.csv"
    times.write_text("student,submitted_at\nalice,2026-11-20T20:00:00+01:00\n")   # ...the LMS says on time
    results = {r.student: r for r in collect(course, inbox, times=times, deadline=DEADLINE)}
    assert course.read_json("collect", "alice")["submitted_at"] == "2026-11-20T19:00:00+00:00"
    assert course.read_json("collect", "alice")["time_source"] == "--times times.csv"
    assert course.read_json("collect", "bob")["time_source"] == "file time (not in times.csv)"
    assert any("not in times.csv" in p for p in results["bob"].problems)


def test_moodles_grading_worksheet_gives_the_times(tmp_path):
    """Moodle's "Download grading worksheet" (Identifier "Participant N", "Last modified (submission)" in
    Moodle's words, the downloader's zone: read in the deadline's) as --times, matched to the
    download's participant ids; a "-" (no submission) leaves no time and names the student."""
    from grader.collect import collect

    course = _course(tmp_path)
    inbox = tmp_path / "inbox"
    _put(inbox / "Jane Roe_7654321_assignsubmission_file_" / f"{STEM}.ipynb", DUE + 7 * 86400)
    _put(inbox / "Ana Lima_1111111_assignsubmission_file_" / f"{STEM}.ipynb", DUE)
    worksheet = tmp_path / "Grades-Exercise 1.csv"
    worksheet.write_text(
        "Identifier,Full name,Email address,Status,Grade,Maximum Grade,Grade can be changed,"
        "Last modified (submission),Last modified (grade),Feedback comments\n"
        'Participant 7654321,Jane Roe,jane@uni.example,Submitted for grading,,11.00,Yes,'
        '"Saturday, 21 November 2026, 1:30 AM",-,\n'
        "Participant 1111111,Ana Lima,ana@uni.example,No submission,,11.00,Yes,-,-,\n", encoding="utf-8")
    results = {r.student: r for r in collect(course, inbox, times=worksheet, deadline=DEADLINE)}
    jane = course.read_json("collect", "moodle_7654321")
    assert jane["submitted_at"] == "2026-11-21T00:30:00+00:00"   # 1:30 AM at +01:00: 91 minutes late
    assert jane["time_source"].startswith("--times")
    assert course.read_json("collect", "moodle_1111111")["time_source"] == f"none (moodle download, not in {worksheet.name})"
    assert any(p.startswith(f"not in {worksheet.name}: no submission time") for p in results["moodle_1111111"].problems)
    rows = [{"student_id": "moodle_7654321", "score": 10.0, "reason": ""}]
    from grader.extras.deadlines import apply_to_rows

    apply_to_rows(course, rows, DEADLINE, "per-hour:1")
    assert rows[0]["minutes_late"] == 91 and rows[0]["late_penalty"] == 2.0


def test_worksheet_times_need_a_zone(tmp_path):
    from grader.extras.deadlines import read_times

    sheet = tmp_path / "w.csv"
    sheet.write_text("Identifier,Last modified (submission)\nParticipant 5,\"Friday, 20 November 2026, 11:00 PM\"\n")
    with pytest.raises(ValueError, match="time zone"):
        read_times(sheet)
    assert read_times(sheet, timezone.utc) == {"5": {"submitted_at": "2026-11-20T23:00:00+00:00", "late": None}}


def test_a_deadline_without_time_zone_is_refused(tmp_path):
    course = _course(tmp_path)
    (tmp_path / "inbox").mkdir()
    proc = grader_cli(course.grading, course.source, "collect", str(tmp_path / "inbox"), "--deadline", "2026-11-20T23:59")
    assert proc.returncode != 0 and "has no time zone" in proc.stderr, proc.stderr


@pytest.mark.parametrize("method, minutes_late, score, want", [
    ("none", 300, 10.0, 0.0),
    ("zero", 1, 10.0, 10.0),
    ("per-hour:1", 150, 10.0, 2.0),     # round(2.5) = 2: Python's round, as in nbgrader's example plugin
    ("per-hour:1", 100, 10.0, 2.0),     # round(1.67) = 2
    ("per-hour:4", 24 * 60, 10.0, 10.0),  # clamped to the score
    ("per-hour:1", 0, 10.0, 0.0),
])
def test_penalties_follow_nbgraders_rules(tmp_path, method, minutes_late, score, want):
    from grader.extras.deadlines import apply_to_rows, penalty_for

    course = _course(tmp_path)
    when = datetime.fromtimestamp(DUE + minutes_late * 60, timezone.utc).isoformat(timespec="seconds")
    course.write_json("collect", "alice", {"submitted_at": when, "time_source": "file time"})
    course.write_json("collect", "bob", {})   # no time at all
    rows = [{"student_id": "alice", "score": score, "reason": ""}, {"student_id": "bob", "score": score, "reason": ""}]
    unknown = apply_to_rows(course, rows, DEADLINE, method)
    assert rows[0]["late_penalty"] == pytest.approx(want)
    assert rows[0]["score"] == pytest.approx(score - want) and rows[0]["score_before_penalty"] == score
    assert rows[0]["minutes_late"] == minutes_late
    # never silently on time: bob is named, in the return value and in his reason
    assert unknown == ["bob"] and rows[1]["minutes_late"] == "unknown" and "submission time unknown" in rows[1]["reason"]
    assert penalty_for(5.0, -10, "zero", 0) == 0.0


def test_canvas_late_flag_against_an_earlier_time_is_pointed_out(tmp_path):
    from grader.extras.deadlines import apply_to_rows

    course = _course(tmp_path)
    course.write_json("collect", "carol", {"submitted_at": "2026-11-20T12:00:00+00:00",
                                           "lms": {"system": "canvas", "user_id": "5", "late": True}})
    rows = [{"student_id": "carol", "score": 4.0, "reason": ""}]
    apply_to_rows(course, rows, DEADLINE, "zero")
    assert rows[0]["late_penalty"] == 0.0 and "Canvas marked this submission late" in rows[0]["reason"]


def test_bad_penalty_is_refused():
    from grader.extras.deadlines import parse_penalty

    with pytest.raises(ValueError, match="per-hour:P"):
        parse_penalty("half")


def _gradebook(course, scores: dict[str, list[float]]):
    """A gradebook with the assignment, one code grade cell of 5 points per notebook, and a submission
    per student in ``scores`` (student -> autograded score of each notebook, in the sheet's order)."""
    from nbgrader.api import Gradebook

    from grader import ASSIGNMENT
    from grader.course import COURSE_ID

    notebooks = course.notebook_names()
    course.db_path.parent.mkdir(parents=True, exist_ok=True)
    with Gradebook(course.db_url, COURSE_ID) as gb:
        gb.add_assignment(ASSIGNMENT)
        for nb in notebooks:
            gb.add_notebook(nb, ASSIGNMENT)
            gb.add_grade_cell("answer", nb, ASSIGNMENT, max_score=5, cell_type="code")
        for student, points in scores.items():
            gb.add_student(student)
            gb.add_submission(ASSIGNMENT, student)
            for nb, value in zip(notebooks, points):
                gb.find_grade("answer", nb, ASSIGNMENT, student).auto_score = value
        gb.db.commit()
    return notebooks


def test_formgrader_shows_the_same_times_deadline_and_penalties(tmp_path):
    """export writes the due date, each submission's time and the late penalty into nbgrader's gradebook:
    formgrader's Manage Submissions reads gb.submission_dicts (its "Submission Date" column), nbgrader's
    own export reads late_submission_penalty. The totals equal grades.csv's."""
    from nbgrader.api import Gradebook

    from grader import ASSIGNMENT
    from grader.course import COURSE_ID
    from grader.extras.deadlines import apply_to_rows, record_in_gradebook

    course = _course(tmp_path)
    shutil.copy(ROOT / "solutions" / "ex01" / "task2_pseudo_likelihood.ipynb", course.source)
    assert course.notebook_names() == [STEM, "task2_pseudo_likelihood"]
    _gradebook(course, {"alice": [1.0, 4.0], "bob": [2.0, 2.0], "carol": [3.0, 3.0]})
    three_hours_late = datetime.fromtimestamp(DUE + 3 * 3600, timezone.utc).isoformat(timespec="seconds")
    on_time = datetime.fromtimestamp(DUE - 600, timezone.utc).isoformat(timespec="seconds")
    course.write_json("collect", "alice", {"submitted_at": three_hours_late})
    course.write_json("collect", "bob", {"submitted_at": on_time})
    course.write_json("collect", "carol", {})     # no time known
    rows = [{"student_id": s, "score": total, "reason": ""} for s, total in (("alice", 5.0), ("bob", 4.0), ("carol", 6.0))]
    apply_to_rows(course, rows, DEADLINE, "per-hour:1")
    record_in_gradebook(course, rows, DEADLINE)
    assert [r["late_penalty"] for r in rows] == [3.0, 0.0, 0.0]
    with Gradebook(course.db_url, COURSE_ID) as gb:
        assert gb.find_assignment(ASSIGNMENT).duedate == datetime(2026, 11, 20, 22, 59)   # UTC, as nbgrader keeps it
        shown = {d["student"]: d for d in gb.submission_dicts(ASSIGNMENT)}
        assert shown["alice"]["timestamp"] == datetime(2026, 11, 21, 1, 59)
        assert shown["bob"]["timestamp"] == datetime(2026, 11, 20, 22, 49) and shown["carol"]["timestamp"] is None
        alice = gb.find_submission(ASSIGNMENT, "alice")
        assert alice.total_seconds_late == 3 * 3600 and alice.late_submission_penalty == pytest.approx(3.0)
        # spread in the sheet's order, none above its notebook's score: 1 from Task 1, 2 from Task 2
        assert [nb.late_submission_penalty for nb in sorted(alice.notebooks, key=lambda nb: nb.name)] == [1.0, 2.0]
        assert gb.find_submission(ASSIGNMENT, "bob").late_submission_penalty == 0.0
    # without a deadline the due date and the penalties are cleared, the times stay
    rows = [{"student_id": "alice", "score": 5.0, "reason": ""}]
    apply_to_rows(course, rows)
    record_in_gradebook(course, rows)
    with Gradebook(course.db_url, COURSE_ID) as gb:
        assert gb.find_assignment(ASSIGNMENT).duedate is None
        assert gb.find_submission(ASSIGNMENT, "alice").timestamp == datetime(2026, 11, 21, 1, 59)
        assert gb.find_submission(ASSIGNMENT, "alice").late_submission_penalty == 0.0
