"""Import submissions into nbgrader's layout: ``grading/submitted/<student>/ex01/<notebook>.ipynb``.

``PATH`` may hold, in any mix:

* ``<student>.zip`` (LMS download, one archive per student; notebooks anywhere inside),
* ``<student>/`` folders with the notebooks (at any depth),
* loose ``<student>__<notebook>.ipynb`` files.

A file is matched to an assignment notebook by name (``task1_infonce (1).ipynb`` and
``task1_infonce-Copy1.ipynb`` count too; if several match, the newest wins and the report says
so). Nothing is extracted to disk except the matched notebooks, each capped in size, so archive
path tricks and zip bombs go nowhere. Problems are written to ``grading/collect/<student>.json``
and reported; a student whose archive cannot be opened is marked unreadable.
"""

from __future__ import annotations

import re
import shutil
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from .course import Course, valid_student_id
from .submissions import MAX_NOTEBOOK_BYTES


@dataclass
class Collected:
    student: str
    notebooks: dict[str, str] = field(default_factory=dict)   # notebook stem -> where it came from
    problems: list[str] = field(default_factory=list)
    unreadable: bool = False


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


def _sources(path: Path, notebooks: list[str]) -> dict[str, list]:
    """student -> list of (kind, location) found under PATH."""
    found: dict[str, list] = {}
    for entry in sorted(path.iterdir()):
        if entry.name.startswith("."):
            continue
        if entry.is_file() and entry.suffix.lower() == ".zip":
            found.setdefault(entry.stem, []).append(("zip", entry))
        elif entry.is_dir():
            found.setdefault(entry.name, []).append(("dir", entry))
        elif entry.is_file() and entry.suffix == ".ipynb" and "__" in entry.stem:
            student, _, rest = entry.stem.partition("__")
            found.setdefault(student, []).append(("file", entry, rest + ".ipynb"))
        else:
            found.setdefault("?", []).append(("ignored", entry))
    return found


def collect(course: Course, path: Path) -> list[Collected]:
    path = Path(path)
    if not path.is_dir():
        raise FileNotFoundError(f"{path} is not a folder of submissions")
    notebooks = course.notebook_names()
    results = []
    for student, items in _sources(path, notebooks).items():
        if student == "?":
            for _, entry in items:
                results.append(Collected(entry.name, problems=[f"ignored {entry.name}: not a zip, folder or "
                                                                 "<student>__<notebook>.ipynb"], unreadable=True))
            continue
        res = Collected(student)
        results.append(res)
        if not valid_student_id(student):
            res.problems.append(f"{student!r} is not a usable student id (letters, digits, ._@+- only); skipped")
            res.unreadable = True
            continue
        chosen: dict[str, tuple] = {}   # notebook -> (mtime, label, reader)
        for item in items:
            kind, entry = item[0], item[1]
            if kind == "zip":
                try:
                    with zipfile.ZipFile(entry) as zf:
                        for info in zf.infolist():
                            if info.is_dir() or "__MACOSX" in info.filename or ".ipynb_checkpoints" in info.filename:
                                continue
                            nb = _match(info.filename, notebooks)
                            if nb is None:
                                continue
                            if info.file_size > MAX_NOTEBOOK_BYTES:
                                res.problems.append(f"{info.filename} in {entry.name} is too large "
                                                    f"({info.file_size / 1024 ** 2:.0f} MB); skipped")
                                continue
                            mtime = time.mktime(info.date_time + (0, 0, -1))
                            chosen.setdefault(nb, []).append(
                                (mtime, f"{entry.name}:{info.filename}",
                                 lambda zpath=entry, member=info.filename: _read_zip(zpath, member)))
                except (zipfile.BadZipFile, OSError, RuntimeError, ValueError) as exc:
                    res.problems.append(f"cannot open {entry.name}: {exc.__class__.__name__}: {exc}")
                    res.unreadable = True
            else:
                files = [entry] if kind == "file" else [p for p in entry.rglob("*.ipynb")
                                                          if ".ipynb_checkpoints" not in p.parts]
                for f in files:
                    nb = _match(item[2] if kind == "file" else f.name, notebooks)
                    if nb is None:
                        continue
                    chosen.setdefault(nb, []).append((f.stat().st_mtime, str(f.relative_to(path)),
                                                      lambda f=f: f.read_bytes()[: MAX_NOTEBOOK_BYTES + 1]))
        dest = course.folder("submitted", student)
        if dest.exists():
            shutil.rmtree(dest)
        dest.mkdir(parents=True)
        for nb, candidates in sorted(chosen.items()):
            candidates.sort(key=lambda c: c[0])
            _, label, reader = candidates[-1]
            if len(candidates) > 1:
                res.problems.append(f"{len(candidates)} files for {nb}.ipynb; took the newest, {label}")
            try:
                (dest / f"{nb}.ipynb").write_bytes(reader())
                res.notebooks[nb] = label
            except (OSError, zipfile.BadZipFile, RuntimeError, ValueError) as exc:
                res.problems.append(f"cannot read {label}: {exc}")
        missing = [nb for nb in notebooks if nb not in res.notebooks]
        if missing and not res.unreadable:
            res.problems.append("not submitted: " + ", ".join(f"{m}.ipynb" for m in missing))
        if not res.notebooks and not res.unreadable:
            res.unreadable = True
            res.problems.append("no assignment notebook found")
        course.write_json("collect", student, {"notebooks": res.notebooks, "problems": res.problems,
                                               "unreadable": res.unreadable})
    return results


def _read_zip(zpath: Path, member: str) -> bytes:
    with zipfile.ZipFile(zpath) as zf, zf.open(member) as handle:
        data = handle.read(MAX_NOTEBOOK_BYTES + 1)  # never inflate more than the cap
    if len(data) > MAX_NOTEBOOK_BYTES:
        raise ValueError("larger than the size limit once decompressed")
    return data
