"""Moodle: its "Download all submissions" names, its grading worksheet's times, its grade import CSV.

**Download names** (moodle/moodle mod/assign: ``classes/downloader.php`` from 4.1, ``locallib.php``
``download_submissions`` in 3.1-4.0): the prefix is the participant's full name (``_`` turned into spaces;
"Participant" under blind marking) and the participant id, ``<Full Name>_<participant id>``, then the
plugin: ``_assignsubmission_file``. 4.1+ puts each student's files, with their sub-folders, in the folder
``<prefix>_assignsubmission_file/``; 3.1-4.0 in ``<prefix>_assignsubmission_file_/``, or, without
"download as folders", names each file ``<prefix>_assignsubmission_file_<file>``. The pack's student id is
the participant id, ``moodle_<participant id>``: names in any script, two students of one name, and names
of any length stay apart. Online text (``_assignsubmission_onlinetext``) holds no notebook.

**Times**: the assignment's grading worksheet (View all submissions > Download grading worksheet):
``Identifier`` ("Participant 1234567") and ``Last modified (submission)`` in the downloading user's time
zone, which the file does not name (read in the deadline's). Zip entry times are no submission times.

**Import** (Grades > Import > CSV file): one identifier column mapped to a user field (``Email address``,
``ID number`` or ``Username``: ``--moodle-key``), ``Full name`` (for people; ignored), the grade item's
column. Moodle aborts the whole import when one identifier matches no user, so a student the roster lacks
is left out and named. Docs: https://docs.moodle.org/en/Grade_import
"""

from __future__ import annotations

import csv
import re
from datetime import datetime
from pathlib import Path

from .base import (ExportOptions, Index, LmsExport, LmsName, check_points_possible, exportable, lms_points,
                   parse_iso, squish)
from ...course import write_csv

NAME = "moodle"
DOCS = "https://docs.moodle.org/en/Grade_import"
TIMES_HELP = ("Moodle's download carries no submission times: download the grading worksheet (Assignment > "
              "View all submissions > Download grading worksheet) and collect again with --times WORKSHEET.csv")
KEYS = {"email": "Email address", "idnumber": "ID number", "username": "Username"}
DOWNLOAD = re.compile(r"^(?P<name>.+?)_(?P<participant>\d+)_assign(?:submission|feedback)_(?P<plugin>[a-z]+)"
                      r"(?:_(?P<file>.*))?$", re.S)
TIME_FORMATS = ("%A, %d %B %Y, %I:%M %p", "%A, %d %B %Y, %H:%M", "%d %B %Y, %I:%M %p", "%d %B %Y, %H:%M")


def parse_name(name: str, is_dir: bool) -> LmsName | None:
    """The Moodle download entry ``name`` (a student's folder, or one file of a flat download), or None."""
    m = DOWNLOAD.match(name)
    if not m:
        return None
    file = m["file"] or ""
    if not is_dir and not file:
        return None
    return LmsName(f"moodle_{m['participant']}", file,
                   {"system": NAME, "participant_id": m["participant"], "name": m["name"], "full_name": m["name"],
                    "plugin": m["plugin"]})


def time_keys(student: str, info: dict) -> list[str]:
    return [k for k in (student, info.get("participant_id")) if k]


def parse_time(text: str, zone) -> datetime | None:
    """A time as the worksheet writes it ("Friday, 20 November 2026, 11:59 PM"), in ``zone``; None when the
    text is in none of Moodle's formats."""
    text = " ".join(str(text).split())
    for fmt in TIME_FORMATS:
        try:
            value = datetime.strptime(text, fmt)
        except ValueError:
            continue
        if zone is None:
            raise ValueError(f"{text!r} has no time zone: give --deadline with a zone, the worksheet's times are "
                             "read in it")
        return value.replace(tzinfo=zone)
    return None


def is_worksheet(fields: list[str]) -> bool:
    lower = {f.strip().lower() for f in fields}
    return "identifier" in lower and "last modified (submission)" in lower


def upload_name(student: str, info: dict, page: str) -> str | None:
    """The name a feedback page takes in the zip for Moodle's "Upload multiple feedback files in a zip"
    (mod/assign/feedback/file/importziplib.php: ``<name>_<participant id>_<plugin type>_<plugin>_<file>``,
    split at the first four underscores, so the name carries none); None without a participant id."""
    if not info.get("participant_id"):
        return None
    name = (info.get("name") or "Participant").replace("_", " ")
    return f"{name}_{info['participant_id']}_assignsubmission_file_feedback-{page}"


def participant(identifier: str) -> str:
    """"Participant 1234567" -> "1234567"."""
    return re.sub(r"\D", "", identifier or "")


def export(headers, roster_rows, rows: list[dict], lms_info: dict[str, dict], out: Path,
           options: ExportOptions) -> LmsExport:
    result = LmsExport(Path(out), column=options.column)
    graded = exportable(rows, options, result)
    if options.key not in KEYS:
        raise ValueError(f"--moodle-key {options.key!r}: expected one of {', '.join(KEYS)}")
    key_column = KEYS[options.key]
    if key_column not in headers:
        raise ValueError(f"the Moodle roster has no '{key_column}' column (has: {', '.join(headers)}); "
                         f"pick --moodle-key from the ones it has ({DOCS})")

    def full_name(r):
        return r.get("Full name") or " ".join(filter(None, [r.get("First name", ""),
                                                             r.get("Surname") or r.get("Last name", "")]))

    by_participant, by_key, by_name = Index(), Index(), Index()
    possible = set()
    for i, r in enumerate(roster_rows):
        by_participant.add(participant(r.get("Identifier", "")), i)
        for col in KEYS.values():
            by_key.add(r.get(col, "").lower(), i)
        by_name.add(squish(full_name(r)), i)
        try:
            possible.add(float(r["Maximum Grade"]))
        except (KeyError, ValueError):
            pass

    matched = {}
    for student in sorted(graded):
        info = lms_info.get(student, {})
        found = by_participant.find(info.get("participant_id", "")) if info.get("participant_id") else None
        how = "participant id"
        if found is None:
            found, how = by_key.find(student.lower()), "identifier"
        if found is None and info.get("name") and info.get("name") != "Participant":
            found, how = by_name.find(squish(info["name"])), "name"
        if found == "ambiguous":
            result.not_in_roster.append(f"{student} (the {how} fits several roster rows: ambiguous, no grade "
                                        "written; use the grading worksheet as --roster: it has participant ids)")
        elif found is None:
            result.not_in_roster.append(student)
        elif found in matched:
            result.not_in_roster.append(f"{student} (its roster row is taken by {matched[found]}: no grade written)")
        else:
            matched[found] = student
    points = {s: lms_points(graded[s], options) for s in matched.values()}
    check_points_possible(points, next(iter(possible)) if len(possible) == 1 else None, result, options)
    out_rows = []
    for i, r in enumerate(roster_rows):
        student = matched.get(i)
        if not r.get(key_column):
            if student is not None:
                result.not_in_roster.append(f"{student} (the roster row has no {key_column})")
            continue
        if student is None:
            result.no_submission.append(f"{full_name(r)} ({r[key_column]})")
            continue   # no row: Moodle's import leaves their grade as it is
        out_rows.append({key_column: r[key_column], "Full name": full_name(r), options.column: points[student]})
    write_csv(out, [key_column, "Full name", options.column], out_rows, verbatim=(key_column,))
    result.rows = len(out_rows)
    return result


def worksheet_times(path: Path, zone) -> dict[str, dict] | None:
    """The grading worksheet's times: participant id -> {"submitted_at": datetime}; None when ``path`` is not a
    worksheet. "-" (no submission) is left out, so collect names the student."""
    with open(path, newline="", encoding="utf-8-sig") as f:
        reader = csv.DictReader(f)
        if not is_worksheet(reader.fieldnames or []):
            return None
        fields = {k.strip().lower(): k for k in reader.fieldnames}
        who, when = fields["identifier"], fields["last modified (submission)"]
        out = {}
        for line, row in enumerate(reader, 2):
            key, text = participant(row.get(who) or ""), (row.get(when) or "").strip()
            if not key or text in ("", "-"):
                continue
            try:
                value = parse_time(text, zone)
            except ValueError as exc:
                raise ValueError(f"{path}, line {line}: {exc}") from None
            if value is None:
                try:
                    value = parse_iso(text, zone)
                except ValueError as exc:
                    raise ValueError(f"{path}, line {line}: {exc}") from None
            out[key] = {"submitted_at": value}
    return out
