"""Given plumbing for Task 1's critic experiments (nothing here is graded).

Correlated Gaussian pairs whose mutual information is known, the optimal critic (the true log density
ratio), a small separable MLP critic and its cosine variant, score matrices with ``k`` fresh negatives,
and a training loop that takes the loss as an argument: the notebook passes in the student's own
``info_nce_loss`` or ``nce_loss`` (and ``cosine_scores`` to the cosine critic), so no loss is implemented
here.
"""

from __future__ import annotations

import math
from typing import Callable

import torch
import torch.nn as nn


def sample_correlated_gaussians(n: int, dim: int, rho: float, generator: torch.Generator):
    """n pairs (x, y) of standard normals, each [n, dim], with corr(x_i, y_i) = rho per coordinate and
    independent coordinates."""
    x = torch.randn(n, dim, generator=generator)
    noise = torch.randn(n, dim, generator=generator)
    return x, rho * x + math.sqrt(1 - rho ** 2) * noise


def optimal_critic(x: torch.Tensor, y: torch.Tensor, rho: float) -> torch.Tensor:
    """The true log density ratio log p(y|x) - log p(y), summed over coordinates.

    x [..., dim] and y [..., dim] broadcastable; returns scores of the broadcast leading shape [...].
    """
    var = 1 - rho ** 2
    per_coordinate = -0.5 * math.log(var) - (y - rho * x) ** 2 / (2 * var) + y ** 2 / 2
    return per_coordinate.sum(-1)


class SeparableCritic(nn.Module):
    """f(x, y) = g(x) . h(y) with two small MLPs: the separable form SimCLR and CLIP use (each side is
    encoded once, however many candidates it is scored against)."""

    def __init__(self, dim: int, hidden: int = 64, out: int = 32):
        super().__init__()
        self.g = nn.Sequential(nn.Linear(dim, hidden), nn.ReLU(), nn.Linear(hidden, out))
        self.h = nn.Sequential(nn.Linear(dim, hidden), nn.ReLU(), nn.Linear(hidden, out))

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """x [..., dim] and y [..., dim] broadcastable; returns scores of the broadcast leading shape [...]."""
        return (self.g(x) * self.h(y)).sum(-1)


class CosineCritic(nn.Module):
    """f(x, y) = cos(g(x), h(y)) / tau: the two MLPs of :class:`SeparableCritic`, scored by ``cosine_scores``
    (anchors [B, D], candidates [B, K+1, D], tau -> [B, K+1]; the notebook passes in the student's function).
    Its scores lie in [-1/tau, 1/tau] whatever the encoders learn."""

    def __init__(self, dim: int, temperature: float, cosine_scores: Callable, hidden: int = 64, out: int = 32):
        super().__init__()
        self.encoders = SeparableCritic(dim, hidden, out)
        self.temperature = temperature
        self.cosine_scores = cosine_scores

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """x [n, 1, dim] (one anchor per row) and y [n, k+1, dim] (its candidates); returns scores [n, k+1]."""
        anchors = self.encoders.g(x[:, 0])
        candidates = self.encoders.h(y)
        return self.cosine_scores(anchors, candidates, self.temperature)


def candidates_near_and_far(x: torch.Tensor, m: int, rho: float, generator: torch.Generator) -> torch.Tensor:
    """Candidates [n, 2m, dim] for anchors x [n, dim]: m drawn from p(y | x) (likely partners), then m from
    the marginal p(y) = N(0, I) (typical negatives), so that they span the range of the true log ratio."""
    n, dim = x.shape
    near = rho * x[:, None, :] + math.sqrt(1 - rho ** 2) * torch.randn(n, m, dim, generator=generator)
    far = torch.randn(n, m, dim, generator=generator)
    return torch.cat([near, far], dim=1)


def scores_with_negatives(critic: Callable, x: torch.Tensor, y_pos: torch.Tensor, k: int,
                          generator: torch.Generator, dim: int) -> torch.Tensor:
    """Score matrix [n, k+1] for anchors x [n, dim]: column 0 scores the positive y_pos [n, dim], columns
    1..k score k negatives per anchor drawn afresh from the marginal N(0, I)."""
    y_neg = torch.randn(x.shape[0], k, dim, generator=generator)
    candidates = torch.cat([y_pos[:, None, :], y_neg], dim=1)      # [n, k+1, dim]
    return critic(x[:, None, :], candidates)                         # [n, k+1]


def train_critic(loss_fn: Callable, k: int, *, dim: int, rho: float, steps: int, batch: int,
                 generator: torch.Generator, lr: float = 3e-3, progress: bool = True, critic: nn.Module | None = None):
    """Train ``critic`` (by default a fresh :class:`SeparableCritic`) with ``k`` negatives per anchor from the
    marginal.

    Every step draws ``batch`` new pairs, scores each anchor against its positive (column 0) and ``k``
    fresh negatives, and takes an Adam step on ``loss_fn(scores)`` (scores [batch, k+1] -> a 0-dim mean
    loss; the notebook passes the student's ``info_nce_loss``). Fresh data at every step, so each
    recorded loss is an unbiased estimate of the current critic's expected loss.

    Returns (critic, losses): the trained critic and the list of ``steps`` training losses (floats, nats),
    each measured before that step's update.
    """
    from tqdm.auto import tqdm

    critic = SeparableCritic(dim) if critic is None else critic
    optimizer = torch.optim.Adam(critic.parameters(), lr=lr)
    losses = []
    threads = torch.get_num_threads()
    torch.set_num_threads(1)   # matrices of a few thousand numbers: too little work to split across threads
    try:
        for _ in tqdm(range(steps), desc=f"critic, K = {k}", leave=False, disable=not progress):
            x, y = sample_correlated_gaussians(batch, dim, rho, generator)
            loss = loss_fn(scores_with_negatives(critic, x, y, k, generator, dim))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
    finally:
        torch.set_num_threads(threads)
    return critic, losses
