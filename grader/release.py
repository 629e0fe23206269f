"""Regenerate the student release (notebooks/ex01) from the nbgrader source (solutions/ex01)."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path

from . import ASSIGNMENT, GRADER_DIR, ROOT

LEAK_MARKERS = ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS", "END HIDDEN TESTS")


@contextmanager
def _lock(name: str):
    """Serialise concurrent releases (two terminals, parallel test workers)."""
    lock_dir = ROOT / "build"
    lock_dir.mkdir(exist_ok=True)
    with open(lock_dir / f".{name}.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def generate_release(out_dir: Path | None = None) -> Path:
    """Run ``nbgrader generate_assignment`` on solutions/ex01 and write the release.

    With ``out_dir=None`` the release replaces notebooks/ex01 (what TAs commit); otherwise it is
    written to ``out_dir/ex01`` and the committed release is left alone (the drift test uses this).
    Returns the folder holding the generated notebooks.
    """
    with tempfile.TemporaryDirectory(prefix="las-release-") as tmp, _lock("release"):
        tmp = Path(tmp)
        target = tmp / "release"
        cmd = [
            sys.executable, "-m", "nbgrader", "generate_assignment", ASSIGNMENT, "--force",
            f"--CourseDirectory.release_directory={target}",
            f"--CourseDirectory.db_url=sqlite:///{tmp / 'gradebook.db'}",
            "--log-level=WARN",
        ]
        from .course import nbgrader_env

        proc = subprocess.run(cmd, cwd=GRADER_DIR, capture_output=True, text=True, env=nbgrader_env())
        if proc.returncode != 0:
            raise RuntimeError(f"nbgrader generate_assignment failed:\n{proc.stdout}\n{proc.stderr}")
        generated = target / ASSIGNMENT
        check_no_leaks(generated)
        dest = (out_dir / ASSIGNMENT) if out_dir is not None else ROOT / "notebooks" / ASSIGNMENT
        if dest.exists():
            shutil.rmtree(dest)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(generated, dest)
        for nb in dest.glob("*.ipynb"):
            _normalise(nb, drop_rubrics=True)
        return dest


def _normalise(path: Path, *, drop_rubrics: bool = False) -> None:
    """Write notebooks with stable formatting, so the committed release diffs cleanly; with
    ``drop_rubrics`` the TA's rubric cells (grader/tiers.py) are removed first."""
    data = json.loads(path.read_text(encoding="utf-8"))
    if drop_rubrics:
        from .tiers import strip_rubrics

        strip_rubrics(data)
    write_notebook_json(path, data)


def write_notebook_json(path: Path, data: dict) -> None:
    """Write a notebook dict with the pack's stable formatting (sorted keys, indent 1, a final newline)."""
    path.write_text(json.dumps(data, indent=1, ensure_ascii=False, sort_keys=True) + "\n", encoding="utf-8")


def check_no_leaks(folder: Path) -> None:
    """Raise if a released notebook still carries solution or hidden-test markers."""
    leaks = []
    for nb in folder.glob("*.ipynb"):
        cells = json.loads(nb.read_text(encoding="utf-8"))["cells"]
        for i, cell in enumerate(cells):
            src = "".join(cell.get("source", ""))
            for marker in LEAK_MARKERS:
                if marker in src:
                    leaks.append(f"{nb.name} cell {i}: {marker}")
    if leaks:
        raise RuntimeError("the release would leak solutions or hidden tests:\n  " + "\n  ".join(leaks))
