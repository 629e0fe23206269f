"""``python -m grader export``: grading/grades.csv, one row per student, and the late penalties behind it.

:func:`class_rows` builds the rows (the gradebook's points per tier, the status and reason of every student
with a submission folder or a collect report, the deadline's columns from grader/extras/deadlines.py) and writes
the penalties into nbgrader's gradebook, so that formgrader, nbgrader's own export and the feedback pages
(which call it too, whatever the order of the verbs) show the same. :func:`export` writes the CSV
atomically, every name printable and every free-text cell escaped against spreadsheet formulas. The LMS's
own import file is grader/extras/lms/ (``export --lms``).
"""

from __future__ import annotations

from pathlib import Path

from nbgrader.api import Gradebook, MissingEntry, SolutionCell

from ..course import COURSE_ID, Course, printable, shown, valid_student_id, write_csv
from .deadlines import LATE_FIELDS, apply_to_rows, record_in_gradebook
from .tiers import grade_tiers

FIELDS = ["student_id", "name", "status", "reason", "score", "max_score", "core_score", "core_max",
          "extension_score", "extension_max", "autograded_score", "autograded_max", "manual_score",
          "needs_manual_grade"]


def _tiers(course: Course) -> dict[tuple[str, str], str]:
    """(notebook, grade_id) -> "core" | "extension", read from the source notebooks (never a student's)."""
    return {(path.stem, gid): tier for path in sorted(course.source.glob("*.ipynb"))
            for gid, tier in grade_tiers(path).items()}


def gradebook_rows(course: Course, students: list[str]) -> dict[str, dict]:
    """student -> autograded score/max, manual score, needs_manual_grade, per notebook scores, and the
    points (autograded and manual) of the core and of the extensions, each with its maximum."""
    tiers = _tiers(course)
    rows = {}
    with Gradebook(course.db_url, COURSE_ID) as gb:
        manual_cells = {(c.notebook.name, c.name) for c in gb.db.query(SolutionCell).all()}
        for student in students:
            row = {"autograded_score": 0.0, "autograded_max": 0.0, "manual_score": 0.0,
                   "needs_manual_grade": False, "per_notebook": {}, "core_score": 0.0, "core_max": 0.0,
                   "extension_score": 0.0, "extension_max": 0.0}
            try:
                sub = gb.find_submission(course.assignment, student)
            except MissingEntry:
                rows[student] = None
                continue
            for nb in sub.notebooks:
                nb_score = 0.0
                for grade in nb.grades:
                    tier = tiers.get((nb.notebook.name, grade.cell.name), "core")
                    row[f"{tier}_score"] += grade.score or 0.0
                    row[f"{tier}_max"] += grade.max_score or 0.0
                    if (nb.notebook.name, grade.cell.name) in manual_cells:
                        row["manual_score"] += grade.score or 0.0
                        row["needs_manual_grade"] |= bool(grade.needs_manual_grade)
                    else:
                        row["autograded_score"] += grade.score or 0.0
                        row["autograded_max"] += grade.max_score
                        nb_score += grade.score or 0.0
                row["per_notebook"][nb.notebook.name] = nb_score
            row["score"], row["max_score"] = sub.score, sub.max_score
            rows[student] = row
    return rows


def _export_students(course: Course) -> list[str]:
    """Everyone with a submission folder or a collect report, whatever their names look like.

    Names come from directory listings, so they may be anything (even not UTF-8): they are only
    used as keys here, get a row that says what is wrong with them, and are made printable when
    the row is written."""
    reports, submitted = course.grading / "collect", course.grading / "submitted"
    stems = {p.name[: -len(".json")] for p in reports.iterdir() if p.name.endswith(".json")} \
        if reports.is_dir() else set()
    folders = {p.name for p in submitted.iterdir() if p.is_dir()} if submitted.is_dir() else set()
    return sorted(stems | folders)


def _state(course: Course, student: str) -> tuple[str, str]:
    """(status, reason) of one student, from the autograde status or else the collect report."""
    if not valid_student_id(student):
        return "unreadable", (f"'{shown(student)}' is not a usable student id (letters, digits and ._@+- only): "
                              "rename the submission, delete it from grading/collect and grading/submitted, "
                              "and collect again")
    status, collected = course.read_json("status", student), course.read_json("collect", student)
    status = status if isinstance(status, dict) else {}
    collected = collected if isinstance(collected, dict) else {}
    if status.get("status"):
        return str(status["status"]), str(status.get("reason") or "")
    if collected.get("unreadable"):
        problems = collected.get("problems") or []
        return "unreadable", "; ".join(map(str, problems)) if isinstance(problems, list) else str(problems)
    return "not graded", "collected but not autograded yet"


def class_rows(course: Course, deadline: str | None = None,
               late_penalty: str | None = None) -> tuple[list[str], list[dict]]:
    """(grades.csv's columns, one row per student), late penalties taken off ``score`` and written into the
    gradebook (grader/extras/deadlines.py). One student's odd files never cut the rows short: every id and reason
    is made printable (file names that are not UTF-8)."""
    students = _export_students(course)
    notebooks = course.notebook_names()
    valid = [s for s in students if valid_student_id(s)]
    gb_rows = gradebook_rows(course, valid) if course.db_path.exists() else {}
    rows = []
    for student in students:
        state, reason = _state(course, student)
        g = gb_rows.get(student)
        lms = (course.read_json("collect", student).get("lms") or {}) if valid_student_id(student) else {}
        row = {"student_id": shown(student), "name": printable(lms.get("name", "")), "status": printable(state),
               "reason": printable(reason),
               "autograded_score": g["autograded_score"] if g else 0.0,
               "autograded_max": g["autograded_max"] if g else "",
               "manual_score": g["manual_score"] if g else 0.0,
               "needs_manual_grade": g["needs_manual_grade"] if g else False,
               "score": g["score"] if g else 0.0, "max_score": g["max_score"] if g else "",
               **{k: g[k] if g else (0.0 if k.endswith("score") else "")
                  for k in ("core_score", "core_max", "extension_score", "extension_max")}}
        for nb in notebooks:
            row[nb] = g["per_notebook"].get(nb, 0.0) if g else 0.0
        rows.append(row)
    apply_to_rows(course, rows, deadline, late_penalty)
    record_in_gradebook(course, rows, deadline)   # formgrader and the feedback pages show the same penalties
    return FIELDS + notebooks + LATE_FIELDS, rows


def export(course: Course, out: Path | None = None, deadline: str | None = None,
           late_penalty: str | None = None) -> tuple[Path, list[dict]]:
    """grading/grades.csv (or ``out``): :func:`class_rows`, replaced atomically, so it is either the complete
    new CSV or the previous one."""
    out = Path(out) if out else course.grading / "grades.csv"
    fields, rows = class_rows(course, deadline, late_penalty)
    write_csv(out, fields, rows)
    return out, rows
