"""The student release: nbgrader's ``generate_assignment`` on the source notebooks, checked and normalised.

:func:`release_notebooks` is the one way a release is made. ``python -m grader release``
(:func:`generate_release`: notebooks/ex01, committed) and every grading run (grader/course.py
``sync_assignment``: grading/release and the gradebook) both call it, so the release a student got and
the one the grader compares with are made alike: with the pack's nbgrader configuration
(grader/nbgrader_config.py: its preprocessors drop the rubrics and record the given cells), checked for
leaked solution markers, without rubric cells, in the pack's stable JSON. This module imports nothing
from grader/course.py (course builds on it).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path

# write_notebook_json lives in utils/notebook_cells.py; imported from here too (the house rules name this path)
from utils.notebook_cells import cell_source, drop_rubrics, read_notebook, write_notebook_json

from . import ASSIGNMENT, GRADER_DIR, ROOT

LEAK_MARKERS = ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS", "END HIDDEN TESTS")
#: How the grader runs an nbgrader command: ``python -m nbgrader ARGS``, after ``import grader`` (grader/__init__.py:
#: jsonschema without its IRI parsers, about 1.4 s less per command). Needs the repository on PYTHONPATH
#: (:func:`nbgrader_env`).
NBGRADER = (sys.executable, "-c", "import grader; from nbgrader.apps.nbgraderapp import main; main()")


@contextmanager
def _lock(name: str):
    """Serialise concurrent writers of one release folder (two terminals, parallel test workers)."""
    lock_dir = ROOT / "build"
    lock_dir.mkdir(exist_ok=True)
    with open(lock_dir / f".{name}.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def nbgrader_env(env: dict | None = None) -> dict:
    """``env`` (default: this process's) for an nbgrader subprocess: the repository on PYTHONPATH, and
    this interpreter's bin/ first on PATH, because nbgrader runs `alembic` from PATH to create a
    gradebook, even when the environment was not activated (`.venv/bin/python -m grader ...`)."""
    full = dict(os.environ if env is None else env)
    full["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), full.get("PYTHONPATH", "")]))
    full["PATH"] = os.pathsep.join(filter(None, [os.path.dirname(sys.executable), full.get("PATH", "")]))
    return full


def release_notebooks(source: Path, dest: Path, *, db_url: str | None = None, assignment: str = ASSIGNMENT) -> Path:
    """Generate the release of the source notebooks in ``source`` (a folder of ``<stem>.ipynb``) into
    ``dest`` (replaced) and return ``dest``.

    nbgrader runs in a scratch course holding a copy of ``source``, with the pack's configuration, and
    records the assignment in the gradebook at ``db_url`` (default: a scratch one, thrown away).
    Raises RuntimeError when nbgrader fails or a released notebook still holds solution markers."""
    source, dest = Path(source), Path(dest)
    with tempfile.TemporaryDirectory(prefix="las-release-") as tmp:
        tmp = Path(tmp)
        db_url = db_url or f"sqlite:///{tmp / 'gradebook.db'}"
        shutil.copytree(source, tmp / "source" / assignment,
                        ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__"))
        cmd = [
            *NBGRADER, "generate_assignment", assignment, "--force",
            f"--CourseDirectory.root={tmp}", "--CourseDirectory.source_directory=source",
            "--CourseDirectory.release_directory=release",
            f"--CourseDirectory.db_url={db_url}",
            "--log-level=WARN",
        ]
        # run from grader/ so nbgrader reads the pack's nbgrader_config.py (formgrader's *Generate* does too)
        proc = subprocess.run(cmd, cwd=GRADER_DIR, capture_output=True, text=True, env=nbgrader_env())
        if proc.returncode != 0:
            raise RuntimeError(f"nbgrader generate_assignment failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
        generated = tmp / "release" / assignment
        check_no_leaks(generated)
        with _lock("release"):
            if dest.exists():
                shutil.rmtree(dest)
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copytree(generated, dest)
            for nb in dest.glob("*.ipynb"):   # the release a student gets has no rubric cells
                write_notebook_json(nb, drop_rubrics(read_notebook(nb)))
    return dest


def generate_release(out_dir: Path | None = None, assignment: str = ASSIGNMENT) -> Path:
    """Release solutions/ex01 (:func:`release_notebooks`) and return the folder holding the notebooks.

    With ``out_dir=None`` the release replaces notebooks/ex01 (what TAs commit); otherwise it is
    written to ``out_dir/ex01`` and the committed release is left alone (the drift test uses this).
    """
    dest = (out_dir / assignment) if out_dir is not None else ROOT / "notebooks" / assignment
    source = ROOT / "solutions" / assignment
    if not source.is_dir():
        raise FileNotFoundError(f"no {source}: an assignment's source notebooks go in solutions/<assignment>/")
    return release_notebooks(source, dest, assignment=assignment)


def check_no_leaks(folder: Path) -> None:
    """Raise if a released notebook still carries solution or hidden-test markers."""
    leaks = []
    for nb in folder.glob("*.ipynb"):
        for i, cell in enumerate(read_notebook(nb)["cells"]):
            src = cell_source(cell)
            for marker in LEAK_MARKERS:
                if marker in src:
                    leaks.append(f"{nb.name} cell {i}: {marker}")
    if leaks:
        raise RuntimeError("the release would leak solutions or hidden tests:\n  " + "\n  ".join(leaks))
