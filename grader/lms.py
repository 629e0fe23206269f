"""Grades into a learning management system: ``python -m grader export --lms canvas|moodle --roster R --to FILE``.

``export`` writes grading/grades.csv as always; with ``--lms`` it also writes FILE in the LMS's own grade
import format, with each pack student matched to the LMS's student through the LMS's own roster export
(``--roster``). A graded student missing from the roster, and a roster student with no submission, are
named (in the return value, printed by the command) and never guessed. The points are grades.csv's
``score`` (autograded + manual so far, less any late penalty: grader/deadlines.py).

**Canvas.** Roster: the gradebook export ("Gradebook > Export > Export Entire Gradebook", a CSV whose
first columns are ``Student, ID, SIS User ID, SIS Login ID, Section``; a "Points Possible" row and the
"Student, Test" student are skipped). FILE is the gradebook import CSV: those five columns, then one
assignment column. Canvas matches the assignment by the ID in parentheses in its header
(``Exercise 1 (123456)``), so ``--assignment`` picks the roster's column whose name starts with it, and a
name the roster lacks creates a new assignment on import. A student is matched by the Canvas user id from
their download name (``<login>_<userid>_...``, grader/collect.py), else by SIS Login ID, SIS User ID or the
login (Canvas's sortable name squished, "Doe, Jane" -> "doejane").
Docs: https://community.canvaslms.com/t5/Instructor-Guide/How-do-I-import-grades-in-the-Gradebook/ta-p/807
and https://community.canvaslms.com/t5/Instructor-Guide/How-do-I-export-grades-in-the-Gradebook/ta-p/809

**Moodle.** Roster: a CSV of the course's participants with an ``Email address`` column (and, where the
site has them, ``ID number``, ``Username``, ``Identifier`` = "Participant 1234567" as in the assignment's
grading worksheet, ``First name``/``Surname`` or ``Full name``), e.g. the grader report or grading worksheet
download. FILE is a grade import CSV: the identifier column (``--moodle-key``: email, idnumber or
username; Moodle's import maps it to "Email address", "ID number" or "Username"), ``Full name`` (for
people; the import ignores it) and one column named ``--assignment`` to map to the grade item.
A student is matched by the participant id from their download folder (``..._<participantid>_assignsubmission_file_``),
else by email, ID number or username equal to the pack's id, else by full name.
Docs: https://docs.moodle.org/en/Grade_import and
https://docs.moodle.org/en/Assignment_settings#Offline_grading_worksheet
"""

from __future__ import annotations

import csv
import re
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path

from .course import Course, valid_student_id, write_csv

CANVAS_FIELDS = ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"]
MOODLE_KEYS = {"email": "Email address", "idnumber": "ID number", "username": "Username"}
CANVAS_DOCS = "https://community.canvaslms.com/t5/Instructor-Guide/How-do-I-import-grades-in-the-Gradebook/ta-p/807"
MOODLE_DOCS = "https://docs.moodle.org/en/Grade_import"


@dataclass
class LmsExport:
    path: Path
    rows: int = 0
    column: str = ""
    not_in_roster: list[str] = field(default_factory=list)     # graded students the roster lacks
    no_submission: list[str] = field(default_factory=list)     # roster students nobody graded
    notes: list[str] = field(default_factory=list)


def _squish(text: str) -> str:
    """Canvas's download login: the sortable name's letters and digits, lower case ("Doe, Jane" -> "doejane")."""
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    return re.sub(r"[^a-z0-9]", "", text.lower())


def _read_roster(path: Path) -> tuple[list[str], list[dict]]:
    with open(path, newline="", encoding="utf-8-sig") as f:
        reader = csv.DictReader(f)
        rows = [{(k or "").strip(): (v or "").strip() for k, v in row.items()} for row in reader]
        return [(h or "").strip() for h in reader.fieldnames or []], rows


def _graded(grade_rows: list[dict]) -> dict[str, dict]:
    """student id -> grades.csv row, for students with a submission."""
    return {r["student_id"]: r for r in grade_rows if r.get("status") != "not submitted"}


def export_lms(course: Course, grade_rows: list[dict], lms: str, roster: Path, out: Path,
               assignment: str = "ex01", moodle_key: str = "email") -> LmsExport:
    """Write ``out`` for ``lms`` (canvas | moodle) from grades.csv's ``grade_rows``; see the module doc."""
    if lms not in ("canvas", "moodle"):
        raise ValueError(f"--lms {lms!r}: expected canvas or moodle")
    if not Path(roster).is_file():
        raise FileNotFoundError(f"--roster {roster}: no such file (the LMS's own roster export, see grader/lms.py)")
    headers, roster_rows = _read_roster(Path(roster))
    graded = _graded(grade_rows)
    lms_info = {s: course.read_json("collect", s).get("lms") or {} for s in graded if valid_student_id(s)}
    if lms == "canvas":
        return _canvas(headers, roster_rows, graded, lms_info, Path(out), assignment)
    return _moodle(headers, roster_rows, graded, lms_info, Path(out), assignment, moodle_key)


def _match(graded: dict[str, dict], keys_of) -> tuple[dict[str, int], list[str]]:
    """student -> roster index, through ``keys_of(student)``: candidate roster indexes, best first."""
    matched, missing = {}, []
    for student in sorted(graded):
        index = keys_of(student)
        if index is None:
            missing.append(student)
        else:
            matched[student] = index
    return matched, missing


def _canvas(headers, roster_rows, graded, lms_info, out: Path, assignment: str) -> LmsExport:
    absent = [h for h in CANVAS_FIELDS if h not in headers]
    if absent:
        raise ValueError(f"the Canvas roster lacks {', '.join(absent)}: use Canvas's gradebook export ({CANVAS_DOCS})")
    students = [(i, r) for i, r in enumerate(roster_rows)
                if r.get("ID", "").isdigit() and r.get("Student", "") != "Student, Test"]
    by_id = {r["ID"]: i for i, r in students}
    by_login = {}
    for i, r in students:
        for key in (r.get("SIS Login ID", "").lower(), r.get("SIS User ID", "").lower(), _squish(r.get("Student", ""))):
            if key:
                by_login.setdefault(key, i)

    def keys_of(student):
        uid = lms_info.get(student, {}).get("user_id")
        if uid and uid in by_id:
            return by_id[uid]
        return by_login.get(student.lower())

    matched, missing = _match(graded, keys_of)
    column = next((h for h in headers[len(CANVAS_FIELDS):] if h == assignment or h.startswith(assignment + " (")),
                  assignment)
    result = LmsExport(out, column=column, not_in_roster=missing)
    if column == assignment:
        result.notes.append(f"no column '{assignment} (<id>)' in the roster: Canvas creates a new assignment "
                            f"'{assignment}' on import (--assignment names an existing one)")
    by_index = {i: s for s, i in matched.items()}
    rows = []
    for i, r in students:
        row = {h: r.get(h, "") for h in CANVAS_FIELDS}
        student = by_index.get(i)
        if student is None:
            result.no_submission.append(f"{r.get('Student')} (ID {r.get('ID')})")
            row[column] = ""   # left blank: Canvas leaves the grade as it is
        else:
            row[column] = _points(graded[student])
        rows.append(row)
    write_csv(out, CANVAS_FIELDS + [column], rows)
    result.rows = len(rows)
    return result


def _moodle(headers, roster_rows, graded, lms_info, out: Path, assignment: str, moodle_key: str) -> LmsExport:
    if moodle_key not in MOODLE_KEYS:
        raise ValueError(f"--moodle-key {moodle_key!r}: expected one of {', '.join(MOODLE_KEYS)}")
    key_column = MOODLE_KEYS[moodle_key]
    if key_column not in headers:
        raise ValueError(f"the Moodle roster has no '{key_column}' column (has: {', '.join(headers)}); "
                         f"pick --moodle-key from the ones it has ({MOODLE_DOCS})")

    def full_name(r):
        return r.get("Full name") or " ".join(filter(None, [r.get("First name", ""), r.get("Surname") or r.get("Last name", "")]))

    by_participant, by_key, by_name = {}, {}, {}
    for i, r in enumerate(roster_rows):
        digits = re.sub(r"\D", "", r.get("Identifier", ""))
        if digits:
            by_participant[digits] = i
        for col in MOODLE_KEYS.values():
            if r.get(col):
                by_key.setdefault(r[col].lower(), i)
        name = _squish(full_name(r))
        if name:
            by_name.setdefault(name, i)

    def keys_of(student):
        info = lms_info.get(student, {})
        if info.get("participant_id") in by_participant:
            return by_participant[info["participant_id"]]
        if student.lower() in by_key:
            return by_key[student.lower()]
        name = _squish(info.get("full_name", ""))
        return by_name.get(name) if name else None

    matched, missing = _match(graded, keys_of)
    result = LmsExport(out, column=assignment, not_in_roster=missing)
    by_index = {i: s for s, i in matched.items()}
    rows = []
    for i, r in enumerate(roster_rows):
        student = by_index.get(i)
        if not r.get(key_column):
            continue
        if student is None:
            result.no_submission.append(f"{full_name(r)} ({r[key_column]})")
            continue   # no row: Moodle's import leaves their grade as it is
        rows.append({key_column: r[key_column], "Full name": full_name(r), assignment: _points(graded[student])})
    write_csv(out, [key_column, "Full name", assignment], rows)
    result.rows = len(rows)
    return result


def _points(row: dict):
    score = row.get("score", "")
    try:
        return round(float(score), 4)
    except (TypeError, ValueError):
        return ""
