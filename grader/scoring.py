"""The judge's points into the gradebook: the verdict from the session's records, the written answers'
grades, and the merge into nbgrader's gradebook (the executed notebook's steps: grader/steps.py)."""

from __future__ import annotations

import json
import warnings

import nbformat
from nbgrader import utils as nbutils
from nbgrader.api import Gradebook, MissingEntry, SolutionCell

from .course import COURSE_ID, Course
from . import judge as judging
from utils.notebook_cells import cell_source, grade_id, is_manually_graded, nbgrader_meta
from .fullrun import write_notebook
from .pageclean import strip_active_outputs
from .policy import Settings
from .results import Job, NotebookResult


def judge_verdict(job: Job, records: list[dict], tail: str, settings: Settings, reference: dict | None):
    """The judge's verdict on the session's evidence for this notebook; None without a reference."""
    if reference is None:
        return None
    result, notebook, release = job.result, job.notebook, job.release
    case_seeds = judging.case_runs([settings.seed or 0], notebook)[0]["case_seeds"]
    secrets = (str(settings.seed or 0), *(str(v) for v in case_seeds.values()))
    # a void record (the session's or this notebook's) voids every record of the notebook
    void = next((str(r.get("problem")) for r in records if r.get("kind") in ("void", "notebook_void")), "")
    cases, header = ({}, {}) if void else judging.by_case(records, "student")
    if void:
        result.flag("review", f"{notebook}: the judge discarded every check ({void}); 0 autograded points; "
                    "look at it by hand")
    elif not cases:
        result.flag(None, f"{notebook}: the judge got no evidence (the probe run failed: "
                    f"{tail.strip().splitlines()[-1][:200] if tail.strip() else 'no output'})")
    verdict = judging.judge(notebook, cases, reference, judging.points_per_test_cell(release), header, secrets)
    timed = sorted({c.cell for c in verdict.cases if not c.passed and "did not finish" in c.message})
    if timed:
        # the light full run does not call the functions: a function that hangs shows here
        result.flag("timed out", f"{notebook}: checks of {', '.join(timed)} ran past their time limit (0 for those checks)")
    cell_of = {case.probe: case.cell for case in judging.load_cases(notebook)}
    died = sorted({cell_of[name] for name, rec in cases.items() if rec.get("status") == "died" and name in cell_of})
    if died:
        result.flag("kernel died", f"{notebook}: checks of {', '.join(died)} ended their grading process (os._exit, a crash "
                    f"or the {settings.mem_gb:g} GB memory cap; 0 for those checks)")
    budget = sorted({c.cell for c in verdict.cases if not c.passed and "was used up" in c.message})
    if budget:
        result.flag("timed out", f"{notebook}: the judge's {settings.judge_budget} s for this notebook ran out before the "
                    f"checks of {', '.join(budget)} (0 for those checks)")
    if verdict.dropped:
        shown = "; ".join(verdict.dropped[:5]) + (f"; and {len(verdict.dropped) - 5} more" if len(verdict.dropped) > 5 else "")
        result.flag(None, f"{notebook}: the judge could not run {shown}")
        if any(e.get("kind") in ("timeout", "died", "budget") for e in header.get("not_run", []) if isinstance(e, dict)):
            result.flag("timed out")
    if verdict.tampered:
        result.flag("review", f"{notebook}: {verdict.tampered}; the judge discarded the checks after it")
    return verdict


def written_answer_grades(job: Job) -> None:
    """Written answers go to the TA, as nbgrader's SaveAutoGrades decides: an answer left exactly as
    released scores 0 and needs no grading (nbgrader.utils.determine_grade's checksum rule)."""
    grades = dict(job.result.grades or {})
    for cell in (c for c in job.graded["cells"] if is_manually_graded(c)):
        flags = nbgrader_meta(cell)
        try:
            node = nbformat.from_dict({**cell, "source": cell_source(cell)})
            unchanged = flags.get("checksum") and flags["checksum"] == nbutils.compute_checksum(node)
        except Exception:  # noqa: BLE001 - an odd cell is simply graded by hand
            unchanged = False
        grades[flags["grade_id"]] = (0.0, False) if unchanged else (None, True)
    job.result.grades = grades


def apply_verdict(job: Job, verdict) -> None:
    """The judge's points replace whatever nbgrader read from the test cells' outputs, next to the
    written answers' grades (:func:`written_answer_grades`); no verdict: every grade is zero."""
    result = job.result
    if verdict is None:
        result.grades = None
        return
    manual = dict(result.grades or {})   # the written answers: the TA grades them
    result.grades = {grade_id(c): manual.get(grade_id(c), (None, True)) for c in job.release["cells"]
                     if is_manually_graded(c)}
    for cell, pts in verdict.points.items():
        result.grades[cell] = (pts, False)
        result.comments[cell] = verdict.cell_report(cell)
    result.verdict = verdict


def merge(course: Course, result: NotebookResult) -> tuple[float, float]:
    """Write one job's scores into the real gradebook and copy its executed notebook; returns
    (autograded score, autograded max) of that notebook."""
    dest = course.folder("autograded", result.student) / f"{result.notebook}.ipynb"
    with Gradebook(course.db_url, COURSE_ID) as gb:
        try:
            gb.find_submission(course.assignment, result.student)
        except MissingEntry:
            with warnings.catch_warnings():  # nbgrader's add_submission trips a harmless SQLAlchemy warning
                warnings.simplefilter("ignore")
                gb.add_submission(course.assignment, result.student)
        sub = gb.find_submission_notebook(result.notebook, course.assignment, result.student)
        score = max_score = 0.0
        for grade in sub.grades:
            cell = grade.cell
            # no grades (unreadable, died, timed out, missing): zero; a TA's grade: a regrade keeps it graded
            auto, needs = (0.0, False) if result.grades is None else result.grades.get(cell.name, (0.0, False))
            grade.auto_score, grade.needs_manual_grade = auto, needs and grade.manual_score is None
            if getattr(cell, "cell_type", None) != "markdown" and not _is_manual(gb, cell):   # an autograded test
                score += grade.auto_score or 0.0
                max_score += grade.max_score
        for comment in sub.comments:
            if result.grades is not None and comment.cell.name in result.comments:
                comment.auto_comment = result.comments[comment.cell.name]
        gb.db.commit()
    dest.parent.mkdir(parents=True, exist_ok=True)
    if dest.is_symlink() or (dest.exists() and not dest.is_file()):
        dest.unlink()
    if result.autograded is not None and result.autograded.is_file() and not result.autograded.is_symlink():
        # formgrader shows this copy in the TA's browser: nothing of the student's may run there. The
        # batch's steps cleaned it already (grader/steps.py strip_active); cleaning the copy again keeps
        # a notebook from a shard graded elsewhere to the same rule. One that cannot be cleaned (whatever
        # the reason) is not copied: the TA reads the reason.
        try:
            executed = json.loads(result.autograded.read_text(encoding="utf-8"))
            write_notebook(dest, strip_active_outputs(executed))
        except Exception as exc:  # noqa: BLE001 - one student's content never stops the batch
            dest.unlink(missing_ok=True)
            result.flag("review", f"{result.notebook}: the executed notebook could not be made safe to show "
                        f"({exc.__class__.__name__}); it is not in autograded/, look at the submission by hand")
    elif dest.exists():
        dest.unlink()  # never leave an older run's notebook behind for feedback
    return score, max_score


def _is_manual(gb, cell) -> bool:
    """A manually graded answer is a grade cell that is also a solution cell."""
    return gb.db.query(SolutionCell).filter(SolutionCell.name == cell.name,
                                            SolutionCell.notebook_id == cell.notebook_id).count() > 0
