"""The executed notebook the TA and the student see, made one step at a time.

Each step is ``step(notebook, context) -> notebook``, in the shape of an nbgrader preprocessor: it gets
the notebook the step before it made and a :class:`StepContext` (the job, the session's records, the
settings, the judge's verdict), and returns the notebook for the next step. :func:`run_steps` runs
:data:`NOTEBOOK_STEPS` in order, starting from the release view of the submission (grader/submissions.py
``release_view``):

=====================  ============================================================================
``attach_full_run``    the session's cell records as outputs, and the full run's status (grader/fullrun.py)
``annotate_reports``   the judge's report under each test cell
``insert_rubrics``     each written answer's rubric under it, for the TA in formgrader
``strip_active``       nothing that would run in a browser (formgrader shows this copy in the TA's)
=====================  ============================================================================

No step decides a point: the judge's points are in the result before the chain starts. A step that
fails adds a reason to the notebook's status for the TA ("review") and the points stand; after a failed
*required* step there is no executed notebook at all (a half-made or uncleaned page is worse than none:
the TA reads the reason and the submission). The caller writes the notebook once, after the last step.

To add a step: write ``def my_step(nb, ctx) -> dict`` here (at most about 40 lines), put a
:class:`Step` for it in :data:`NOTEBOOK_STEPS` where it belongs, and test it on a notebook dict.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from utils.notebook_cells import RUBRIC_TAG, drop_rubrics, grade_id, rubric_cells

from .fullrun import full_run_notebook
from .pageclean import strip_active_outputs
from .policy import Settings
from .results import Job


@dataclass
class StepContext:
    """What the steps read besides the notebook. ``job.result`` collects statuses and reasons."""

    job: Job | None = None
    records: list[dict] = field(default_factory=list)   # the session's records of this notebook
    tail: str = ""                                      # the session's log tail (the TA's, when no sandbox started)
    settings: Settings = field(default_factory=Settings)
    secrets: tuple = ()                                  # strings scrubbed from every output (the batch's seeds)
    source: Path | None = None                           # the source notebook (its rubrics)
    verdict: object = None                               # the judge's Verdict; None when the judge gave none

    @property
    def result(self):
        return self.job.result


@dataclass(frozen=True)
class Step:
    what: str                                            # what the TA reads when it fails
    run: Callable[[dict, StepContext], dict | None]
    required: bool = False                               # failed: no executed notebook


def attach_full_run(nb: dict, ctx: StepContext) -> dict | None:
    """The full run's outputs and status (grader/fullrun.py); None when no cell ran."""
    return full_run_notebook(nb, ctx.job, ctx.records, ctx.tail, ctx.settings, ctx.secrets)


def annotate_reports(nb: dict, ctx: StepContext) -> dict:
    """The judge's per-case report under each test cell (what the feedback page shows)."""
    if ctx.verdict is None:
        return nb
    for cell in nb["cells"]:
        gid = grade_id(cell)
        if gid in ctx.verdict.points and cell.get("cell_type") == "code":
            cell.setdefault("outputs", []).append(
                {"output_type": "stream", "name": "stdout", "text": ctx.verdict.cell_report(gid) + "\n"})
    return nb


def insert_rubrics(nb: dict, ctx: StepContext) -> dict:
    """Each written answer's rubric (from the source notebook) directly under the
    student's answer, where the TA grades it in formgrader. Cells a student tagged ``rubric`` are dropped
    first; feedback drops every rubric cell again (pageclean.sanitise)."""
    rubrics = rubric_cells(ctx.source) if ctx.source is not None else {}
    cells = []
    for cell in drop_rubrics(nb)["cells"]:
        cells.append(cell)
        gid = grade_id(cell)
        if gid in rubrics and cell.get("cell_type") == "markdown":
            cells.append({"cell_type": "markdown", "metadata": {"tags": [RUBRIC_TAG]}, "source": rubrics.pop(gid)})
    nb["cells"] = cells
    return nb


def strip_active(nb: dict, ctx: StepContext) -> dict:
    """Every output made safe as for a page and active elements removed from markdown
    (grader/pageclean.py): formgrader shows this notebook in the TA's own browser session."""
    return strip_active_outputs(nb)


NOTEBOOK_STEPS: tuple[Step, ...] = (
    Step("the full run's outputs", attach_full_run, required=True),
    Step("the judge's report under each test cell", annotate_reports),
    Step("the rubrics under the written answers", insert_rubrics),
    Step("the cleaning of active content (HTML, scripts)", strip_active, required=True),
)


def run_steps(nb: dict, ctx: StepContext, steps: tuple[Step, ...] = NOTEBOOK_STEPS) -> dict | None:
    """``steps`` in order from ``nb``: the executed notebook, or None when a step returned None (nothing
    ran) or a required step failed. Steps may change the notebook in place; the first one
    (``attach_full_run``) builds a new one, so ``nb`` itself is left as it was. A failure is a reason on
    the notebook's status, never silent, never a lost point, never an exception: one student's content
    does not stop the batch."""
    for step in steps:
        try:
            nb = step.run(nb, ctx)
        except Exception as exc:  # noqa: BLE001 - RecursionError, MemoryError, a malformed cell: this notebook's
            dropped = ("; there is no executed notebook for it, look at the submission by hand" if step.required
                       else "; the points stand")
            ctx.result.flag("review", f"{ctx.result.notebook}: {step.what} could not be added to the executed "
                            f"notebook ({exc.__class__.__name__}: {str(exc)[:120]}){dropped}")
            if step.required:
                return None
            continue
        if nb is None:
            return None
    return nb
