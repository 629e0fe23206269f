"""Grading a class on many machines: the split, one shard's folder (``autograde --shard``) and the merge
(``python -m grader merge-shards``).

Each shard (:func:`prepare_shard`: one task of a Slurm job array or a Kubernetes Indexed
Job) grades its students into a folder of its own; :func:`merge_shards` checks that the shards agree
and builds the class's one gradebook, status files and autograded notebooks, as one local
``autograde`` run would have left them. It sits above grader/scoring.py (whose ``merge`` it uses),
which sits above grader/batch.py (fingerprints, the split, the seed).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

from nbgrader.api import Gradebook, MissingEntry

from ..results import NotebookResult
from ..scoring import merge
from ..batch import batch_fingerprint, grade_settings, invalidate, is_finished, student_fingerprint, what_changed
from ..course import COURSE_ID, Course, add_students, sync_assignment, write_atomic
from ..seed import SEED_FILE, adopt_seed, ensure_seed, give_seed, read_seed, seed_digest

MANIFEST = "shard.json"
#: What every shard of one split must share, and what the words for it are in a refusal.
BATCH_PARTS = {"seed": "judge seeds", "assignment": "assignments (source notebooks)", "grader": "grader code",
               "settings": "settings"}



def short(value) -> str:
    """A fingerprint part for a message: digests cut to 12 characters."""
    return value[:12] if isinstance(value, str) and len(value) == 64 else json.dumps(value, sort_keys=True)



def shard_of(student: str, count: int) -> int:
    """The shard (0..count-1) of a student: sha256 of the id, modulo ``count``. A hash rather than
    position in the sorted class, so that a student's shard depends on nothing but their id and N: a late
    submission or a withdrawn student moves nobody else, and shards already graded stay valid."""
    return int.from_bytes(hashlib.sha256(student.encode("utf-8", "surrogateescape")).digest()[:8], "big") % count


def split(students: list[str], count: int) -> list[list[str]]:
    """``students`` in ``count`` shards (each sorted)."""
    shards: list[list[str]] = [[] for _ in range(count)]
    for s in sorted(students):
        shards[shard_of(s, count)].append(s)
    return shards


class ShardError(RuntimeError):
    """A shard argument, environment or folder that cannot be used; the message says why."""


def parse_shard(text: str, env: dict | None = None) -> tuple[int, int, str]:
    """``"I/N"`` or ``"auto"`` -> (index, count, where they came from). ``auto`` reads

    * a Slurm job array: index SLURM_ARRAY_TASK_ID, count LAS_SHARD_COUNT if set, else
      SLURM_ARRAY_TASK_COUNT (else SLURM_ARRAY_TASK_MAX + 1). The array must be ``--array=0-<N-1>``;
      to rerun one task alone (``--array=3``, whose own count is 1) set LAS_SHARD_COUNT=N;
    * a Kubernetes Indexed Job: index JOB_COMPLETION_INDEX, count LAS_SHARD_COUNT (the Job's
      ``completions``; grader/extras/cluster/k8s_indexed_job.yaml sets it)."""
    env = os.environ if env is None else env
    if text != "auto":
        try:
            index, count = (int(p) for p in text.split("/"))
        except ValueError:
            raise ShardError(f"--shard {text!r}: expected I/N (e.g. 0/4) or auto") from None
        where = f"--shard {text}"
    else:
        if env.get("SLURM_ARRAY_TASK_ID"):
            names = ["SLURM_ARRAY_TASK_ID", "LAS_SHARD_COUNT", "SLURM_ARRAY_TASK_COUNT", "SLURM_ARRAY_TASK_MAX"]
        elif env.get("JOB_COMPLETION_INDEX"):
            names = ["JOB_COMPLETION_INDEX", "LAS_SHARD_COUNT"]
        else:
            raise ShardError("--shard auto: no SLURM_ARRAY_TASK_ID (Slurm job array) or JOB_COMPLETION_INDEX "
                             "(Kubernetes Indexed Job) in the environment; pass --shard I/N")
        found = {k: env[k] for k in names if env.get(k)}
        counts = [int(found[k]) + (k == "SLURM_ARRAY_TASK_MAX") for k in names[1:] if k in found]
        if not counts:
            raise ShardError(f"--shard auto: {names[0]} is set but not the number of shards: set LAS_SHARD_COUNT")
        # name only what was used: the index and the first count found
        used = [names[0], next(k for k in names[1:] if k in found)]
        where = ", ".join(f"{k}={found[k]}" for k in used)
        index, count = int(found[names[0]]), counts[0]
        if "LAS_SHARD_COUNT" not in found and int(env.get("SLURM_ARRAY_TASK_MIN") or 0) != 0:
            raise ShardError(f"--shard auto ({where}): the array starts at {env['SLURM_ARRAY_TASK_MIN']}; submit "
                             "--array=0-<N-1>, or set LAS_SHARD_COUNT=N to rerun some of its tasks")
    if not (count >= 1 and 0 <= index < count):
        raise ShardError(f"shard {index} of {count} ({where}): the index must be 0..{count - 1} (a Slurm array "
                         "is --array=0-<N-1>, without a step)")
    return index, count, where


def shard_folder(root: Path, index: int, count: int) -> Path:
    return Path(root) / f"{index}-of-{count}"


def _write_json(path: Path, data: dict) -> None:
    write_atomic(path, json.dumps(data, indent=1, sort_keys=True))


def _replace_tree(src: Path, dst: Path) -> None:
    """``dst`` becomes a copy of ``src`` (removed when ``src`` is absent)."""
    if dst.exists():
        shutil.rmtree(dst)
    if src.is_dir():
        shutil.copytree(src, dst, symlinks=True)


def prepare_shard(course: Course, index: int, count: int, root: Path | None = None,
                  only: list[str] | None = None, settings=None) -> tuple[Course, list[str]]:  # settings: grader.results.Settings
    """Set up shard ``index`` of ``count`` of the class in ``course``: its folder (default
    ``grading/shards/<I>-of-<N>``) with the class's judge seed, a copy of each of its students'
    submission and collect report, and ``shard.json``. Returns (the shard's course, its students).
    ``only``: a subset of the class (``--student``). Refuses a folder graded with another seed."""
    everyone = course.students()
    unknown = [s for s in only or [] if s not in everyone]
    if unknown:
        raise FileNotFoundError(f"no submission folder for {', '.join(unknown)} under {course.grading / 'submitted'}")
    seed = ensure_seed(course.grading)
    folder = shard_folder(root or course.grading / "shards", index, count)
    shard = Course(grading=folder, source=course.source, assignment=course.assignment)
    mine = [s for s in split(everyone, count)[index] if not only or s in only]
    folder.mkdir(parents=True, exist_ok=True)
    try:
        give_seed(folder, seed, course.grading)
    except ValueError as refused:
        raise ShardError(str(refused)) from None
    for s in mine:
        _replace_tree(course.grading / "submitted" / s, folder / "submitted" / s)
        report, copy = course.status_path("collect", s), shard.status_path("collect", s)
        if report.exists():
            copy.parent.mkdir(exist_ok=True)
            shutil.copyfile(report, copy.with_suffix(".tmp"))
            copy.with_suffix(".tmp").replace(copy)
        else:
            copy.unlink(missing_ok=True)
    batch = batch_fingerprint(course, course.notebook_names(), seed, grade_settings(settings))
    _write_json(folder / MANIFEST, {"index": index, "count": count, "students": mine, "batch": batch,
                                    "seed": int(seed)})   # staff-only: merge-shards adopts it
    return shard, mine


def shard_folders(dirs: list[Path]) -> list[Path]:
    """Each of ``dirs`` that holds a shard.json, and the shard folders directly inside the others."""
    found = []
    for d in dirs:
        d = Path(d)
        if (d / MANIFEST).is_file():
            found.append(d)
        elif d.is_dir():
            found += sorted(p for p in d.iterdir() if (p / MANIFEST).is_file())
    return found




def _notebook_result(shard: Course, student: str, notebook: str, scratch: Path):
    """A NotebookResult as the shard merged it into its gradebook: every grade and comment, and a
    scratch copy of its autograded notebook (grader.scoring.merge cleans what it copies from it)."""
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
    found = [folder] if folder.is_symlink() else []
    for top, dirs, files in os.walk(folder):
        found += [Path(top) / name for name in dirs + files if (Path(top) / name).is_symlink()]
    return found


def _hard_links(folder: Path) -> dict[str, list[Path]]:
    """Every file in ``folder`` with more than one hard link (it may be another student's file, or the
    class's own, under another name), by the student whose folder or status file holds it ("": shared)."""
    found: dict[str, list[Path]] = {}
    for top, _, files in os.walk(folder):
        for name in files:
            path = Path(top) / name
            if path.is_symlink() or path.stat().st_nlink == 1:
                continue
            parts = path.relative_to(folder).parts   # <kind>/<student>/... or status/<student>.json
            student = parts[1].removesuffix(".json") if len(parts) > 2 or parts[0] in ("status", "collect") else ""
            found.setdefault(student, []).append(path)
    return found


def _unverified(shard: Course, student: str, notebooks: list[str], expected: dict, links: list[Path]) -> str | None:
    """Why a student a shard says it graded must not be merged (None: nothing found). The shard's status
    file is the shard's word only: what the shard graded must be the course's own submission and collect
    report, byte for byte (its copies hashed here, as ``expected`` hashed the course's), graded with the
    class's judge seed, and no file of the student's may be a hard link."""
    if links:
        return f"{links[0]} has {links[0].stat().st_nlink} hard links (another student's file under this name?)"
    if seed_digest(read_seed(shard.grading) or 0) != expected["seed"]:
        return f"{shard.grading / SEED_FILE} is not the class's judge seed"
    graded = student_fingerprint(shard, student, notebooks, expected)
    changed = [f"submitted/{student}/{shard.assignment}/{nb}.ipynb" for nb in notebooks
               if graded["submitted"][nb] != expected["submitted"][nb]]
    changed += [f"collect/{student}.json"] if graded["collect"] != expected["collect"] else []
    if changed:
        return (f"the shard's {', '.join(changed)} differs from the course's, which its status file claims it graded "
                "(changed after the shard was prepared, or forged)")
    return None


def _grade_disagreements(shard: Course, student: str, status: dict, notebooks: list[str]) -> list[str]:
    """Where a shard's gradebook disagrees with the judge's points in the student's status file: each
    test cell the judge scored must hold exactly those points, and a notebook the judge did not grade
    (unreadable, not submitted) no autograded point at all."""
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
    not graded their present submission (the message names them per shard). A shard's status files are only
    its word: a student whose shard's copies are not the course's own inputs, or hold a hard link, or whose
    shard has another judge seed file, is left unmerged with one ``NOT MERGED`` line (:func:`_unverified`);
    the others merge. Returns shard -> students merged."""
    folders = shard_folders(dirs or [course.grading / "shards"])
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
                f"shard {m['index']}: {short(m['batch'][part])}" for m in manifests)
                + f": grade the odd ones again (every shard reads the class's grading/{SEED_FILE} and source)")
    batch = manifests[0]["batch"]
    seed = adopt_seed(course.grading, manifests[0]["seed"])
    notebooks = course.notebook_names()
    current = batch_fingerprint(course, notebooks, seed, batch["settings"])
    for part, label in BATCH_PARTS.items():
        if current[part] != batch[part]:
            raise ShardError(f"the shards were graded with other {label} ({short(batch[part])}) than "
                             f"{course.grading} has now ({short(current[part])}): grade them again")
    missing: dict[int, list[str]] = {}
    done: dict[int, list[tuple[str, dict]]] = {}
    fingerprints = {}   # of the course's own inputs: what each shard must have graded
    for s in course.students():
        index = shard_of(s, count)
        expected = fingerprints[s] = student_fingerprint(course, s, notebooks, current)
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
    hard = {index: _hard_links(by_index[index]) for index in done}

    def shard_course(index: int) -> Course:
        return Course(grading=by_index[index], source=course.source, assignment=course.assignment)
    refused = []
    for index, pairs in sorted(done.items()):
        if hard[index].get(""):
            raise ShardError(f"shard {index}/{count} {by_index[index]}: files with more than one hard link (merge-shards "
                             "trusts no file that is also elsewhere; grade the shard again into a fresh folder): "
                             + ", ".join(str(p) for p in hard[index][""][:10]))
        shard = shard_course(index)
        for s, status in list(pairs):
            why = _unverified(shard, s, notebooks, fingerprints[s], hard[index].get(s, []))
            if why:
                pairs.remove((s, status))
                refused.append(f"NOT MERGED: {s} (shard {index}/{count} {by_index[index]}): {why}. Grade them again: "
                               f"python -m grader autograde --shard {index}/{count} --student {s} --regrade, "
                               "then merge-shards")
    for line in refused:
        progress(line)
    disagree = [line for index, pairs in sorted(done.items()) for s, status in pairs
                for line in _grade_disagreements(shard_course(index), s, status, notebooks)]
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
            shard = shard_course(index)
            for s, status in done[index]:
                invalidate(course, s)
                for nb in notebooks:
                    merge(course, _notebook_result(shard, s, nb, scratch))
                course.write_json("status", s, status)   # last: the student counts as finished from here
                merged.setdefault(index, []).append(s)
            progress(f"shard {index}/{count}: merged {len(merged.get(index, []))} students from {shard.grading}")
    return merged
