"""No student lost between the LMS and the gradebook: Canvas and Moodle downloads built as their own source
code builds them (tests/fixtures/lms_downloads.py), collected by the pack (grader/collect.py, grader/extras/lms/).
Each test holds one way a real download lost or merged students before: same names, Unicode and anonymous
names, Moodle 4.1+ folders, zips and sub-folders inside a submission, the download left zipped, competing
files, hard links, file times that are not submission times."""

from __future__ import annotations

import json
import os
import shutil
import zipfile
from datetime import datetime, timedelta, timezone

import pytest

from fixtures.lms_downloads import (Student, canvas_download, canvas_submissions_json, moodle_download,
                                    moodle_grading_worksheet)
from grader import ROOT

STEM = "task1_infonce"
DEADLINE = "2026-11-20T23:59:00+01:00"
DUE = datetime.fromisoformat(DEADLINE)
BUILT = DUE + timedelta(days=2)          # when the TA downloaded: two days after the deadline
UTC = timezone.utc


def _notebook(tag: str) -> bytes:
    """A distinct notebook per student (so a merge of two students would show)."""
    nb = json.loads((ROOT / "notebooks" / "ex01" / f"{STEM}.ipynb").read_text())
    nb["metadata"]["las_test_tag"] = tag
    return json.dumps(nb).encode()


def _course(tmp_path):
    from grader.course import Course

    source = tmp_path / "source"
    source.mkdir(parents=True)
    shutil.copy(ROOT / "solutions" / "ex01" / f"{STEM}.ipynb", source)
    return Course(grading=tmp_path / "grading", source=source)


def _student(name, sortable, uid, pid, **kw):
    files = kw.pop("files", None) or {f"{STEM}.ipynb": _notebook(f"{name}-{uid or pid}")}
    return Student(name, sortable, uid, pid, f"u{uid}@uni.example", files=files,
                   submitted_at=kw.pop("submitted_at", DUE - timedelta(hours=1)), **kw)


def _tag(course, student) -> str:
    return json.loads((course.folder("submitted", student) / f"{STEM}.ipynb").read_text())["metadata"]["las_test_tag"]


def _own_tag(s: Student) -> str:
    """The tag of the notebook ``s`` handed in."""
    data = next(v for k, v in s.files.items() if k.endswith(f"{STEM}.ipynb"))
    return json.loads(data)["metadata"]["las_test_tag"]


def _collect(course, path, **kw):
    from grader.collect import collect

    return {r.student: r for r in collect(course, path, **kw)}


# ----------------------------------------------------------------------------- Canvas
CANVAS_CLASS = [
    _student("Jane Doe", "Doe, Jane", 1001, 0),
    _student("Jane Doe", "Doe, Jane", 1008, 0),                               # the same name, another student
    _student("José Núñez", "Núñez, José", 1003, 0),
    _student("王小明", "王, 小明", 1007, 0),
    _student("Zoë Ångström", "A\u030angstro\u0308m, Zoe\u0308", 1010, 0),   # decomposed accents: marks
    _student("Seán O'Brien", "O'Brien, Seán", 1012, 0, late=True),
    _student("Kim Zip", "Zip, Kim", 1014, 0, as_zip=True,
             files={f"work/{STEM}.ipynb": _notebook("Kim Zip-1014"), "work/plot.png": b"png"}),
    _student("Pat Pdf", "Pdf, Pat", 1016, 0, files={f"{STEM}.ipynb": _notebook("Pat Pdf-1016"),
                                                    "report.pdf": b"%PDF"}),
]


@pytest.mark.parametrize("style", ["current", "lowercase", "hyphen"])
def test_every_canvas_student_is_collected_under_their_user_id(tmp_path, style):
    course = _course(tmp_path)
    klass = [s for s in CANVAS_CLASS if style == "current" or not s.as_zip]
    inbox = canvas_download(tmp_path / "download", klass, built_at=BUILT, style=style)
    (inbox / "readme.txt").write_text("stray")
    results = _collect(course, inbox)
    students = {s: r for s, r in results.items() if not r.stray}
    assert sorted(students) == sorted(f"canvas_{s.user_id}" for s in klass)
    for s in klass:
        res = students[f"canvas_{s.user_id}"]
        assert not res.unreadable and res.notebooks, (s.name, res.problems)
        assert _tag(course, res.student) == _own_tag(s), "each student's own notebook"
        assert res.lms["late"] == s.late
    assert results["readme.txt"].stray and "readme.txt" in results["readme.txt"].problems[0]
    pdf = students["canvas_1016"].files
    assert any(line.startswith("ignored pdfpat_1016_") or "report.pdf" in line for line in pdf), pdf
    assert any(line.startswith("taken ") for line in pdf)


def test_anonymous_canvas_downloads_and_resubmissions(tmp_path):
    course = _course(tmp_path)
    anonymous = [_student("A", "A, A", 2001, 0, anonymous_id="XyZ12"),
                 _student("B", "B, B", 2002, 0, anonymous_id="Ab3dE", late=True)]
    inbox = canvas_download(tmp_path / "anon", anonymous, built_at=BUILT, anonymous=True)
    results = _collect(course, inbox)
    assert sorted(results) == ["canvas_anon_Ab3dE", "canvas_anon_XyZ12"]
    assert results["canvas_anon_Ab3dE"].lms["late"] is True and not results["canvas_anon_XyZ12"].unreadable

    # one student uploads the notebook twice in one submission: identical copies are one, different ones are
    # not guessed (the zip's file times say nothing), and the report names both
    twice = _student("Twin", "Twin, Tom", 3001, 0, files={f"{STEM}.ipynb": _notebook("a"),
                                                         f"{STEM}-1.ipynb": _notebook("a")})
    differ = _student("Dif", "Dif, Dee", 3002, 0, files={f"{STEM}.ipynb": _notebook("a"),
                                                        f"{STEM}-1.ipynb": _notebook("b")})
    results = _collect(course, canvas_download(tmp_path / "again", [twice, differ], built_at=BUILT))
    assert not results["canvas_3001"].unreadable
    assert any("superseded" in f and "(the same content)" in f for f in results["canvas_3001"].files)
    assert results["canvas_3002"].unreadable and not results["canvas_3002"].notebooks
    assert "2 different files compete" in "; ".join(results["canvas_3002"].problems)


def test_the_canvas_zip_itself_or_left_in_the_folder_is_read_as_the_download(tmp_path):
    course = _course(tmp_path)
    klass = CANVAS_CLASS[:3]
    packed = canvas_download(tmp_path / "zipped", klass, built_at=BUILT, zipped=True)
    results = _collect(course, packed)
    assert sorted(results) == ["canvas_1001", "canvas_1003", "canvas_1008"]
    folder = tmp_path / "folder"
    folder.mkdir()
    shutil.copy(packed, folder)
    results = _collect(course, folder)
    assert sorted(results) == ["canvas_1001", "canvas_1003", "canvas_1008"], "not one student called 'submissions'"
    assert all(not r.unreadable for r in results.values())


# ----------------------------------------------------------------------------- Moodle
MOODLE_CLASS = [
    _student("Jane Doe", "", 0, 1234567),
    _student("Jane Doe", "", 0, 1234568),                                   # twins: one name, two participants
    _student("José Núñez", "", 0, 2345678),
    _student("איימן שפסו", "", 0, 7085),
    _student("A" * 70, "", 0, 4444401),                                      # names sharing their first 64 characters
    _student("A" * 70, "", 0, 4444402),
    _student("Kim Zip", "", 0, 5555555, as_zip=True, files={f"{STEM}.ipynb": _notebook("Kim Zip")}),
    _student("Deep Nest", "", 0, 6666666, files={f"deep/er/{STEM}.ipynb": _notebook("Deep Nest"),
                                                "deep/notes.md": b"notes"}),
]


@pytest.mark.parametrize("version, folders, blind", [("4.1", True, False), ("3.x", True, False), ("4.1", False, False),
                                                      ("3.x", False, False), ("4.1", True, True)])
def test_every_moodle_student_is_collected_under_their_participant_id(tmp_path, version, folders, blind):
    course = _course(tmp_path)
    klass = [s for s in MOODLE_CLASS if folders or not (s.as_zip or "/" in next(iter(s.files)))]
    inbox = moodle_download(tmp_path / "download", klass, version=version, folders=folders, blind=blind)
    results = _collect(course, inbox)
    assert sorted(results) == sorted(f"moodle_{s.participant_id}" for s in klass)
    for s in klass:
        res = results[f"moodle_{s.participant_id}"]
        assert not res.unreadable, (version, folders, s.name, res.problems)
        assert _tag(course, res.student) == _own_tag(s), "each student's own notebook"
        assert res.lms["name"] == ("Participant" if blind else s.name)
    if folders:
        assert any("notes.md" in f for f in results["moodle_6666666"].files), "every file accounted for"


def test_moodle_download_zip_with_a_zip_inside_a_submission(tmp_path):
    course = _course(tmp_path)
    packed = moodle_download(tmp_path / "zipped", MOODLE_CLASS, version="4.1", zipped=True)
    results = _collect(course, packed)
    assert sorted(results) == sorted(f"moodle_{s.participant_id}" for s in MOODLE_CLASS)
    kim = results["moodle_5555555"]
    assert not kim.unreadable and STEM in kim.notebooks and ".zip:" in kim.notebooks[STEM]


# ----------------------------------------------------------------------------- times
def test_canvas_file_times_are_never_submission_times(tmp_path):
    """Without Canvas's times nobody is charged and the TA is told where to get them; with the Submissions
    API's list (two pages, two files) every student has a true time, and Canvas's LATE flag agrees."""
    from grader.extras.deadlines import apply_to_rows

    course = _course(tmp_path)
    klass = [_student("On Time", "Time, On", 1, 0, submitted_at=DUE - timedelta(minutes=30)),
             _student("Late Lee", "Lee, Late", 2, 0, submitted_at=DUE + timedelta(minutes=150), late=True)]
    inbox = canvas_download(tmp_path / "download", klass, built_at=BUILT)
    _collect(course, inbox, deadline=DEADLINE, late_penalty="per-hour:1")
    rows = [{"student_id": s, "score": 10.0, "reason": ""} for s in ("canvas_1", "canvas_2")]
    apply_to_rows(course, rows)
    assert [r["minutes_late"] for r in rows] == ["unknown", "unknown"] and [r["late_penalty"] for r in rows] == [0, 0]
    assert "Canvas marked it LATE" in rows[1]["reason"] and "Submissions API" in rows[0]["reason"]

    pages = [canvas_submissions_json(tmp_path / f"page{i}.json", [s]) for i, s in enumerate(klass)]
    _collect(course, inbox, times=pages)
    rows = [{"student_id": s, "score": 10.0, "reason": ""} for s in ("canvas_1", "canvas_2")]
    apply_to_rows(course, rows)
    assert [r["minutes_late"] for r in rows] == [0, 150] and [r["late_penalty"] for r in rows] == [0, 2.0]
    assert "check it" not in rows[1]["reason"]


def test_moodle_worksheet_times_in_the_deadlines_zone(tmp_path):
    from grader.extras.deadlines import apply_to_rows

    zone = DUE.tzinfo
    course = _course(tmp_path)
    klass = [_student("On Time", "", 0, 11, submitted_at=DUE - timedelta(minutes=5)),
             _student("Late Lee", "", 0, 12, submitted_at=DUE + timedelta(minutes=91)),
             _student("No Sub", "", 0, 13, files={"x.txt": b"x"}, submitted_at=None)]
    inbox = moodle_download(tmp_path / "download", klass[:2], version="4.1")
    sheet = moodle_grading_worksheet(tmp_path / "worksheet.csv", klass, zone=zone)
    _collect(course, inbox, times=[sheet], deadline=DEADLINE, late_penalty="per-hour:1")
    rows = [{"student_id": s, "score": 10.0, "reason": ""} for s in ("moodle_11", "moodle_12")]
    apply_to_rows(course, rows)
    assert [r["minutes_late"] for r in rows] == [0, 91] and rows[1]["late_penalty"] == 2.0


# ----------------------------------------------------------------------------- what collect refuses
def test_a_hard_link_to_another_students_notebook_is_not_read(tmp_path):
    course = _course(tmp_path)
    inbox = tmp_path / "inbox"
    (inbox / "alice").mkdir(parents=True)
    (inbox / "alice" / f"{STEM}.ipynb").write_bytes(_notebook("alice"))
    (inbox / "mallory").mkdir()
    os.link(inbox / "alice" / f"{STEM}.ipynb", inbox / "mallory" / f"{STEM}.ipynb")
    results = _collect(course, inbox)
    assert not results["mallory"].notebooks and results["mallory"].unreadable
    assert "hard link" in "; ".join(results["mallory"].problems)
    assert results["alice"].notebooks == {} and "hard link" in "; ".join(results["alice"].problems), \
        "both names of a shared file are refused: which one is the author's is unknowable"


def test_a_students_own_zip_dates_are_not_their_submission_time(tmp_path):
    """A zip whose entries claim an early date: the plain layout takes the zip file's own time here."""
    course = _course(tmp_path)
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    with zipfile.ZipFile(inbox / "eve.zip", "w") as zf:
        zf.writestr(zipfile.ZipInfo(f"{STEM}.ipynb", date_time=(2026, 11, 1, 0, 0, 0)), _notebook("eve"))
    arrived = (DUE + timedelta(days=8, hours=12)).timestamp()
    os.utime(inbox / "eve.zip", (arrived, arrived))
    _collect(course, inbox)
    assert course.read_json("collect", "eve")["submitted_at"].startswith("2026-11-29")


# ----------------------------------------------------------------------------- back to the LMS
def test_feedback_zip_names_route_back_to_each_student(tmp_path):
    """The pages are named so that each LMS's bulk feedback upload finds the student: Canvas by the user id
    and an attachment id of their submission (``_<digits>_`` parts), Moodle by the participant id, the second
    of the first five "_"-parts (mod/assign/feedback/file/importziplib.php)."""
    from grader.extras.lms import feedback_zip

    course = _course(tmp_path)
    _collect(course, canvas_download(tmp_path / "c", CANVAS_CLASS[:3], built_at=BUILT))
    for student in ("canvas_1001", "canvas_1008", "canvas_1003"):
        page = course.folder("feedback", student) / f"{STEM}.html"
        page.parent.mkdir(parents=True)
        page.write_text(f"<p>{student}</p>")
    written, left_out = feedback_zip(course, "canvas", tmp_path / "fb.zip")
    assert written == 3 and not left_out
    with zipfile.ZipFile(tmp_path / "fb.zip") as zf:
        routed = {}
        for name in zf.namelist():
            digits = [part for part in name.split("_") if part.isdigit()]
            routed[digits[0]] = (digits[1], zf.read(name).decode())
    assert {uid: text for uid, (_, text) in routed.items()} == {
        "1001": "<p>canvas_1001</p>", "1008": "<p>canvas_1008</p>", "1003": "<p>canvas_1003</p>"}

    course = _course(tmp_path / "m")
    _collect(course, moodle_download(tmp_path / "md", MOODLE_CLASS[:4], version="4.1"))
    for s in MOODLE_CLASS[:4]:
        page = course.folder("feedback", f"moodle_{s.participant_id}") / f"{STEM}.html"
        page.parent.mkdir(parents=True)
        page.write_text(str(s.participant_id))
    written, _ = feedback_zip(course, "moodle", tmp_path / "fbm.zip")
    with zipfile.ZipFile(tmp_path / "fbm.zip") as zf:
        for name in zf.namelist():
            info = name.split("_", 4)
            assert len(info) == 5 and info[1].isdigit() and (info[2], info[3]) == ("assignsubmission", "file")
            assert zf.read(name).decode() == info[1]
    assert written == 4


def test_backup_and_restore_keep_the_gradebook(tmp_path):
    from nbgrader.api import Gradebook

    from grader.extras.backup import backup, restore
    from grader.course import COURSE_ID

    course = _course(tmp_path)
    course.grading.mkdir(parents=True)
    with Gradebook(course.db_url, COURSE_ID) as gb:
        gb.add_assignment("ex01")
        gb.add_student("alice")
    saved = backup(course)
    with Gradebook(course.db_url, COURSE_ID) as gb:
        gb.remove_student("alice")
    db, previous = restore(course, saved)
    with Gradebook(course.db_url, COURSE_ID) as gb:
        assert [s.id for s in gb.students] == ["alice"]
    assert previous is not None and previous.exists() and previous != saved
    (tmp_path / "notes.db").write_text("not a gradebook")
    with pytest.raises(ValueError, match="not an"):
        restore(course, tmp_path / "notes.db")


def test_an_assignment_other_than_ex01_has_its_own_folders(tmp_path, monkeypatch):
    from grader.course import Course

    monkeypatch.setenv("LAS_GRADING_DIR", str(tmp_path / "grading"))
    monkeypatch.delenv("LAS_ASSIGNMENT", raising=False)
    first, second = Course(), Course(assignment="ex02")
    assert first.grading == tmp_path / "grading" and second.grading == tmp_path / "grading" / "ex02"
    assert second.source == ROOT / "solutions" / "ex02" and second.folder("submitted", "a").parts[-2:] == ("a", "ex02")
    assert second.release.name == "ex02"
    monkeypatch.setenv("LAS_ASSIGNMENT", "ex03")
    assert Course().assignment == "ex03"
    with pytest.raises(ValueError, match="assignment"):
        Course(assignment="../ex01")
    from grader.release import generate_release

    with pytest.raises(FileNotFoundError, match="solutions/<assignment>"):   # release NAME: solutions/NAME
        generate_release(tmp_path / "out", assignment="ex99")


def test_a_download_unzipped_into_its_own_folder_and_online_text_entries(tmp_path):
    """Unzip tools make a folder of the zip's name ("CS101-Exercise 1-42/"): it is read as the download, not
    as one student; Canvas's online text entries ("<name>_<user id>_text.html") are the student's, ignored
    with the reason, and a student who handed in only text is named, not silently dropped."""
    course = _course(tmp_path)
    downloads = tmp_path / "Downloads"
    moodle_download(downloads / "CS101-Exercise 1-42", MOODLE_CLASS[:3], version="4.1")
    results = _collect(course, downloads)
    assert sorted(results) == sorted(f"moodle_{s.participant_id}" for s in MOODLE_CLASS[:3])

    course = _course(tmp_path / "c")
    inbox = canvas_download(tmp_path / "canvas", CANVAS_CLASS[:2], built_at=BUILT)
    (inbox / "doejane_1001_text.html").write_text("<p>my answer</p>")
    (inbox / "textonly_LATE_1020_text.html").write_text("<p>only text</p>")
    results = _collect(course, inbox)
    assert sorted(results) == ["canvas_1001", "canvas_1008", "canvas_1020"]
    assert "ignored doejane_1001_text.html: not a notebook or a zip" in results["canvas_1001"].files
    assert not results["canvas_1001"].unreadable
    assert results["canvas_1020"].unreadable and results["canvas_1020"].lms["late"] is True


def test_a_corrupt_entry_of_the_download_zip_costs_that_entry_alone(tmp_path):
    course = _course(tmp_path)
    packed = canvas_download(tmp_path / "zipped", CANVAS_CLASS[:3], built_at=BUILT, zipped=True)
    data = bytearray(packed.read_bytes())
    with zipfile.ZipFile(packed) as zf:
        first = zf.infolist()[0]
        start = first.header_offset + 30 + len(first.filename.encode()) + len(first.extra)
    data[start:start + 8] = bytes(b ^ 0xFF for b in data[start:start + 8])   # its bytes, not the directory
    packed.write_bytes(bytes(data))
    results = _collect(course, packed)
    strays = [r for r in results.values() if r.stray]
    assert len(strays) == 1 and "not unpacked" in strays[0].problems[0], [r.problems for r in strays]
    assert sum(not r.stray and not r.unreadable for r in results.values()) == 2
