"""Hidden-test reference checks for Task 1 (InfoNCE). Imported inside hidden test cells only."""

from __future__ import annotations

import math

import numpy as np
import torch

from ._common import as_float_list, assert_close, assert_raises, assert_tensor


# ---------------------------------------------------------------- independent reference formulas
def _ref_info_nce(scores: np.ndarray, pos: np.ndarray) -> float:
    """Mean over rows of -s_pos + log sum_j exp(s_j), in float64 with an explicit max shift."""
    total = 0.0
    for row, p in zip(scores, pos):
        m = max(row)
        lse = m + math.log(sum(math.exp(v - m) for v in row))
        total += lse - row[p]
    return total / len(scores)


def _log_sigmoid(v: float) -> float:
    return -math.log1p(math.exp(-v)) if v >= 0 else v - math.log1p(math.exp(v))


def _ref_nce(scores: np.ndarray) -> float:
    """Sheet's NCE: -[log h(s_0) + sum_k log(1 - h(s_k))], h(s) = sigmoid(s - log K), mean over rows."""
    k = scores.shape[1] - 1
    total = 0.0
    for row in scores:
        shifted = [v - math.log(k) for v in row]
        total -= _log_sigmoid(shifted[0]) + sum(_log_sigmoid(-v) for v in shifted[1:])
    return total / len(scores)


def _ref_cosine_scores(anchor: np.ndarray, cands: np.ndarray, tau: float) -> np.ndarray:
    out = np.empty(cands.shape[:2])
    for b in range(cands.shape[0]):
        a = anchor[b] / math.sqrt(float(anchor[b] @ anchor[b]))
        for j in range(cands.shape[1]):
            c = cands[b, j] / math.sqrt(float(cands[b, j] @ cands[b, j]))
            out[b, j] = float(a @ c) / tau
    return out


# ------------------------------------------------------------------------------------ the checks
def check_info_nce_loss(info_nce_loss) -> None:
    g = torch.Generator().manual_seed(20261)
    for batch, k in [(1, 1), (5, 3), (16, 31), (7, 255)]:
        scores = torch.randn(batch, k + 1, generator=g) * 3
        got = info_nce_loss(scores)
        assert_tensor(got, shape=(), dtype=torch.float32, name="info_nce_loss(scores)")
        assert_close(got, _ref_info_nce(scores.double().numpy(), np.zeros(batch, dtype=int)),
                     rtol=1e-5, atol=1e-5, name=f"InfoNCE, batch {batch}, K={k}")
        pos = torch.randint(0, k + 1, (batch,), generator=g)
        got = info_nce_loss(scores, pos)
        assert_close(got, _ref_info_nce(scores.double().numpy(), pos.numpy()),
                     rtol=1e-5, atol=1e-5, name=f"InfoNCE with positives at {pos.tolist()}")
    # float64 in, float64 out; large scores must not overflow.
    big = torch.tensor([[1000.0, 999.0, -1000.0]], dtype=torch.float64)
    got = info_nce_loss(big)
    assert_tensor(got, shape=(), dtype=torch.float64, name="info_nce_loss(float64 scores)")
    assert_close(got, _ref_info_nce(big.numpy(), np.zeros(1, dtype=int)), rtol=1e-9, atol=1e-9,
                 name="InfoNCE with scores near 1000 (use a stable log-sum-exp)")
    # gradients flow (it is a training loss).
    s = torch.randn(4, 6, generator=g, requires_grad=True)
    info_nce_loss(s).backward()
    if s.grad is None or not torch.isfinite(s.grad).all():
        raise AssertionError("info_nce_loss must be differentiable with finite gradients")
    grad0 = as_float_list(s.grad[:, 0])
    if not all(v < 0 for v in grad0):
        raise AssertionError("raising the positive's score must lower the loss (gradient sign)")
    assert_raises((ValueError,), info_nce_loss, torch.randn(5), what="a 1-D scores tensor")


def check_nce_loss(nce_loss) -> None:
    g = torch.Generator().manual_seed(20262)
    for batch, k in [(1, 1), (6, 4), (9, 63)]:
        scores = torch.randn(batch, k + 1, generator=g) * 2
        got = nce_loss(scores)
        assert_tensor(got, shape=(), dtype=torch.float32, name="nce_loss(scores)")
        assert_close(got, _ref_nce(scores.double().numpy()), rtol=1e-5, atol=1e-5,
                     name=f"NCE, batch {batch}, K={k}")
    big = torch.tensor([[80.0, -70.0, 60.0]], dtype=torch.float64)
    got = nce_loss(big)
    assert_tensor(got, shape=(), dtype=torch.float64, name="nce_loss(float64 scores)")
    assert_close(got, _ref_nce(big.numpy()), rtol=1e-9, atol=1e-9, name="NCE with large scores (stability)")
    assert_raises((ValueError,), nce_loss, torch.randn(3, 1), what="scores with no negative (K = 0)")


def check_cosine_scores(cosine_scores) -> None:
    g = torch.Generator().manual_seed(20263)
    for batch, k, dim, tau in [(2, 1, 3, 1.0), (4, 7, 16, 0.1), (3, 5, 8, 0.5)]:
        anchor = torch.randn(batch, dim, generator=g) * 5
        cands = torch.randn(batch, k + 1, dim, generator=g) * 0.1
        got = cosine_scores(anchor, cands, tau)
        assert_tensor(got, shape=(batch, k + 1), dtype=torch.float32, name="cosine_scores(...)")
        assert_close(got, _ref_cosine_scores(anchor.double().numpy(), cands.double().numpy(), tau),
                     rtol=1e-4, atol=1e-5, name=f"scores with temperature {tau}")
    # scale invariance: cosine similarity ignores the norms
    a, c = torch.randn(2, 4, generator=g), torch.randn(2, 3, 4, generator=g)
    assert_close(cosine_scores(a * 7.0, c * 0.01, 0.2), cosine_scores(a, c, 0.2), rtol=1e-4, atol=1e-5,
                 name="cosine scores must not depend on the vectors' norms")
    assert_raises((ValueError,), cosine_scores, torch.randn(2, 4), torch.randn(3, 3, 4), 0.5,
                  what="anchors and candidates with different batch sizes")
    assert_raises((ValueError,), cosine_scores, torch.randn(2, 4), torch.randn(2, 3, 4), 0.0,
                  what="a temperature of 0")


def check_mi_lower_bound(infonce_mi_lower_bound) -> None:
    for loss, k in [(0.3, 1), (2.0, 15), (4.5, 1023)]:
        got = infonce_mi_lower_bound(torch.tensor(loss), k)
        assert_close(got, math.log(k + 1) - loss, rtol=1e-6, atol=1e-6, name=f"bound for loss {loss}, K={k}")
    assert_raises((ValueError,), infonce_mi_lower_bound, torch.tensor([1.0, 2.0]), 3,
                  what="a per-sample loss vector (the bound needs the MEAN loss)")


def check_gaussian_mi(gaussian_mutual_information) -> None:
    for rho, dim in [(0.5, 1), (0.8, 5), (-0.3, 10), (0.0, 3)]:
        got = gaussian_mutual_information(rho, dim)
        assert_close(torch.as_tensor(got, dtype=torch.float64), -0.5 * dim * math.log(1 - rho ** 2),
                     rtol=1e-9, atol=1e-12, name=f"I(X;Y) for rho={rho}, d={dim}")
    assert_raises((ValueError,), gaussian_mutual_information, 1.0, 2, what="rho = 1 (infinite MI)")


def check_n_pair_loss(n_pair_loss, info_nce_loss) -> None:
    g = torch.Generator().manual_seed(20264)
    for batch, k in [(3, 2), (8, 9)]:
        pos = torch.randn(batch, generator=g)
        neg = torch.randn(batch, k, generator=g)
        got = n_pair_loss(pos, neg)
        assert_tensor(got, shape=(), dtype=torch.float32, name="n_pair_loss(...)")
        expected = sum(math.log1p(sum(math.exp(n - p) for n in nr)) for p, nr in
                       zip(pos.double().tolist(), neg.double().tolist())) / batch
        assert_close(got, expected, rtol=1e-5, atol=1e-5, name="N-pair loss")
        assert_close(got, info_nce_loss(torch.cat([pos[:, None], neg], dim=1)), rtol=1e-5, atol=1e-6,
                     name="N-pair loss must equal InfoNCE at temperature 1")
    # negatives scoring far above the positive: exp(s_k - s_0) overflows float32 unless stabilised
    pos = torch.tensor([-60.0, 0.0, 3.0])
    neg = torch.tensor([[60.0, 0.0], [1.0, 2.0], [-40.0, 50.0]])
    got = n_pair_loss(pos, neg)
    assert_tensor(got, shape=(), dtype=torch.float32, name="n_pair_loss(large scores)")
    expected = sum(math.log1p(sum(math.exp(n - p) for n in nr)) for p, nr in zip(pos.tolist(), neg.tolist())) / 3
    assert_close(got, expected, rtol=1e-5, atol=1e-4, name="N-pair loss with large score gaps (use log-sum-exp)")
