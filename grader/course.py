"""Where a grading run keeps its files, and the few nbgrader calls every verb needs.

A :class:`Course` is the TA's grading folder (default ``grading/``, or ``$LAS_GRADING_DIR``)::

    grading/
      gradebook.db                 nbgrader's gradebook (never visible to a student's kernel)
      release/ex01/*.ipynb         the release nbgrader generated from the source (tamper reference)
      submitted/<student>/ex01/    what ``collect`` imported
      autograded/<student>/ex01/   executed notebooks (with the hidden tests)
      feedback/<student>/ex01/     feedback HTML (hidden tests removed)
      status/<student>.json        what happened to each student (status + reasons)
      collect/<student>.json       what ``collect`` could not read
      grades.csv                   ``export``
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import re
import shutil
import sqlite3
import subprocess
import tempfile
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path

from utils.notebook_cells import read_notebook

from . import ASSIGNMENT, ROOT
from .release import NBGRADER, nbgrader_env, release_notebooks  # noqa: F401 - nbgrader_env: every verb's, re-exported

COURSE_ID = "learning-at-scale"
ASSIGNMENT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")
STUDENT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@+-]{0,63}$")


def valid_student_id(student: str) -> bool:
    r"""Student ids become folder names: letters, digits and ``._@+-`` only, no path tricks.

    ``fullmatch``, not ``match``: ``$`` also matches before a trailing newline, which let
    ``"alice\n"`` through as a folder name."""
    return isinstance(student, str) and bool(STUDENT_ID.fullmatch(student)) and ".." not in student


def printable(text) -> str:
    r"""``text`` as a str that can always be printed and written as UTF-8.

    File names that are not valid UTF-8 reach Python as lone surrogates (``b"caf\xe9"`` becomes
    ``"caf\udce9"``); printing or writing those raises UnicodeEncodeError half-way through a
    table or a CSV. Here their bytes are shown as ``\xe9`` instead, so the TA sees which file it was.
    """
    text = str(text)
    try:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:  # a surrogate that did not come from a file name (e.g. from JSON)
        return text.encode("utf-8", "backslashreplace").decode("utf-8")


def shown(name) -> str:
    """A file or student name as the TA should see it on one line: printable, control characters
    (a newline or a bell in a folder name) escaped."""
    text = printable(name)
    return text if text.isprintable() else repr(text)[1:-1]


FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def table(rows: list[list], headers: list[str], max_width: int = 90) -> str:
    """A plain-text table; long cells are cut to ``max_width`` characters, every cell printable (a file name
    that is not UTF-8 must not crash the summary)."""
    cells = [[str(h) for h in headers]] + [[t if len(t) <= max_width else t[: max_width - 3] + "..."
                                            for t in map(printable, row)] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def spreadsheet_safe(value):
    """A CSV cell that a spreadsheet shows as text, never runs as a formula (CSV injection).

    A text cell starting with ``= + - @``, a tab or a carriage return is prefixed with ``'``, as
    OWASP recommends; numbers and booleans are left alone (``-1.5`` stays a number)."""
    if not isinstance(value, str):
        return value
    value = printable(value)
    return "'" + value if value.startswith(FORMULA_START) else value


def write_atomic(path: Path, text: str, *, private: bool = False) -> Path:
    """Write ``text`` to ``path`` through a temporary file in the same folder and a rename, so that a
    reader never sees half a file and a crash leaves none. The file gets the umask's permissions (the
    TA's group can read grades and statuses), or the owner's alone with ``private``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", newline="", encoding="utf-8") as f:
            f.write(text)
        if not private:   # mkstemp's 0600 would hide the file from the TA's group
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_csv(path: Path, fields: list[str], rows: list[dict], verbatim: tuple[str, ...] = ()) -> Path:
    """Write ``rows`` to ``path`` atomically (:func:`write_atomic`), every free-text cell spreadsheet-safe: a
    failure half-way never leaves a truncated grades file that looks complete. The ``verbatim`` columns are
    identifiers another system matches on (a Moodle ID number ``+491701234``): escaping them would make the
    LMS find nobody, so they are written as they are (printable)."""
    out = io.StringIO(newline="")
    writer = csv.DictWriter(out, fieldnames=fields)
    writer.writeheader()
    writer.writerows({k: (printable(row.get(k, "")) if k in verbatim else spreadsheet_safe(row.get(k, "")))
                      for k in fields} for row in rows)
    return write_atomic(path, out.getvalue())


@dataclass
class Course:
    """A grading folder plus the nbgrader source notebooks it grades."""

    grading: Path | None = None
    source: Path | None = None
    assignment: str = field(default_factory=lambda: os.environ.get("LAS_ASSIGNMENT") or ASSIGNMENT)

    def __post_init__(self):
        """Defaults: ``solutions/<assignment>``; the grading folder ``$LAS_GRADING_DIR`` (else ``grading/``) for
        the default assignment and its sub-folder ``<assignment>/`` for another, so that each assignment's
        statuses, seed, deadline and grades stay apart while one TA folder holds the semester."""
        if not ASSIGNMENT_NAME.fullmatch(self.assignment or ""):
            raise ValueError(f"assignment {self.assignment!r}: letters, digits, '_' and '-' only (e.g. ex02)")
        if self.grading is None:
            base = Path(os.environ.get("LAS_GRADING_DIR") or ROOT / "grading")
            self.grading = base if self.assignment == ASSIGNMENT else base / self.assignment
        self.grading = Path(self.grading).resolve()
        self.source = Path(self.source if self.source is not None else ROOT / "solutions" / self.assignment).resolve()

    @property
    def db_path(self) -> Path:
        return self.grading / "gradebook.db"

    @property
    def db_url(self) -> str:
        return f"sqlite:///{self.db_path}"

    def folder(self, kind: str, student: str | None = None) -> Path:
        """``grading/<kind>/<student>/ex01`` (or ``grading/<kind>`` without a student)."""
        base = self.grading / kind
        return base if student is None else base / student / self.assignment

    def handed_in(self, students: list[str], notebooks: list[str]) -> list[str]:
        """Those of ``notebooks`` that at least one of ``students`` submitted (a file in their submitted folder):
        the only ones a batch of these students needs the solution's reference values for."""
        return [nb for nb in notebooks if any((self.folder("submitted", s) / f"{nb}.ipynb").exists() for s in students)]

    @property
    def release(self) -> Path:
        return self.grading / "release" / self.assignment

    def notebook_names(self) -> list[str]:
        """Stems of the assignment's notebooks (from the source folder)."""
        return sorted(p.stem for p in self.source.glob("*.ipynb"))

    def students(self) -> list[str]:
        folder = self.grading / "submitted"
        if not folder.is_dir():
            return []
        return sorted(p.name for p in folder.iterdir() if p.is_dir() and valid_student_id(p.name))

    # ----------------------------------------------------------------- status files
    def status_path(self, kind: str, student: str) -> Path:
        return self.grading / kind / f"{student}.json"

    def read_json(self, kind: str, student: str) -> dict:
        try:
            return json.loads(self.status_path(kind, student).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}

    def write_json(self, kind: str, student: str, data: dict) -> None:
        write_atomic(self.status_path(kind, student), json.dumps(data, indent=1, sort_keys=True))


def scratch_course(folder: Path, notebook: Path) -> tuple[Course, dict, dict]:
    """A one-notebook course in ``folder`` (source/, grading/) synced into its gradebook; returns
    (course, the release nbgrader generated, the source notebook), both as notebook dicts."""
    (folder / "source").mkdir()
    shutil.copy(notebook, folder / "source")
    course = Course(grading=folder / "grading", source=folder / "source")
    sync_assignment(course)
    return course, read_notebook(course.release / notebook.name), read_notebook(notebook)


def nbgrader(args: list[str], *, course_root: Path, db_url: str, env: dict | None = None,
             timeout: float | None = None, extra: list[str] = ()) -> subprocess.CompletedProcess:
    """Run ``python -m nbgrader ARGS`` on a course folder, configured entirely from the command line
    (no nbgrader_config.py is read: the grading folder may live anywhere)."""
    cmd = [*NBGRADER, *args,
           f"--CourseDirectory.root={course_root}", f"--CourseDirectory.db_url={db_url}",
           f"--CourseDirectory.course_id={COURSE_ID}", *extra]
    return subprocess.run(cmd, cwd=course_root, capture_output=True, text=True, env=nbgrader_env(env),
                          timeout=timeout)


def sync_assignment(course: Course) -> list[str]:
    """Put the assignment (its notebooks, grade cells and source cells) into the gradebook and write the
    matching release to ``grading/release``, as ``python -m grader release`` makes it from ``course.source``
    (the committed notebooks/ folder is never touched); returns the notebook stems."""
    course.grading.mkdir(parents=True, exist_ok=True)
    digest = release_digest(course.source, course.assignment)
    stamp = course.grading / "release-digest.txt"
    try:
        unchanged = stamp.read_text().strip() == digest and course.db_path.exists() and any(course.release.glob("*.ipynb"))
    except OSError:
        unchanged = False
    if not unchanged:   # nbgrader's generate_assignment costs about 10 s: only when the source changed
        stamp.unlink(missing_ok=True)
        fresh = not course.db_path.exists()
        if not (fresh and _from_release_cache(course, digest)):
            release_notebooks(course.source, course.release, db_url=course.db_url, assignment=course.assignment)
            if fresh:
                _to_release_cache(course, digest)
        stamp.write_text(digest + "\n")
    return course.notebook_names()


def release_cache_dir() -> Path | None:
    """Where a fresh grading folder takes its release and gradebook from, when another folder (a shard, a
    second class, a test) was synced with the same source before: ``$LAS_RELEASE_CACHE`` when set (``off``
    turns it off), else ``$XDG_CACHE_HOME/learning-at-scale/releases`` (``~/.cache``). Outside the
    repository, so no sandbox sees it. An entry holds what ``generate_assignment`` wrote: the release and
    a gradebook with the assignment and no student."""
    return cache_folder("LAS_RELEASE_CACHE",
                        Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "learning-at-scale" / "releases")


def cache_folder(variable: str, default: Path | None) -> Path | None:
    """A disk cache's folder: ``$variable`` when set, None (no disk cache) when it is ``off``, else ``default``."""
    env = os.environ.get(variable, "")
    return None if env.lower() == "off" else Path(env) if env else default


def _cache_key(digest: str) -> str:
    """The release digest with nbgrader's version: a new nbgrader may write another gradebook schema."""
    return hashlib.sha256(f"{digest}\0nbgrader {version('nbgrader')}".encode()).hexdigest()[:32]


def _entry_files(folder: Path) -> dict[str, str]:
    """relative path -> sha256 of every file of a cache entry but its manifest."""
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file() and p.name != "manifest.json"}


def _from_release_cache(course: Course, digest: str) -> bool:
    """Copy a cached release and gradebook into the fresh ``course``; False (nothing written) when the
    cache is off or has no entry, or when the entry's files differ from its manifest (then the entry is
    removed, and this sync stores a new one)."""
    cache = release_cache_dir()
    entry = cache / _cache_key(digest) if cache else None
    try:
        if entry is None or not entry.exists():
            return False
        if json.loads((entry / "manifest.json").read_text()) != _entry_files(entry):
            shutil.rmtree(entry, ignore_errors=True)
            return False
        if course.release.exists():
            shutil.rmtree(course.release)
        shutil.copytree(entry / "release", course.release)
        shutil.copyfile(entry / "gradebook.db", course.db_path)
        return True
    except (OSError, ValueError):
        return False


def _to_release_cache(course: Course, digest: str) -> None:
    """Keep the release and the gradebook ``course`` was just synced with (no student in it yet) for the
    next fresh folder; a cache that cannot be written costs nothing but the next sync's time."""
    cache = release_cache_dir()
    if cache is None:
        return
    try:
        cache.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".entry-", dir=cache))
        shutil.copytree(course.release, tmp / "release")
        snapshot_db(course.db_path, tmp / "gradebook.db")
        (tmp / "manifest.json").write_text(json.dumps(_entry_files(tmp)))
        try:
            tmp.rename(cache / _cache_key(digest))   # atomic; another process's entry may already be there
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)
    except (OSError, sqlite3.Error):
        pass


def release_digest(source: Path, assignment: str = ASSIGNMENT) -> str:
    """A digest of what the release is made from: the assignment's name (its gradebook entry), the source
    notebooks, the pack's nbgrader configuration and the release code."""
    h = hashlib.sha256(assignment.encode() + b"\0" if assignment != ASSIGNMENT else b"")
    here = Path(__file__).resolve().parent
    for path in [*sorted(Path(source).glob("*.ipynb")), here / "nbgrader_config.py", here / "release.py"]:
        h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def add_students(course: Course, students: list[str]) -> None:
    from nbgrader.api import Gradebook

    with Gradebook(course.db_url, COURSE_ID) as gb:
        for student in students:
            gb.update_or_create_student(student)


def snapshot_db(src: Path, dst: Path) -> None:
    """A consistent copy of an sqlite file (the backup API, safe while another process reads it)."""
    with sqlite3.connect(src) as source, sqlite3.connect(dst) as target:
        source.backup(target)


NBGRADER_FAILED = re.compile(r"There was an error processing assignment '[^']*' for student '(.*)'\s*$")
NBGRADER_FAILED_PATH = re.compile(r"There was an error processing assignment: .*[/\\]autograded[/\\](.+?)[/\\]")


def nbgrader_failures(log: str) -> dict[str, str]:
    """student -> the last line of the error nbgrader logged for them (nbgrader converts every
    student, logs each failure and only then exits non-zero)."""
    failed, current = {}, None
    for line in log.splitlines():
        if m := NBGRADER_FAILED.search(line):
            failed.setdefault(m.group(1), "")
            current = None
        elif m := NBGRADER_FAILED_PATH.search(line):
            current = m.group(1)
            failed[current] = ""
        elif current and line.strip() and not line.startswith("["):
            failed[current] = line.strip()   # the traceback's last line is the error
    return failed
