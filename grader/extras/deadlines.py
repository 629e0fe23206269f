"""Submission times, the deadline, extensions and late penalties (``collect --deadline``, ``export``).

**Where a time comes from.** ``collect`` records each student's submission time in their collect report
(``grading/collect/<student>.json``: ``submitted_at``, ISO 8601 in UTC, and ``time_source``):

* ``--times FILE``, the LMS's own record: Canvas's Submissions API list saved as JSON (grader/extras/lms/canvas.py),
  Moodle's grading worksheet (grader/extras/lms/moodle.py), or a CSV with a ``student`` column (the pack's id, or
  the LMS's user id / participant id) and a ``submitted_at`` column (ISO 8601 with a time zone, e.g.
  ``2026-11-20T23:59:00+01:00``; a time without a zone is read in the deadline's zone). A student missing
  from it is named by collect.
* otherwise, for the plain layout only (the TA's own folders and zips), the newest modification time of the
  student's matched files as they lie on this machine: a file's mtime, or the mtime of the zip file itself.
  The dates stored *inside* a zip are never used: the student's software wrote them.
* an LMS download without ``--times`` gives no time: Canvas stamps every entry with the time the zip was
  built, Moodle with whatever it stored. Such a student's ``minutes_late`` is ``unknown`` and no penalty is
  charged; collect and export say how to get the LMS's times.

**Penalties** follow nbgrader's LateSubmissionPlugin
(https://nbgrader.readthedocs.io/en/stable/plugins/late-plugin.html, nbgrader/plugins/latesubmission.py):
``none`` (nbgrader's default: lateness is reported, nothing is taken off), ``zero`` (penalty = the score),
``per-hour:P`` (P points per hour late, hours rounded as in nbgrader's documented ``SubMarks`` example
plugin, ``round(seconds_late / 3600)``), and, as nbgrader's AssignLatePenalties does, the penalty is
clamped to [0, score]. The pack applies it to the student's total. A deadline is ISO 8601 with a time
zone. Lateness is counted from the deadline plus the student's extension, as nbgrader counts it
(``SubmittedAssignment.extension`` in nbgrader's gradebook, or ``--extensions FILE``: ``student,hours``),
and a submission within ``--grace MINUTES`` of that is on time. A student whose submission time is unknown
is never counted on time: ``minutes_late`` says ``unknown``, their reason names it, and ``export`` lists
them. The LMS's own late flag (Canvas's ``LATE`` in the download name, ``late`` in its API) is checked
against the time both ways: a disagreement is written into the student's reason for the TA.
"""

from __future__ import annotations

import csv
import json
import math
import re
from datetime import datetime, timezone
from pathlib import Path

from nbgrader.api import Gradebook, MissingEntry

from ..course import COURSE_ID, Course, valid_student_id
from .lms import adapter_of
from .lms.base import parse_iso
from .lms.canvas import read_api_times
from .lms.moodle import worksheet_times

SETTINGS = "deadline.json"   # in the grading folder: what collect was given, used by export


# ----------------------------------------------------------------------------- times
def parse_time(text: str, default_zone=None) -> datetime:
    """An ISO 8601 time; one without a zone is read in ``default_zone`` (an error when there is none)."""
    return parse_iso(text, default_zone)


def parse_deadline(text: str) -> datetime:
    value = parse_time(text)
    return value


def iso_utc(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, timezone.utc).isoformat(timespec="seconds")


def _utc(value: datetime) -> str:
    return value.astimezone(timezone.utc).isoformat(timespec="seconds")


def read_times(path: Path, default_zone=None) -> dict[str, dict]:
    """``--times FILE``: key (the pack's id or an LMS id) -> {"submitted_at": ISO 8601 UTC, "late": the LMS's own
    late flag or None}. Raises ValueError naming the bad line. The LMS formats are tried first (Canvas's
    Submissions API JSON, Moodle's grading worksheet), then the pack's own CSV (``student``, ``submitted_at``)."""
    path = Path(path)
    api = read_api_times(path)
    if api is not None:
        out = {}
        for key, entry in api.items():
            try:
                out[key] = {"submitted_at": _utc(parse_iso(entry["submitted_at"], default_zone)), "late": entry["late"]}
            except ValueError as exc:
                raise ValueError(f"{path}, user {key}: {exc}") from None
        return out
    try:
        worksheet = worksheet_times(path, default_zone)
    except UnicodeDecodeError:
        raise ValueError(f"{path}: not UTF-8 text; expected a CSV or the Canvas Submissions API's JSON") from None
    if worksheet is not None:
        return {key: {"submitted_at": _utc(entry["submitted_at"]), "late": None} for key, entry in worksheet.items()}
    out = {}
    with open(path, newline="", encoding="utf-8-sig") as f:
        reader = csv.DictReader(f)
        fields = {k.strip().lower(): k for k in reader.fieldnames or []}
        who = next((fields[k] for k in ("student", "student_id", "login", "id", "user_id") if k in fields), None)
        when = next((fields[k] for k in ("submitted_at", "time", "timestamp") if k in fields), None)
        if who is None or when is None:
            raise ValueError(f"{path}: needs a 'student' and a 'submitted_at' column, Moodle's grading worksheet "
                             "('Identifier', 'Last modified (submission)') or Canvas's Submissions API list (JSON) "
                             f"(has: {reader.fieldnames})")
        for line, row in enumerate(reader, 2):
            student, time_text = (row.get(who) or "").strip(), (row.get(when) or "").strip()
            if not student or time_text in ("", "-"):
                continue
            try:
                out[student] = {"submitted_at": _utc(parse_iso(time_text, default_zone)), "late": None}
            except ValueError as exc:
                raise ValueError(f"{path}, line {line}: {exc}") from None
    return out


def time_for(student: str, lms: dict, times: dict[str, dict]) -> dict | None:
    """The ``--times`` entry for a student: by the pack's id, else by the ids their LMS download carried."""
    adapter = adapter_of(lms)
    keys = adapter.time_keys(student, lms) if adapter else [student]
    return next((times[k] for k in keys if k in times), None)


def read_extensions(path: Path) -> dict[str, float]:
    """``--extensions FILE``: a CSV of ``student`` (the pack's id or an LMS id) and ``hours`` -> seconds."""
    out = {}
    with open(path, newline="", encoding="utf-8-sig") as f:
        reader = csv.DictReader(f)
        fields = {k.strip().lower(): k for k in reader.fieldnames or []}
        if "student" not in fields or "hours" not in fields:
            raise ValueError(f"{path}: needs a 'student' and an 'hours' column (has: {reader.fieldnames})")
        for line, row in enumerate(reader, 2):
            student = (row.get(fields["student"]) or "").strip()
            try:
                hours = float((row.get(fields["hours"]) or "").strip())
            except ValueError:
                raise ValueError(f"{path}, line {line}: hours must be a number") from None
            if student:
                out[student] = hours * 3600
    return out


# ----------------------------------------------------------------------------- settings and penalties
def parse_penalty(text: str) -> tuple[str, float]:
    """``none`` | ``zero`` | ``per-hour:P`` -> (method, points per hour)."""
    text = (text or "none").strip().lower()
    if text in ("none", "zero"):
        return text, 0.0
    m = re.fullmatch(r"per-hour:(\d+(?:\.\d+)?)", text)
    if m:
        return "per-hour", float(m[1])
    raise ValueError(f"--late-penalty {text!r}: expected none, zero or per-hour:P (P points per hour late)")


def save_settings(course: Course, deadline: str | None, penalty: str | None, grace: float | None = None,
                  extensions: Path | None = None) -> dict:
    """Check and store ``--deadline``, ``--late-penalty``, ``--grace`` (minutes) and ``--extensions`` (the
    file's hours per student) in grading/deadline.json (export and feedback read them)."""
    settings = load_settings(course)
    if deadline is not None:
        parse_deadline(deadline)
        settings["deadline"] = deadline
    if penalty is not None:
        parse_penalty(penalty)
        settings["late_penalty"] = penalty
    if grace is not None:
        if not grace >= 0:
            raise ValueError(f"--grace {grace}: expected minutes, 0 or more")
        settings["grace_minutes"] = float(grace)
    if extensions is not None:
        settings["extensions_seconds"] = read_extensions(Path(extensions))
    if settings:
        course.grading.mkdir(parents=True, exist_ok=True)
        (course.grading / SETTINGS).write_text(json.dumps(settings, indent=1, sort_keys=True), encoding="utf-8")
    return settings


def load_settings(course: Course) -> dict:
    try:
        return json.loads((course.grading / SETTINGS).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def penalty_for(score: float, seconds_late: float, method: str, per_hour: float) -> float:
    """nbgrader's rules: none -> 0; zero -> the score; per-hour -> P * round(hours late); clamped to [0, score]."""
    if seconds_late <= 0 or method == "none":
        return 0.0
    penalty = score if method == "zero" else per_hour * round(seconds_late / 3600)
    return float(min(max(penalty, 0.0), max(score, 0.0)))


def effective_settings(course: Course, deadline: str | None = None,
                       penalty: str | None = None) -> tuple[str | None, tuple[str, float]]:
    """The deadline and the parsed penalty rule in force: the arguments, else collect's grading/deadline.json."""
    settings = load_settings(course)
    deadline = deadline if deadline is not None else settings.get("deadline")
    return deadline, parse_penalty(penalty if penalty is not None else settings.get("late_penalty", "none"))


LATE_FIELDS = ["submitted_at", "time_source", "minutes_late", "late_penalty", "score_before_penalty"]


def _gradebook_extensions(course: Course) -> dict[str, float]:
    """student -> seconds of the extension set in nbgrader's gradebook (``SubmittedAssignment.extension``)."""
    if not course.db_path.exists():
        return {}

    with Gradebook(course.db_url, COURSE_ID) as gb:
        try:
            submissions = gb.find_assignment(course.assignment).submissions
        except MissingEntry:
            return {}
        return {sub.student.id: sub.extension.total_seconds() for sub in submissions if sub.extension}


def _add_reason(row: dict, text: str) -> None:
    row["reason"] = "; ".join(filter(None, [row.get("reason"), text]))


def apply_to_rows(course: Course, rows: list[dict], deadline: str | None = None,
                  penalty: str | None = None) -> list[str]:
    """Fill grades.csv's late columns in ``rows`` (dicts with student_id and score) and take each
    penalty off ``score``; returns the students whose time is unknown while a deadline is set."""
    deadline, (method, per_hour) = effective_settings(course, deadline, penalty)
    due = parse_deadline(deadline) if deadline else None
    settings = load_settings(course)
    grace = float(settings.get("grace_minutes") or 0.0) * 60
    listed = settings.get("extensions_seconds") or {}
    in_gradebook = _gradebook_extensions(course) if due is not None else {}
    unknown = []
    for row in rows:
        student = row["student_id"]
        report = course.read_json("collect", student) if valid_student_id(student) else {}
        lms = report.get("lms") or {}
        adapter = adapter_of(lms)
        when = report.get("submitted_at")
        row["submitted_at"] = when or ""
        row["time_source"] = report.get("time_source", "")
        row["score_before_penalty"] = row.get("score", 0.0)
        row["late_penalty"] = 0.0
        if due is None:
            row["minutes_late"] = ""
            continue
        if not when:
            row["minutes_late"] = "unknown"
            unknown.append(student)
            how = adapter.TIMES_HELP if adapter else "check it by hand or collect with --times"
            flag = f"{adapter.NAME.capitalize()} marked it LATE; " if lms.get("late") else ""
            _add_reason(row, f"submission time unknown (deadline {deadline}): {flag}no penalty charged; {how}")
            continue
        keys = adapter.time_keys(student, lms) if adapter else [student]
        extension = max([in_gradebook.get(student, 0.0)] + [float(listed[k]) for k in keys if k in listed])
        seconds = (parse_time(when) - due).total_seconds() - extension
        if seconds <= grace:
            seconds = min(seconds, 0.0)
        row["minutes_late"] = max(0, math.ceil(seconds / 60)) if seconds > 0 else 0
        score = float(row.get("score") or 0.0)
        row["late_penalty"] = penalty_for(score, seconds, method, per_hour)
        row["score"] = round(score - row["late_penalty"], 6)
        if extension:
            _add_reason(row, f"extension of {extension / 3600:g} h counted")
        flagged = lms.get("late")
        if adapter is not None and flagged is not None and bool(flagged) != (seconds > 0):
            name = adapter.NAME.capitalize()
            _add_reason(row, f"{name} marked this submission late, but its time ({when}) is on time here: check it"
                        if flagged else f"{name} did not mark this submission late, but its time ({when}) is "
                        f"{row['minutes_late']} min late here (an extension or due date set in {name}?): check it")
    return unknown


def _naive_utc(text: str) -> datetime:
    """nbgrader's gradebook keeps times as naive UTC datetimes."""
    return parse_time(text).astimezone(timezone.utc).replace(tzinfo=None)


def record_in_gradebook(course: Course, rows: list[dict], deadline: str | None = None) -> None:
    """Write what :func:`apply_to_rows` put in ``rows`` into nbgrader's gradebook, so that formgrader and
    nbgrader's own tools show the same: the assignment's due date (``Assignment.duedate``), each
    submission's time (``SubmittedAssignment.timestamp``, formgrader's "Submission Date" column) and its
    penalty (``SubmittedNotebook.late_submission_penalty``; nbgrader sums it per submission). The pack's
    penalty is on the student's total, so it is spread over the notebooks in the sheet's order, none above
    its notebook's score; the sum is grades.csv's ``late_penalty``. Without a deadline the due date and the
    penalties are cleared; a submission's time is written whenever it is known."""

    if not course.db_path.exists():
        return
    deadline, _ = effective_settings(course, deadline)
    order = {name: index for index, name in enumerate(course.notebook_names())}
    with Gradebook(course.db_url, COURSE_ID) as gb:
        try:
            gb.find_assignment(course.assignment).duedate = _naive_utc(deadline) if deadline else None
        except MissingEntry:
            return
        for row in rows:
            try:
                submission = gb.find_submission(course.assignment, row["student_id"])
            except MissingEntry:
                continue
            submission.timestamp = _naive_utc(row["submitted_at"]) if row.get("submitted_at") else None
            left = float(row.get("late_penalty") or 0.0)
            for notebook in sorted(submission.notebooks, key=lambda nb: order.get(nb.name, len(order))):
                share = min(left, max(float(notebook.score or 0.0), 0.0))
                notebook.late_submission_penalty = share if deadline else None
                left -= share
        gb.db.commit()
