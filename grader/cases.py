"""The judge's case table entry: what a checks module (grader/checks/<stem>.py) declares.

A leaf module: the checks import this and grader/compare.py, never the judge's engine (grader/judge.py).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Case:
    """One named check: ``probe`` (in grader/probes/<stem>.py) gives the student's value, ``check``
    compares it with the solution's value and raises AssertionError(message) when it is wrong.
    ``says`` is the requirement in the words of the task text, shown in the feedback."""

    cell: str
    probe: str
    says: str
    check: object
    weight: float = 1.0
    requires: tuple = ()   # further probes that must pass for this case to score
    kind: str = "value"    # see CASE_KINDS; a check that expects an error is a "rule" whatever it says


#: What a case checks. Only "value" cases stand on their own; every other kind scores only when the
#: MAIN value cases of its function pass (``MAIN`` of the checks module: what the function computes on
#: ordinary inputs; ``FUNCTIONS`` says which function each probe exercises), so an answer that computes
#: nothing right earns nothing for its shape, its identities, its generator use or its error messages,
#: while an edge-case value (stability, a degenerate input) that fails costs its own share only.
#: "rule" (input validation, typing, random-state hygiene) weighs at most 10 % of the core's
#: autograded points; "given" (a check of code the release gives) weighs 0 and is only reported.
CASE_KINDS = ("value", "property", "rule", "given")


def case_kind(case: Case) -> str:
    """The kind of ``case``: its ``kind``, except that an error-expecting check is a "rule"."""
    if case.kind not in CASE_KINDS:
        raise ValueError(f"{case.probe}: kind {case.kind!r} is not one of {CASE_KINDS}")
    if case.kind == "value" and getattr(case.check, "expects_error", False):
        return "rule"
    return case.kind
