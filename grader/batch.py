"""The batch around the per-student job: when a student counts as graded (resume), and shards (clusters).

**Resume.** ``autograde`` writes a student's status file (``grading/status/<student>.json``) only after
every notebook of theirs is merged into the gradebook, and stores in it a *fingerprint* of what was
graded (:func:`student_fingerprint`): the sha256 of each submitted notebook and of the collect report,
the source notebooks, the grader's own code, the judge's seed and the settings that change a grade. A
student whose status file carries the fingerprint of the present inputs is finished; anyone else (no
status file, an older one, a re-collected submission, a changed assignment or grader, a run killed
between the merge and the status file) is graded again. ``--regrade`` grades everyone again.

**Shards.** ``autograde --shard I/N`` grades the students that :func:`shard_of` puts in shard I into a
grading folder of its own, ``grading/shards/<I>-of-<N>/`` (its own gradebook, status files and
autograded notebooks, a copy of each student's submission, ``shard.json``), with the class's judge
seed; ``merge-shards`` checks that the shards agree (seed, assignment, grader, settings, split) and that
each student's shard has graded exactly the submission in ``grading/submitted``, then merges them into
``grading/`` as a local run would have written it. ``--shard auto`` reads the index from a Slurm job
array (``SLURM_ARRAY_TASK_ID``) or a Kubernetes Indexed Job (``JOB_COMPLETION_INDEX``); the launchers are
in ``grader/extras/cluster/``.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import tempfile
from pathlib import Path

from . import GRADER_DIR, ROOT
from .course import Course, write_atomic

#: Settings fields that can change a grade (limits, sandbox): a change regrades. Workers and threads
#: change only the speed.
GRADE_SETTINGS = ("cell_timeout", "notebook_timeout", "mem_gb", "judge_budget", "load_seconds",
                  "max_output_lines", "full_run")   # full_run changes what the executed notebook shows
MANIFEST = "shard.json"
#: What every shard of one split must share, and what the words for it are in a refusal.
BATCH_PARTS = {"seed": "judge seeds", "assignment": "assignments (source notebooks)", "grader": "grader code",
               "settings": "settings"}


# ----------------------------------------------------------------------------- fingerprints
def _sha256(path: Path) -> str | None:
    """sha256 of a file's bytes, or None when it is absent or unreadable."""
    h = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    except OSError:
        return None
    return h.hexdigest()


def _tree_digest(files: list[tuple[str, Path]]) -> str:
    """One sha256 over (name, content digest) pairs, in the given order."""
    h = hashlib.sha256()
    for name, path in files:
        h.update(f"{name}\0{_sha256(path)}\n".encode())
    return h.hexdigest()


def grader_digest() -> str:
    """The code that grades: every .py file of grader/ (but its QA mutants) and of utils/ (which the
    notebooks import). Grades from another version of the grader are not reused."""
    files = []
    for base in (GRADER_DIR, ROOT / "utils"):
        for path in sorted(base.rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if not rel.startswith("grader/mutants/"):
                files.append((rel, path))
    return _tree_digest(files)


def grade_settings(settings) -> dict:
    """The grade-changing settings of a grader.results.Settings, as JSON values."""
    out = {name: getattr(settings, name) for name in GRADE_SETTINGS if hasattr(settings, name)}
    out["sandbox"] = settings.mode()
    return out


def seed_digest(seed: int) -> str:
    """The judge seed as the fingerprints hold it: a digest, from which the seed cannot be read back."""
    return hashlib.sha256(f"las-judge-seed:{int(seed)}".encode()).hexdigest()


def batch_fingerprint(course: Course, notebooks: list[str], seed: int, settings: dict,
                      grader: str | None = None) -> dict:
    """What every student of a batch shares: the judge's seed, the source notebooks (names and
    contents), the grader's code and the grade-changing ``settings`` (see :func:`grade_settings`)."""
    return {"seed": seed_digest(seed),   # never the seed itself: status files are shown to TAs and pages
            "assignment": _tree_digest([(nb, course.source / f"{nb}.ipynb") for nb in sorted(notebooks)]),
            "grader": grader or grader_digest(),
            "settings": dict(sorted(settings.items()))}


def student_fingerprint(course: Course, student: str, notebooks: list[str], batch: dict) -> dict:
    """``batch`` plus this student's inputs: each submitted notebook's sha256 (None: not submitted) and
    the collect report's (its problems go into the status). ``digest`` sums it all up."""
    fp = dict(batch)
    fp["submitted"] = {nb: _sha256(course.folder("submitted", student) / f"{nb}.ipynb") for nb in sorted(notebooks)}
    fp["collect"] = _sha256(course.status_path("collect", student))
    fp["digest"] = hashlib.sha256(json.dumps(fp, sort_keys=True).encode()).hexdigest()
    return fp


def is_finished(status: dict, fingerprint: dict) -> bool:
    """Whether a status file records a finished grading of exactly these inputs."""
    recorded = status.get("fingerprint") if isinstance(status, dict) else None
    return isinstance(recorded, dict) and recorded.get("digest") == fingerprint["digest"]


def what_changed(status: dict, fingerprint: dict) -> str:
    """Why a student is not finished, in a few words (for the merge's report)."""
    recorded = status.get("fingerprint") if isinstance(status, dict) else None
    if not status:
        return "not graded"
    if not isinstance(recorded, dict):
        return "not finished (killed, or the grader failed)"
    parts = [k for k in ("submitted", "collect", "assignment", "seed", "grader", "settings")
             if recorded.get(k) != fingerprint.get(k)]
    return "graded with another " + "/".join(parts) if parts else "not finished"


def _short(value) -> str:
    """A fingerprint part for a message: digests cut to 12 characters."""
    return value[:12] if isinstance(value, str) and len(value) == 64 else json.dumps(value, sort_keys=True)


def _adopt_seed(grading: Path, seed: int) -> int:
    """The grading folder's judge seed; ``seed`` written there first if it has none."""
    from . import judge as judging

    path = Path(grading) / "judge-seed.txt"
    if not path.exists():
        _link_new(path, f"{seed}\n")
    return judging.judge_seed(path.parent)


def _link_new(path: Path, text: str) -> None:
    """Create ``path`` holding ``text`` atomically, unless it exists (then the first writer wins)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.link(tmp, path)
    except FileExistsError:
        pass
    finally:
        os.unlink(tmp)


def ensure_seed(grading: Path) -> int:
    """The grading folder's judge seed (grader/judge.py judge_seed), created atomically if absent: N
    shards that start at once on N nodes all end up with the one seed the first of them wrote."""
    from . import judge as judging

    path = Path(grading) / "judge-seed.txt"
    if not path.exists():
        _link_new(path, f"{secrets.randbelow(2 ** 62)}\n")
    return judging.judge_seed(path.parent)


# ----------------------------------------------------------------------------- shards
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
    seed_file = folder / "judge-seed.txt"
    if seed_file.exists() and seed_file.read_text().strip() != str(seed):
        raise ShardError(f"{folder} was graded with judge seed {seed_file.read_text().strip()}, the class's is {seed} "
                         f"({course.grading / 'judge-seed.txt'}): remove the shard folder and grade it again")
    if not seed_file.exists():
        tmp = folder / ".judge-seed.txt.tmp"
        tmp.write_text(f"{seed}\n")
        tmp.replace(seed_file)
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


def _shard_folders(dirs: list[Path]) -> list[Path]:
    """Each of ``dirs`` that holds a shard.json, and the shard folders directly inside the others."""
    found = []
    for d in dirs:
        d = Path(d)
        if (d / MANIFEST).is_file():
            found.append(d)
        elif d.is_dir():
            found += sorted(p for p in d.iterdir() if (p / MANIFEST).is_file())
    return found


def invalidate(course: Course, student: str) -> None:
    """Drop the fingerprint from a student's status file before their grades change, so that a run
    killed half-way through merging them grades them again instead of trusting the old status."""
    status = course.read_json("status", student)
    if isinstance(status, dict) and status.get("fingerprint"):
        status.pop("fingerprint")
        course.write_json("status", student, status)
