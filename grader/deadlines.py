"""Submission times, the deadline and late penalties (``collect --deadline``, ``export``).

**Where a time comes from.** ``collect`` records each student's submission time in their collect report
(``grading/collect/<student>.json``: ``submitted_at``, ISO 8601 in UTC, and ``time_source``):

* ``--times FILE``: a CSV with a ``student`` column (the pack's id, or the LMS login / user id /
  participant id that the download names carry) and a ``submitted_at`` column (ISO 8601 with a time zone,
  e.g. ``2026-11-20T23:59:00+01:00``; a time without a zone is read in the deadline's zone). It wins over
  file times. A student missing from it keeps the file time, and collect names them.
* otherwise the newest modification time of the student's matched notebooks: a file's mtime, or a zip
  entry's time (zip stores local time without a zone: read as this machine's local time).

The LMS download names say who a file belongs to (grader/collect.py reads them):

* Canvas "Download Submissions": ``<login>_<userid>_<submissionid>_<filename>``, late ones
  ``<login>_late_<userid>_<submissionid>_<filename>`` (Canvas's own late flag, kept as ``lms.late``);
  the pack's student id is the login, the Canvas user id is kept for the gradebook export.
* Moodle "Download all submissions": ``<Full Name>_<participantid>_assignsubmission_file_/<file>`` (a
  folder per student; older versions: the same prefix on each file); the pack's id is the name's
  letters and digits joined by ``_`` and the participant id (``Jane_Doe_1234567``).

**Penalties** follow nbgrader's LateSubmissionPlugin
(https://nbgrader.readthedocs.io/en/stable/plugins/late-plugin.html, nbgrader/plugins/latesubmission.py):
``none`` (nbgrader's default: lateness is reported, nothing is taken off), ``zero`` (penalty = the score),
``per-hour:P`` (P points per hour late, hours rounded as in nbgrader's documented ``SubMarks`` example
plugin, ``round(seconds_late / 3600)``), and, as nbgrader's AssignLatePenalties does, the penalty is
clamped to [0, score]. The pack applies it to the student's total. A deadline is ISO 8601 with a time
zone. A student whose submission time is unknown is never counted on time: ``minutes_late`` says
``unknown``, their reason names it, and ``export`` lists them.
"""

from __future__ import annotations

import csv
import json
import math
import re
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from .course import Course, valid_student_id

SETTINGS = "deadline.json"   # in the grading folder: what collect was given, used by export
CANVAS = re.compile(r"^(?P<login>[A-Za-z0-9][A-Za-z0-9.@+-]*?)(?P<late>_late)?_(?P<user_id>\d+)_(?P<submission_id>\d+)"
                    r"_(?P<file>.+)$", re.IGNORECASE)
MOODLE = re.compile(r"^(?P<name>.+?)_(?P<participant>\d+)_assign(?:submission|feedback)_(?:file|onlinetext)_(?P<file>.*)$")


# ----------------------------------------------------------------------------- LMS download names
@dataclass
class LmsName:
    student: str          # the pack's student id
    file: str             # the file name after the LMS's prefix ("" for a Moodle folder)
    info: dict            # what the name said: system, user id / participant id, late flag, full name


def parse_lms_name(name: str) -> LmsName | None:
    """Who a Canvas or Moodle download entry belongs to, or None when the name is neither."""
    m = MOODLE.match(name)
    if m:
        words = re.findall(r"[A-Za-z0-9]+", _ascii(m["name"]))
        student = "_".join(words + [m["participant"]])[:64] if words else f"participant_{m['participant']}"
        return LmsName(student, m["file"], {"system": "moodle", "participant_id": m["participant"],
                                            "full_name": m["name"]})
    m = CANVAS.match(name)
    if m and valid_student_id(m["login"]):
        return LmsName(m["login"], m["file"], {"system": "canvas", "user_id": m["user_id"],
                                               "submission_id": m["submission_id"], "late": bool(m["late"])})
    return None


def _ascii(text: str) -> str:
    """``José Núñez`` -> ``Jose Nunez`` (accents dropped), for a folder-safe student id."""
    import unicodedata

    return unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()


# ----------------------------------------------------------------------------- times
def parse_time(text: str, default_zone=None) -> datetime:
    """An ISO 8601 time; one without a zone is read in ``default_zone`` (an error when there is none)."""
    text = str(text).strip()
    try:
        value = datetime.fromisoformat(text.replace("Z", "+00:00") if text.endswith("Z") else text)
    except ValueError:
        raise ValueError(f"{text!r} is not an ISO 8601 time (e.g. 2026-11-20T23:59:00+01:00)") from None
    if value.tzinfo is None:
        if default_zone is None:
            raise ValueError(f"{text!r} has no time zone: write it as e.g. {text}+01:00 or {text}Z")
        value = value.replace(tzinfo=default_zone)
    return value


def parse_deadline(text: str) -> datetime:
    value = parse_time(text)
    return value


def iso_utc(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, timezone.utc).isoformat(timespec="seconds")


MOODLE_TIME_FORMATS = ("%A, %d %B %Y, %I:%M %p", "%A, %d %B %Y, %H:%M", "%d %B %Y, %I:%M %p", "%d %B %Y, %H:%M")


def parse_moodle_time(text: str, default_zone=None) -> datetime:
    """A time as Moodle's grading worksheet writes it ("Friday, 20 November 2026, 11:59 PM", in the
    downloading user's time zone, which the file does not name: ``default_zone``, the deadline's), or ISO 8601."""
    text = " ".join(str(text).split())
    for fmt in MOODLE_TIME_FORMATS:
        try:
            value = datetime.strptime(text, fmt)
        except ValueError:
            continue
        if default_zone is None:
            raise ValueError(f"{text!r} has no time zone: give --deadline with a zone, the worksheet's times are read in it")
        return value.replace(tzinfo=default_zone)
    return parse_time(text, default_zone)


def read_times(path: Path, default_zone=None) -> dict[str, str]:
    """``--times FILE``: student (or LMS id) -> ISO 8601 UTC time. Raises ValueError naming the bad line.

    Two layouts: the pack's own CSV (``student``, ``submitted_at``), or Moodle's grading worksheet
    (Assignment > View all submissions > Download grading worksheet;
    https://docs.moodle.org/en/Assignment_settings#Offline_grading_worksheet): ``Identifier``
    ("Participant 1234567", matched to the download's participant id) and ``Last modified (submission)``
    ("-" for no submission: left out, so collect names the student)."""
    out = {}
    with open(path, newline="", encoding="utf-8-sig") as f:
        reader = csv.DictReader(f)
        fields = {k.strip().lower(): k for k in reader.fieldnames or []}
        moodle = "identifier" in fields and "last modified (submission)" in fields
        if moodle:
            who, when = fields["identifier"], fields["last modified (submission)"]
        else:
            who = next((fields[k] for k in ("student", "student_id", "login", "id") if k in fields), None)
            when = next((fields[k] for k in ("submitted_at", "time", "timestamp") if k in fields), None)
        if who is None or when is None:
            raise ValueError(f"{path}: needs a 'student' and a 'submitted_at' column, or Moodle's grading worksheet "
                             f"('Identifier', 'Last modified (submission)') (has: {reader.fieldnames})")
        for line, row in enumerate(reader, 2):
            student, time_text = (row.get(who) or "").strip(), (row.get(when) or "").strip()
            if moodle:
                student = re.sub(r"\D", "", student)
                if time_text in ("", "-"):
                    continue
            if not student:
                continue
            try:
                parsed = parse_moodle_time(time_text, default_zone) if moodle else parse_time(time_text, default_zone)
                out[student] = parsed.astimezone(timezone.utc).isoformat(timespec="seconds")
            except ValueError as exc:
                raise ValueError(f"{path}, line {line}: {exc}") from None
    return out


def time_for(student: str, lms: dict, times: dict[str, str]) -> str | None:
    """The ``--times`` entry for a student: by the pack's id, else by the LMS's ids."""
    for key in (student, lms.get("user_id"), lms.get("participant_id"), lms.get("full_name")):
        if key and key in times:
            return times[key]
    return None


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


def save_settings(course: Course, deadline: str | None, penalty: str | None) -> dict:
    """Check and store ``--deadline`` / ``--late-penalty`` in grading/deadline.json (export reads them)."""
    settings = load_settings(course)
    if deadline is not None:
        parse_deadline(deadline)
        settings["deadline"] = deadline
    if penalty is not None:
        parse_penalty(penalty)
        settings["late_penalty"] = penalty
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


def apply_to_rows(course: Course, rows: list[dict], deadline: str | None = None,
                  penalty: str | None = None) -> list[str]:
    """Fill grades.csv's late columns in ``rows`` (dicts with student_id and score) and take each
    penalty off ``score``; returns the students whose time is unknown while a deadline is set."""
    deadline, (method, per_hour) = effective_settings(course, deadline, penalty)
    due = parse_deadline(deadline) if deadline else None
    unknown = []
    for row in rows:
        report = course.read_json("collect", row["student_id"]) if valid_student_id(row["student_id"]) else {}
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
            unknown.append(row["student_id"])
            row["reason"] = "; ".join(filter(None, [row.get("reason"), f"submission time unknown (deadline {deadline}): "
                                                    "not counted on time; check it by hand or collect with --times"]))
            continue
        seconds = (parse_time(when) - due).total_seconds()
        row["minutes_late"] = max(0, math.ceil(seconds / 60)) if seconds > 0 else 0
        score = float(row.get("score") or 0.0)
        row["late_penalty"] = penalty_for(score, seconds, method, per_hour)
        row["score"] = round(score - row["late_penalty"], 6)
        lms = report.get("lms") or {}
        if lms.get("late") and seconds <= 0:
            row["reason"] = "; ".join(filter(None, [row.get("reason"), "Canvas marked this submission late, its time "
                                                    f"({when}) is before the deadline: check it"]))
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
    from nbgrader.api import Gradebook, MissingEntry

    from . import ASSIGNMENT
    from .course import COURSE_ID

    if not course.db_path.exists():
        return
    deadline, _ = effective_settings(course, deadline)
    order = {name: index for index, name in enumerate(course.notebook_names())}
    with Gradebook(course.db_url, COURSE_ID) as gb:
        try:
            gb.find_assignment(ASSIGNMENT).duedate = _naive_utc(deadline) if deadline else None
        except MissingEntry:
            return
        for row in rows:
            try:
                submission = gb.find_submission(ASSIGNMENT, row["student_id"])
            except MissingEntry:
                continue
            submission.timestamp = _naive_utc(row["submitted_at"]) if row.get("submitted_at") else None
            left = float(row.get("late_penalty") or 0.0)
            for notebook in sorted(submission.notebooks, key=lambda nb: order.get(nb.name, len(order))):
                share = min(left, max(float(notebook.score or 0.0), 0.0))
                notebook.late_submission_penalty = share if deadline else None
                left -= share
        gb.db.commit()
