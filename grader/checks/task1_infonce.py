"""The judge's cases for Task 1 (InfoNCE), compared outside the sandbox.

Each case names a probe of grader/probes/task1_infonce.py and says, in the words of the task text,
what it checks; the solution's value from the same probe is the expected one. Every case that is not a
value case scores only once the MAIN value cases of its function pass (grader/judge.py derives the gate from
``FUNCTIONS`` and ``MAIN``); the equal-scores case also needs real values (``requires``), never itself alone.
An edge-case value (stability) gates nothing: a failed value costs its own share. Every
requirement here is written in the notebook above the answer cell (dtypes, stability). The input checks
(what raises a ValueError) are given code in the answer cells: their cases are reported, weigh nothing.
"""

from __future__ import annotations

from grader.compare import expect_dtype_kept, expect_raises, expect_same
from grader.cases import Case, function_tables

# Values only: the dtype the text asks for is a rule of its own (DTYPE), so a dtype slip costs that rule's share
# and no value case. A float32 rounding of the right value passes the value cases.
LOSS = expect_same(rtol=1e-5, atol=1e-5, dtype=False)
STABLE = expect_same(rtol=1e-6, atol=1e-6, dtype=False)
DTYPE = expect_dtype_kept(rtol64=1e-9)

# Weights are shares, not points: a comment "name: the test cell's N points" gives the points of the test
# cell the cases under it belong to, and a case earns its weight's share of them (grader/judge.py: points x
# passed weight / total weight of the cell). A cell of 1 point with weights 2 and 1 gives 2/3 and 1/3.
CASES = [
    # info_nce_loss: the test cell's 3 points, shared by the weights below
    # equal scores are the one trivial input: that case too scores only next to real values
    Case("test_info_nce_loss", "info_nce_uniform", "equal scores give log(K+1)", LOSS,
         requires=("info_nce_column0",)),
    Case("test_info_nce_loss", "info_nce_column0", "mean InfoNCE with the positive in column 0 (0-dim)",
         LOSS, weight=2, main=True),
    Case("test_info_nce_loss", "info_nce_positive_index",
         "mean InfoNCE with the positive of row i in column positive_index[i] (an int64 tensor [B], or an int)",
         LOSS, weight=2, main=True),
    Case("test_info_nce_loss", "info_nce_float64_stable",
         "float64 rows near 1000 and hundreds below, and float32 rows whose positive lies 100 above the rest, give "
         "the finite loss (log-sum-exp within each row, shifted by its largest score)", STABLE, weight=2),
    Case("test_info_nce_loss", "info_nce_gradient", "differentiable: the gradient a training step needs",
         expect_same(rtol=1e-4, atol=1e-6), kind="property"),
    Case("test_info_nce_loss", "info_nce_dtype", "the scores' dtype kept (float32 or float64, float64 precision)",
         DTYPE, weight=0.5, kind="rule", checks="dtype"),
    Case("test_info_nce_loss", "info_nce_rejects_1d", "a ValueError for scores that are not 2-D (given code)",
         expect_raises("ValueError"), weight=0, kind="given", checks="raises"),
    # nce_loss: the test cell's 3 points, shared by the weights below
    Case("test_nce_loss", "nce_values", "mean NCE loss with the log K shift (0-dim)", LOSS, weight=3, main=True),
    Case("test_nce_loss", "nce_float64_stable", "float64 scores of size 80 give the finite loss (F.logsigmoid)",
         STABLE),
    Case("test_nce_loss", "nce_dtype", "the scores' dtype kept (float32 or float64, float64 precision)", DTYPE,
         weight=0.5, kind="rule", checks="dtype"),
    Case("test_nce_loss", "nce_rejects_no_negative", "a ValueError when there is no negative, K = 0 (given code)",
         expect_raises("ValueError"), weight=0, kind="given", checks="raises"),
    # cosine_scores: the test cell's 2 points, shared by the weights below
    Case("test_cosine_scores", "cosine_values", "cosine similarity over the temperature, shape [B, K+1]",
         expect_same(rtol=1e-4, atol=1e-5), weight=2, main=True),
    Case("test_cosine_scores", "cosine_scale_invariant", "scores do not depend on the vectors' norms",
         expect_same(rtol=1e-4, atol=1e-5), kind="property"),
    Case("test_cosine_scores", "cosine_rejects_batch_mismatch",
         "a ValueError when anchors and candidates disagree in B (given code)", expect_raises("ValueError"),
         weight=0, kind="given", checks="raises"),
    Case("test_cosine_scores", "cosine_rejects_bad_temperature", "a ValueError for a temperature <= 0 (given code)",
         expect_raises("ValueError"), weight=0, kind="given", checks="raises"),
    # gaussian_mutual_information and infonce_mi_lower_bound: the test cell's 2 points, shared by the weights below
    Case("test_mi_functions", "gaussian_mi_values", "I(X;Y) = -d/2 log(1 - rho^2)",
         expect_same(rtol=1e-9, atol=1e-12, numbers="any"), weight=2,
         function="gaussian_mutual_information", main=True),
    Case("test_mi_functions", "gaussian_mi_negative_rho",
         "I(X;Y) = -d/2 log(1 - rho^2) for negative rho, many coordinates and |rho| near 1",
         expect_same(rtol=1e-9, atol=1e-12, numbers="any"), function="gaussian_mutual_information"),
    Case("test_mi_functions", "gaussian_mi_rejects_rho_one", "a ValueError for |rho| >= 1 (given code)",
         expect_raises("ValueError"), weight=0, kind="given", checks="raises", function="gaussian_mutual_information"),
    Case("test_mi_functions", "mi_bound_values", "log(K+1) - L from the mean loss",
         expect_same(rtol=1e-6, atol=1e-6, numbers="any"), weight=2, function="infonce_mi_lower_bound", main=True),
    # a float64 loss and large K: the same formula, its precision kept (a rule: a small share)
    Case("test_mi_functions", "mi_bound_float64",
         "the float64 precision of a float64 mean (0-dim) loss kept for large K",
         expect_same(rtol=1e-9, atol=1e-9, numbers="any"), weight=0.5, kind="rule", checks="dtype",
         function="infonce_mi_lower_bound"),
    Case("test_mi_functions", "mi_bound_rejects_per_sample",
         "a ValueError for per-sample losses, not 0-dim (given code)", expect_raises("ValueError"),
         weight=0, kind="given", checks="raises", function="infonce_mi_lower_bound"),
    # n_pair_loss: the test cell's 1 point, shared by the weights below
    Case("test_n_pair_loss", "n_pair_values", "mean N-pair loss (0-dim), equal to InfoNCE", LOSS,
         weight=2, main=True),
    Case("test_n_pair_loss", "n_pair_large_gaps", "stable for score gaps of 100 (log-sum-exp within each row)",
         expect_same(rtol=1e-5, atol=1e-4, dtype=False)),
    Case("test_n_pair_loss", "n_pair_dtype", "the scores' dtype kept (float32 or float64, float64 precision)", DTYPE,
         weight=0.25, kind="rule", checks="dtype"),
]

# What each function computes on ordinary inputs: the value cases that gate its other cases. Edge-case values
# (stability, large gaps, |rho| near 1) stand alone; the dtypes kept and the float64 precision of the bound are
# rules, gated.
FUNCTIONS, MAIN = function_tables(CASES)
