"""The judge's cases for Task 1 (InfoNCE), compared outside the sandbox.

Each case is declared by its probe in grader/probes/task1_infonce.py (where it says, in the words of the task text,
what it checks); this module holds the comparators it names; the solution's value from the same probe is the
expected one. Every case that is not a value case scores only once the MAIN value cases of its function pass
(grader/judge.py derives the gate from ``FUNCTIONS`` and ``MAIN``); the equal-scores case also needs real values
(``requires``), never itself alone. An edge-case value (stability) gates nothing: a failed value costs its own
share. Every requirement here is written in the notebook above the answer cell (dtypes, stability). The input
checks (what raises a ValueError) are given code in the answer cells: their cases are reported, weigh nothing.
"""

from __future__ import annotations

from grader.compare import expect_dtype_kept, expect_raises, expect_same
from grader.cases import declared_cases, function_tables
from grader.probes.task1_infonce import PROBES

# Values only: the dtype the text asks for is a rule of its own (DTYPE), so a dtype slip costs that rule's share
# and no value case. A float32 rounding of the right value passes the value cases.
LOSS = expect_same(rtol=1e-5, atol=1e-5, dtype=False)
STABLE = expect_same(rtol=1e-6, atol=1e-6, dtype=False)
DTYPE = expect_dtype_kept(rtol64=1e-9)


# Comparators the probes name, besides those above.
GRADIENT = expect_same(rtol=1e-4, atol=1e-6)
RAISES_VALUE_ERROR = expect_raises("ValueError")
COSINE = expect_same(rtol=1e-4, atol=1e-5)
GAUSSIAN_MI = expect_same(rtol=1e-9, atol=1e-12, numbers="any")
BOUND = expect_same(rtol=1e-6, atol=1e-6, numbers="any")
BOUND_FLOAT64 = expect_same(rtol=1e-9, atol=1e-9, numbers="any")
LARGE_GAPS = expect_same(rtol=1e-5, atol=1e-4, dtype=False)

# Each case is declared by its probe (grader/probes/task1_infonce.py: @probe(cell, says, check, ...)), which
# names its comparator here: a case's weight is its share of its test cell's points.
CASES = declared_cases(PROBES, globals())

# What each function computes on ordinary inputs: the value cases that gate its other cases. Edge-case values
# (stability, large gaps, |rho| near 1) stand alone; the dtypes kept and the float64 precision of the bound are
# rules, gated.
FUNCTIONS, MAIN = function_tables(CASES)
