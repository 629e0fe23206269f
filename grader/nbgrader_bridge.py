"""nbgrader's own entry points, wired to the pack's grader.

TAs who work in formgrader (its *Generate* and *Autograde* buttons) or run ``nbgrader
generate_assignment`` / ``nbgrader autograde`` with the pack's ``grader/nbgrader_config.py`` get the
same release and the same grades as ``python -m grader release`` / ``autograde``:

* :class:`StripRubrics` (``GenerateAssignment.preprocessors``): the release never holds the TA's
  rubric cells, exactly as ``python -m grader release`` (which runs nbgrader with the same config).
* :class:`JudgeExecute` (first of ``Autograde.autograde_preprocessors``, in place of nbgrader's
  ``Execute``): instead of running the notebook in an unsandboxed kernel and scoring the visible test
  cells by their outputs, it grades the notebook with the pack's pipeline (grader/autograde.py:
  the sandboxed full run, the static audit and the judge) and returns the executed notebook with
  each test cell's outputs replaced by the judge's per-case report and its points as a number, which
  nbgrader's ``SaveAutoGrades`` stores as partial credit. Written answers keep their rubric under
  them for formgrader's manual grading view. The student's status file (``grading/status``) is
  written as ``python -m grader autograde`` writes it, so ``python -m grader export`` agrees.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import nbformat
from nbgrader.preprocessors import NbGraderPreprocessor
from traitlets import Unicode

from utils.answer_loader import source_digest
from utils.notebook_cells import cell_role, cell_source, drop_rubrics, grade_id, is_test

from . import judge as judging
from .autograde import grade_notebook
from .course import Course, sync_assignment
from .policy import Settings
from .results import record_statuses
from .scoring import merge
from .seed import ensure_seed


class StripRubrics(NbGraderPreprocessor):
    """Drop the cells tagged ``rubric`` (grader/extras/tiers.py) from a generated release."""

    def preprocess(self, nb, resources):
        data = json.loads(nbformat.writes(nb))
        drop_rubrics(data)
        return nbformat.reads(json.dumps(data), as_version=4), resources


class MarkGivenCells(NbGraderPreprocessor):
    """Record in the release's notebook metadata (``las_given_cells``) a digest of every given cell's
    source, so the student's own check (utils/answer_loader.py, ``./pack.sh validate``) tells the
    course's given cells from the cells a student added, as the judge does by comparing with the release."""

    def preprocess(self, nb, resources):
        digests = sorted({source_digest(cell_source(c)) for c in nb.cells if c.cell_type == "code"
                          and cell_role(c) == "given"})
        nb.metadata["las_given_cells"] = digests
        return nb, resources


def _test_outputs(report: str, points: float) -> list:
    """A test cell's outputs: the judge's report (stdout), then its points as the cell's value,
    which nbgrader reads as partial credit (nbgrader.utils.determine_grade)."""
    return [nbformat.v4.new_output("stream", name="stdout", text=report.rstrip("\n") + "\n"),
            nbformat.v4.new_output("execute_result", data={"text/plain": repr(float(points))}, execution_count=None)]


def grade_one(student: str, notebook: str, course=None):
    """Grade one submitted notebook with the pack's pipeline; returns its NotebookResult (with the
    executed notebook still in place) and the scratch folder to remove afterwards."""
    course = course or Course()
    if not (course.release / f"{notebook}.ipynb").exists():
        sync_assignment(course)
    settings = Settings(workers=1)
    settings.seed = ensure_seed(course.grading)
    workroot = Path(tempfile.mkdtemp(prefix="las-nbgrader-"))
    release = json.loads((course.release / f"{notebook}.ipynb").read_text(encoding="utf-8"))
    solution = json.loads((course.source / f"{notebook}.ipynb").read_text(encoding="utf-8"))
    reference = judging.reference_records(notebook, release, solution, settings.seed, workroot,
                                          threads=settings.threads(), cache_dir=course.grading / "cache")
    result = grade_notebook(course, student, notebook, settings, workroot, reference)
    result.score, result.max_score = merge(course, result)
    record_statuses(course, {student: [result]}, settings.protections(), update=True)
    return result, workroot


class JudgeExecute(NbGraderPreprocessor):
    """nbgrader's ``Execute``, replaced by the pack's grader (see the module docstring). The grading
    folder is the one holding nbgrader's gradebook; the source notebooks default to solutions/ex01."""

    source = Unicode("", help="folder of the source (solution) notebooks; default solutions/ex01").tag(config=True)

    def preprocess(self, nb, resources):
        info = resources.get("nbgrader") or {}
        student, notebook = info.get("student"), info.get("notebook")
        db_url = str(info.get("db_url") or "")
        if not db_url.startswith("sqlite:///"):
            raise RuntimeError("the pack's grader keeps its gradebook in a SQLite file (grading/gradebook.db); "
                               f"got {db_url!r}: use `python -m grader autograde`")
        named = {"assignment": str(info["assignment"])} if info.get("assignment") else {}
        course = Course(grading=Path(db_url[len("sqlite:///"):]).parent, **named,
                        **({"source": Path(self.source)} if self.source else {}))
        result, workroot = grade_one(student, notebook, course)
        try:
            if result.autograded is not None and result.autograded.exists():
                out = nbformat.read(str(result.autograded), as_version=4)
            else:   # the full run failed: the student's cells as submitted, with the judge's reports
                out = nb
            for cell in out.cells:
                gid = grade_id(cell)
                if is_test(cell):
                    points = (result.grades or {}).get(gid, (0.0, False))[0] or 0.0
                    report = result.comments.get(gid) or ("Autograder: 0 points (" + "; ".join(result.reasons[:3]) + ")")
                    cell.outputs = _test_outputs(report, points)
            return out, resources
        finally:
            shutil.rmtree(workroot, ignore_errors=True)
            if result.scratch is not None:
                shutil.rmtree(result.scratch, ignore_errors=True)
