"""What grading a notebook and a student produces: each notebook's result, the statuses (worst first), the
one way to mark a result (:meth:`NotebookResult.flag`) and the status files the TA reads
(grading/status/<student>.json). The settings of a run are grader/policy.py."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from .course import Course
from .policy import Settings  # noqa: F401 - re-exported: the settings of a run, with its results


STATUS_ORDER = ["unreadable", "kernel died", "timed out", "tampered", "review", "graded"]


@dataclass
class NotebookResult:
    student: str
    notebook: str
    status: str = "graded"
    reasons: list[str] = field(default_factory=list)
    grades: dict = field(default_factory=dict)      # grade_id -> (auto_score, needs_manual_grade)
    comments: dict = field(default_factory=dict)    # grade_id -> auto_comment
    autograded: Path | None = None                  # the executed notebook (in the scratch course)
    seconds: float = 0.0
    log: str = ""
    score: float = 0.0
    max_score: float = 0.0
    scratch: Path | None = None
    infra: bool = False                             # no sandbox started: the grader's fault
    full_run_ok: bool = False
    verdict: object = None                          # the judge's Verdict
    audit: list = field(default_factory=list)       # static audit findings (grader/audit.py)
    full_run_reason: str = ""                       # why the full run failed (feedback's note), "" if it did not

    def flag(self, status: str | None = None, reason: str | None = None, *, first: bool = False) -> None:
        """Mark this result, the one way a status is set: its status becomes the worse of the present one
        and ``status`` (STATUS_ORDER; None leaves it), and ``reason`` joins what the TA reads (``first``:
        in front, the reason the notebook's page leads with)."""
        if status is not None:
            self.status = worse_status(self.status, status)
        if reason:
            self.reasons.insert(0, reason) if first else self.reasons.append(reason)


@dataclass
class Job:
    """One readable notebook of a student's session: as graded, and where its results go."""
    notebook: str
    graded: dict          # the submission with the release's locked cells restored
    release: dict
    result: NotebookResult


def worse_status(a: str, b: str) -> str:
    return min(a, b, key=STATUS_ORDER.index)


def _notebook_status(res: NotebookResult) -> dict:
    return {"status": res.status, "reasons": res.reasons, "score": res.score,
            "max_score": res.max_score, "seconds": round(res.seconds, 1),
            "judge": res.verdict.to_json() if res.verdict is not None else None,
            "reports": {cell: res.verdict.cell_report(cell) for cell in   # each test cell's, as feedback shows it
                        res.verdict.points} if res.verdict is not None else None,
            "full_run_reason": res.full_run_reason,
            "audit": res.audit,
            # what nbgrader printed when the full run failed: the TA's first stop at "look at it by hand"
            "full_run_log": "" if res.full_run_ok else res.log[-4000:]}


def record_statuses(course: Course, results: dict[str, list[NotebookResult]], prot: dict,
                    update: bool = False, fingerprints: dict[str, dict] | None = None) -> dict[str, dict]:
    """Write grading/status/<student>.json for every student of ``results``; with ``update`` the
    notebooks graded before (nbgrader's autograde button grades one notebook at a time) are kept.
    ``fingerprints`` (grader/batch.py) marks students as finished; a status without one (``update``,
    a grader failure) is graded again by the next batch."""
    statuses = {}
    for s, per_nb in results.items():
        collected = course.read_json("collect", s)
        notebooks = dict(course.read_json("status", s).get("notebooks", {})) if update else {}
        notebooks.update({res.notebook: _notebook_status(res) for res in per_nb})
        notebooks = dict(sorted(notebooks.items()))
        reasons = list(dict.fromkeys(list(collected.get("problems", [])) +
                                     [r for nb in notebooks.values() for r in nb.get("reasons", [])]))
        worst = min([nb.get("status", "graded") for nb in notebooks.values()] + ["graded"] +
                    (["unreadable"] if collected.get("unreadable") else []), key=STATUS_ORDER.index)
        status = {
            "student": s,
            "status": worst,
            "reason": "; ".join(reasons),
            "notebooks": notebooks,
            "score": sum(nb.get("score", 0.0) for nb in notebooks.values()),
            "max_score": sum(nb.get("max_score", 0.0) for nb in notebooks.values()),
            "protections": prot,
            "graded_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        }
        if fingerprints and s in fingerprints:
            status["fingerprint"] = fingerprints[s]
        course.write_json("status", s, status)
        statuses[s] = status
    return statuses
