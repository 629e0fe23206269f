"""Probes for Task 1 (InfoNCE). Inputs only: the judge (grader/checks/task1_infonce.py) compares."""

from __future__ import annotations

import torch

from grader.probes import attempt, probes

PROBES: dict = {}
probe = probes(PROBES)


# ------------------------------------------------------------------------------ info_nce_loss
@probe()
def info_nce_uniform(ns, gen):
    b, k = int(torch.randint(2, 9, (1,), generator=gen)), int(torch.randint(1, 30, (1,), generator=gen))
    return ns.info_nce_loss(torch.zeros(b, k + 1))


@probe()
def info_nce_column0(ns, gen):
    out = []
    for batch, k in [(1, 1), (5, 3), (16, 31), (7, 255)]:
        scores = torch.randn(batch, k + 1, generator=gen) * 3
        out.append(attempt(ns.info_nce_loss, scores))
    return out


@probe()
def info_nce_positive_index(ns, gen):
    out = []
    for batch, k in [(5, 3), (16, 31)]:
        scores = torch.randn(batch, k + 1, generator=gen) * 3
        pos = torch.randint(0, k + 1, (batch,), generator=gen)
        out.append(attempt(ns.info_nce_loss, scores, pos))
    scores = torch.randn(4, 6, generator=gen)
    out.append(attempt(ns.info_nce_loss, scores, 2))  # an int: the same column for every row
    return out


@probe()
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


@probe()
def info_nce_gradient(ns, gen):
    s = torch.randn(4, 6, generator=gen, requires_grad=True)
    ns.info_nce_loss(s).backward()
    return s.grad


@probe()
def info_nce_rejects_1d(ns, gen):
    return ns.info_nce_loss(torch.randn(5, generator=gen))


@probe()
def info_nce_dtype(ns, gen):
    """float32 and float64 scores of ordinary size: the loss comes back in the scores' dtype."""
    return [attempt(ns.info_nce_loss, torch.randn(6, 9, generator=gen, dtype=dtype) * 3)
            for dtype in (torch.float32, torch.float64)]


# ------------------------------------------------------------------------------ nce_loss
@probe()
def nce_values(ns, gen):
    out = []
    for batch, k in [(1, 1), (6, 4), (9, 63)]:
        out.append(attempt(ns.nce_loss, torch.randn(batch, k + 1, generator=gen) * 2))
    return out


@probe()
def nce_float64_stable(ns, gen):
    big = torch.tensor([[80.0, -70.0, 60.0]], dtype=torch.float64) + torch.randn(1, 3, generator=gen).double()
    return ns.nce_loss(big)


@probe()
def nce_rejects_no_negative(ns, gen):
    return ns.nce_loss(torch.randn(3, 1, generator=gen))


@probe()
def nce_dtype(ns, gen):
    """float32 and float64 scores of ordinary size: the loss comes back in the scores' dtype."""
    return [attempt(ns.nce_loss, torch.randn(6, 9, generator=gen, dtype=dtype) * 2)
            for dtype in (torch.float32, torch.float64)]


# ------------------------------------------------------------------------------ cosine_scores
@probe()
def cosine_values(ns, gen):
    out = []
    for batch, k, dim, tau in [(2, 1, 3, 1.0), (4, 7, 16, 0.1), (3, 5, 8, 0.5)]:
        anchor = torch.randn(batch, dim, generator=gen) * 5
        cands = torch.randn(batch, k + 1, dim, generator=gen) * 0.1
        out.append(attempt(ns.cosine_scores, anchor, cands, tau))
    return out


@probe()
def cosine_scale_invariant(ns, gen):
    a, c = torch.randn(2, 4, generator=gen), torch.randn(2, 3, 4, generator=gen)
    return [ns.cosine_scores(a * 7.0, c * 0.01, 0.2), ns.cosine_scores(a, c, 0.2)]


@probe()
def cosine_rejects_batch_mismatch(ns, gen):
    return ns.cosine_scores(torch.randn(2, 4, generator=gen), torch.randn(3, 3, 4, generator=gen), 0.5)


@probe()
def cosine_rejects_bad_temperature(ns, gen):
    a, c = torch.randn(2, 4, generator=gen), torch.randn(2, 3, 4, generator=gen)
    return [attempt(ns.cosine_scores, a, c, 0.0), attempt(ns.cosine_scores, a, c, -0.5)]


# ------------------------------------------------------------------------------ the MI functions
@probe()
def gaussian_mi_values(ns, gen):
    rho = float(torch.rand(1, generator=gen)) * 1.8 - 0.9
    return [attempt(ns.gaussian_mutual_information, r, d) for r, d in [(0.5, 1), (0.8, 5), (-0.3, 10), (0.0, 3),
                                                                        (rho, 7)]]


@probe()
def gaussian_mi_negative_rho(ns, gen):
    """Negative correlations, many coordinates and |rho| close to 1 (a large but finite MI)."""
    rho = float(torch.rand(1, generator=gen)) * 0.98 + 0.01
    dim = int(torch.randint(8, 129, (1,), generator=gen))
    return [attempt(ns.gaussian_mutual_information, r, d) for r, d in [(-rho, dim), (-0.999, 2), (0.999, 1),
                                                                        (-0.6, 64)]]


@probe()
def gaussian_mi_rejects_rho_one(ns, gen):
    return [attempt(ns.gaussian_mutual_information, 1.0, 2), attempt(ns.gaussian_mutual_information, -1.0, 3)]


@probe()
def mi_bound_values(ns, gen):
    loss = float(torch.rand(1, generator=gen)) * 3
    return [attempt(ns.infonce_mi_lower_bound, torch.tensor(v), k)
            for v, k in [(0.3, 1), (2.0, 15), (4.5, 1023), (loss, 63)]]


@probe()
def mi_bound_float64(ns, gen):
    """Float64 mean losses (as info_nce_loss returns for float64 scores) and large K."""
    losses = torch.rand(3, generator=gen, dtype=torch.float64) * 5
    ks = [int(k) for k in torch.randint(100, 100_000, (3,), generator=gen)]
    return [attempt(ns.infonce_mi_lower_bound, loss, k) for loss, k in zip(losses, ks)]


@probe()
def mi_bound_rejects_per_sample(ns, gen):
    return ns.infonce_mi_lower_bound(torch.rand(4, generator=gen) + 1.0, 3)


# ------------------------------------------------------------------------------ n_pair_loss
@probe()
def n_pair_values(ns, gen):
    out = []
    for batch, k, dtype in [(3, 2, torch.float32), (8, 9, torch.float32), (5, 4, torch.float64)]:
        out.append(attempt(ns.n_pair_loss, torch.randn(batch, generator=gen, dtype=dtype),
                           torch.randn(batch, k, generator=gen, dtype=dtype)))
    return out


@probe()
def n_pair_large_gaps(ns, gen):
    pos = torch.tensor([-60.0, 0.0, 3.0]) + torch.randn(3, generator=gen)
    neg = torch.tensor([[60.0, 0.0], [1.0, 2.0], [-40.0, 50.0]])
    return ns.n_pair_loss(pos, neg)


@probe()
def n_pair_dtype(ns, gen):
    """float32 and float64 scores of ordinary size: the loss comes back in the scores' dtype."""
    return [attempt(ns.n_pair_loss, torch.randn(6, generator=gen, dtype=dtype),
                    torch.randn(6, 5, generator=gen, dtype=dtype)) for dtype in (torch.float32, torch.float64)]
