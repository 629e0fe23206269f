"""Import submissions into nbgrader's layout: ``grading/submitted/<student>/ex01/<notebook>.ipynb``.

``PATH`` may hold, in any mix:

* ``<student>.zip`` (LMS download, one archive per student; notebooks anywhere inside),
* ``<student>/`` folders with the notebooks (at any depth),
* loose ``<student>__<notebook>.ipynb`` files,
* an LMS's bulk download, unpacked: Canvas's ``<login>_<userid>_<submissionid>_<file>`` files (``.ipynb``
  or ``.zip``; late ones carry ``_late_``) and Moodle's ``<Full Name>_<participantid>_assignsubmission_file_/``
  folders (grader/deadlines.py says which student id each gets).

Each student's submission time (``--times FILE``, else the newest matched file's time) goes into their
collect report for the deadline (grader/deadlines.py).

A file is matched to an assignment notebook by name (``task1_infonce (1).ipynb`` and
``task1_infonce-Copy1.ipynb`` count too; if several match, the newest wins and the report says
so). Nothing is extracted to disk except the matched notebooks, each capped in size, so archive
path tricks and zip bombs go nowhere. Only regular files are read: symbolic links are never
followed (in folders or archives) and FIFOs or devices are never opened, so a link to /dev/zero, to
another student's notebook or into solutions/ and a FIFO named like a notebook are skipped.
Problems are written to ``grading/collect/<student>.json`` and reported; a student whose archive
cannot be opened, or whose id is unsafe as a folder name, is marked unreadable. One student's
files never stop the others from being collected.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import stat
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from .course import Course, shown, valid_student_id
from .submissions import MAX_NOTEBOOK_BYTES

JUNK = {".DS_Store", "__MACOSX", ".ipynb_checkpoints", "Thumbs.db", "desktop.ini"}   # skipped silently
MAX_ENTRIES = 200_000   # files looked at in one student's folder: a huge tree must not stall the batch
SHOWN = 5               # skipped items named per problem line


@dataclass
class Collected:
    student: str
    notebooks: dict[str, str] = field(default_factory=dict)   # notebook stem -> where it came from
    problems: list[str] = field(default_factory=list)
    unreadable: bool = False
    times: dict[str, float] = field(default_factory=dict)   # notebook stem -> time of the file taken
    lms: dict = field(default_factory=dict)                 # what an LMS download name said (deadlines.py)
    submitted_at: str = ""                                  # ISO 8601, UTC
    time_source: str = ""


class Skipped(ValueError):
    """A file that is not read: a symbolic link, a FIFO or device, or over the size limit."""


def _match(name: str, notebooks: list[str]) -> str | None:
    """Which assignment notebook a file name stands for (longest matching name first)."""
    stem = Path(name).name
    if not stem.endswith(".ipynb"):
        return None
    stem = stem[: -len(".ipynb")].strip().lower()
    for nb in sorted(notebooks, key=len, reverse=True):
        if stem == nb.lower() or re.fullmatch(re.escape(nb.lower()) + r"[\s_\-(]*(copy)?\d*\)?", stem):
            return nb
    return None


# ----------------------------------------------------------------------------- reading files safely
def _kind(mode: int) -> str:
    """'dir', 'file', or why the item is not read: symbolic links are never followed (they could
    point at /dev/zero, another student's notebook or solutions/), and FIFOs, sockets and devices
    are never opened (opening a FIFO blocks forever)."""
    if stat.S_ISDIR(mode):
        return "dir"
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISLNK(mode):
        return "a symbolic link (not followed; copy the file itself in)"
    return "not a regular file (FIFO, socket or device; not opened)"


def _open_regular(path: Path):
    """Open ``path`` for reading only if it is a regular file, without following a symbolic link
    and without blocking on a FIFO (O_NOFOLLOW | O_NONBLOCK, then fstat): the check holds even if
    the file was swapped since the folder was listed."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise Skipped(_kind(stat.S_IFLNK)) from None
        raise
    handle = os.fdopen(fd, "rb")
    try:
        kind = _kind(os.fstat(handle.fileno()).st_mode)
        if kind != "file":
            raise Skipped(kind if kind != "dir" else "a folder")
    except BaseException:
        handle.close()
        raise
    return handle


def _read_file(path: Path) -> bytes:
    with _open_regular(path) as handle:
        data = handle.read(MAX_NOTEBOOK_BYTES + 1)   # never more than the cap, whatever the file claims
    if len(data) > MAX_NOTEBOOK_BYTES:
        raise Skipped(f"larger than the size limit ({MAX_NOTEBOOK_BYTES // 1024 ** 2} MB)")
    return data


def _read_zip(zpath: Path, index: int) -> bytes:
    """Entry ``index`` of the archive, inflating at most the size limit (zip bombs stop there)."""
    with _open_regular(zpath) as raw, zipfile.ZipFile(raw) as zf, zf.open(zf.infolist()[index]) as handle:
        data = handle.read(MAX_NOTEBOOK_BYTES + 1)
    if len(data) > MAX_NOTEBOOK_BYTES:
        raise Skipped("larger than the size limit once decompressed")
    return data


def _summary(why: str, names: list[str]) -> str:
    more = f" and {len(names) - SHOWN} more" if len(names) > SHOWN else ""
    return f"skipped {', '.join(names[:SHOWN])}{more}: {why}"


# ----------------------------------------------------------------------------- finding submissions
def _sources(path: Path, lms: dict | None = None) -> tuple[dict[str, list], list[str]]:
    """(student -> list of (kind, ...) found under PATH, names of entries that fit no pattern).

    Looks at each entry with lstat only: a symbolic link or a FIFO is recorded as a "skip" item for
    the student its name stands for, so the TA sees it in that student's problems. Canvas and Moodle
    download names are read for the student (``lms``, if given, receives student -> what the name said)."""
    from .deadlines import parse_lms_name

    found: dict[str, list] = {}
    ignored = []
    with os.scandir(path) as it:
        entries = sorted(it, key=lambda e: e.name)
    for entry in entries:
        name = entry.name
        if name in JUNK:
            continue
        kind = _kind(entry.stat(follow_symlinks=False).st_mode)
        special = kind not in ("dir", "file")
        named = parse_lms_name(name) if kind in ("dir", "file") else None
        if named is not None and (kind == "dir" or named.file.lower().endswith((".zip", ".ipynb"))):
            student = named.student
            if lms is not None:
                lms[student] = named.info
            item = (("dir", Path(entry.path)) if kind == "dir" else ("zip", Path(entry.path))
                    if named.file.lower().endswith(".zip") else ("file", Path(entry.path), named.file))
        elif kind == "dir":
            student, item = name, ("dir", Path(entry.path))
        elif name.lower().endswith(".zip"):
            student, item = name[: -len(".zip")], ("zip", Path(entry.path))
        elif name.endswith(".ipynb") and "__" in name:
            student, _, rest = name[: -len(".ipynb")].partition("__")
            item = ("file", Path(entry.path), rest + ".ipynb")
        elif special:   # e.g. a link standing for a student's folder
            student, item = name, None
        else:
            ignored.append(name)
            continue
        found.setdefault(student, []).append(("skip", name, kind) if special else item)
    return found, ignored


def _walk(folder: Path, inbox: Path, res: Collected):
    """Yield (path, mtime) of the regular ``*.ipynb`` files under ``folder``, never entering a
    symbolic link; symbolic links and special files met on the way become problems for ``res``."""
    skipped: dict[str, list[str]] = {}
    stack, seen = [folder], 0
    while stack:
        current = stack.pop()
        try:
            with os.scandir(current) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError as exc:
            res.problems.append(f"cannot list {shown(os.path.relpath(current, inbox))}: {exc.strerror}")
            continue
        for entry in entries:
            seen += 1
            if seen > MAX_ENTRIES:
                res.problems.append(f"more than {MAX_ENTRIES} files in {shown(folder.name)}/; stopped looking "
                                    "(ask for the notebooks alone)")
                stack = []
                break
            if entry.name in JUNK:
                continue
            st = entry.stat(follow_symlinks=False)
            kind = _kind(st.st_mode)
            if kind == "dir":
                stack.append(Path(entry.path))
            elif kind == "file":
                if entry.name.endswith(".ipynb"):
                    yield Path(entry.path), st.st_mtime
            else:
                skipped.setdefault(kind, []).append(shown(os.path.relpath(entry.path, inbox)))
    for why, names in skipped.items():
        res.problems.append(_summary(why, names))


def _zip_entry_problem(info: zipfile.ZipInfo) -> str | None:
    """Why an archive entry is not taken: a link or special file, a path that would escape the
    folder if extracted (absolute, ``..``), or a size over the cap (a zip bomb's declared size)."""
    mode = info.external_attr >> 16
    if stat.S_IFMT(mode) and not stat.S_ISREG(mode):
        return _kind(mode)
    name = info.filename
    if name.startswith(("/", "\\")) or re.match(r"[A-Za-z]:", name):
        return "an absolute path"
    if ".." in re.split(r"[\\/]", name):
        return "a path with '..'"
    if info.file_size > MAX_NOTEBOOK_BYTES:
        return f"too large ({info.file_size / 1024 ** 2:.0f} MB, limit {MAX_NOTEBOOK_BYTES // 1024 ** 2} MB)"
    return None


def _zip_mtime(info: zipfile.ZipInfo) -> float:
    try:
        return time.mktime(info.date_time + (0, 0, -1))
    except (OverflowError, ValueError):
        return 0.0


def _scan_zip(zpath: Path, notebooks: list[str], chosen: dict, res: Collected) -> None:
    """Add the archive's notebooks to ``chosen``; nothing is extracted to disk."""
    skipped: dict[str, list[str]] = {}
    try:
        with _open_regular(zpath) as raw, zipfile.ZipFile(raw) as zf:
            for index, info in enumerate(zf.infolist()):
                if info.is_dir() or "__MACOSX" in info.filename or ".ipynb_checkpoints" in info.filename:
                    continue
                nb = _match(info.filename, notebooks)
                if nb is None:
                    continue
                label = f"{shown(zpath.name)}:{shown(info.filename)}"
                problem = _zip_entry_problem(info)
                if problem:
                    skipped.setdefault(problem, []).append(label)
                    continue
                chosen.setdefault(nb, []).append(
                    (_zip_mtime(info), label, lambda zpath=zpath, index=index: _read_zip(zpath, index)))
    except Exception as exc:  # noqa: BLE001 - BadZipFile, OSError, EOFError, NotImplementedError, ...
        res.problems.append(f"cannot open {shown(zpath.name)}: {exc.__class__.__name__}: {shown(str(exc))}")
        res.unreadable = True
    for why, names in skipped.items():
        res.problems.append(_summary(why, names))


# ----------------------------------------------------------------------------- collect
def collect(course: Course, path: Path, times: Path | None = None, deadline: str | None = None,
            late_penalty: str | None = None) -> list[Collected]:
    """Import every student's notebooks; one student's files never stop the others.

    Student ids that would be unsafe as folder names, links, FIFOs, devices, archive entries with
    path tricks and oversized files are skipped and reported in that student's problems.
    ``times``: a CSV of submission times (grader/deadlines.py); ``deadline`` / ``late_penalty`` are
    checked and stored for ``export``."""
    from . import deadlines

    path = Path(path)
    if not path.is_dir():
        raise FileNotFoundError(f"{path} is not a folder of submissions")
    deadlines.save_settings(course, deadline, late_penalty)
    zone = deadlines.parse_deadline(deadline).tzinfo if deadline else None
    listed = deadlines.read_times(Path(times), zone) if times else None
    notebooks = course.notebook_names()
    lms: dict[str, dict] = {}
    found, ignored = _sources(path, lms)
    results = [Collected(shown(name), problems=[f"ignored {shown(name)}: not a zip, folder or "
                                                "<student>__<notebook>.ipynb"], unreadable=True)
               for name in ignored]
    for student, items in found.items():
        res = Collected(shown(student), lms=lms.get(student, {}))
        results.append(res)
        if not valid_student_id(student):
            res.problems.append(f"'{shown(student)}' is not a usable student id (letters, digits and ._@+- only, "
                                "starting with a letter or digit, no '..'); skipped: rename it and collect again")
            res.unreadable = True
            continue
        try:
            _collect_student(course, path, student, items, notebooks, res)
        except Exception as exc:  # noqa: BLE001 - one student's files must not stop the batch
            res.problems.append(f"collect failed for this student: {exc.__class__.__name__}: {shown(str(exc))}")
            res.unreadable = True
        _submission_time(res, listed, times)
        course.write_json("collect", student, {"notebooks": res.notebooks, "problems": res.problems,
                                               "unreadable": res.unreadable, "submitted_at": res.submitted_at,
                                               "time_source": res.time_source, "lms": res.lms})
    return sorted(results, key=lambda r: r.student)


def _submission_time(res: Collected, listed: dict | None, times_file) -> None:
    """``res.submitted_at``: the ``--times`` entry, else the newest time of the notebooks taken."""
    from .deadlines import iso_utc, time_for

    entry = time_for(res.student, res.lms, listed) if listed is not None else None
    if entry:
        res.submitted_at, res.time_source = entry, f"--times {Path(times_file).name}"
    elif res.times and max(res.times.values()) > 0:
        res.submitted_at, res.time_source = iso_utc(max(res.times.values())), "file time"
        if listed is not None:
            res.time_source = f"file time (not in {Path(times_file).name})"
            res.problems.append(f"not in {Path(times_file).name}: the submission time is the file's")


def _candidates(inbox: Path, items: list, notebooks: list[str], res: Collected) -> dict[str, list]:
    """notebook -> [(mtime, label, reader)] for one student's zips, folders and loose files."""
    chosen: dict[str, list] = {}
    for item in items:
        kind, entry = item[0], item[1]
        if kind == "skip":
            res.problems.append(_summary(item[2], [shown(entry)]))
        elif kind == "zip":
            _scan_zip(entry, notebooks, chosen, res)
        elif kind == "file":
            nb = _match(item[2], notebooks)
            if nb is not None:
                chosen.setdefault(nb, []).append((entry.lstat().st_mtime, shown(entry.name),
                                                  lambda f=entry: _read_file(f)))
        else:
            for f, mtime in _walk(entry, inbox, res):
                nb = _match(f.name, notebooks)
                if nb is not None:
                    chosen.setdefault(nb, []).append((mtime, shown(os.path.relpath(f, inbox)),
                                                      lambda f=f: _read_file(f)))
    return chosen


def _collect_student(course: Course, inbox: Path, student: str, items: list, notebooks: list[str],
                     res: Collected) -> None:
    chosen = _candidates(inbox, items, notebooks, res)
    dest = course.folder("submitted", student)
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    for nb, candidates in sorted(chosen.items()):
        candidates.sort(key=lambda c: c[0])
        mtime, label, reader = candidates[-1]
        if len(candidates) > 1:
            res.problems.append(f"{len(candidates)} files for {nb}.ipynb; took the newest, {label}")
        try:
            (dest / f"{nb}.ipynb").write_bytes(reader())
            res.notebooks[nb] = label
            res.times[nb] = mtime
        except Exception as exc:  # noqa: BLE001 - encrypted, unsupported compression, swapped for a link, ...
            res.problems.append(f"cannot read {label}: {shown(str(exc))}")
    missing = [nb for nb in notebooks if nb not in res.notebooks]
    if missing and not res.unreadable:
        res.problems.append("not submitted: " + ", ".join(f"{m}.ipynb" for m in missing))
    if not res.notebooks and not res.unreadable:
        res.unreadable = True
        res.problems.append("no assignment notebook found")
