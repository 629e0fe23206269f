"""The batch around the per-student job: when a student counts as graded (resume).

**Resume.** ``autograde`` writes a student's status file (``grading/status/<student>.json``) only after every
notebook of theirs is merged into the gradebook, with a *fingerprint* of what was graded
(:func:`student_fingerprint`): the sha256 of each submitted notebook and of the collect report, the source
notebooks, the grader's own code, the judge's seed and the settings that change a grade. A student whose status
file carries the fingerprint of the present inputs is finished; anyone else (a re-collected submission, a changed
grader, a run killed between the merge and the status file, ...) is graded again; ``--regrade`` grades everyone.
Shards are grader/extras/shards.py; the judge seed, which the fingerprint holds as a digest, is grader/seed.py.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from . import GRADER_DIR, ROOT
from .course import Course
from .seed import seed_digest

#: Settings fields that can change a grade (limits, sandbox): a change regrades. Workers and threads
#: change only the speed.
GRADE_SETTINGS = ("cell_timeout", "notebook_timeout", "mem_gb", "judge_budget", "load_seconds",
                  "max_output_lines", "full_run")   # full_run changes what the executed notebook shows


# ----------------------------------------------------------------------------- fingerprints
def _sha256(path: Path) -> str | None:
    """sha256 of a file's bytes, or None when it is absent or unreadable."""
    try:
        with open(path, "rb") as f:
            return hashlib.file_digest(f, "sha256").hexdigest()   # in blocks: a submission may be large
    except OSError:
        return None


def _tree_digest(files: list[tuple[str, Path]]) -> str:
    """One sha256 over (name, content digest) pairs, in the given order."""
    h = hashlib.sha256()
    for name, path in files:
        h.update(f"{name}\0{_sha256(path)}\n".encode())
    return h.hexdigest()


def grader_digest() -> str:
    """The code that grades: every .py file of grader/ (but its QA mutants) and of utils/ (which the
    notebooks import). Grades from another version of the grader are not reused."""
    files = [(path.relative_to(ROOT).as_posix(), path) for base in (GRADER_DIR, ROOT / "utils")
             for path in sorted(base.rglob("*.py"))]
    return _tree_digest([(rel, path) for rel, path in files if not rel.startswith("grader/mutants/")])


def grade_settings(settings) -> dict:
    """The grade-changing settings of a grader.results.Settings, as JSON values."""
    out = {name: getattr(settings, name) for name in GRADE_SETTINGS if hasattr(settings, name)}
    out["sandbox"] = settings.mode()
    return out


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


def invalidate(course: Course, student: str) -> None:
    """Drop the fingerprint from a student's status file before their grades change, so that a run
    killed half-way through merging them grades them again instead of trusting the old status."""
    status = course.read_json("status", student)
    if isinstance(status, dict) and status.get("fingerprint"):
        status.pop("fingerprint")
        course.write_json("status", student, status)
