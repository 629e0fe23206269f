"""Sandbox-side probes, one module per notebook: ``grader/probes/<stem>.py``, and the API they import.

A probe builds inputs from a seeded ``torch.Generator``, calls the student's functions through the
namespace ``ns`` and returns whatever they gave. Probes hold **no reference implementation and no
expected value**: they run inside the grading sandbox next to student code. The judge runs the same
probes on the solution (outside the sandbox) and compares the two (grader/checks/<stem>.py).

This package's own module is the probes' whole API (:func:`probes`, :func:`attempt`,
:func:`with_global_state`): it imports nothing of grader/ but the evidence codec (grader/evidence.py,
the standard library's alone), so a probe reads without the harness (grader/probe.py), which only
loads ``PROBES``.

The files one requirement of a graded function touches (README, "Add a check"), in this order:

1. the task text: a sentence above the answer cell of ``solutions/ex01/<stem>.ipynb``, and where the student
   can see it, an assert on a public input in the test cell under the answer (then ``python -m grader release``);
2. the probe and its case, declared once: ``@probe("<test cell>", "<the requirement in the text's words>",
   "<COMPARATOR>", ...)`` over ``def <probe>(ns, gen)`` here, in ``grader/probes/<stem>.py`` (``function="f"``
   when the test cell is not ``test_f``, ``main=True`` for what ``f`` computes on ordinary inputs); the
   comparator is a name of ``grader/checks/<stem>.py`` (a new one is written there, from
   ``grader/compare.py``), whose ``CASES``, ``FUNCTIONS`` and ``MAIN`` are derived;
3. the mutant that breaks it: ``Mutant(..., visible=True, case="<probe>")`` in ``grader/mutants/<stem>.py``;
4. tests: tests/test_judge.py, test_visible_checks.py and test_judge_gates.py pick the above up; a new
   style of correct answer goes in ``tests/fixtures/honest/<stem>.py``, a check of the solution against
   an independent reference in ``tests/test_<stem>.py``.
"""

import hashlib as _hashlib
import random as _random

import numpy as _np
import torch as _torch

from grader.evidence import raised

DEFAULT_TIMEOUT = 60.0

# Captured when the harness loads the probes, before any student definition runs: a function that
# replaces torch.get_rng_state (or NumPy's, or Python's) cannot hide that it drew from the global state.
_TORCH_STATE, _NUMPY_STATE, _PYTHON_STATE = _torch.get_rng_state, _np.random.get_state, _random.getstate
_TOLIST, _sha256 = _torch.Tensor.tolist, _hashlib.sha256


class Probe:
    """One named probe: ``fn(ns, gen)`` builds inputs from the torch.Generator ``gen``, calls the
    student's functions through ``ns`` and returns what they gave (the judge compares it). ``cases``: the
    case declarations it carries (dicts of grader/cases.py Case's fields, ``check`` a comparator's name)."""

    def __init__(self, name: str, fn, timeout: float):
        self.name, self.fn, self.timeout, self.cases = name, fn, timeout, []


def probes(registry: dict):
    """Decorator factory for a probe module: ``probe = probes(PROBES)``. Then ``@probe(cell, says, check,
    **fields)`` over ``def name(ns, gen)`` declares the probe and its case, once: ``cell`` the test cell,
    ``says`` the requirement in the task text's words, ``check`` the name of a comparator of
    grader/checks/<stem>.py, ``fields`` the rest of grader/cases.py Case (``weight``, ``kind``, ``main``, ...).
    A probe that several cases read carries one ``@probe`` per case (top first); ``timeout`` is per probe."""
    def probe(cell: str, says: str, check: str, *, timeout: float | None = None, **fields):
        def wrap(fn):
            held = registry.setdefault(fn.__name__, Probe(fn.__name__, fn, DEFAULT_TIMEOUT))
            if held.fn is not fn:
                raise ValueError(f"probe {fn.__name__!r} defined twice")
            held.cases.insert(0, {"cell": cell, "says": says, "check": check, **fields})  # decorators apply bottom-up
            held.timeout = timeout or held.timeout
            return fn
        return wrap
    return probe


def attempt(fn, *args, **kwargs):
    """Call ``fn``; return its value, or the :class:`grader.evidence.Raised` record of its exception."""
    try:
        return fn(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - the exception is the evidence
        return raised(exc)


def global_random_state() -> dict:
    """Digests of the global random states a function could draw from instead of its ``generator``:
    torch's (CPU), NumPy's legacy ``np.random`` and Python's ``random``."""
    kind, keys, pos, has_gauss, cached = _NUMPY_STATE()
    return {"torch": _sha256(bytes(_TOLIST(_TORCH_STATE()))).hexdigest(),
            "numpy": _sha256(keys.tobytes() + repr((kind, pos, has_gauss, cached)).encode()).hexdigest(),
            "random": _sha256(repr(_PYTHON_STATE()).encode()).hexdigest()}


def with_global_state(fn, *args, **kwargs) -> dict:
    """Call ``fn`` and return ``{"result": what it returned or raised, "before": ..., "after": ...}``,
    the digests of the global random states just before and just after the call (the judge compares)."""
    before = global_random_state()
    result = attempt(fn, *args, **kwargs)
    after = global_random_state()
    return {"result": result, "before": before, "after": after}
