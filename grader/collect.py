"""Import submissions into nbgrader's layout: ``grading/submitted/<student>/ex01/<notebook>.ipynb``.

``PATH`` may hold, in any mix, an LMS's bulk download, unpacked or zipped (Canvas's and Moodle's names and the
student ids they give are read by their adapters, grader/extras/lms/), and the plain layout: ``<student>.zip``
(notebooks anywhere inside), ``<student>/`` folders and loose ``<student>__<notebook>.ipynb`` files. A student's
files may be notebooks, zips of notebooks and folders of them at any depth; a file stands for an assignment
notebook by name (``task1_infonce (1).ipynb`` and ``task1_infonce-Copy1.ipynb`` count too). Of two *different*
files for one notebook a plain folder's newest wins (its time is the TA's copy's), but in an LMS download, whose
file times say nothing, the notebook is not guessed: the student is unreadable with both named. The collect report
(``grading/collect/<student>.json``) accounts for every file (taken, superseded by which, or ignored and why) and
holds the submission time (grader/extras/deadlines.py; zip entry dates never count).

Nothing is extracted to disk except the matched notebooks, each capped in size, so archive path tricks and zip
bombs go nowhere. Only regular files with a single link are read: symbolic links are never followed, FIFOs or
devices never opened, and a hard link (maybe another student's notebook under a second name, made by unpacking
a crafted archive) is refused. A student whose archive cannot be opened, or whose id is unsafe as a folder name,
is unreadable; one student's files never stop the others from being collected.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import stat
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from .course import Course, shown, valid_student_id
from .extras import deadlines
from .extras.lms import adapter_of, parse_download_name
from .submissions import MAX_NOTEBOOK_BYTES

JUNK = {".DS_Store", "__MACOSX", ".ipynb_checkpoints", "Thumbs.db", "desktop.ini"}   # skipped silently
MAX_ENTRIES = 200_000   # files looked at in one student's folder: a huge tree must not stall the batch
SHOWN = 5               # skipped items named per problem line
HARD_LINK = ("a hard link (the same file under another name, maybe another student's notebook: not read; "
             "copy the file itself in)")
MAX_DOWNLOAD_BYTES = 16 * 1024 ** 3   # all of an LMS download zip's files, unpacked
MAX_DOWNLOAD_ENTRY = 4 * MAX_NOTEBOOK_BYTES
REPORT = ("notebooks", "problems", "unreadable", "submitted_at", "time_source", "lms", "files")


@dataclass
class Collected:
    student: str
    notebooks: dict[str, str] = field(default_factory=dict)   # notebook stem -> where it came from
    problems: list[str] = field(default_factory=list)
    unreadable: bool = False
    times: dict[str, float] = field(default_factory=dict)   # notebook stem -> time of the file taken
    lms: dict = field(default_factory=dict)                 # what an LMS download name said (grader/extras/lms/)
    submitted_at: str = ""                                  # ISO 8601, UTC
    time_source: str = ""
    files: list[str] = field(default_factory=list)          # every file looked at: taken, superseded or ignored
    stray: bool = False                                     # a download entry that belongs to no student


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
def _kind(mode: int, links: int = 1) -> str:
    """'dir', 'file', or why the item is not read: symbolic links are never followed (they could
    point at /dev/zero, another student's notebook or solutions/), FIFOs, sockets and devices
    are never opened (opening a FIFO blocks forever), and a file with ``links`` > 1 is a HARD_LINK."""
    if stat.S_ISDIR(mode):
        return "dir"
    if stat.S_ISREG(mode):
        return "file" if links <= 1 else HARD_LINK
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
        st = os.fstat(handle.fileno())
        kind = _kind(st.st_mode, st.st_nlink)
        if kind != "file":
            raise Skipped(kind if kind != "dir" else "a folder")
    except BaseException:
        handle.close()
        raise
    return handle


def _read(path: Path, index: int | None = None) -> bytes:
    """The regular file ``path``, or with ``index`` that entry of the archive ``path``: never more than the
    size limit is read or inflated, whatever the file claims (zip bombs stop there)."""
    with _open_regular(path) as raw:
        if index is None:
            data = raw.read(MAX_NOTEBOOK_BYTES + 1)
        else:
            with zipfile.ZipFile(raw) as zf, zf.open(zf.infolist()[index]) as handle:
                data = handle.read(MAX_NOTEBOOK_BYTES + 1)
    if len(data) > MAX_NOTEBOOK_BYTES:
        raise Skipped(f"larger than the size limit ({MAX_NOTEBOOK_BYTES // 1024 ** 2} MB)" if index is None
                      else "larger than the size limit once decompressed")
    return data


def _summary(why: str, names: list[str], verb: str = "skipped") -> str:
    more = f" and {len(names) - SHOWN} more" if len(names) > SHOWN else ""
    return f"{verb} {', '.join(names[:SHOWN])}{more}: {why}"


def _report(res: Collected, skipped: dict[str, list[str]], others: list[str], why_ignored: str) -> None:
    """Skipped items (why -> names) become ``res``'s problems, ignored ones (``others``) a line of its files."""
    res.problems.extend(_summary(why, names) for why, names in skipped.items())
    if others:
        res.files.append(_summary(why_ignored, others, "ignored"))


# ----------------------------------------------------------------------------- finding submissions
def _sources(path: Path, found: dict[str, list], ignored: list[str], lms: dict, skip: set) -> None:
    """Add to ``found`` (student -> list of (kind, ...)) what PATH's entries hold, to ``ignored`` "name: why"
    of the entries that belong to nobody, to ``lms`` student -> what an LMS download name said.

    Looks at each entry with lstat only: a symbolic link, a FIFO or a hard link is recorded as a "skip"
    item for the student its name stands for, so the TA sees it in that student's problems."""
    with os.scandir(path) as it:
        entries = sorted(it, key=lambda e: e.name)
    for entry in entries:
        name = entry.name
        if name in JUNK or name in skip:
            continue
        st = entry.stat(follow_symlinks=False)
        kind = _kind(st.st_mode, st.st_nlink)
        special = kind not in ("dir", "file")
        named = (parse_download_name(name, kind == "dir") if not special
                 else parse_download_name(name, False) or parse_download_name(name, True))
        if named is not None:
            student, file = named.student, named.file
            lms[student] = {**lms.get(student, {}), **named.info}
        elif kind == "dir":
            student, file = name, name
        elif name.lower().endswith(".zip"):
            student, file = name[: -len(".zip")], name
        elif name.endswith(".ipynb") and "__" in name:
            student, _, file = name.partition("__")
        elif special:   # e.g. a link standing for a student's folder
            student, file = name, name
        else:
            ignored.append(f"{shown(name)}: not an LMS download name, a zip, a folder or <student>__<notebook>.ipynb")
            continue
        where = Path(entry.path)
        found.setdefault(student, []).append(
            ("skip", name, kind) if special else ("dir", where) if kind == "dir"
            else ("zip", where) if file.lower().endswith(".zip")
            else ("file", where, file) if file.lower().endswith(".ipynb")
            else ("other", shown(name), "not a notebook or a zip"))


def _walk(folder: Path, res: Collected):
    """Yield (path, mtime) of the regular ``*.ipynb`` and ``*.zip`` files under ``folder``, never entering a
    symbolic link; links, hard links and special files met on the way become problems for ``res``, other
    files are listed in ``res.files`` as ignored. Names are shown from ``folder``'s parent on."""
    skipped: dict[str, list[str]] = {}
    others: list[str] = []
    stack, seen = [folder], 0
    while stack:
        current = stack.pop()
        try:
            with os.scandir(current) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError as exc:
            res.problems.append(f"cannot list {shown(os.path.relpath(current, folder.parent))}: {exc.strerror}")
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
            kind = _kind(st.st_mode, st.st_nlink)
            label = shown(os.path.relpath(entry.path, folder.parent))
            if kind == "dir":
                stack.append(Path(entry.path))
            elif kind != "file":
                skipped.setdefault(kind, []).append(label)
            elif entry.name.endswith(".ipynb") or entry.name.lower().endswith(".zip"):
                yield Path(entry.path), st.st_mtime
            else:
                others.append(label)
    _report(res, skipped, others, "not a notebook or a zip")


def _zip_entry_problem(info: zipfile.ZipInfo, limit: int = MAX_NOTEBOOK_BYTES) -> str | None:
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
    if info.file_size > limit:
        return f"too large ({info.file_size / 1024 ** 2:.0f} MB, limit {limit // 1024 ** 2} MB)"
    return None


def _scan_zip(zpath: Path, notebooks: list[str], chosen: dict, res: Collected) -> None:
    """Add the archive's notebooks to ``chosen``; nothing is extracted to disk."""
    skipped: dict[str, list[str]] = {}
    others: list[str] = []
    try:
        with _open_regular(zpath) as raw, zipfile.ZipFile(raw) as zf:
            mtime = os.fstat(raw.fileno()).st_mtime   # the zip's own time here: its entries' dates are the student's
            for index, info in enumerate(zf.infolist()):
                if info.is_dir() or "__MACOSX" in info.filename or ".ipynb_checkpoints" in info.filename:
                    continue
                nb = _match(info.filename, notebooks)
                label = f"{shown(zpath.name)}:{shown(info.filename)}"
                problem = _zip_entry_problem(info) if nb is not None else None
                if nb is None:
                    others.append(label)
                elif problem:
                    skipped.setdefault(problem, []).append(label)
                else:
                    chosen.setdefault(nb, []).append((mtime, label, zpath, index))
    except Skipped as exc:
        res.problems.append(_summary(str(exc), [shown(zpath.name)]))
    except Exception as exc:  # noqa: BLE001 - BadZipFile, OSError, EOFError, NotImplementedError, ...
        res.problems.append(f"cannot open {shown(zpath.name)}: {exc.__class__.__name__}: {shown(str(exc))}")
        res.unreadable = True
    _report(res, skipped, others, "not an assignment notebook (zips inside a zip are not opened)")


# ----------------------------------------------------------------------------- an LMS's whole download
def _is_download(path: Path) -> bool:
    """Whether a zip or a folder (as an unzip tool makes it: "CS101-Exercise 1-42/") is an LMS's download of
    the whole class, not one student's: most of its entries' first path parts are LMS download names."""
    try:
        if path.is_dir():
            with os.scandir(path) as it:
                tops = {e.name: e.is_dir(follow_symlinks=False) for _, e in zip(range(2000), it) if e.name not in JUNK}
        else:
            with _open_regular(path) as raw, zipfile.ZipFile(raw) as zf:
                names = [i.filename for i in zf.infolist()][:2000]
            tops = {n.replace("\\", "/").split("/")[0]: n.endswith("/") or "/" in n.strip("/")
                    for n in names if n.strip("/")}
    except Exception:  # noqa: BLE001 - a broken zip is a student's problem, reported where it is read
        return False
    named = sum(parse_download_name(top, is_dir) is not None for top, is_dir in tops.items())
    return len(tops) > 0 and named * 2 > len(tops)


def _unpack_download(zpath: Path, dest: Path, notes: list[str]) -> Path:
    """Unpack an LMS's download zip into ``dest``, as safely as a student's zip is read: regular files only, no
    absolute paths or '..', no entry over MAX_DOWNLOAD_ENTRY, at most MAX_DOWNLOAD_BYTES in all. What is
    skipped is added to ``notes`` ("name: why"). Returns ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    total = 0
    with _open_regular(zpath) as raw, zipfile.ZipFile(raw) as zf:
        for info in zf.infolist():
            if info.is_dir():
                continue
            problem = _zip_entry_problem(info, MAX_DOWNLOAD_ENTRY)
            if problem is None and total + info.file_size > MAX_DOWNLOAD_BYTES:
                problem = "past the download's size limit"
            if problem:
                notes.append(f"{shown(zpath.name)}:{shown(info.filename)}: {problem}")
                continue
            target = dest / info.filename.replace("\\", "/")
            try:
                target.parent.mkdir(parents=True, exist_ok=True)
                with zf.open(info) as src, open(target, "wb") as out:
                    written = 0
                    while chunk := src.read(1 << 20):
                        written += len(chunk)
                        if written > MAX_DOWNLOAD_ENTRY:
                            raise Skipped("larger than its stated size")
                        out.write(chunk)
            except Exception as exc:  # noqa: BLE001 - encrypted, corrupt, a name clash: that entry alone
                if target.is_file():
                    target.unlink()
                notes.append(f"{shown(zpath.name)}:{shown(info.filename)}: not unpacked ({exc.__class__.__name__}: "
                             f"{shown(str(exc))[:120]})")
                continue
            total += info.file_size
    return dest


# ----------------------------------------------------------------------------- collect
def collect(course: Course, path: Path, times: Path | list[Path] | None = None, deadline: str | None = None,
            late_penalty: str | None = None, grace: float | None = None,
            extensions: Path | None = None) -> list[Collected]:
    """Import every student's notebooks; one student's files never stop the others.

    Student ids that would be unsafe as folder names, links, FIFOs, devices, archive entries with
    path tricks and oversized files are skipped and reported in that student's problems; entries that
    belong to no student are returned as unreadable rows named after the entry (no report is written for
    them). ``times``: the LMS's submission times (grader/extras/deadlines.py); ``deadline``, ``late_penalty``,
    ``grace`` (minutes) and ``extensions`` (a CSV) are checked and stored for ``export``."""
    path = Path(path)
    if not (path.is_dir() or (path.is_file() and path.suffix.lower() == ".zip")):
        raise FileNotFoundError(f"{path} is neither a folder of submissions nor an LMS's download zip")
    deadlines.save_settings(course, deadline, late_penalty, grace, extensions)
    deadline = deadlines.effective_settings(course)[0]
    zone = deadlines.parse_deadline(deadline).tzinfo if deadline else None
    files = [Path(t) for t in ([times] if isinstance(times, (str, Path)) else times or [])]
    listed = {} if files else None
    for file in files:   # several: e.g. the pages of Canvas's Submissions API, one file each
        listed.update(deadlines.read_times(file, zone))
    with tempfile.TemporaryDirectory(prefix="las-collect-") as unpacked:
        return _collect_all(course, path, Path(unpacked), listed, ", ".join(f.name for f in files))


def _collect_all(course: Course, path: Path, unpacked: Path, listed, times) -> list[Collected]:
    notebooks = course.notebook_names()
    lms: dict[str, dict] = {}
    notes: list[str] = []
    roots = [path]
    if path.is_file():   # the LMS's download zip itself
        roots = [_unpack_download(path, unpacked / "download", notes)]
    else:
        for entry in sorted(path.iterdir()):
            if entry.is_symlink() or parse_download_name(entry.name, entry.is_dir()) is not None:
                continue
            packed = entry.suffix.lower() == ".zip" and entry.is_file()   # else unpacked into a folder of its name
            if (packed or entry.is_dir()) and _is_download(entry):
                roots.append(_unpack_download(entry, unpacked / entry.name, notes) if packed else entry)
    found, ignored = {}, []
    for root in roots:
        _sources(root, found, ignored, lms, skip=set() if root is not path else {Path(r).name for r in roots[1:]})
    results = [Collected(shown(entry.split(": ")[0]), problems=[f"ignored {entry}"], unreadable=True, stray=True)
               for entry in ignored + notes]
    for student, items in found.items():
        res = Collected(shown(student), lms=lms.get(student, {}))
        results.append(res)
        if not valid_student_id(student):
            res.problems.append(f"'{shown(student)}' is not a usable student id (letters, digits and ._@+- only, "
                                "starting with a letter or digit, no '..'); skipped: rename it and collect again")
            res.unreadable = True
            continue
        try:
            _collect_student(course, student, items, notebooks, res)
        except Exception as exc:  # noqa: BLE001 - one student's files must not stop the batch
            res.problems.append(f"collect failed for this student: {exc.__class__.__name__}: {shown(str(exc))}")
            res.unreadable = True
        _submission_time(res, listed, times)
        course.write_json("collect", student, {key: getattr(res, key) for key in REPORT})
    return sorted(results, key=lambda r: r.student)


def _submission_time(res: Collected, listed: dict | None, times_file) -> None:
    """``res.submitted_at``: the ``--times`` entry; else, in the plain layout, the newest time of the files
    taken; an LMS download's file times are never used (grader/extras/deadlines.py)."""
    entry = deadlines.time_for(res.student, res.lms, listed) if listed is not None else None
    adapter = adapter_of(res.lms)
    if entry:
        res.submitted_at, res.time_source = entry["submitted_at"], f"--times {times_file}"
        if entry.get("late") is not None:
            if res.lms.get("late") is not None and bool(res.lms["late"]) != bool(entry["late"]):
                res.problems.append(f"the download's late flag ({res.lms['late']}) and {times_file}'s "
                                    f"({entry['late']}) disagree: the times file's is kept")
            res.lms["late"] = bool(entry["late"])
    elif adapter is not None:
        missing = f", not in {times_file}" if listed is not None else ""
        res.time_source = f"none ({adapter.NAME} download{missing})"
        if res.notebooks:
            res.problems.append(f"not in {times_file}: no submission time, no late penalty (check it by hand)"
                                if listed is not None else f"no submission time: {adapter.TIMES_HELP}")
    elif res.times and max(res.times.values()) > 0:
        res.submitted_at, res.time_source = deadlines.iso_utc(max(res.times.values())), "file time"
        if listed is not None:
            res.time_source = f"file time (not in {times_file})"
            res.problems.append(f"not in {times_file}: the submission time is the file's")


def _candidates(items: list, notebooks: list[str], res: Collected) -> dict[str, list]:
    """notebook -> [(mtime, label, path, zip entry index or None)] for one student's zips, folders and files."""
    chosen: dict[str, list] = {}

    def add(name: str, mtime: float, label: str, path: Path) -> None:
        nb = _match(name, notebooks)
        if nb is None:
            res.files.append(f"ignored {label}: not an assignment notebook")
        else:
            chosen.setdefault(nb, []).append((mtime, label, path, None))

    for kind, entry, *more in items:
        if kind == "skip":
            res.problems.append(_summary(more[0], [shown(entry)]))
        elif kind == "other":
            res.files.append(f"ignored {entry}: {more[0]}")
        elif kind == "zip":
            _scan_zip(entry, notebooks, chosen, res)
        elif kind == "file":
            add(more[0], entry.lstat().st_mtime, shown(entry.name), entry)
        else:
            for f, mtime in _walk(entry, res):
                if f.name.lower().endswith(".zip"):
                    _scan_zip(f, notebooks, chosen, res)
                else:
                    add(f.name, mtime, shown(os.path.relpath(f, entry.parent)), f)
    return chosen


def _pick(nb: str, candidates: list, res: Collected) -> tuple | None:
    """The (mtime, label, bytes) to take for ``nb``: identical copies are one; of different files the newest in
    the plain layout, none in an LMS download (its file times say nothing: the student is unreadable, both named)."""
    distinct: dict[bytes, tuple] = {}
    unread = set()
    for mtime, label, path, index in sorted(candidates, key=lambda c: c[0]):
        try:
            data = _read(path, index)
        except Exception as exc:  # noqa: BLE001 - encrypted, unsupported compression, a link, too large, ...
            res.problems.append(f"cannot read {label}: {shown(str(exc))}")
            unread.add(label)
            continue
        distinct.pop(data, None)
        distinct[data] = (mtime, label, data)
    if not distinct:
        return None
    kept = list(distinct.values())
    if len(kept) > 1 and res.lms:
        res.problems.append(f"{len(kept)} different files compete for {nb}.ipynb: "
                            + ", ".join(c[1] for c in kept) + "; not guessed (the download's file times say "
                            "nothing): keep the one to grade and collect again")
        res.files.extend(f"not taken {c[1]}: competes for {nb}.ipynb" for c in kept)
        res.unreadable = True
        return None
    taken, kept_labels = kept[-1], {c[1] for c in kept}
    for other in candidates:
        if other[1] != taken[1] and other[1] not in unread:
            res.files.append(f"superseded {other[1]} by {taken[1]}"
                             + ("" if other[1] in kept_labels else " (the same content)"))
    if len(kept) > 1:
        res.problems.append(f"{len(kept)} different files for {nb}.ipynb; took the newest, {taken[1]}")
    return taken


def _collect_student(course: Course, student: str, items: list, notebooks: list[str], res: Collected) -> None:
    chosen = _candidates(items, notebooks, res)
    dest = course.folder("submitted", student)
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    for nb, candidates in sorted(chosen.items()):
        taken = _pick(nb, candidates, res)
        if taken is None:
            continue
        mtime, label, data = taken
        (dest / f"{nb}.ipynb").write_bytes(data)
        res.notebooks[nb] = label
        res.times[nb] = mtime
        res.files.append(f"taken {label} as {nb}.ipynb")
    missing = [nb for nb in notebooks if nb not in res.notebooks]
    if missing and not res.unreadable:
        res.problems.append("not submitted: " + ", ".join(f"{m}.ipynb" for m in missing))
    if not res.notebooks and not res.unreadable:
        res.unreadable = True
        res.problems.append("no assignment notebook found")
