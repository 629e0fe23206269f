"""The judge's case table entry: what a checks module (grader/checks/<stem>.py) declares.

A leaf module: the checks import this and grader/compare.py, never the judge's engine (grader/judge.py).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Case:
    """One named check: ``probe`` (in grader/probes/<stem>.py) gives the student's value, ``check``
    compares it with the solution's value and raises AssertionError(message) when it is wrong.
    ``says`` is the requirement in the words of the task text, shown in the feedback. ``kind`` says
    what the case checks (:data:`CASE_KINDS`); a "rule" or "given" case that checks an interface
    convention names it in ``checks`` (:data:`RULE_CHECKS`), so that the accounting can tell what the
    core's rule points buy (``python -m grader tiers``). ``function`` is the graded function the case
    exercises (default: its test cell's, ``test_f`` -> ``f``); ``main=True`` marks a value case of what
    that function computes on ordinary inputs, which gates the function's other cases (:func:`function_tables`)."""

    cell: str
    probe: str
    says: str
    check: object
    weight: float = 1.0
    requires: tuple = ()   # further probes that must pass for this case to score
    kind: str = "value"    # see CASE_KINDS; a check that expects an error is a "rule" whatever it says
    checks: str = ""       # for a "rule" (or a "given" check of one): one of RULE_CHECKS
    function: str = ""     # default: the test cell's function
    main: bool = False     # a main value case of its function

    def __post_init__(self):
        if not self.function:
            object.__setattr__(self, "function", self.cell.removeprefix("test_"))


#: What a case checks. Only "value" cases stand on their own; every other kind scores only when the
#: main value cases of its function pass (``main=True``: what the function computes on ordinary inputs;
#: ``MAIN`` and ``FUNCTIONS`` of the checks module, :func:`function_tables`), so an answer that computes
#: nothing right earns nothing for its shape, its identities, its generator use or its error messages,
#: while an edge-case value (stability, a degenerate input) that fails costs its own share only.
#: "value": what the function computes (an edge case, a numerical-stability or degenerate input
#: included); "property": a property of the computation the sheet teaches (differentiable, one forward
#: pass, no autograd graph, a shape or range, an invariance); "rule": an interface convention
#: (:data:`RULE_CHECKS`), at most 10 % of the core's autograded points; "given": a check of code the
#: release gives, weight 0, only reported.
CASE_KINDS = ("value", "property", "rule", "given")

#: The interface conventions a "rule" case checks, its ``checks`` tag: the maths is the same whichever
#: way the convention goes. "dtype": a dtype or precision kept or returned; "return type": a Python
#: float, int or bool against a tensor or array, a detached loss; "arguments": a default or an argument
#: convention; "input form": the same formula on another form of input (an array of budgets for a
#: number, a 0-dim tensor for a float, one sequence for a batch); "generator": draws come from the given
#: generator (the same seed reproduces them, another seed gives others); "global state": the global
#: random states are left alone; "mutation": the caller's inputs are left unchanged; "raises": an error
#: for invalid input.
RULE_CHECKS = ("dtype", "return type", "arguments", "input form", "generator", "global state", "mutation",
               "raises")


def case_kind(case: Case) -> str:
    """The kind of ``case``: its ``kind``, except that an error-expecting check is a "rule". A case
    tagged with an interface convention (``checks``) must be a "rule" or "given" case."""
    if case.kind not in CASE_KINDS:
        raise ValueError(f"{case.probe}: kind {case.kind!r} is not one of {CASE_KINDS}")
    if case.checks and case.checks not in RULE_CHECKS:
        raise ValueError(f"{case.probe}: checks {case.checks!r} is not one of {RULE_CHECKS}")
    if case.checks and case.kind not in ("rule", "given"):
        raise ValueError(f"{case.probe}: checks {case.checks!r}, an interface rule, but declares kind {case.kind!r}")
    if case.kind == "value" and getattr(case.check, "expects_error", False):
        return "rule"
    return case.kind


def rule_check(case: Case) -> str:
    """What the interface rule of ``case`` checks: its ``checks`` tag, "raises" for an error-expecting
    check without one, "" for a case that checks no interface rule."""
    if case.checks:
        return case.checks
    return "raises" if getattr(case.check, "expects_error", False) else ""


def function_tables(cases, borrows: dict | None = None) -> tuple[dict, dict]:
    """``FUNCTIONS`` and ``MAIN`` of a checks module, derived from its ``cases`` in their order: function ->
    the probes of its cases, and function -> the probes of its main value cases (``main=True``), for the
    functions that have some. ``borrows`` (function -> functions) gives given code built on other functions
    (Task A's augment_batch) their main cases, after its own."""
    functions: dict[str, list[str]] = {}
    main: dict[str, list[str]] = {}
    owner: dict[str, str] = {}
    for case in cases:
        if owner.setdefault(case.probe, case.function) != case.function:
            raise ValueError(f"{case.probe}: a case of {owner[case.probe]} and of {case.function}")
        if case.main and case_kind(case) != "value":
            raise ValueError(f"{case.probe}: main=True on a {case_kind(case)} case (a main case is a value case)")
        probes = functions.setdefault(case.function, [])
        if case.probe not in probes:
            probes.append(case.probe)
        if case.main and case.probe not in main.setdefault(case.function, []):
            main[case.function].append(case.probe)
    for fn, others in (borrows or {}).items():
        main.setdefault(fn, []).extend(p for other in others for p in main[other])
    return ({fn: tuple(probes) for fn, probes in functions.items()},
            {fn: tuple(main[fn]) for fn in functions if main.get(fn)})


def declared_cases(probes: dict, comparators: dict) -> list[Case]:
    """The cases the probes declare (``@probe(cell, says, check, ...)`` in grader/probes/<stem>.py), in their
    order, each ``check`` (a comparator's name) looked up in ``comparators`` (the checks module's globals).
    Raises ``ValueError`` for a name that is not a comparator there."""
    cases = []
    for name, probe in probes.items():
        for fields in probe.cases:
            fields = dict(fields)
            key = fields.pop("check")
            check = comparators.get(key)
            if not callable(check):
                raise ValueError(f"{name}: no comparator {key!r} in the checks module")
            cases.append(Case(fields.pop("cell"), name, fields.pop("says"), check, **fields))
    return cases
