"""The judge's cases for the bonus (masked pre-training and the marginal likelihood of PPCA),
compared outside the sandbox.

Each case is declared by its probe in grader/probes/bonus_masked_pretraining_bayes.py (where it says, in the words
of the task text, what it checks); this module holds the comparators it names. Deterministic values (log p(x), the
Gaussian conditional, gradients) are compared with the solution's value from the same probe. The Monte-Carlo
estimates are compared with exact values computed here from the probe's inputs, by references deliberately computed
*differently* from the way the notebook asks students to do it:

- log p(x) comes from SciPy's multivariate normal (float64 NumPy), not from a Cholesky in torch;
- the Gaussian conditional comes from the precision matrix Lambda = S^-1
  (cov = Lambda_MM^-1, mean = mu_M - Lambda_MM^-1 Lambda_MR (x_R - mu_R)), not from S_RR^-1;
- the masked score S(x; m) is computed *exactly* by enumerating all C(D, m) masks, so the
  Monte-Carlo estimates are compared with a known target and a known standard deviation.

Messages say what is wrong (how many standard errors off, which shape) without the hidden inputs or
the expected values.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import torch
from scipy.stats import multivariate_normal

from grader.compare import (SE_RATIO_RANGE, as_numpy64, as_returned, as_scalar_float, describe, expect_raises,
                            expect_same, global_states_moved)
from grader.evidence import Raised
from grader.cases import declared_cases, function_tables
from grader.probes.bonus_masked_pretraining_bayes import PROBES

DTYPE = torch.float64

#: The task text's tolerances: a masked score, and Proposition 1's sum over the mask sizes, within four
#: true standard errors of the exact value (a normal estimate misses with probability about 6e-5).
SCORE_SIGMAS = 4.0
OBJECTIVE_SIGMAS = 4.0


# ----------------------------------------------------------------------------------------------
# Exact values the comparators need (the random PPCA inputs of the tests are in
# tests/references/bonus_masked_pretraining_bayes.py)
# ----------------------------------------------------------------------------------------------

def ref_covariance(W, sigma2) -> np.ndarray:
    W = np.asarray(W, dtype=np.float64)
    return W @ W.T + float(sigma2) * np.eye(W.shape[0])


def ref_log_marginal(x, W, mu, sigma2) -> np.ndarray:
    """log N(x; mu, W W^T + sigma2 I) by SciPy; x (D,) -> float, x (N, D) -> (N,)."""
    S = ref_covariance(W, sigma2)
    return np.asarray(multivariate_normal(mean=np.asarray(mu, dtype=np.float64), cov=S).logpdf(np.asarray(x)))


def ref_conditional(mu, S, x, masked_idx):
    """p(x_M | x_R) from the precision matrix. Returns (mean (..., m), cov (m, m)) as NumPy."""
    mu, S, x = (np.asarray(a, dtype=np.float64) for a in (mu, S, x))
    M = np.asarray(masked_idx, dtype=np.int64)
    D = S.shape[0]
    R = np.setdiff1d(np.arange(D), M)
    if len(R) == 0:
        return np.broadcast_to(mu[M], x.shape[:-1] + (len(M),)).copy(), S[np.ix_(M, M)].copy()
    Lam = np.linalg.inv(S)
    cov = np.linalg.inv(Lam[np.ix_(M, M)])
    mean = mu[M] - (x[..., R] - mu[R]) @ (cov @ Lam[np.ix_(M, R)]).T
    return mean, cov


def _all_mask_values(x, W, mu, sigma2, m: int) -> np.ndarray:
    """(1/m) sum_{j in M} log p(x_j | x_R) for every mask M of size m (rows of x averaged)."""
    S = ref_covariance(W, sigma2)
    x = np.atleast_2d(np.asarray(x, dtype=np.float64))
    D = S.shape[0]
    values = []
    for M in itertools.combinations(range(D), m):
        mean, cov = ref_conditional(mu, S, x, list(M))
        var = np.diag(cov)
        logp = -0.5 * (np.log(2 * np.pi * var) + (x[:, list(M)] - mean) ** 2 / var)
        values.append(logp.mean(axis=1).mean())
    return np.array(values)


def exact_masked_score(x, W, mu, sigma2, m: int) -> tuple[float, float]:
    """Exact S(x; m) by enumerating all C(D, m) masks, and the standard deviation of the
    per-mask value over uniformly drawn masks (what one Monte-Carlo sample scatters by)."""
    v = _all_mask_values(x, W, mu, sigma2, m)
    return float(v.mean()), float(v.std())


def exact_objective_se(x, W, mu, sigma2, n_masks: int) -> float:
    """The standard error of sum_m S-hat(x; m) with n_masks uniform masks per m, from the enumeration."""
    D = np.asarray(W).shape[0]
    return math.sqrt(sum(exact_masked_score(x, W, mu, sigma2, m)[1] ** 2 for m in range(1, D + 1)) / n_masks)


# ----------------------------------------------------------------------------------------------
# Comparators (check(got, ref) for the judge)
# ----------------------------------------------------------------------------------------------

def _estimate_pair(out, where: str) -> tuple[float, float]:
    """(estimate, standard_error): two 0-d float64 tensors."""
    as_returned(out, where)
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        raise AssertionError(f"{where}: return a tuple (estimate, standard_error), but it {describe(out)}"
                             + (f" of length {len(out)}" if isinstance(out, (tuple, list)) else ""))
    return (as_scalar_float(out[0], f"{where}: the estimate", DTYPE),
            as_scalar_float(out[1], f"{where}: the standard error", DTYPE))


LOGP = expect_same(rtol=1e-8, atol=1e-8)
GRAD = expect_same(rtol=1e-6, atol=1e-8)

#: The erratum of (a): the talk's snippet Normal(torch.zeros(D), S).log_prob(x), said back to the student.
NORMAL_SLIP = ("this looks like the talk's snippet (the erratum in (a)): torch.distributions.Normal is a ONE-dimensional "
               "normal applied elementwise, so Normal(mu, S) reads every entry of the covariance S as the standard "
               "deviation of its own scalar normal (and rejects negative entries). p(x) is ONE multivariate normal: "
               "MultivariateNormal(mu, covariance_matrix=S), or the Cholesky formula of the text.")


def _normal_slip(out) -> bool:
    """Whether ``out`` is what the talk's snippet gives: an error naming the parameters of a 1-D ``Normal``
    (its scale S has negative entries), or a square D x D array of elementwise log-densities."""
    if isinstance(out, Raised):
        return "distribution Normal(" in out.message
    return isinstance(out, torch.Tensor) and out.dim() == 2 and out.shape[0] == out.shape[1]


def check_log_marginal(got, ref) -> None:
    """log p(x) for x (N, D); recognises the product of independent per-coordinate normals."""
    if not isinstance(got, list) or len(got) != len(ref):
        raise AssertionError(f"expected {len(ref)} results, but it {describe(got)}")
    for i, (g, r) in enumerate(zip(got, ref)):
        where = f"call {i + 1} (x of shape {tuple(r['x'].shape)})"
        out = g.get("out") if isinstance(g, dict) else g
        if _normal_slip(out):
            raise AssertionError(f"{where}: it {describe(out)}; {NORMAL_SLIP}")
        try:
            LOGP(out, r["out"], where)
        except AssertionError:
            if isinstance(out, torch.Tensor) and tuple(out.shape) == tuple(r["out"].shape):
                var = np.diag(ref_covariance(r["W"], r["sigma2"]))
                x, mu = as_numpy64(r["x"]), as_numpy64(r["mu"])
                independent = (-0.5 * (np.log(2 * np.pi * var) + (x - mu) ** 2 / var)).sum(axis=1)
                if np.allclose(as_numpy64(out), independent, rtol=1e-6, atol=1e-6):
                    raise AssertionError(
                        f"{where}: the values are the log-likelihood of independent coordinates (a product of "
                        "one-dimensional normals with the marginal variances): it ignores the correlations "
                        "W W^T puts between coordinates. p(x) is ONE multivariate normal N(mu, W W^T + sigma2 I)."
                    ) from None
            raise


def check_single_log_marginal(got, ref) -> None:
    """log p(x) of single points x (D,): 0-d tensors; says the erratum back to the talk's snippet."""
    for i, out in enumerate(got if isinstance(got, list) else []):
        if _normal_slip(out):
            raise AssertionError(f"call {i + 1}: it {describe(out)}; {NORMAL_SLIP}")
    LOGP(got, ref)


def check_conditional(got, ref) -> None:
    """(cond_mean, cond_cov) of every call; recognises the slide's '+' covariance and transposed mean."""
    if not isinstance(got, list) or len(got) != len(ref):
        raise AssertionError(f"expected {len(ref)} results, but it {describe(got)}")
    compare = expect_same(rtol=1e-7, atol=1e-9)
    for i, (g, r) in enumerate(zip(got, ref)):
        D, m = int(r["S"].shape[0]), int(r["idx"].numel())
        where = f"call {i + 1} (D = {D}, {m} masked)"
        out = as_returned(g.get("out") if isinstance(g, dict) else g, where)
        if not isinstance(out, (tuple, list)) or len(out) != 2:
            raise AssertionError(f"{where}: return a tuple (cond_mean, cond_cov), but it {describe(out)}")
        _slide_plus(out[1], r)
        compare(out[1], r["out"][1], f"{where}, cond_cov")
        compare(out[0], r["out"][0], f"{where}, cond_mean")


def _slide_plus(cov, r) -> None:
    """Raise the erratum's message when cov is S_MM + S_MR S_RR^-1 S_RM."""
    if not isinstance(cov, torch.Tensor) or tuple(cov.shape) != tuple(r["out"][1].shape):
        return
    S, M = as_numpy64(r["S"]), as_numpy64(r["idx"]).astype(np.int64)
    R = np.setdiff1d(np.arange(S.shape[0]), M)
    if len(R) == 0:
        return
    plus = S[np.ix_(M, M)] + S[np.ix_(M, R)] @ np.linalg.solve(S[np.ix_(R, R)], S[np.ix_(R, M)])
    if np.allclose(as_numpy64(cov), plus, rtol=1e-6, atol=1e-8):
        raise AssertionError("cond_cov = S_MM + S_MR S_RR^-1 S_RM is the slide's erratum: conditioning REDUCES "
                             "uncertainty, the covariance is the Schur complement S_MM - S_MR S_RR^-1 S_RM")


def check_score_estimates(got, ref) -> None:
    """Every S-hat(x; m) lies within SCORE_SIGMAS true standard errors of the exact S(x; m)."""
    if not isinstance(got, dict) or not isinstance(got.get("calls"), list) or len(got["calls"]) != len(ref["calls"]):
        raise AssertionError(f"no estimates: it {describe(got)}")
    n = int(ref["n_masks"])
    for (_, out), (m, _) in zip(got["calls"], ref["calls"]):
        where = f"S(x; {m})" + (f" for x of shape {tuple(ref['x'].shape)}" if ref["x"].dim() == 2 else "")
        est, _se = _estimate_pair(out, where)
        exact, sd = exact_masked_score(ref["x"], ref["W"], ref["mu"], ref["sigma2"], int(m))
        true_se = sd / math.sqrt(n)
        if abs(est - exact) > SCORE_SIGMAS * true_se + 1e-9:
            raise AssertionError(
                f"{where} with {n} masks is {abs(est - exact) / true_se:.1f} standard errors from the exact value "
                "(every mask enumerated). Each mask of size m contributes (1/m) sum_j log p(x_j | x_R), every "
                "masked x_j predicted on its own from the UNmasked coordinates only"
                + (", averaged over the rows of x." if ref["x"].dim() == 2 else "."))


def check_score_standard_errors(got, ref) -> None:
    """The reported standard error is about sd / sqrt(n_masks) (sd: the exact per-mask scatter)."""
    if not isinstance(got, dict) or not isinstance(got.get("calls"), list) or len(got["calls"]) != len(ref["calls"]):
        raise AssertionError(f"no estimates: it {describe(got)}")
    n = int(ref["n_masks"])
    for (_, out), (m, _) in zip(got["calls"], ref["calls"]):
        _est, se = _estimate_pair(out, f"S(x; {m})")
        _, sd = exact_masked_score(ref["x"], ref["W"], ref["mu"], ref["sigma2"], int(m))
        ratio = se / (sd / math.sqrt(n))
        if not SE_RATIO_RANGE[0] <= ratio <= SE_RATIO_RANGE[1]:
            raise AssertionError(f"the standard error of S(x; {m}) with {n} masks is {ratio:.3g} times the true one: "
                                 "report the sample standard deviation of the per-mask values over sqrt(n_masks)")


def check_full_mask(got, ref) -> None:
    """m = D: one possible mask, S(x; D) exact (the mean marginal log-density), standard error 0."""
    if not isinstance(got, list) or len(got) != len(ref):
        raise AssertionError(f"expected {len(ref)} results, but it {describe(got)}")
    for i, (g, r) in enumerate(zip(got, ref)):
        est, se = _estimate_pair(g, f"call {i + 1}")
        want = float(r[0])
        if abs(est - want) > 1e-8 * (1 + abs(want)):
            raise AssertionError(f"call {i + 1}: S(x; D) is off by {abs(est - want):.3g}; with m = D every mask is "
                                 "the full set, so the value is the mean marginal log-density log p(x_j)")
        if abs(se) > 1e-8:
            raise AssertionError(f"call {i + 1}: with m = D every mask gives the same value, so the standard "
                                 f"error is 0, not {se:.3g}")


def check_generator(got, ref) -> None:
    """Same generator seed, same estimate; another seed, another estimate."""
    if not isinstance(got, list) or len(got) != 3:
        raise AssertionError(f"expected 3 results, but it {describe(got)}")
    a, b, c = (_estimate_pair(g, f"call {i + 1}")[0] for i, g in enumerate(got))
    if abs(a - b) > 1e-12 * (1 + abs(a)):
        raise AssertionError("two generators with the same seed give different estimates: draw the masks with "
                             "the `generator` argument (torch.randperm(D, generator=generator))")
    if a == c:
        raise AssertionError("generators with different seeds give identical estimates: draw the masks with the "
                             "given `generator`, not with a generator of your own seeded with a fixed number")


def check_global_state(got, ref) -> None:
    """The call returned (estimate, standard_error) and left the global random states of torch, NumPy and
    Python as they were: every mask was drawn with the given generator."""
    names = {"torch": "torch's global random state (torch.randperm without generator=)",
             "numpy": "NumPy's global random state (np.random)", "random": "Python's global random state"}
    moved = global_states_moved(got, ref, lambda g, r: _estimate_pair(g, "the call"), names)
    if moved:
        raise AssertionError(f"the call drew from {' and '.join(moved)}: draw the masks with the `generator` "
                             "argument (torch.randperm(D, generator=generator))")


def check_objective_estimate(got, ref) -> None:
    """Proposition 1: sum_m S-hat(x; m) within OBJECTIVE_SIGMAS true standard errors (every mask enumerated)
    of log p(x). The student's own standard error is checked by check_objective_standard_error."""
    if not isinstance(got, list) or len(got) != len(ref):
        raise AssertionError(f"expected {len(ref)} results, but it {describe(got)}")
    for i, (g, r) in enumerate(zip(got, ref)):
        if not isinstance(g, dict) or not isinstance(g.get("calls"), list) or len(g["calls"]) != len(r["calls"]):
            raise AssertionError(f"case {i + 1}: no estimates")
        exact = float(np.mean(ref_log_marginal(r["x"], r["W"], r["mu"], r["sigma2"])))
        for n, out in zip(r["n_masks"], g["calls"]):
            est, _se = _estimate_pair(out, f"case {i + 1} with {n} masks per m")
            z = abs(est - exact) / exact_objective_se(r["x"], r["W"], r["mu"], r["sigma2"], int(n))
            if not z < OBJECTIVE_SIGMAS:   # NaN fails too
                raise AssertionError(
                    f"case {i + 1}: sum_m S(x; m) is {z:.1f} standard errors from the exact log p(x). Sum S(x; m) "
                    "over ALL mask sizes m = 1..D (no average over m), each an average over masks"
                    + (" and over the rows of x." if r["x"].dim() == 2 else "."))


def check_objective_standard_error(got, ref) -> None:
    """The standard error is about sqrt(sum_m SE_m^2) (the S(x; m) being independent)."""
    if not isinstance(got, list) or len(got) != len(ref):
        raise AssertionError(f"expected {len(ref)} results, but it {describe(got)}")
    for i, (g, r) in enumerate(zip(got, ref)):
        if not isinstance(g, dict) or not isinstance(g.get("calls"), list) or len(g["calls"]) != len(r["calls"]):
            raise AssertionError(f"case {i + 1}: no estimates")
        for n, out in zip(r["n_masks"], g["calls"]):
            _est, se = _estimate_pair(out, f"case {i + 1}")
            ratio = se / exact_objective_se(r["x"], r["W"], r["mu"], r["sigma2"], int(n))
            if not SE_RATIO_RANGE[0] <= ratio <= SE_RATIO_RANGE[1]:
                raise AssertionError(f"case {i + 1}: the standard error is {ratio:.3g} times the true one: the "
                                     "S(x; m) are independent estimates, so it is sqrt(sum_m SE_m^2)")


# ----------------------------------------------------------------------------------------------
# The cases
# ----------------------------------------------------------------------------------------------
# What each comparator checks about the draws of a function that takes a generator
# (tests/test_judge_gates.py).
check_generator.draws = ("same seed", "other seed")
check_global_state.draws = ("global state",)


# Comparators the probes name, besides those above.
RAISES_VALUE_ERROR = expect_raises("ValueError")

# Each case is declared by its probe (grader/probes/bonus_masked_pretraining_bayes.py:
# @probe(cell, says, check, ...)), which names its comparator here: a case's weight is its share of its test
# cell's points.
CASES = declared_cases(PROBES, globals())

# What each function computes on ordinary inputs: the value cases that gate its other cases (grader/judge.py
# value_gates). Edge-case values (the order of masked_idx) stand alone; a single x is an input form (a rule).
FUNCTIONS, MAIN = function_tables(CASES)
