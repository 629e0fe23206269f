"""Merging graded shards into one grading folder (``python -m grader merge-shards``).

Each shard (grader/batch.py ``prepare_shard``: one task of a Slurm job array or a Kubernetes Indexed
Job) grades its students into a folder of its own; :func:`merge_shards` checks that the shards agree
and builds the class's one gradebook, status files and autograded notebooks, as one local
``autograde`` run would have left them. It sits above grader/scoring.py (whose ``merge`` it uses),
which sits above grader/batch.py (fingerprints, the split, the seed).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

from ..results import NotebookResult
from ..scoring import merge
from ..batch import (BATCH_PARTS, MANIFEST, ShardError, _adopt_seed, _shard_folders, _short, batch_fingerprint,
                    invalidate, is_finished, shard_of, student_fingerprint, what_changed)
from ..course import COURSE_ID, Course, add_students, sync_assignment


def _notebook_result(shard: Course, student: str, notebook: str, scratch: Path):
    """A NotebookResult as the shard merged it into its gradebook: every grade and comment, and a
    scratch copy of its autograded notebook (grader.scoring.merge cleans what it copies from it)."""
    from nbgrader.api import Gradebook, MissingEntry

    result = NotebookResult(student, notebook, grades={})
    with Gradebook(shard.db_url, COURSE_ID) as gb:
        try:
            sub = gb.find_submission_notebook(notebook, shard.assignment, student)
        except MissingEntry:
            result.grades = None
            return result
        for grade in sub.grades:
            result.grades[grade.cell.name] = (grade.auto_score, grade.needs_manual_grade)
        for comment in sub.comments:
            if comment.auto_comment is not None:
                result.comments[comment.cell.name] = comment.auto_comment
    executed = shard.folder("autograded", student) / f"{notebook}.ipynb"
    if executed.exists():
        result.autograded = scratch / f"{student}-{notebook}.ipynb"
        shutil.copyfile(executed, result.autograded)
    return result


def _links_in(folder: Path) -> list[Path]:
    """Every symbolic link in ``folder`` (the folder itself included), links not followed."""
    import os

    found = [folder] if folder.is_symlink() else []
    for top, dirs, files in os.walk(folder):
        found += [Path(top) / name for name in dirs + files if (Path(top) / name).is_symlink()]
    return found


def _grade_disagreements(shard: Course, student: str, status: dict, notebooks: list[str]) -> list[str]:
    """Where a shard's gradebook disagrees with the judge's points in the student's status file: each
    test cell the judge scored must hold exactly those points, and a notebook the judge did not grade
    (unreadable, not submitted) no autograded point at all."""
    from nbgrader.api import Gradebook, MissingEntry

    entries = status.get("notebooks") if isinstance(status.get("notebooks"), dict) else {}
    found = []
    with Gradebook(shard.db_url, COURSE_ID) as gb:
        for nb in notebooks:
            entry = entries.get(nb) if isinstance(entries.get(nb), dict) else {}
            judged = entry.get("judge") if isinstance(entry.get("judge"), dict) else None
            points = judged.get("points") if judged and isinstance(judged.get("points"), dict) else None
            try:
                sub = gb.find_submission_notebook(nb, shard.assignment, student)
            except MissingEntry:
                if points and any(v for v in points.values()):
                    found.append(f"{student} {nb}: no gradebook entry, the status file gives points")
                continue
            scores = {g.cell.name: g.auto_score for g in sub.grades}
            if points is None:
                odd = sorted(name for name, score in scores.items() if score)
                if odd:
                    found.append(f"{student} {nb}: autograded points in the gradebook ({', '.join(odd[:3])}) "
                                 "where the judge graded nothing")
                continue
            for cell, want in points.items():
                got = scores.get(cell)
                if not isinstance(want, (int, float)) or got is None or abs(float(got) - float(want)) > 1e-6:
                    found.append(f"{student} {nb} {cell}: gradebook {got}, judge {want}")
    return found


def merge_shards(course: Course, dirs: list[Path] | None = None, allow_missing: bool = False,
                 progress=print) -> dict[int, list[str]]:
    """Merge shard folders (``dirs``: shard folders or folders of them; default ``grading/shards``) into
    ``course``: its gradebook, status files and autograded notebooks, as one local ``autograde`` run
    would have left them. Refuses (ShardError) shards of different splits, seeds, assignments, grader
    code or settings, and, unless ``allow_missing``, any student of ``grading/submitted`` whose shard has
    not graded their present submission (the message names them per shard). Returns shard -> students merged."""
    folders = _shard_folders(dirs or [course.grading / "shards"])
    if not folders:
        raise ShardError(f"no shard folders (with {MANIFEST}) in "
                         + ", ".join(str(d) for d in dirs or [course.grading / "shards"]))
    manifests = sorted((json.loads((f / MANIFEST).read_text(encoding="utf-8")) | {"folder": f} for f in folders),
                       key=lambda m: (m["count"], m["index"]))
    counts = sorted({m["count"] for m in manifests})
    if len(counts) > 1:
        raise ShardError(f"shards of different splits ({' and '.join(map(str, counts))} shards): "
                         "pass the folders of one split")
    count = counts[0]
    by_index: dict[int, Path] = {}
    for m in manifests:
        if m["index"] in by_index:
            raise ShardError(f"shard {m['index']} of {count} twice: {by_index[m['index']]} and {m['folder']}")
        by_index[m["index"]] = m["folder"]
    for part, label in BATCH_PARTS.items():
        values = {json.dumps(m["batch"][part], sort_keys=True) for m in manifests}
        if len(values) > 1:
            raise ShardError(f"shards graded with different {label}: " + "; ".join(
                f"shard {m['index']}: {_short(m['batch'][part])}" for m in manifests)
                + ": grade the odd ones again (every shard reads the class's grading/judge-seed.txt and source)")
    batch = manifests[0]["batch"]
    seed = _adopt_seed(course.grading, manifests[0]["seed"])
    notebooks = course.notebook_names()
    current = batch_fingerprint(course, notebooks, seed, batch["settings"])
    for part, label in BATCH_PARTS.items():
        if current[part] != batch[part]:
            raise ShardError(f"the shards were graded with other {label} ({_short(batch[part])}) than "
                             f"{course.grading} has now ({_short(current[part])}): grade them again")
    missing: dict[int, list[str]] = {}
    done: dict[int, list[tuple[str, dict]]] = {}
    for s in course.students():
        index = shard_of(s, count)
        expected = student_fingerprint(course, s, notebooks, current)
        folder = by_index.get(index)
        status = Course(grading=folder, source=course.source, assignment=course.assignment).read_json("status", s) if folder else {}
        if is_finished(status, expected):
            done.setdefault(index, []).append((s, status))
        else:
            why = what_changed(status, expected)
            missing.setdefault(index, []).append(s if why == "not graded" else f"{s} ({why})")
    links = [p for f in folders for p in _links_in(Path(f))]
    if links:
        raise ShardError("shard folders hold symbolic links, which merge-shards never follows (grade those shards "
                         "again into plain folders): " + ", ".join(str(p) for p in links[:10])
                         + (f" and {len(links) - 10} more" if len(links) > 10 else ""))
    disagree = [line for index, pairs in sorted(done.items()) for s, status in pairs
                for line in _grade_disagreements(Course(grading=by_index[index], source=course.source, assignment=course.assignment), s, status,
                                                 notebooks)]
    if disagree:
        raise ShardError("shard gradebooks disagree with their status files' judge records (was a gradebook edited "
                         "or copied from another run? grade those shards again):\n  " + "\n  ".join(disagree[:20])
                         + (f"\n  and {len(disagree) - 20} more" if len(disagree) > 20 else ""))
    if missing:
        lines = [f"shard {index}/{count} {by_index.get(index) or '(no shard folder: never started)'}: "
                 f"{len(names)} missing: {', '.join(names)}" for index, names in sorted(missing.items())]
        message = ("students that their shard has not graded (rerun those shards: they resume):\n  "
                   + "\n  ".join(lines))
        if not allow_missing:
            raise ShardError(message)
        progress(message + "\n(--allow-missing: merging the others)")

    sync_assignment(course)
    add_students(course, [s for pairs in done.values() for s, _ in pairs])
    merged: dict[int, list[str]] = {}
    with tempfile.TemporaryDirectory(prefix="las-merge-") as scratch:
        scratch = Path(scratch)
        for index in sorted(done):
            shard = Course(grading=by_index[index], source=course.source, assignment=course.assignment)
            for s, status in done[index]:
                invalidate(course, s)
                for nb in notebooks:
                    merge(course, _notebook_result(shard, s, nb, scratch))
                course.write_json("status", s, status)   # last: the student counts as finished from here
                merged.setdefault(index, []).append(s)
            progress(f"shard {index}/{count}: merged {len(merged.get(index, []))} students from {shard.grading}")
    return merged
