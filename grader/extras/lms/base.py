"""What every LMS adapter shares: the name a download entry carries, the export's options and outcome,
reading a roster CSV, matching a student to exactly one roster row, and the points a row sends."""

from __future__ import annotations

import csv
import re
import unicodedata
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path


@dataclass
class LmsName:
    """Who a download entry belongs to, read from its name alone."""

    student: str          # the pack's student id, built from the LMS's own id (never from a display name)
    file: str             # the file name after the LMS's prefix ("" for a folder of the student's files)
    info: dict            # system, user_id / participant_id / anonymous_id, late flag, name as the LMS wrote it


@dataclass
class ExportOptions:
    """How ``export --lms`` turns grades.csv's rows into the LMS's points."""

    column: str = "ex01"          # the LMS's assignment column (Canvas) or grade item (Moodle)
    key: str = "email"            # Moodle: the identifier column (email, idnumber, username)
    score: str = "total"          # total (core + extensions) | core
    scale_to: float | None = None  # the LMS's points possible: points are score / max * scale_to
    provisional: str = "refuse"   # refuse | skip | include: students whose written answers are not all graded


@dataclass
class LmsExport:
    path: Path
    rows: int = 0
    column: str = ""
    points_possible: float | None = None
    not_in_roster: list[str] = field(default_factory=list)     # graded students the roster lacks (with why)
    no_submission: list[str] = field(default_factory=list)     # roster students nobody graded
    left_out: list[str] = field(default_factory=list)          # not exported: unreadable, not graded, provisional
    notes: list[str] = field(default_factory=list)


class ExportRefused(ValueError):
    """The LMS file was not written: the message says which students and what to do."""


def squish(text: str) -> str:
    """A name's letters and digits, accents folded, lower case ("Doe, Jane" -> "doejane"; "王小明" kept)."""
    text = unicodedata.normalize("NFKD", text)
    text = "".join(c for c in text if not unicodedata.combining(c))
    return re.sub(r"[\W_]", "", text.lower())


def parse_iso(text: str, default_zone=None) -> datetime:
    """An ISO 8601 time; one without a zone is read in ``default_zone`` (an error when there is none)."""
    text = str(text).strip()
    try:
        value = datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith("Z") else text)
    except ValueError:
        raise ValueError(f"{text!r} is not an ISO 8601 time (e.g. 2026-11-20T23:59:00+01:00)") from None
    if value.tzinfo is None:
        if default_zone is None:
            raise ValueError(f"{text!r} has no time zone: write it as e.g. {text}+01:00 or {text}Z")
        value = value.replace(tzinfo=default_zone)
    return value


def read_roster(path: Path) -> tuple[list[str], list[dict]]:
    """(headers, rows) of an LMS's CSV export, cells stripped; a BOM is skipped, and the separator is the
    header line's (Canvas writes ";" for users who ask for it, lib/csv_with_i18n.rb)."""
    with open(path, newline="", encoding="utf-8-sig") as f:
        first = f.readline()
        f.seek(0)
        if first.startswith("\ufeff"):
            first = first[1:]
        separator = max(",;\t", key=first.count)
        reader = csv.DictReader(f, delimiter=separator)
        rows = [{(k or "").strip(): (v or "").strip() for k, v in row.items() if k is not None} for row in reader]
        return [(h or "").strip() for h in reader.fieldnames or []], rows


class Index:
    """Roster rows by key; a key held by two rows matches nobody (two students named Jane Doe)."""

    def __init__(self):
        self._rows: dict[str, set[int]] = {}

    def add(self, key: str, row: int) -> None:
        if key:
            self._rows.setdefault(key, set()).add(row)

    def find(self, key: str) -> int | None | str:
        """The one row of ``key``; None when no row has it; "ambiguous" when several do."""
        rows = self._rows.get(key) if key else None
        if not rows:
            return None
        return next(iter(rows)) if len(rows) == 1 else "ambiguous"


def lms_points(row: dict, options: ExportOptions):
    """The points ``row`` (a grades.csv row) sends: the total (late penalty already off) or the core less the
    penalty, scaled to ``options.scale_to`` when given; "" when the row has no score."""
    try:
        if options.score == "core":
            raw = max(float(row.get("core_score") or 0.0) - float(row.get("late_penalty") or 0.0), 0.0)
            maximum = float(row.get("core_max") or 0.0)
        else:
            raw, maximum = float(row.get("score") or 0.0), float(row.get("max_score") or 0.0)
    except (TypeError, ValueError):
        return ""
    if options.scale_to is not None:
        raw = raw / maximum * options.scale_to if maximum > 0 else 0.0
    return round(raw, 2)


FINISHED = ("graded", "review", "tampered", "kernel died", "timed out")   # statuses with points to send


def exportable(rows: list[dict], options: ExportOptions, result: LmsExport) -> dict[str, dict]:
    """student id -> grades.csv row of the students whose points go to the LMS; the others in
    ``result.left_out`` with why. Raises :class:`ExportRefused` when written answers are still ungraded and
    ``options.provisional`` is refuse."""
    if options.provisional not in ("refuse", "skip", "include"):
        raise ValueError(f"--provisional {options.provisional!r}: expected refuse, skip or include")
    out, provisional = {}, []
    for row in rows:
        student, status = row["student_id"], str(row.get("status", ""))
        if status == "not submitted":
            continue
        if status not in FINISHED:
            result.left_out.append(f"{student} ({status}: {row.get('reason') or 'no points'}; not in the file, "
                                   "never sent as 0)")
            continue
        if str(row.get("needs_manual_grade")).lower() in ("true", "1"):
            provisional.append(student)
            if options.provisional == "skip":
                result.left_out.append(f"{student} (written answers not graded yet; not in the file)")
                continue
            if options.provisional == "refuse":
                continue
        out[student] = row
    if provisional and options.provisional == "refuse":
        raise ExportRefused(
            f"{len(provisional)} student(s) have written answers not graded yet: {', '.join(provisional[:20])}"
            + (" ..." if len(provisional) > 20 else "") + ". Finish them in formgrader (Manual Grading), or pass "
            "--provisional skip (leave them out of the file) or --provisional include (send their grade so far); "
            "nothing was written")
    return out


def check_points_possible(points: dict[str, float], possible: float | None, result: LmsExport,
                          options: ExportOptions) -> None:
    """Refuse points above the LMS's points possible unless they were scaled to it on purpose."""
    result.points_possible = options.scale_to if options.scale_to is not None else possible
    if possible is None or options.scale_to is not None:
        return
    over = [f"{s} {p:g}" for s, p in sorted(points.items()) if p != "" and p > possible + 1e-9]
    if over:
        raise ExportRefused(
            f"{len(over)} grade(s) above the LMS's {possible:g} points possible ({', '.join(over[:10])}"
            + (" ..." if len(over) > 10 else "") + f"): pass --scale-to {possible:g} to send score / maximum x "
            f"{possible:g}, or --score core for the core points alone; nothing was written")
