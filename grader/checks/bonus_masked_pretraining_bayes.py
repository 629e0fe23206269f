"""Grader-only checks for solutions/ex01/bonus_masked_pretraining_bayes.ipynb.

The references here are deliberately computed *differently* from the way the notebook asks
students to do it, so a check is an independent second opinion rather than a copy:

- log p(x) comes from SciPy's multivariate normal (float64 NumPy), not from a Cholesky in torch;
- the Gaussian conditional comes from the precision matrix Lambda = S^-1
  (cov = Lambda_MM^-1, mean = mu_M - Lambda_MM^-1 Lambda_MR (x_R - mu_R)), not from S_RR^-1;
- the masked score S(x; m) is computed *exactly* by enumerating all C(D, m) masks, so the
  Monte-Carlo estimates can be compared with a known target and a known standard deviation.

Every ``check_*`` function takes the student's function, raises ``AssertionError`` with a message
that says what went wrong, and uses its own seeded generators (deterministic, no flakes).
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import torch
from scipy.stats import multivariate_normal

DTYPE = torch.float64


# ----------------------------------------------------------------------------------------------
# Independent references
# ----------------------------------------------------------------------------------------------

def random_ppca(D: int, K: int, sigma2: float, seed: int, scale: float = 1.0):
    """Random PPCA parameters: W (D, K), mu (D,), sigma2 (float), all float64."""
    g = torch.Generator().manual_seed(seed)
    W = scale * torch.randn(D, K, generator=g, dtype=DTYPE)
    mu = torch.randn(D, generator=g, dtype=DTYPE)
    return W, mu, float(sigma2)


def ppca_samples(W, mu, sigma2, n: int, seed: int) -> torch.Tensor:
    """n samples x = W z + mu + eps, shape (n, D)."""
    g = torch.Generator().manual_seed(seed)
    D, K = W.shape
    z = torch.randn(n, K, generator=g, dtype=DTYPE)
    eps = math.sqrt(sigma2) * torch.randn(n, D, generator=g, dtype=DTYPE)
    return z @ W.T + mu + eps


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


# ----------------------------------------------------------------------------------------------
# Small assertion helpers
# ----------------------------------------------------------------------------------------------

def _as_tensor(name: str, value) -> torch.Tensor:
    assert isinstance(value, torch.Tensor), f"{name} should be a torch.Tensor, got {type(value).__name__}"
    return value


def _expect(name, got, shape, dtype=DTYPE):
    got = _as_tensor(name, got)
    assert tuple(got.shape) == tuple(shape), f"{name}: expected shape {tuple(shape)}, got {tuple(got.shape)}"
    assert got.dtype == dtype, f"{name}: expected dtype {dtype}, got {got.dtype}"
    assert torch.isfinite(got).all(), f"{name} contains NaN or inf"
    return got.detach().cpu().numpy()


def _expect_raises(fn, exc, what: str):
    try:
        fn()
    except exc:
        return
    except NotImplementedError:
        raise
    except Exception as other:  # a crash is not a clear error message
        raise AssertionError(f"{what}: expected {exc.__name__}, got {type(other).__name__}: {other}") from other
    raise AssertionError(f"{what}: expected {exc.__name__}, but nothing was raised")


# ----------------------------------------------------------------------------------------------
# Checks, one per graded function
# ----------------------------------------------------------------------------------------------

def check_ppca_log_marginal(ppca_log_marginal) -> None:
    """log N(x; mu, W W^T + sigma2 I), single point and batch, gradients, bad shapes."""
    for seed, (D, K, s2) in enumerate([(5, 2, 0.3), (9, 3, 0.05), (4, 4, 1.7)]):
        W, mu, _ = random_ppca(D, K, s2, seed=100 + seed)
        x = ppca_samples(W, mu, s2, 7, seed=200 + seed)
        got = _expect("ppca_log_marginal(x (N, D))", ppca_log_marginal(x, W, mu, s2), (7,))
        want = ref_log_marginal(x, W, mu, s2)
        var = np.diag(ref_covariance(W, s2))
        elementwise = (-0.5 * (np.log(2 * np.pi * var) + (x.numpy() - mu.numpy()) ** 2 / var)).sum(axis=1)
        if np.allclose(got, elementwise, rtol=1e-6, atol=1e-6):
            raise AssertionError("ppca_log_marginal ignores the correlations: it sums elementwise Normal "
                                 "log-densities log N(x_j; mu_j, S_jj). p(x) is ONE multivariate normal N(mu, S).")
        assert np.allclose(got, want, rtol=1e-8, atol=1e-8), (
            f"ppca_log_marginal (D={D}, K={K}, sigma2={s2}): expected {np.round(want, 4)}, got {np.round(got, 4)}")
        single = _expect("ppca_log_marginal(x (D,))", ppca_log_marginal(x[0], W, mu, s2), ())
        assert np.allclose(single, want[0], rtol=1e-8, atol=1e-8), "a single point x (D,) gives a different value"

    # Gradients must flow to W and sigma2 (the fitting experiment needs them).
    W, mu, s2 = random_ppca(4, 2, 0.5, seed=7)
    W = W.clone().requires_grad_(True)
    log_s2 = torch.tensor(math.log(s2), dtype=DTYPE, requires_grad=True)
    x = ppca_samples(W.detach(), mu, s2, 5, seed=8)
    out = ppca_log_marginal(x, W, mu, log_s2.exp()).sum()
    out.backward()
    assert W.grad is not None and log_s2.grad is not None, "no gradient reaches W or sigma2: use torch ops only"

    W, mu, s2 = random_ppca(4, 2, 0.5, seed=9)
    _expect_raises(lambda: ppca_log_marginal(torch.zeros(3, dtype=DTYPE), W, mu, s2), ValueError,
                   "x with the wrong number of dimensions D")
    _expect_raises(lambda: ppca_log_marginal(torch.zeros(4, dtype=DTYPE), W, mu[:3], s2), ValueError,
                   "mu with the wrong length")


def check_gaussian_conditional(gaussian_conditional) -> None:
    """Mean and covariance of p(x_M | x_R) on random SPD matrices (not PPCA-shaped)."""
    g = torch.Generator().manual_seed(31)
    # D = 6, |M| = 3 = |R|: the slide's S_MR^T then has the right shape but the wrong value.
    cases = [(6, [4, 0, 2]), (7, [5]), (5, [3, 1, 0, 4]), (6, [1, 5, 2]), (4, [2, 0, 3, 1])]
    for D, M in cases:
        A = torch.randn(D, D, generator=g, dtype=DTYPE)
        S = A @ A.T + 0.5 * torch.eye(D, dtype=DTYPE)
        mu = torch.randn(D, generator=g, dtype=DTYPE)
        x = torch.randn(3, D, generator=g, dtype=DTYPE)
        idx = torch.tensor(M, dtype=torch.long)
        out = gaussian_conditional(mu, S, x, idx)
        assert isinstance(out, tuple) and len(out) == 2, "return a tuple (cond_mean, cond_cov)"
        mean = _expect("cond_mean for x (N, D)", out[0], (3, len(M)))
        cov = _expect("cond_cov", out[1], (len(M), len(M)))
        want_mean, want_cov = ref_conditional(mu, S, x, M)
        if len(M) < D:
            Mi, Ri = np.array(M), np.setdiff1d(np.arange(D), M)
            Sn = S.numpy()
            plus = Sn[np.ix_(Mi, Mi)] + Sn[np.ix_(Mi, Ri)] @ np.linalg.solve(Sn[np.ix_(Ri, Ri)], Sn[np.ix_(Ri, Mi)])
            if np.allclose(cov, plus, rtol=1e-6, atol=1e-8):
                raise AssertionError("cond_cov = S_MM + S_MR S_RR^-1 S_RM is the slide's erratum: conditioning "
                                     "REDUCES uncertainty, the covariance is the Schur complement S_MM - S_MR S_RR^-1 S_RM")
        assert np.allclose(cov, want_cov, rtol=1e-7, atol=1e-9), (
            f"cond_cov wrong for D={D}, masked_idx={M} (expected the Schur complement S_MM - S_MR S_RR^-1 S_RM)")
        assert np.allclose(mean, want_mean, rtol=1e-7, atol=1e-9), (
            f"cond_mean wrong for D={D}, masked_idx={M}: expected mu_M + S_MR S_RR^-1 (x_R - mu_R) "
            f"(S_MR is the |M| x |R| block; the order of the outputs follows masked_idx)")
        single_mean, single_cov = gaussian_conditional(mu, S, x[1], idx)
        _expect("cond_mean for x (D,)", single_mean, (len(M),))
        assert np.allclose(single_mean.detach().numpy(), want_mean[1], rtol=1e-7, atol=1e-9), (
            "a single x (D,) gives a different mean than the same row inside a batch")

    mu, S = torch.zeros(3, dtype=DTYPE), torch.eye(3, dtype=DTYPE)
    _expect_raises(lambda: gaussian_conditional(mu, S, torch.zeros(4, dtype=DTYPE), torch.tensor([0])),
                   ValueError, "x of length 4 with a 3x3 covariance")
    _expect_raises(lambda: gaussian_conditional(mu, S[:2], torch.zeros(3, dtype=DTYPE), torch.tensor([0])),
                   ValueError, "a non-square covariance")
    _expect_raises(lambda: gaussian_conditional(mu, S, torch.zeros(3, dtype=DTYPE), torch.tensor([0, 3])),
                   ValueError, "masked_idx out of range")
    _expect_raises(lambda: gaussian_conditional(mu, S, torch.zeros(3, dtype=DTYPE), torch.tensor([1, 1])),
                   ValueError, "repeated masked_idx")


def check_masked_score(masked_score) -> None:
    """Monte-Carlo S(x; m) against the exact enumeration, with its standard error."""
    D, K, s2 = 6, 2, 0.1
    W, mu, _ = random_ppca(D, K, s2, seed=41)
    x = ppca_samples(W, mu, s2, 1, seed=42)[0]
    n = 200
    for m in (1, 3, 5):
        est, se = masked_score(x, W, mu, s2, m, n, torch.Generator().manual_seed(1000 + m))
        est = float(_expect(f"S(x; {m}) estimate", est, ()))
        se = float(_expect(f"S(x; {m}) standard error", se, ()))
        exact, sd = exact_masked_score(x, W, mu, s2, m)
        # 4 SE per m (three values of m checked) keeps the chance of failing a correct answer below 1e-4.
        assert abs(est - exact) < 4 * se + 1e-9, (
            f"S(x; {m}) = {est:.4f} +- {se:.4f}, but the exact value (all masks enumerated) is {exact:.4f}. "
            f"Each mask contributes (1/m) sum_j log p(x_j | x_R), every masked x_j conditioned on the "
            f"UNmasked coordinates only.")
        assert 0.6 * sd / math.sqrt(n) <= se <= 1.6 * sd / math.sqrt(n), (
            f"standard error of S(x; {m}) with {n} masks should be about sd/sqrt(n) = {sd / math.sqrt(n):.4f}, "
            f"got {se:.4f} (the sample standard deviation of the per-mask values over sqrt(n_masks))")
    # m = D: no context, one possible mask; the value is the mean marginal log-density, exactly.
    est, se = masked_score(x, W, mu, s2, D, 8, torch.Generator().manual_seed(5))
    exact, _ = exact_masked_score(x, W, mu, s2, D)
    assert abs(float(est) - exact) < 1e-8 and float(se) < 1e-8, f"S(x; D) should be exactly {exact:.6f} with SE 0"

    # A batch (N, D) averages the per-mask value over the rows.
    X = ppca_samples(W, mu, s2, 5, seed=43)
    est, se = masked_score(X, W, mu, s2, 2, n, torch.Generator().manual_seed(7))
    est = float(_expect("S(X; 2) for a batch X (N, D)", est, ()))
    exact, _ = exact_masked_score(X, W, mu, s2, 2)
    assert abs(est - exact) < 4 * float(se) + 1e-9, (
        f"for X (N, D) return the average over rows: expected about {exact:.4f}, got {est:.4f} +- {float(se):.4f}")

    # The generator drives the masks: same seed, same answer; another seed, another answer.
    a = masked_score(x, W, mu, s2, 2, 20, torch.Generator().manual_seed(3))[0]
    b = masked_score(x, W, mu, s2, 2, 20, torch.Generator().manual_seed(3))[0]
    c = masked_score(x, W, mu, s2, 2, 20, torch.Generator().manual_seed(4))[0]
    assert float(a) == float(b), "draw the masks with the `generator` argument, so a seed reproduces the estimate"
    assert float(a) != float(c), "different generators give identical estimates: are the masks random?"
    _expect_raises(lambda: masked_score(x, W, mu, s2, 0, 10, torch.Generator().manual_seed(0)), ValueError,
                   "mask size m = 0")
    _expect_raises(lambda: masked_score(x, W, mu, s2, D + 1, 10, torch.Generator().manual_seed(0)), ValueError,
                   "mask size m > D")


def objective_matches_log_marginal(objective, x, W, mu, sigma2, n_masks: int, seed: int):
    """Return (estimate, se, exact, z) for the cumulative masked objective on (x, W, mu, sigma2)."""
    est, se = objective(x, W, mu, sigma2, n_masks, torch.Generator().manual_seed(seed))
    est = float(_expect("masked_pretraining_objective estimate", est, ()))
    se = float(_expect("masked_pretraining_objective standard error", se, ()))
    exact = float(np.mean(ref_log_marginal(x, W, mu, sigma2)))
    z = abs(est - exact) / se if se > 0 else math.inf
    return est, se, exact, z


def check_masked_pretraining_objective(masked_pretraining_objective) -> None:
    """Proposition 1: sum_m S(x; m) = log p(x), within 3 standard errors (with one re-draw)."""
    for case, (D, K, s2, N) in enumerate([(6, 2, 0.1, 1), (5, 1, 0.3, 4)]):
        W, mu, _ = random_ppca(D, K, s2, seed=51 + case)
        x = ppca_samples(W, mu, s2, N, seed=61 + case)
        x = x[0] if N == 1 else x
        n = 100  # masks per mask size
        est, se, exact, z = objective_matches_log_marginal(masked_pretraining_objective, x, W, mu, s2, n, 71 + case)
        if z >= 3:
            # A correct answer misses 3 SE with probability ~0.3 %; one fresh draw with 4x the masks
            # makes a false alarm ~1e-5, while the usual mistakes miss by tens of SE both times.
            n = 4 * n
            est, se, exact, z = objective_matches_log_marginal(masked_pretraining_objective, x, W, mu, s2,
                                                               n, 171 + case)
        assert z < 3, (
            f"sum_m S(x; m) = {est:.4f} +- {se:.4f} but log p(x) = {exact:.4f} ({z:.1f} standard errors away). "
            f"Sum S(x; m) over ALL mask sizes m = 1..D (no average over m), each an average over masks.")
        # The SE itself must be honest: compare with the exact per-m scatter from the enumeration.
        want_se = math.sqrt(sum(exact_masked_score(x, W, mu, s2, m)[1] ** 2 for m in range(1, D + 1)) / n)
        assert 0.6 * want_se <= se <= 1.6 * want_se, (
            f"standard error {se:.4f} should be about {want_se:.4f}: sqrt(sum_m SE_m^2), the S(x; m) being "
            f"independent estimates")
