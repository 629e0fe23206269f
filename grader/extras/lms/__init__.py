"""The learning management systems: one adapter module per LMS, behind the registry ``ADAPTERS``.

An adapter (``canvas.py``, ``moodle.py``) holds everything one LMS decides: how its bulk download names
a student's files (``parse_name``: the student id comes from the LMS's own id, never a display name), which
keys its times file uses (``time_keys``), why its file times are no submission times (``TIMES_HELP``), and
its grade import file (``export``: the roster matched by id, the points checked against its points possible).
``collect`` (grader/collect.py), ``--times`` (grader/extras/deadlines.py) and ``export --lms`` (grader/extras/export.py)
go through the registry; a folder, zip or ``<student>__<notebook>.ipynb`` file that no adapter claims is the
plain layout (grader/collect.py). A new LMS is one module here and one line in ``ADAPTERS``.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

from ...course import valid_student_id
from . import canvas, moodle
from .base import ExportOptions, ExportRefused, LmsExport, LmsName, read_roster

ADAPTERS = {canvas.NAME: canvas, moodle.NAME: moodle}

__all__ = ["ADAPTERS", "ExportOptions", "ExportRefused", "LmsExport", "LmsName", "export_lms", "parse_download_name",
           "adapter_of", "feedback_zip"]


def parse_download_name(name: str, is_dir: bool) -> LmsName | None:
    """Which student of which LMS a top-level download entry belongs to; None for the plain layout."""
    for adapter in ADAPTERS.values():
        named = adapter.parse_name(name, is_dir)
        if named is not None:
            return named
    return None


def adapter_of(info: dict | None):
    """The adapter that read a student's download (their collect report's ``lms``), or None."""
    return ADAPTERS.get((info or {}).get("system"))


def export_lms(course, grade_rows: list[dict], lms: str, roster: Path, out: Path,
               options: ExportOptions | None = None) -> LmsExport:
    """Write ``out``, the ``lms``'s grade import file, from grades.csv's ``grade_rows``, students matched to
    the LMS's roster export (``roster``) by the ids their download carried. Raises :class:`ExportRefused`
    (nothing written) for provisional grades or points above the LMS's points possible."""
    if lms not in ADAPTERS:
        raise ValueError(f"--lms {lms!r}: expected one of {', '.join(ADAPTERS)}")
    if not Path(roster).is_file():
        raise FileNotFoundError(f"--roster {roster}: no such file (the LMS's own roster export, see grader/extras/lms/{lms}.py)")
    headers, roster_rows = read_roster(Path(roster))
    lms_info = {r["student_id"]: course.read_json("collect", r["student_id"]).get("lms") or {}
                for r in grade_rows if valid_student_id(r["student_id"])}
    return ADAPTERS[lms].export(headers, roster_rows, grade_rows, lms_info, Path(out), options or ExportOptions())


def feedback_zip(course, lms: str, out: Path) -> tuple[int, list[str]]:
    """``out``: every student's feedback pages (grading/feedback/<student>/<assignment>/*.html), named for the
    LMS's bulk feedback upload (each adapter's ``upload_name``). Returns (pages written, students left out
    with why): a student collected from another layout carries no LMS ids."""
    if lms not in ADAPTERS:
        raise ValueError(f"--lms {lms!r}: expected one of {', '.join(ADAPTERS)}")
    adapter, written, left_out = ADAPTERS[lms], 0, []
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zf:
        for student in course.students():
            pages = sorted(course.folder("feedback", student).glob("*.html"))
            if not pages:
                continue
            info = course.read_json("collect", student).get("lms") or {}
            if info.get("system") != lms:
                left_out.append(f"{student} (not collected from a {lms} download)")
                continue
            for page in pages:
                name = adapter.upload_name(student, info, page.name)
                if name is None:
                    left_out.append(f"{student} (its download name carried no id {lms} can route by)")
                    break
                zf.write(page, name)
                written += 1
    tmp.replace(out)
    return written, left_out
