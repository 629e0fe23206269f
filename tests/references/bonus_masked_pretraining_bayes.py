"""Random inputs and an in-process study of the bonus (masked pre-training and PPCA), used by
tests/test_bonus_masked_pretraining_bayes.py. The exact values the judge compares with (SciPy's log p(x), the enumerated
masked scores) stay in grader/checks/bonus_masked_pretraining_bayes.py, which the comparators use."""

from __future__ import annotations

import math

import numpy as np
import torch

from grader.checks.bonus_masked_pretraining_bayes import DTYPE, ref_log_marginal


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


def objective_matches_log_marginal(objective, x, W, mu, sigma2, n_masks: int, seed: int):
    """Return (estimate, se, exact, z) for the cumulative masked objective on (x, W, mu, sigma2)
    (used by tests/test_bonus_masked_pretraining_bayes.py to study the solution and wrong objectives in-process)."""
    est, se = objective(x, W, mu, sigma2, n_masks, torch.Generator().manual_seed(seed))
    est, se = float(est), float(se)
    exact = float(np.mean(ref_log_marginal(x, W, mu, sigma2)))
    z = abs(est - exact) / se if se > 0 else math.inf
    return est, se, exact, z
