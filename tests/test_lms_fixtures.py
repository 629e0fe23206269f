"""Self-tests of tests/fixtures/lms_downloads.py and lms_importers.py: the names, times and columns Canvas and
Moodle produce, and the import checks they apply (pure Python, no grader import, well under a second)."""

from __future__ import annotations

import json
import os
import zipfile
from datetime import datetime, timedelta, timezone

import pytest

from fixtures.lms_downloads import (Student, canvas_download, canvas_entries, canvas_gradebook_export,
                                    canvas_sanitize_file_name, canvas_submissions_json, example_students,
                                    moodle_download, moodle_entries, moodle_grading_worksheet, moodle_participants,
                                    moodle_userdate)
from fixtures.lms_importers import ImportRefused, canvas_import, moodle_import, moodle_worksheet_import

UTC = timezone.utc
BUILT = datetime(2026, 11, 21, 8, 15, 6, tzinfo=UTC)
NB = b'{"cells": []}'
CANVAS_HEAD = "Student,ID,SIS User ID,SIS Login ID,Section,Exercise 1 (4242)\n"


def canvas_class():
    t = datetime(2026, 11, 20, 22, 0, tzinfo=UTC)
    return [
        Student("Jane Doe", "Doe, Jane", 1001, 11, "j@x", files={"task1_infonce.ipynb": NB}, submitted_at=t,
                anonymous_id="XyZ12", attachment_ids={"task1_infonce.ipynb": 55501}),
        Student("José Núñez", "Núñez, José", 1003, 13, "n@x", files={"task1_infonce.ipynb": NB}, submitted_at=t,
                anonymous_id="Ab3dE", late=True, attachment_ids={"task1_infonce.ipynb": 55503}),
        Student("王小明", "王, 小明", 1007, 17, "w@x", files={"task1_infonce.ipynb": NB}, submitted_at=t,
                anonymous_id="Qr7sT", attachment_ids={"task1_infonce.ipynb": 55507}),
        Student("Jane Doe", "Doe, Jane", 1008, 18, "j2@x", files={"task1 infonce?.ipynb": NB}, submitted_at=t,
                late=True, anonymous_id="Mn4pK", attachment_ids={"task1 infonce?.ipynb": 55517}),
        Student("No Body", "Body, No", 1009, 19, "b@x"),
    ]


def test_canvas_download_names_follow_content_zipper():
    names = [n for n, _ in canvas_entries(canvas_class())]
    assert names == ["doejane_1001_55501_task1_infonce.ipynb", "núñezjosé_LATE_1003_55503_task1_infonce.ipynb",
                     "王小明_1007_55507_task1_infonce.ipynb", "doejane_LATE_1008_55517_task1 infonce_.ipynb"]
    anonymous = [n for n, _ in canvas_entries(canvas_class(), anonymous=True)]
    assert anonymous[:2] == ["anon_XyZ12_55501_task1_infonce.ipynb", "LATE_anon_Ab3dE_55503_task1_infonce.ipynb"]
    old = [n for n, _ in canvas_entries(canvas_class(), old_late_style=True)]
    assert old[3] == "doejane_late_1008_55517_task1 infonce?.ipynb"
    hyphen = [n for n, _ in canvas_entries(canvas_class(), style="hyphen")]
    assert hyphen[:2] == ["doe--jane_1001_55501_task1_infonce.ipynb", "n--ez--jos--late_1003_55503_task1_infonce.ipynb"]
    with pytest.raises(ValueError):
        canvas_entries([Student("A", "A", 1, 1, "a", files={"x": b""}, anonymous_id="0Oil1")], anonymous=True)
    # Onigmo's [[:word:]]: marks stay (a decomposed é), other numbers and punctuation go
    assert canvas_sanitize_file_name("Jose\u0301_²-x, y") == "Jose\u0301_xy"


def test_canvas_zip_and_folder_carry_the_build_time(tmp_path):
    archive = canvas_download(tmp_path / "z", canvas_class(), built_at=BUILT, zipped=True)
    assert archive.name == "submissions.zip"
    with zipfile.ZipFile(archive) as z:
        assert {i.date_time for i in z.infolist()} == {(2026, 11, 21, 8, 15, 6)}
        assert all("/" not in n for n in z.namelist())
    folder = canvas_download(tmp_path / "u", canvas_class(), built_at=BUILT)
    assert {os.stat(p).st_mtime for p in folder.iterdir()} == {BUILT.timestamp()}


def test_moodle_download_paths_per_version_and_mode(tmp_path):
    s = [Student("Seán O'Brien_Jr", "O'Brien_Jr, Seán", 5, 1234567, "s@x", files={"a/b.ipynb": NB, "c/b.ipynb": b"2"},
                 submitted_at=BUILT - timedelta(days=1))]
    assert [n for n, _ in moodle_entries(s)] == ["Seán OBrien Jr_1234567_assignsubmission_file/a/b.ipynb",
                                                 "Seán OBrien Jr_1234567_assignsubmission_file/c/b.ipynb"]
    legacy = [n for n, _ in moodle_entries(s, version="3.x")]
    assert legacy[0] == "Seán OBrien Jr_1234567_assignsubmission_file_/a/b.ipynb"
    flat = moodle_entries(s, folders=False)  # the sub-folders are lost and the later b.ipynb wins
    assert flat == [("Seán OBrien Jr_1234567_assignsubmission_file_b.ipynb", b"2")]
    assert moodle_entries(s, blind=True)[0][0].startswith("Participant_1234567_assignsubmission_file/")
    archive = moodle_download(tmp_path, s, zipped=True, built_at=BUILT)
    assert archive.name == "CS101-Exercise 1-42.zip"
    with zipfile.ZipFile(archive) as z:
        assert {i.date_time for i in z.infolist()} == {(2026, 11, 21, 8, 15, 6)}


def test_moodle_dates_worksheet_and_roster(tmp_path):
    cet = timezone(timedelta(hours=1))
    assert moodle_userdate(datetime(2026, 11, 6, 8, 5, tzinfo=UTC), cet) == "Friday, 6 November 2026, 9:05 AM"
    assert moodle_userdate(datetime(2026, 11, 20, 22, 59, tzinfo=UTC), cet) == "Friday, 20 November 2026, 11:59 PM"
    students = example_students()
    sheet = moodle_grading_worksheet(tmp_path / "w.csv", students, zone=cet).read_bytes()
    assert sheet.startswith(b"\xef\xbb\xbfIdentifier,\"Full name\",\"Email address\",Status,Grade,\"Maximum Grade\","
                            b"\"Grade can be changed\",\"Last modified (submission)\",\"Last modified (grade)\","
                            b"\"Feedback comments\"\n\"Participant 1234567\"")
    roster = moodle_participants(tmp_path / "p.csv", students).read_text(encoding="utf-8")
    assert roster.splitlines()[:3] == ['"First name",Surname,"ID number","Email address"',
                                       "Jane,Doe,+491701234,jane.doe@uni.example",
                                       "José,Núñez,-0042,jose@uni.example"]


def test_canvas_exports(tmp_path):
    students = example_students()
    lines = canvas_gradebook_export(tmp_path / "g.csv", students).read_text(encoding="utf-8").splitlines()
    assert lines[0].startswith("Student,ID,SIS User ID,SIS Login ID,Section,Exercise 1 (4242),Quiz (77),")
    assert lines[1].startswith("    Points Possible,,,,,100.00,5.00,(read only)")
    assert lines[-1].startswith('"Student, Test",99999,,') and len(lines[-1].split(",")[4]) == 40
    api = json.loads(canvas_submissions_json(tmp_path / "s.json", students).read_text(encoding="utf-8"))
    assert api[0]["submitted_at"] == "2026-11-20T22:30:00Z" and api[0]["user_id"] == 1001
    assert api[4]["workflow_state"] == "unsubmitted" and api[4]["submitted_at"] is None
    anonymous = json.loads(canvas_submissions_json(tmp_path / "a.json", students, anonymize_user_id=True).read_text())
    assert "user_id" not in anonymous[0] and anonymous[0]["anonymous_id"] == "XyZ12"


def test_canvas_import_checks(tmp_path):
    export = canvas_gradebook_export(tmp_path / "g.csv", example_students())

    def imported(text, **kw):
        (tmp_path / "in.csv").write_text(text, encoding="utf-8")
        return canvas_import(tmp_path / "in.csv", export, **kw)

    assert imported(export.read_text(encoding="utf-8"), assignment_id=4242)["grades"] == {}  # its own export
    done = imported(CANVAS_HEAD + '"Doe, Jane",1001,,,S,"91,5"\n"Núñez, José",1003,,,S,88\nGhost,5,,,S,1\n')
    assert done["grades"] == {"1001": "91.5", "1003": "88"} and done["unknown_students"][0]["name"] == "Ghost"
    cleared = imported("Student,ID,Section,Exercise 1\nx,1001,S,\n")  # bare title matches; blank removes 85.00
    assert cleared["grades"] == {"1001": ""} and any("REMOVES" in w for w in cleared["warnings"])
    assert imported(CANVAS_HEAD.replace("4242", "9") + "x,1001,,,S,5\n")["new_assignments"] == ["Exercise 1"]
    for bad in ("Student,ID,SIS User ID,Section,Exercise 1 (4242)\nx,1001,S1,S,5\n", "ID,Grade\n1001,5\n",
                CANVAS_HEAD + "x,1001,,,S,abc\n", CANVAS_HEAD + 'x,1001,,,S,1"2\n'):
        with pytest.raises(ImportRefused):
            imported(bad)


def test_moodle_import_checks(tmp_path):
    roster = moodle_participants(tmp_path / "p.csv", example_students())

    def imported(text, **kw):
        (tmp_path / "in.csv").write_text(text, encoding="utf-8")
        return moodle_import(tmp_path / "in.csv", roster, **kw)

    assert imported("ID number,Exercise 1\n+491701234,85\n-0042,\n", key="idnumber")["grades"] == {
        "+491701234": 85.0, "-0042": None}
    assert imported("Email address,Ex\njane.doe@uni.example,15\n", max_grade=10)["grades"] == {
        "jane.doe@uni.example": 10.0}
    refused = ["ID number,Ex\n+491701234,85\n-42,3\n",             # not verbatim: the whole import stops
               "ID number,Ex\n+491701234,101\n",                   # above the site's maximum of 100
               "ID number,Ex\n+491701234,\"85,5\"\n",              # not a number on an English site
               "ID number,Ex\n+491701234,85\n+491701234,86\n",     # twice
               "ID number,Ex\n+491701234,85\n,50\n",               # blank key: Moodle would misattribute
               "ID number,Ex\n+491701234,85,x\n"]                  # column count not constant
    for text in refused:
        with pytest.raises(ImportRefused):
            imported(text, key="idnumber")


def test_worksheet_upload_is_forgiving(tmp_path):
    sheet = moodle_grading_worksheet(tmp_path / "w.csv", example_students(), zone=UTC)
    upload = tmp_path / "u.csv"
    upload.write_text("Identifier,Grade,Last modified (grade)\nParticipant 1234567,abc,-\n"
                      'Participant 2345678,"85,5",-\nParticipant 1,50,-\nParticipant 3456789,101,-\n',
                      encoding="utf-8")
    result = moodle_worksheet_import(upload, sheet)
    assert result["grades"] == {"Participant 1234567": 0.0, "Participant 2345678": 85.0}
    assert [why for _, why in result["skipped"]] == ["not a participant of this assignment", "out of range 0..100"]
