"""An nbgrader round trip in a throwaway course directory, used by the tests.

generate the release from solutions/ex01 -> submit notebooks as a student -> autograde -> export,
then read every grade cell's score from the gradebook. Each call uses its own course folder and
gradebook, so two round trips (the solution and the unmodified release) run side by side.
"""

from __future__ import annotations

import csv
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ASSIGNMENT = "ex01"


@dataclass
class RoundTrip:
    """What one autograded submission produced."""

    course: Path
    student: str
    scores: dict = field(default_factory=dict)       # (notebook, grade_id) -> (score, max_score)
    autograded: dict = field(default_factory=dict)    # notebook -> Path of the autograded .ipynb
    export: list = field(default_factory=list)        # rows of nbgrader's grades CSV
    log: str = ""


def _command(course: Path, *args: str) -> list[str]:
    """An nbgrader command line pointed at ``course`` and its own gradebook."""
    return [sys.executable, "-m", "nbgrader", *args,
            f"--CourseDirectory.root={course}",
            f"--CourseDirectory.db_url=sqlite:///{course / 'gradebook.db'}",
            "--CourseDirectory.course_id=learning-at-scale"]


def _env() -> dict:
    from grader.course import nbgrader_env

    return nbgrader_env()


def _nbgrader(course: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(_command(course, *args), cwd=course, capture_output=True, text=True, env=_env())


def prepare_course(course: Path, notebooks: list[Path]) -> None:
    """Course folder with source/ex01 = the given solution notebooks, and its release generated."""
    src = course / "source" / ASSIGNMENT
    src.mkdir(parents=True)
    for nb in notebooks:
        shutil.copy(nb, src / nb.name)
    proc = _nbgrader(course, "generate_assignment", ASSIGNMENT, "--force")
    if proc.returncode != 0:
        raise RuntimeError(f"generate_assignment failed:\n{proc.stdout}\n{proc.stderr}")


def copy_prepared_course(prepared: Path, course: Path) -> None:
    """``course`` as :func:`prepare_course` would make it from the same notebooks: a copy of ``prepared``'s
    source, release and gradebook, taken before any student was added (nbgrader's generate_assignment and
    the ``alembic`` call it starts for a new gradebook cost about 15 s)."""
    for folder in ("source", "release"):
        shutil.copytree(prepared / folder, course / folder)
    shutil.copy2(prepared / "gradebook.db", course / "gradebook.db")


def start_autograde(course: Path, student: str, submission: str) -> subprocess.Popen:
    """Submit ``submission`` ('solution' = the source notebooks, 'release' = the generated
    release, unmodified) as ``student`` and start ``nbgrader autograde`` in the background."""
    dst = course / "submitted" / student / ASSIGNMENT
    origin = course / ("source" if submission == "solution" else "release") / ASSIGNMENT
    shutil.copytree(origin, dst)
    _nbgrader(course, "db", "student", "add", student)
    cmd = _command(course, "autograde", ASSIGNMENT, "--force")
    return subprocess.Popen(cmd, cwd=course, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=_env())


def collect(course: Path, student: str, proc: subprocess.Popen) -> RoundTrip:
    """Wait for autograde, export the grades and read each grade cell's score from the gradebook."""
    log, _ = proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"nbgrader autograde failed for {student}:\n{log[-5000:]}")
    from nbgrader.api import Gradebook

    result = RoundTrip(course=course, student=student, log=log)
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        assignment = gb.find_assignment(ASSIGNMENT)
        for notebook in assignment.notebooks:
            for cell in notebook.grade_cells:
                grade = gb.find_grade(cell.name, notebook.name, ASSIGNMENT, student)
                result.scores[(notebook.name, cell.name)] = (grade.score, grade.max_score)
            result.autograded[notebook.name] = course / "autograded" / student / ASSIGNMENT / f"{notebook.name}.ipynb"
    export = _nbgrader(course, "export", f"--to={course / 'grades.csv'}")
    if export.returncode != 0:
        raise RuntimeError(f"nbgrader export failed:\n{export.stdout}\n{export.stderr}")
    with open(course / "grades.csv", newline="") as f:
        result.export = list(csv.DictReader(f))
    return result
