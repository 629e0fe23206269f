"""``python -m grader backup`` / ``restore FILE``: copies of nbgrader's gradebook, the only file in the grading
folder a TA's hand fills (manual grades, comments, extensions) and no command can make again.

A backup is a consistent copy taken with SQLite's backup API (safe while formgrader has the gradebook
open), kept as ``grading/backups/gradebook-<UTC time>.db``. ``restore`` first backs up the gradebook it
replaces, so a restore can itself be undone, and refuses a file that is not an nbgrader gradebook.
"""

from __future__ import annotations

import sqlite3
from datetime import datetime, timezone
from pathlib import Path

from ..course import Course, snapshot_db

GRADEBOOK_TABLES = {"assignment", "student", "submitted_assignment", "grade"}


def backup(course: Course, dest: Path | None = None) -> Path:
    """Copy the gradebook to ``dest`` (default grading/backups/gradebook-<time>.db); returns the copy's path."""
    if not course.db_path.exists():
        raise FileNotFoundError(f"no gradebook at {course.db_path}: nothing to back up (run collect and autograde first)")
    if dest is None:
        stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
        dest = course.grading / "backups" / f"gradebook-{stamp}.db"
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    snapshot_db(course.db_path, dest)
    return dest


def check_gradebook(path: Path) -> None:
    """Raise ValueError unless ``path`` is an SQLite file with nbgrader's gradebook tables."""
    try:
        with sqlite3.connect(f"file:{Path(path)}?mode=ro", uri=True) as db:
            tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    except sqlite3.DatabaseError as exc:
        raise ValueError(f"{path} is not an SQLite file ({exc})") from None
    missing = GRADEBOOK_TABLES - tables
    if missing:
        raise ValueError(f"{path} is not an nbgrader gradebook (no {', '.join(sorted(missing))} table)")


def restore(course: Course, source: Path) -> tuple[Path, Path | None]:
    """Replace the gradebook with ``source`` (a backup); returns (the gradebook, the backup of the one replaced)."""
    source = Path(source)
    if not source.is_file():
        raise FileNotFoundError(f"{source}: no such file")
    check_gradebook(source)
    previous = backup(course) if course.db_path.exists() else None
    course.grading.mkdir(parents=True, exist_ok=True)
    snapshot_db(source, course.db_path)
    return course.db_path, previous
