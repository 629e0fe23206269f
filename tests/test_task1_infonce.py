"""Task 1 (InfoNCE): the solution against independent float64 references, the maths the notebook's text and its
experiment rest on, the text's errata where they belong, the core's budget, and that hollow answers (constants,
noise, fixed patterns that keep every property) earn nothing in any core test cell.

Whether the judge's cases accept the solution and honest variants and reject the mutants, on every seed, is
tests/test_judge.py's job; tests/test_visible_checks.py checks the visible test cells.
"""

from __future__ import annotations

import copy
import json
import math
import re

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from conftest import RELEASE, SOLUTIONS
from references import task1_infonce as refs

from grader.extras import tiers
from grader.judge import case_kind, load_cases

STEM = "task1_infonce"
NOTEBOOK = SOLUTIONS / f"{STEM}.ipynb"


def _cells(path):
    return json.loads(path.read_text(encoding="utf-8"))["cells"]


def _source(cell) -> str:
    return cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])


def _gid(cell):
    return ((cell.get("metadata") or {}).get("nbgrader") or {}).get("grade_id")


@pytest.fixture(scope="module")
def solution():
    """The notebook's answer cells, executed (solutions included) in a fresh namespace."""
    from utils.notebook_cells import cell_role, grade_id, notebook_cells, run_cells

    answers = [grade_id(c) for c in notebook_cells(NOTEBOOK) if cell_role(c) == "answer"]
    return run_cells(NOTEBOOK, answers, {"math": math, "torch": torch, "F": F, "np": np})


# ------------------------------------------------------------------------------ the solution against references
def test_info_nce_and_n_pair_match_the_references_also_for_rows_hundreds_apart(solution):
    gen = torch.Generator().manual_seed(0)
    for batch, k in [(1, 1), (7, 4), (16, 63)]:
        s = torch.randn(batch, k + 1, generator=gen, dtype=torch.float64) * 4
        s[::2] += 700.0   # every other row hundreds above the rest: a batch-wide shift would underflow them
        pos = torch.randint(0, k + 1, (batch,), generator=gen)
        assert float(solution["info_nce_loss"](s, pos)) == pytest.approx(refs.info_nce(s.numpy(), pos.numpy()),
                                                                          rel=1e-12, abs=1e-12)
        assert float(solution["info_nce_loss"](s)) == pytest.approx(refs.info_nce(s.numpy(), 0), rel=1e-12)
        got = solution["n_pair_loss"](s[:, 0], s[:, 1:])
        assert float(got) == pytest.approx(refs.n_pair(s[:, 0].numpy(), s[:, 1:].numpy()), rel=1e-12, abs=1e-12)


def test_nce_and_cosine_match_the_references(solution):
    gen = torch.Generator().manual_seed(1)
    for batch, k in [(1, 1), (5, 3), (9, 63)]:
        s = torch.randn(batch, k + 1, generator=gen, dtype=torch.float64) * 30
        assert float(solution["nce_loss"](s)) == pytest.approx(refs.nce(s.numpy()), rel=1e-12, abs=1e-12)
    a = torch.randn(4, 6, generator=gen, dtype=torch.float64)
    c = torch.randn(4, 3, 6, generator=gen, dtype=torch.float64)
    np.testing.assert_allclose(solution["cosine_scores"](a, c, 0.2).numpy(), refs.cosine(a.numpy(), c.numpy(), 0.2),
                               rtol=1e-12)


def test_the_mutual_information_matches_the_log_determinants(solution):
    for rho, dim in [(0.8, 5), (-0.3, 12), (0.999, 1), (0.0, 3)]:
        assert solution["gaussian_mutual_information"](rho, dim) == pytest.approx(refs.gaussian_mi(rho, dim),
                                                                                   rel=1e-9, abs=1e-12)
    bound = solution["infonce_mi_lower_bound"](torch.tensor(1.25, dtype=torch.float64), 255)
    assert float(bound) == pytest.approx(math.log(256) - 1.25, rel=1e-15)


# ------------------------------------------------------------------------------ the maths behind the text
def test_nce_is_minimised_by_the_ratio_itself_infonce_by_the_ratio_up_to_c_of_x(solution):
    """Question (b) and the slides' erratum on the exact optimal critic of the Gaussians: NCE's loss rises when the
    critic is shifted (by a constant or by -log K, the slides' optimum), InfoNCE's does not move for any c(x)."""
    from utils.critic import optimal_critic, sample_correlated_gaussians, scores_with_negatives

    gen = torch.Generator().manual_seed(2)
    rho, dim, k = 0.8, 2, 15
    x, y = sample_correlated_gaussians(40_000, dim, rho, gen)
    s = scores_with_negatives(lambda a, b: optimal_critic(a, b, rho), x.double(), y.double(), k, gen, dim)
    s = s.double()
    nce, info = solution["nce_loss"], solution["info_nce_loss"]
    for shift in (0.5, -0.5, -math.log(k)):
        assert float(nce(s + shift)) > float(nce(s)) + 1e-3, shift
    c_of_x = torch.randn(s.shape[0], 1, generator=gen, dtype=torch.float64) * 3
    assert float(info(s + c_of_x)) == pytest.approx(float(info(s)), rel=1e-12)
    # the slides' unshifted NCE, sigma(s), is your nce_loss on s + log K: its optimum is the ratio minus log K
    slides = lambda t: nce(t + math.log(k))  # noqa: E731
    assert float(slides(s - math.log(k))) < float(slides(s)) - 1e-3


def test_a_cosine_critic_is_capped_by_its_temperature(solution):
    """Scores in [-1/tau, 1/tau] make the loss at least log(1 + K exp(-2/tau)), so the estimate log(K+1) - L is at
    most the cap the experiment plots; the cap is reached by the best possible row."""
    from utils.critic import CosineCritic

    gen = torch.Generator().manual_seed(3)
    k, tau = 63, 0.5
    critic = CosineCritic(4, tau, solution["cosine_scores"])
    with torch.no_grad():
        scores = critic(torch.randn(32, 1, 4, generator=gen), torch.randn(32, k + 1, 4, generator=gen))
    assert scores.shape == (32, k + 1) and float(scores.abs().max()) <= 1 / tau + 1e-5
    floor = math.log1p(k * math.exp(-2 / tau))
    assert float(solution["info_nce_loss"](scores)) >= floor
    best = torch.full((1, k + 1), -1 / tau, dtype=torch.float64)
    best[0, 0] = 1 / tau
    assert float(solution["info_nce_loss"](best)) == pytest.approx(floor, rel=1e-12)


def test_with_independent_negatives_a_cosine_critic_certifies_about_one_over_tau(solution):
    """The takeaway's limit: for unit vectors u, v the positive's mean cosine beats the negatives' by
    mean_i (u_i - u_bar).(v_i - v_bar) <= 1 (Cauchy-Schwarz; an identity on any sample), so by Jensen the expected
    estimate is at most log(K+1) - log(1 + K e^(-1/tau)), about 1/tau, not the 2/tau of a single best row. Perfectly
    aligned positives with isotropic independent negatives come within a few hundredths of it."""
    gen = torch.Generator().manual_seed(4)
    n, d, k, tau = 2000, 64, 255, 0.5
    for cluster in (0.0, 1.0, 4.0):   # isotropic to tightly clustered embeddings, positives noisy copies
        u = F.normalize(torch.randn(n, d, generator=gen, dtype=torch.float64) + cluster, dim=1)
        v = F.normalize(u + 0.05 * torch.randn(n, d, generator=gen, dtype=torch.float64), dim=1)
        gap = float((u * v).sum(1).mean() - u.mean(0) @ v.mean(0))
        assert gap == pytest.approx(float(((u - u.mean(0)) * (v - v.mean(0))).sum(1).mean()), abs=1e-12)
        assert gap <= 1.0 + 1e-12, (cluster, gap)
    u = F.normalize(torch.randn(n, d, generator=gen), dim=1)
    negatives = F.normalize(torch.randn(n, k, d, generator=gen), dim=2)
    scores = solution["cosine_scores"](u, torch.cat([u[:, None], negatives], dim=1), tau)
    estimate = math.log(k + 1) - float(solution["info_nce_loss"](scores))
    limit = math.log(k + 1) - math.log1p(k * math.exp(-1 / tau))
    hard_cap = math.log(k + 1) - math.log1p(k * math.exp(-2 / tau))
    assert limit - 0.1 < estimate <= limit + 1e-3 and limit < 1 / tau + math.log((k + 1) / k), (estimate, limit)
    assert estimate < 0.6 * hard_cap, (estimate, hard_cap)
    takeaway = next(_source(c) for c in _cells(NOTEBOOK) if c.get("id") == "task1-ratio-takeaway")
    assert r"\log(K+1) - \log(1 + K e^{-1/\tau})" in takeaway and r"\le 1" in takeaway


# ------------------------------------------------------------------------------ the text
def test_the_sheets_erratum_on_the_summed_loss_comes_after_the_answer_it_would_give_away():
    for path in (NOTEBOOK, RELEASE / f"{STEM}.ipynb"):
        cells = _cells(path)
        answer = next(i for i, c in enumerate(cells) if _gid(c) == "answer_c")
        question = next(i for i, c in enumerate(cells) if "**Question (c).**" in _source(c))
        erratum = [i for i, c in enumerate(cells) if "Summed, the right-hand side" in _source(c)]
        assert question < answer and erratum, path
        assert all(i > answer for i in erratum), f"{path.name}: the sheet's erratum precedes answer_c: {erratum}"
        assert "**Erratum (sheet).**" in _source(cells[erratum[0]])


def test_the_slides_nce_erratum_names_the_slides_and_the_log_k_shift():
    cells = _cells(NOTEBOOK)
    nce_text = next(i for i, c in enumerate(cells) if "## (b) InfoNCE and noise-contrastive estimation" in _source(c))
    text = _source(cells[nce_text])
    box = text[text.index("**Erratum (slides).**"):]
    assert r"\sigma(s_\theta - \log k)" in box and r"\log\frac{p_\text{data}(x)}{k\,p_n(x)}" in box, box[:300]
    answers = {_gid(c): i for i, c in enumerate(cells) if _gid(c)}
    assert nce_text < answers["answer_a"] < answers["nce_loss"]


def test_the_pair_and_triplet_losses_are_credited_and_squared_as_on_the_slides():
    text = next(_source(c) for c in _cells(NOTEBOOK) if "## (d) The older contrastive losses" in _source(c))
    assert "Chopra et al., 2005" in text and "Hadsell et al." in text
    assert r"d(a,p)^2 - d(a,n)^2 + m" in text


def test_the_prediction_cell_comes_before_the_experiment_and_its_explanation():
    cells = _cells(RELEASE / f"{STEM}.ipynb")
    ids = [c.get("id") for c in cells]
    order = [ids.index(i) for i in ("task1-ratio-md", "task1-ratio-prediction", "task1-ratio-code",
                                    "task1-cosine-cap-code", "task1-ratio-takeaway")]
    assert order == sorted(order)
    assert _source(cells[order[1]]).startswith("**Your prediction:**")
    assert not ((cells[order[1]].get("metadata") or {}).get("nbgrader") or {}).get("grade")


def test_the_core_fits_its_budget():
    proxy = tiers.core_proxy(NOTEBOOK)
    assert proxy["core_lines"] <= 30 and proxy["core_written"] <= 2, proxy
    kinds = tiers.core_points_by_kind(NOTEBOOK, STEM)
    assert kinds["rule"] <= 0.10 * sum(kinds.values()) and kinds["given"] == 0, kinds
    assert "Core: about 1.75 h" in _source(_cells(NOTEBOOK)[0])


# ------------------------------------------------------------------------------ the judge
def test_failure_messages_never_show_an_expected_value():
    """A value case's message says how far off an answer is, relative, never the hidden expected value (an answer
    of 0 would otherwise read |expected| = log(K+1) off the message, and with it the hidden K)."""
    expected = math.log(64.0)
    for case in load_cases(STEM):
        if case_kind(case) in ("rule", "given"):
            continue
        for dtype in (torch.float32, torch.float64):
            try:
                case.check(torch.tensor(0.0, dtype=dtype), torch.tensor(expected, dtype=dtype))
            except AssertionError as err:
                assert not re.search(r"4\.15|4\.16", str(err)), f"{case.probe}: {err}"


HOLLOW = {  # every answer cell: the given input checks kept, right shapes, dtypes and gradients, no computation
    "constant": {
        "info_nce_loss": '''
def info_nce_loss(scores, positive_index=0):
    if scores.dim() != 2:
        raise ValueError("scores must be [B, K+1]")
    return scores.sum() * 0 + math.log(scores.shape[1])   # log(K+1): right for equal scores only
''',
        "nce_loss": '''
def nce_loss(scores):
    if scores.dim() != 2 or scores.shape[1] < 2:
        raise ValueError("scores must be [B, K+1], K >= 1")
    return scores.sum() * 0 + scores.shape[1] * math.log(2.0)
''',
        "cosine_scores": '''
def cosine_scores(anchors, candidates, temperature):
    if anchors.dim() != 2 or candidates.dim() != 3 or candidates.shape[0] != anchors.shape[0]:
        raise ValueError("anchors [B, D], candidates [B, K+1, D]")
    if not temperature > 0:
        raise ValueError("temperature must be positive")
    return torch.zeros(candidates.shape[:2], dtype=anchors.dtype) / temperature   # norm-free, the right shape
''',
        "mi_functions": '''
def gaussian_mutual_information(rho, dim):
    if not -1 < rho < 1:
        raise ValueError("|rho| < 1")
    return 1.0


def infonce_mi_lower_bound(mean_loss, num_negatives):
    mean_loss = torch.as_tensor(mean_loss)
    if mean_loss.dim() != 0:
        raise ValueError("a 0-dim mean loss")
    return math.log(num_negatives + 1) + 0 * mean_loss   # the ceiling, whatever the loss
''',
        "n_pair_loss": '''
def n_pair_loss(positive_scores, negative_scores):
    if positive_scores.dim() != 1 or negative_scores.dim() != 2:
        raise ValueError("[B] and [B, K]")
    return (positive_scores.sum() + negative_scores.sum()) * 0 + math.log(1 + negative_scores.shape[1])
''',
    },
    "noise": {
        "info_nce_loss": '''
def info_nce_loss(scores, positive_index=0):
    if scores.dim() != 2:
        raise ValueError("scores must be [B, K+1]")
    return scores.sum() * 0 + torch.rand((), dtype=scores.dtype) * math.log(scores.shape[1])
''',
        "nce_loss": '''
def nce_loss(scores):
    if scores.dim() != 2 or scores.shape[1] < 2:
        raise ValueError("scores must be [B, K+1], K >= 1")
    return scores.sum() * 0 + torch.rand((), dtype=scores.dtype) * 5
''',
        "cosine_scores": '''
def cosine_scores(anchors, candidates, temperature):
    if anchors.dim() != 2 or candidates.dim() != 3 or candidates.shape[0] != anchors.shape[0]:
        raise ValueError("anchors [B, D], candidates [B, K+1, D]")
    if not temperature > 0:
        raise ValueError("temperature must be positive")
    return (torch.rand(candidates.shape[:2], dtype=anchors.dtype) * 2 - 1) / temperature   # in [-1/tau, 1/tau]
''',
        "mi_functions": '''
def gaussian_mutual_information(rho, dim):
    if not -1 < rho < 1:
        raise ValueError("|rho| < 1")
    return float(torch.rand(())) * dim


def infonce_mi_lower_bound(mean_loss, num_negatives):
    mean_loss = torch.as_tensor(mean_loss)
    if mean_loss.dim() != 0:
        raise ValueError("a 0-dim mean loss")
    return torch.rand((), dtype=mean_loss.dtype) * math.log(num_negatives + 1)
''',
        "n_pair_loss": '''
def n_pair_loss(positive_scores, negative_scores):
    if positive_scores.dim() != 1 or negative_scores.dim() != 2:
        raise ValueError("[B] and [B, K]")
    return positive_scores.sum() * 0 + torch.rand((), dtype=positive_scores.dtype)
''',
    },
}


def test_hollow_answers_earn_nothing_in_any_core_test_cell(tmp_path):
    from grader.judge import points_per_test_cell, sweep
    from grader.mutants import student_copy

    release, solution = (json.loads((RELEASE / f"{STEM}.ipynb").read_text()), json.loads(NOTEBOOK.read_text()))
    variants = {}
    for name, answers in HOLLOW.items():
        nb = copy.deepcopy(student_copy(release, solution))
        for cell in nb["cells"]:
            if _gid(cell) in answers:
                cell["source"] = answers[_gid(cell)]
        variants[name] = nb
    core = [gid for gid, tier in tiers.grade_tiers(NOTEBOOK).items() if tier == "core"]
    cells = [c for c in points_per_test_cell(release) if c in core]
    assert len(cells) == 5
    verdicts = sweep(STEM, release, solution, variants, [0, 1], workroot=tmp_path)
    for (name, seed), v in verdicts.items():
        earned = {c: v.points[c] for c in cells if v.points[c] > 0}
        assert not earned, f"{name} answers (seed {seed}) earned {earned}: {[c.name for c in v.cases if c.passed]}"
