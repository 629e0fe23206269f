"""Probes for the bonus (masked pre-training and the marginal likelihood of PPCA).

Inputs only: every probe draws its PPCA parameters, covariances, data and mask generators from the
seeded ``gen``, calls the student's functions and returns what they gave, together with the inputs
it used (the judge, grader/checks/bonus_masked_pretraining_bayes.py, computes exact values from
them outside the sandbox: log p(x), the conditionals, and S(x; m) by enumerating every mask).
"""

from __future__ import annotations

import math

import torch

from grader.probes import attempt, probes, with_global_state

PROBES: dict = {}
probe = probes(PROBES)
DTYPE = torch.float64


# ------------------------------------------------------------------------------ fixtures
def _ppca(gen, D: int, K: int, sigma2: float, n: int):
    """Random PPCA parameters W (D, K), mu (D,), a noise variance near ``sigma2``, and n samples (n, D)."""
    W = torch.randn(D, K, generator=gen, dtype=DTYPE)
    mu = torch.randn(D, generator=gen, dtype=DTYPE)
    s2 = float(sigma2 * math.exp(float(torch.rand((), generator=gen, dtype=DTYPE)) - 0.5))
    z = torch.randn(n, K, generator=gen, dtype=DTYPE)
    x = z @ W.T + mu + math.sqrt(s2) * torch.randn(n, D, generator=gen, dtype=DTYPE)
    return W, mu, s2, x


def _spd(gen, D: int):
    """A random covariance (not PPCA-shaped) and a mean."""
    A = torch.randn(D, D, generator=gen, dtype=DTYPE)
    return torch.randn(D, generator=gen, dtype=DTYPE), A @ A.T + 0.5 * torch.eye(D, dtype=DTYPE)


def _child_gen(gen) -> torch.Generator:
    """A fresh generator for the student's mask draws, seeded from ``gen``."""
    return torch.Generator().manual_seed(int(torch.randint(0, 2 ** 31 - 1, (1,), generator=gen)))


def _inputs(W, mu, s2, x) -> dict:
    return {"W": W.clone(), "mu": mu.clone(), "sigma2": s2, "x": x.clone()}


# ------------------------------------------------------------------------------ ppca_log_marginal
# ppca_log_marginal: the test cell's 2 points, shared by the weights below
@probe("test_ppca_log_marginal", "log p(x) = log N(x; mu, W W^T + sigma2 I), one multivariate normal, for x (N, D) -> "
       "(N,) float64", "check_log_marginal", weight=2, main=True)
def lm_batch(ns, gen):
    out = []
    for D, K, s2 in [(5, 2, 0.3), (9, 3, 0.05), (4, 4, 1.7)]:
        W, mu, s2, x = _ppca(gen, D, K, s2, 7)
        rec = _inputs(W, mu, s2, x)
        rec["out"] = attempt(ns.ppca_log_marginal, x, W, mu, s2)
        out.append(rec)
    return out


@probe("test_ppca_log_marginal", "a single x (D,) gives a 0-d tensor", "check_single_log_marginal", kind="rule",
       checks="input form")
def lm_single(ns, gen):
    out = []
    for D, K, s2 in [(6, 2, 0.2), (3, 1, 0.8)]:
        W, mu, s2, x = _ppca(gen, D, K, s2, 1)
        out.append(attempt(ns.ppca_log_marginal, x[0], W, mu, s2))
    return out


@probe("test_ppca_log_marginal", "gradients reach W, mu and sigma2 (everything in torch)", "GRAD")
def lm_gradient(ns, gen):
    W, mu, s2, x = _ppca(gen, 4, 2, 0.5, 5)
    W, mu = W.clone().requires_grad_(True), mu.clone().requires_grad_(True)
    log_s2 = torch.tensor(math.log(s2), dtype=DTYPE, requires_grad=True)
    ns.ppca_log_marginal(x, W, mu, log_s2.exp()).sum().backward()
    return [W.grad, mu.grad, log_s2.grad]


@probe("test_ppca_log_marginal", "a ValueError when W, mu and x disagree in shape", "RAISES_VALUE_ERROR", kind="rule",
       checks="raises")
def lm_rejects_shapes(ns, gen):
    W, mu, s2, x = _ppca(gen, 4, 2, 0.5, 2)
    return [attempt(ns.ppca_log_marginal, x[0, :3].clone(), W, mu, s2),       # x has D - 1 coordinates
            attempt(ns.ppca_log_marginal, x[0], W, mu[:3].clone(), s2)]       # mu has D - 1 entries


# ------------------------------------------------------------------------------ gaussian_conditional
def _conditional_calls(ns, gen, shapes, order: str, n_rows: int | None = 3):
    out = []
    for D, m in shapes:
        mu, S = _spd(gen, D)
        x = torch.randn(n_rows or 1, D, generator=gen, dtype=DTYPE)
        x = x if n_rows else x[0]
        idx = torch.randperm(D, generator=gen)[:m]
        if order == "sorted":
            idx = idx.sort().values
        elif bool((idx[1:] > idx[:-1]).all()):   # make sure the order is not increasing
            idx = idx.flip(0)
        rec = {"mu": mu.clone(), "S": S.clone(), "x": x.clone(), "idx": idx.clone()}
        rec["out"] = attempt(ns.gaussian_conditional, mu, S, x, idx)
        out.append(rec)
    return out


# gaussian_conditional: the test cell's 3 points, shared by the weights below
@probe("test_gaussian_conditional", "mean mu_M + S_MR S_RR^-1 (x_R - mu_R) and Schur-complement covariance S_MM - "
       "S_MR S_RR^-1 S_RM, for x (N, D)", "check_conditional", weight=2, main=True)
def gc_values(ns, gen):
    # D = 6, |M| = 3 = |R|: the slide's S_MR^T then has the right shape but the wrong value.
    return _conditional_calls(ns, gen, [(6, 3), (7, 1), (5, 4), (6, 2)], "sorted")


@probe("test_gaussian_conditional", "outputs in the order of masked_idx", "check_conditional")
def gc_order(ns, gen):
    return _conditional_calls(ns, gen, [(6, 3), (5, 2)], "unsorted")


@probe("test_gaussian_conditional", "a single x (D,) gives cond_mean (m,)", "check_conditional", kind="rule",
       checks="input form")
def gc_single(ns, gen):
    return _conditional_calls(ns, gen, [(6, 3), (4, 1)], "unsorted", n_rows=None)


@probe("test_gaussian_conditional", "R empty (everything masked): the marginal N(mu_M, S_MM)", "check_conditional",
       kind="property")
def gc_all_masked(ns, gen):
    return _conditional_calls(ns, gen, [(4, 4), (3, 3)], "unsorted")


@probe("test_gaussian_conditional", "a ValueError for inconsistent shapes", "RAISES_VALUE_ERROR", kind="rule",
       checks="raises")
def gc_rejects_shapes(ns, gen):
    mu, S = _spd(gen, 3)
    x = torch.randn(4, generator=gen, dtype=DTYPE)
    idx = torch.tensor([int(torch.randint(0, 3, (1,), generator=gen))])
    return [attempt(ns.gaussian_conditional, mu, S, x, idx),                    # x of length 4, S 3 x 3
            attempt(ns.gaussian_conditional, mu, S[:2].clone(), x[:3].clone(), idx)]  # S not square


@probe("test_gaussian_conditional", "a ValueError for indices out of range or repeated", "RAISES_VALUE_ERROR",
       kind="rule", checks="raises")
def gc_rejects_indices(ns, gen):
    mu, S = _spd(gen, 3)
    x = torch.randn(3, generator=gen, dtype=DTYPE)
    i = int(torch.randint(0, 3, (1,), generator=gen))
    return [attempt(ns.gaussian_conditional, mu, S, x, torch.tensor([i, 3])),   # 3 is out of range for D = 3
            attempt(ns.gaussian_conditional, mu, S, x, torch.tensor([i, i]))]   # repeated


# ------------------------------------------------------------------------------ masked_score
def _score_calls(ns, gen, D, K, s2, n_rows, sizes, n_masks):
    W, mu, s2, x = _ppca(gen, D, K, s2, n_rows)
    x = x[0] if n_rows == 1 else x
    rec = _inputs(W, mu, s2, x)
    rec["n_masks"] = n_masks
    rec["calls"] = [[m, attempt(ns.masked_score, x, W, mu, s2, m, n_masks, _child_gen(gen))] for m in sizes]
    return rec


# masked_score: the test cell's 3 points, shared by the weights below
@probe("test_masked_score", "S(x; m) estimated by (1/m) sum_{j in M} log p(x_j | x_R) over uniform masks of size m "
       "(within 4 standard errors of the exact value)", "check_score_estimates", weight=2, main=True)
def ms_estimate(ns, gen):
    return _score_calls(ns, gen, 6, 2, 0.1, 1, (1, 2, 3, 5), 200)


@probe("test_masked_score", "standard error = sample standard deviation of the per-mask values / sqrt(n_masks)",
       "check_score_standard_errors")
def ms_standard_error(ns, gen):
    return _score_calls(ns, gen, 6, 2, 0.1, 1, (2, 4), 300)


@probe("test_masked_score", "x (N, D): each mask's value averaged over the N rows", "check_score_estimates", main=True)
def ms_batch(ns, gen):
    return _score_calls(ns, gen, 6, 2, 0.1, 5, (2, 4), 200)


@probe("test_masked_score", "m = D: the mean marginal log-density, exactly, two 0-d tensors", "check_full_mask",
       kind="property")
def ms_full_mask(ns, gen):
    W, mu, s2, x = _ppca(gen, 5, 2, 0.2, 3)
    return [attempt(ns.masked_score, x[0], W, mu, s2, 5, 4, _child_gen(gen)),
            attempt(ns.masked_score, x, W, mu, s2, 5, 3, _child_gen(gen))]


@probe("test_masked_score", "the estimate stays differentiable in W, mu and sigma2", "GRAD")
def ms_gradient(ns, gen):
    W, mu, s2, x = _ppca(gen, 4, 2, 0.3, 3)
    W, mu = W.clone().requires_grad_(True), mu.clone().requires_grad_(True)
    log_s2 = torch.tensor(math.log(s2), dtype=DTYPE, requires_grad=True)
    est, _ = ns.masked_score(x, W, mu, log_s2.exp(), 4, 3, _child_gen(gen))
    est.backward()
    return [W.grad, mu.grad, log_s2.grad]


@probe("test_masked_score", "masks drawn with `generator`: the same seed reproduces the estimate", "check_generator",
       kind="rule", checks="generator")
def ms_generator(ns, gen):
    """Seeds s, s and s + 1: 30 masks among the C(8, 3) = 56 of size 3, so two seeds give the same
    estimate only if they draw the same multiset of masks (probability about 1e-20)."""
    W, mu, s2, x = _ppca(gen, 8, 2, 0.1, 1)
    seed = int(torch.randint(0, 2 ** 31 - 1, (1,), generator=gen))
    return [attempt(ns.masked_score, x[0], W, mu, s2, 3, 30, torch.Generator().manual_seed(s))
            for s in (seed, seed, seed + 1)]


@probe("test_masked_score", "masks drawn with `generator` (torch.randperm(D, generator=generator)): the global random "
       "state is left alone", "check_global_state", requires=("ms_estimate", "ms_batch"), kind="rule",
       checks="global state")
def ms_global_state(ns, gen):
    W, mu, s2, x = _ppca(gen, 6, 2, 0.1, 2)
    return with_global_state(ns.masked_score, x, W, mu, s2, 3, 10, _child_gen(gen))


@probe("test_masked_score", "a ValueError unless 1 <= m <= D", "RAISES_VALUE_ERROR",
       requires=("ms_estimate", "ms_batch"), kind="rule", checks="raises")
def ms_rejects_m(ns, gen):
    W, mu, s2, x = _ppca(gen, 5, 2, 0.2, 1)
    return [attempt(ns.masked_score, x[0], W, mu, s2, 0, 10, _child_gen(gen)),
            attempt(ns.masked_score, x[0], W, mu, s2, 6, 10, _child_gen(gen))]


# ------------------------------------------------------------------------------ masked_pretraining_objective
def _objective_calls(ns, gen, sizes: tuple):
    out = []
    for D, K, s2, N in [(6, 2, 0.1, 1), (5, 1, 0.3, 4)]:
        W, mu, s2, x = _ppca(gen, D, K, s2, N)
        x = x[0] if N == 1 else x
        rec = _inputs(W, mu, s2, x)
        rec["n_masks"] = list(sizes)
        rec["calls"] = [attempt(ns.masked_pretraining_objective, x, W, mu, s2, n, _child_gen(gen)) for n in sizes]
        out.append(rec)
    return out


# masked_pretraining_objective: the test cell's 2 points, shared by the weights below
@probe("test_masked_pretraining_objective", "Proposition 1: sum over m = 1..D of S(x; m) lands within four true "
       "standard errors of log p(x)", "check_objective_estimate", weight=2, main=True)
def mo_estimate(ns, gen):
    # 100 masks per m: the judge allows four true standard errors (a correct answer misses with probability
    # about 6e-5); every wrong sum of grader/mutants/ misses by far more than that
    return _objective_calls(ns, gen, (100,))


@probe("test_masked_pretraining_objective", "standard error of the sum = sqrt(sum_m SE_m^2), two 0-d tensors",
       "check_objective_standard_error", main=True)
def mo_standard_error(ns, gen):
    # 100 masks per m: a correct standard error lands within 0.87-1.12 of the true one (600 draws), the judge's
    # range is 0.7-1.4
    return _objective_calls(ns, gen, (100,))


@probe("test_masked_pretraining_objective", "your estimates of (d), masks drawn with `generator`: the same seed "
       "reproduces the sum, another seed gives another", "check_generator", kind="rule", checks="generator")
def mo_generator(ns, gen):
    """Seeds s, s and s + 1 with 20 masks for every m of D = 7."""
    W, mu, s2, x = _ppca(gen, 7, 2, 0.1, 1)
    seed = int(torch.randint(0, 2 ** 31 - 1, (1,), generator=gen))
    return [attempt(ns.masked_pretraining_objective, x[0], W, mu, s2, 20, torch.Generator().manual_seed(s))
            for s in (seed, seed, seed + 1)]


@probe("test_masked_pretraining_objective", "your estimates of (d), masks drawn with `generator`: the global random "
       "state is left alone", "check_global_state", requires=("mo_estimate", "mo_standard_error"), kind="rule",
       checks="global state")
def mo_global_state(ns, gen):
    W, mu, s2, x = _ppca(gen, 5, 2, 0.1, 2)
    return with_global_state(ns.masked_pretraining_objective, x, W, mu, s2, 5, _child_gen(gen))
