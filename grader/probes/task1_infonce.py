"""Probes for Task 1 (InfoNCE). Inputs only: the judge (grader/checks/task1_infonce.py) compares."""

from __future__ import annotations

import torch

from grader.probes import attempt, probes

PROBES: dict = {}
probe = probes(PROBES)


# ------------------------------------------------------------------------------ info_nce_loss
# info_nce_loss: the test cell's 3 points, shared by the weights below
# equal scores are the one trivial input: that case too scores only next to real values
@probe("test_info_nce_loss", "equal scores give log(K+1)", "LOSS", requires=("info_nce_column0",))
def info_nce_uniform(ns, gen):
    b, k = int(torch.randint(2, 9, (1,), generator=gen)), int(torch.randint(1, 30, (1,), generator=gen))
    return ns.info_nce_loss(torch.zeros(b, k + 1))


@probe("test_info_nce_loss", "mean InfoNCE with the positive in column 0 (0-dim)", "LOSS", weight=2, main=True)
def info_nce_column0(ns, gen):
    out = []
    for batch, k in [(1, 1), (5, 3), (16, 31), (7, 255)]:
        scores = torch.randn(batch, k + 1, generator=gen) * 3
        out.append(attempt(ns.info_nce_loss, scores))
    return out


@probe("test_info_nce_loss", "mean InfoNCE with the positive of row i in column positive_index[i] (an int64 tensor "
       "[B], or an int)", "LOSS", weight=2, main=True)
def info_nce_positive_index(ns, gen):
    out = []
    for batch, k in [(5, 3), (16, 31)]:
        scores = torch.randn(batch, k + 1, generator=gen) * 3
        pos = torch.randint(0, k + 1, (batch,), generator=gen)
        out.append(attempt(ns.info_nce_loss, scores, pos))
    scores = torch.randn(4, 6, generator=gen)
    out.append(attempt(ns.info_nce_loss, scores, 2))  # an int: the same column for every row
    return out


@probe("test_info_nce_loss", "float64 rows near 1000 and hundreds below, and float32 rows whose positive lies 100 "
       "above the rest, give the finite loss (log-sum-exp within each row, shifted by its largest score)", "STABLE",
       weight=2)
def info_nce_float64_stable(ns, gen):
    """Rows hundreds apart: exp(1000) overflows, and shifting every row by the batch's largest score (instead of
    each row's own) underflows the rows near 600 and -700 to log 0. Then float32 rows with a large positive."""
    big = torch.tensor([[1000.0, 999.0, -1000.0], [600.0, 598.0, 601.0], [-700.0, -699.0, -702.0]],
                       dtype=torch.float64)
    noise = torch.randn(3, 3, generator=gen).double()
    # float32 rows whose positive lies about 100 above the rest: a shift by anything but the row's largest
    # score (the largest negative, the smallest score, none) overflows exp(100) > 3.4e38 to inf
    gap = torch.tensor([[100.0, 0.0, 0.0], [90.0, 1.0, -3.0]]) + 0.1 * torch.randn(2, 3, generator=gen)
    return [attempt(ns.info_nce_loss, big + noise), attempt(ns.info_nce_loss, gap)]


@probe("test_info_nce_loss", "differentiable: the gradient a training step needs", "GRADIENT", kind="property")
def info_nce_gradient(ns, gen):
    s = torch.randn(4, 6, generator=gen, requires_grad=True)
    ns.info_nce_loss(s).backward()
    return s.grad


@probe("test_info_nce_loss", "the scores' dtype kept (float32 or float64, float64 precision)", "DTYPE", weight=0.5,
       kind="rule", checks="dtype")
def info_nce_dtype(ns, gen):
    """float32 and float64 scores of ordinary size: the loss comes back in the scores' dtype."""
    return [attempt(ns.info_nce_loss, torch.randn(6, 9, generator=gen, dtype=dtype) * 3)
            for dtype in (torch.float32, torch.float64)]


@probe("test_info_nce_loss", "a ValueError for scores that are not 2-D (given code)", "RAISES_VALUE_ERROR", weight=0,
       kind="given", checks="raises")
def info_nce_rejects_1d(ns, gen):
    return ns.info_nce_loss(torch.randn(5, generator=gen))


# ------------------------------------------------------------------------------ nce_loss
# nce_loss: the test cell's 3 points, shared by the weights below
@probe("test_nce_loss", "mean NCE loss with the log K shift (0-dim)", "LOSS", weight=3, main=True)
def nce_values(ns, gen):
    out = []
    for batch, k in [(1, 1), (6, 4), (9, 63)]:
        out.append(attempt(ns.nce_loss, torch.randn(batch, k + 1, generator=gen) * 2))
    return out


@probe("test_nce_loss", "float64 scores of size 80 give the finite loss (F.logsigmoid)", "STABLE")
def nce_float64_stable(ns, gen):
    big = torch.tensor([[80.0, -70.0, 60.0]], dtype=torch.float64) + torch.randn(1, 3, generator=gen).double()
    return ns.nce_loss(big)


@probe("test_nce_loss", "the scores' dtype kept (float32 or float64, float64 precision)", "DTYPE", weight=0.5,
       kind="rule", checks="dtype")
def nce_dtype(ns, gen):
    """float32 and float64 scores of ordinary size: the loss comes back in the scores' dtype."""
    return [attempt(ns.nce_loss, torch.randn(6, 9, generator=gen, dtype=dtype) * 2)
            for dtype in (torch.float32, torch.float64)]


@probe("test_nce_loss", "a ValueError when there is no negative, K = 0 (given code)", "RAISES_VALUE_ERROR", weight=0,
       kind="given", checks="raises")
def nce_rejects_no_negative(ns, gen):
    return ns.nce_loss(torch.randn(3, 1, generator=gen))


# ------------------------------------------------------------------------------ cosine_scores
# cosine_scores: the test cell's 2 points, shared by the weights below
@probe("test_cosine_scores", "cosine similarity over the temperature, shape [B, K+1]", "COSINE", weight=2, main=True)
def cosine_values(ns, gen):
    out = []
    for batch, k, dim, tau in [(2, 1, 3, 1.0), (4, 7, 16, 0.1), (3, 5, 8, 0.5)]:
        anchor = torch.randn(batch, dim, generator=gen) * 5
        cands = torch.randn(batch, k + 1, dim, generator=gen) * 0.1
        out.append(attempt(ns.cosine_scores, anchor, cands, tau))
    return out


@probe("test_cosine_scores", "scores do not depend on the vectors' norms", "COSINE", kind="property")
def cosine_scale_invariant(ns, gen):
    a, c = torch.randn(2, 4, generator=gen), torch.randn(2, 3, 4, generator=gen)
    return [ns.cosine_scores(a * 7.0, c * 0.01, 0.2), ns.cosine_scores(a, c, 0.2)]


@probe("test_cosine_scores", "a ValueError when anchors and candidates disagree in B (given code)",
       "RAISES_VALUE_ERROR", weight=0, kind="given", checks="raises")
def cosine_rejects_batch_mismatch(ns, gen):
    return ns.cosine_scores(torch.randn(2, 4, generator=gen), torch.randn(3, 3, 4, generator=gen), 0.5)


@probe("test_cosine_scores", "a ValueError for a temperature <= 0 (given code)", "RAISES_VALUE_ERROR", weight=0,
       kind="given", checks="raises")
def cosine_rejects_bad_temperature(ns, gen):
    a, c = torch.randn(2, 4, generator=gen), torch.randn(2, 3, 4, generator=gen)
    return [attempt(ns.cosine_scores, a, c, 0.0), attempt(ns.cosine_scores, a, c, -0.5)]


# ------------------------------------------------------------------------------ the MI functions
# gaussian_mutual_information and infonce_mi_lower_bound: the test cell's 2 points, shared by the weights below
@probe("test_mi_functions", "I(X;Y) = -d/2 log(1 - rho^2)", "GAUSSIAN_MI", weight=2,
       function="gaussian_mutual_information", main=True)
def gaussian_mi_values(ns, gen):
    rho = float(torch.rand(1, generator=gen)) * 1.8 - 0.9
    return [attempt(ns.gaussian_mutual_information, r, d) for r, d in [(0.5, 1), (0.8, 5), (-0.3, 10), (0.0, 3),
                                                                        (rho, 7)]]


@probe("test_mi_functions", "I(X;Y) = -d/2 log(1 - rho^2) for negative rho, many coordinates and |rho| near 1",
       "GAUSSIAN_MI", function="gaussian_mutual_information")
def gaussian_mi_negative_rho(ns, gen):
    """Negative correlations, many coordinates and |rho| close to 1 (a large but finite MI)."""
    rho = float(torch.rand(1, generator=gen)) * 0.98 + 0.01
    dim = int(torch.randint(8, 129, (1,), generator=gen))
    return [attempt(ns.gaussian_mutual_information, r, d) for r, d in [(-rho, dim), (-0.999, 2), (0.999, 1),
                                                                        (-0.6, 64)]]


@probe("test_mi_functions", "a ValueError for |rho| >= 1 (given code)", "RAISES_VALUE_ERROR", weight=0, kind="given",
       checks="raises", function="gaussian_mutual_information")
def gaussian_mi_rejects_rho_one(ns, gen):
    return [attempt(ns.gaussian_mutual_information, 1.0, 2), attempt(ns.gaussian_mutual_information, -1.0, 3)]


@probe("test_mi_functions", "log(K+1) - L from the mean loss", "BOUND", weight=2, function="infonce_mi_lower_bound",
       main=True)
def mi_bound_values(ns, gen):
    loss = float(torch.rand(1, generator=gen)) * 3
    return [attempt(ns.infonce_mi_lower_bound, torch.tensor(v), k)
            for v, k in [(0.3, 1), (2.0, 15), (4.5, 1023), (loss, 63)]]


# a float64 loss and large K: the same formula, its precision kept (a rule: a small share)
@probe("test_mi_functions", "the float64 precision of a float64 mean (0-dim) loss kept for large K", "BOUND_FLOAT64",
       weight=0.5, kind="rule", checks="dtype", function="infonce_mi_lower_bound")
def mi_bound_float64(ns, gen):
    """Float64 mean losses (as info_nce_loss returns for float64 scores) and large K."""
    losses = torch.rand(3, generator=gen, dtype=torch.float64) * 5
    ks = [int(k) for k in torch.randint(100, 100_000, (3,), generator=gen)]
    return [attempt(ns.infonce_mi_lower_bound, loss, k) for loss, k in zip(losses, ks)]


@probe("test_mi_functions", "a ValueError for per-sample losses, not 0-dim (given code)", "RAISES_VALUE_ERROR",
       weight=0, kind="given", checks="raises", function="infonce_mi_lower_bound")
def mi_bound_rejects_per_sample(ns, gen):
    return ns.infonce_mi_lower_bound(torch.rand(4, generator=gen) + 1.0, 3)


# ------------------------------------------------------------------------------ n_pair_loss
# n_pair_loss: the test cell's 1 point, shared by the weights below
@probe("test_n_pair_loss", "mean N-pair loss (0-dim), equal to InfoNCE", "LOSS", weight=2, main=True)
def n_pair_values(ns, gen):
    out = []
    for batch, k, dtype in [(3, 2, torch.float32), (8, 9, torch.float32), (5, 4, torch.float64)]:
        out.append(attempt(ns.n_pair_loss, torch.randn(batch, generator=gen, dtype=dtype),
                           torch.randn(batch, k, generator=gen, dtype=dtype)))
    return out


@probe("test_n_pair_loss", "stable for score gaps of 100 (log-sum-exp within each row)", "LARGE_GAPS")
def n_pair_large_gaps(ns, gen):
    pos = torch.tensor([-60.0, 0.0, 3.0]) + torch.randn(3, generator=gen)
    neg = torch.tensor([[60.0, 0.0], [1.0, 2.0], [-40.0, 50.0]])
    return ns.n_pair_loss(pos, neg)


@probe("test_n_pair_loss", "the scores' dtype kept (float32 or float64, float64 precision)", "DTYPE", weight=0.25,
       kind="rule", checks="dtype")
def n_pair_dtype(ns, gen):
    """float32 and float64 scores of ordinary size: the loss comes back in the scores' dtype."""
    return [attempt(ns.n_pair_loss, torch.randn(6, generator=gen, dtype=dtype),
                    torch.randn(6, 5, generator=gen, dtype=dtype)) for dtype in (torch.float32, torch.float64)]
