"""Canvas: its "Download Submissions" names, its submission times, its gradebook import CSV.

**Download names** (instructure/canvas-lms lib/content_zipper.rb, ``get_filename`` and
``add_upload_submission``): every uploaded file is ``<name>[_LATE]_<user id>_<attachment id>_<file>``, where
``<name>`` is the sortable name ("Doe, Jane") lower-cased with every character that is not a Unicode word
character removed ("doejane", "núñezjosé", "王小明"), and ``LATE`` is Canvas's own late flag (older Canvas
wrote ``_late_``). With anonymous grading there is no name: ``[LATE_]anon_<anonymous id>_<attachment
id>_<file>``. The pack's student id is the Canvas user id, ``canvas_<user id>`` (``canvas_anon_<id>``): two
students called Jane Doe are two students, a renamed student stays one. The name is kept for the TA.

**Times.** Every entry of Canvas's zip carries the time the zip was built, not the submission time. The
times come from Canvas: the Submissions API's list (``GET /api/v1/courses/:course/assignments/:id/
submissions``: ``user_id``, ``submitted_at``, ``late``; saved as JSON) or a CSV of ``student`` (the user
id) and ``submitted_at``. Without them no late penalty is charged (grader/extras/deadlines.py).

**Import** ("Gradebook > Import"): the gradebook export's first five columns (``Student, ID, SIS User
ID, SIS Login ID, Section``), then the assignment's column ``<name> (<assignment id>)``; Canvas matches
students by ``ID`` and the assignment by the id in parentheses. A blank cell *removes* a grade Canvas holds
(app/models/gradebook_importer.rb), so the file holds a row only for each student whose grade it sends.
Docs: https://community.canvaslms.com/t5/Instructor-Guide/How-do-I-import-grades-in-the-Gradebook/ta-p/807
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from .base import (ExportOptions, Index, LmsExport, LmsName, check_points_possible, exportable, lms_points, squish)
from ...course import write_csv

NAME = "canvas"
DOCS = "https://community.canvaslms.com/t5/Instructor-Guide/How-do-I-import-grades-in-the-Gradebook/ta-p/807"
TIMES_HELP = ("Canvas's download carries the zip's build time, not submission times: save the Submissions API's "
              "list as JSON (GET /api/v1/courses/<course>/assignments/<id>/submissions?per_page=100) or a CSV "
              "of student (the Canvas user id) and submitted_at, and collect again with --times FILE")
FIELDS = ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"]
IDENTIFIERS = ("ID", "SIS User ID", "SIS Login ID")   # written verbatim, never formula-escaped

# the name is any run of Ruby's [[:word:]] (letters, marks, digits, "_"); 2013-2015 Canvas wrote "doe--jane-late"
NAMED = re.compile(r"^(?P<name>[^\s/\\]*?)(?:_(?P<late>LATE|late))?_(?P<user_id>\d+)_(?P<attachment>\d+)_(?P<file>.+)$",
                   re.S)
#: an online text entry or URL submission: no attachment id (content_zipper.rb add_text_or_url)
ONLINE = re.compile(r"^(?:(?P<name>[^\s/\\]*?)_)??(?:(?P<late>LATE|late)_)?(?P<id>\d+|anon_[A-Za-z0-9]+)"
                    r"_(?P<file>text|link)\.html$", re.S)
ANONYMOUS = re.compile(r"^(?:(?P<late>LATE)_)?anon_(?P<anon>[A-Za-z0-9]+)_(?P<attachment>\d+)_(?P<file>.+)$", re.S)


def parse_name(name: str, is_dir: bool) -> LmsName | None:
    """The Canvas download entry ``name`` (a file), or None when it is not one."""
    if is_dir:
        return None
    m = ANONYMOUS.match(name)
    if m:
        return LmsName(f"canvas_anon_{m['anon']}", m["file"],
                       {"system": NAME, "anonymous_id": m["anon"], "attachment_id": m["attachment"],
                        "late": bool(m["late"]), "name": f"anonymous {m['anon']}"})
    m = ONLINE.match(name)
    if m:   # the student's, but no notebook: accounted for as ignored
        anon = m["id"].startswith("anon_")
        key = {"anonymous_id": m["id"][5:]} if anon else {"user_id": m["id"]}
        return LmsName(f"canvas_{m['id']}", f"online {m['file']}.html",
                       {"system": NAME, **key, "late": bool(m["late"]),
                        "name": m["name"] or "" if not anon else f"anonymous {m['id'][5:]}"})
    m = NAMED.match(name)
    if m:
        late = bool(m["late"]) or m["name"].endswith("-late")
        return LmsName(f"canvas_{m['user_id']}", m["file"],
                       {"system": NAME, "user_id": m["user_id"], "attachment_id": m["attachment"],
                        "late": late, "name": m["name"].removesuffix("-late")})
    return None


def time_keys(student: str, info: dict) -> list[str]:
    """The keys a times file may use for this student: the pack's id, the user id, the anonymous id."""
    return [k for k in (student, info.get("user_id"), info.get("anonymous_id"),
                        f"anon_{info['anonymous_id']}" if info.get("anonymous_id") else None) if k]


def upload_name(student: str, info: dict, page: str) -> str | None:
    """The name a feedback page takes in the zip for Canvas's "Upload Submissions" (SpeedGrader's bulk
    comment upload: ``Assignment#generate_comments_from_files`` routes a file by the user id and an
    attachment id of the student's submission, as the download names it); None without those ids."""
    if not info.get("user_id") or not info.get("attachment_id"):
        return None
    return f"{info.get('name') or 'student'}_{info['user_id']}_{info['attachment_id']}_feedback-{page}"


def read_api_times(path: Path) -> dict[str, dict] | None:
    """The Submissions API's list saved as JSON -> key -> {"submitted_at", "late"}; None when ``path`` is
    not such a list (another times format). A submission without ``submitted_at`` (never submitted) is left
    out."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8-sig"))
    except (OSError, ValueError):
        return None
    if isinstance(data, dict) and isinstance(data.get("submissions"), list):
        data = data["submissions"]
    if not isinstance(data, list) or not all(isinstance(d, dict) for d in data):
        return None
    if data and not any("user_id" in d or "anonymous_id" in d for d in data):
        return None
    out = {}
    for entry in data:
        when = entry.get("submitted_at")
        if not when:
            continue
        record = {"submitted_at": str(when), "late": entry.get("late")}
        for key in (entry.get("user_id"), entry.get("anonymous_id")):
            if key not in (None, ""):
                out[str(key)] = record
    return out


def write_import(headers, roster_rows, graded: dict[str, dict], lms_info: dict[str, dict], out: Path,
                 options: ExportOptions, result: LmsExport) -> None:
    absent = [h for h in ("Student", "ID") if h not in headers]
    if absent:
        raise ValueError(f"the Canvas roster lacks {', '.join(absent)}: use Canvas's gradebook export ({DOCS})")
    fields = [h for h in FIELDS if h in headers]   # SIS User ID is there only where the site shows it
    column = next((h for h in headers if h not in FIELDS and (h == options.column or h.startswith(options.column + " ("))),
                  options.column)
    result.column = column
    if column == options.column:
        result.notes.append(f"no column '{options.column} (<id>)' in the roster: Canvas creates a new assignment "
                            f"'{options.column}' on import (--lms-column names an existing one)")
    possible_row = next((r for r in roster_rows if r.get("Student", "").strip() == "Points Possible"), None)
    possible = None
    if possible_row and possible_row.get(column):
        try:
            possible = float(possible_row[column])
        except ValueError:
            pass
    students = [(i, r) for i, r in enumerate(roster_rows)
                if r.get("ID", "").isdigit() and r.get("Student", "") != "Student, Test"]
    by_id, by_login = Index(), Index()
    for i, r in students:
        by_id.add(r["ID"], i)
        for key in (r.get("SIS Login ID", "").lower(), r.get("SIS User ID", "").lower(), squish(r.get("Student", ""))):
            by_login.add(key, i)

    matched = {}
    for student in sorted(graded):
        info = lms_info.get(student, {})
        if info.get("anonymous_id"):
            result.not_in_roster.append(f"{student} (anonymous grading: Canvas's gradebook shows no anonymous "
                                        "ids; post the grades in SpeedGrader, or unhide names and download again)")
            continue
        found = by_id.find(info.get("user_id", "")) if info.get("user_id") else None
        if found is None:
            found = by_login.find(student.lower())
        if found == "ambiguous":
            result.not_in_roster.append(f"{student} (matches several roster rows by name: ambiguous, no grade "
                                        "written; collect from a Canvas download, which carries the user id)")
        elif found is None:
            result.not_in_roster.append(student)
        else:
            matched[found] = student
    points = {s: lms_points(graded[s], options) for s in matched.values()}
    check_points_possible(points, possible, result, options)
    rows = []
    if result.points_possible is not None:
        rows.append({"Student": "    Points Possible", column: result.points_possible})
    for i, r in students:
        student = matched.get(i)
        if student is None:   # no row: a blank cell would REMOVE a grade Canvas holds (gradebook_importer.rb)
            result.no_submission.append(f"{r.get('Student')} (ID {r.get('ID')})")
            continue
        rows.append({**{h: r.get(h, "") for h in fields}, column: points[student]})
    write_csv(out, fields + [column], rows, verbatim=IDENTIFIERS)
    result.rows = len(rows) - (result.points_possible is not None)


def export(headers, roster_rows, rows: list[dict], lms_info: dict[str, dict], out: Path,
           options: ExportOptions) -> LmsExport:
    result = LmsExport(Path(out))
    graded = exportable(rows, options, result)
    write_import(headers, roster_rows, graded, lms_info, Path(out), options, result)
    return result

