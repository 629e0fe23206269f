"""Task 2 (pseudo-likelihood): the grader's reference checks accept the notebook's solution and reject
typical wrong answers, and the reference formulas agree with the libraries they stand in for.

Fast (tiny random transformers, no notebook execution, no model suite); the nbgrader round trip of the
whole notebook is in test_notebooks.py.
"""

from __future__ import annotations

import json
import math

import pytest
import torch

from conftest import SOLUTIONS

from grader.checks import task2_pseudo_likelihood as checks

NOTEBOOK = SOLUTIONS / "task2_pseudo_likelihood.ipynb"


@pytest.fixture(scope="module")
def solution():
    """The notebook's autograded answer cells, executed (solutions included) in a fresh namespace."""
    cells = json.loads(NOTEBOOK.read_text(encoding="utf-8"))["cells"]
    ns = {"math": math, "torch": torch}
    for cell in cells:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if cell["cell_type"] == "code" and meta.get("solution") and not meta.get("grade"):
            exec(compile("".join(cell["source"]), f"<{meta['grade_id']}>", "exec"), ns)
    return ns


def _fails(check, *args, match: str | None = None):
    with pytest.raises(AssertionError, match=match):
        check(*args)


# ------------------------------------------------------------------------------ the notebook's shape
def test_every_answer_has_a_test_cell_with_a_hidden_grader_check():
    cells = json.loads(NOTEBOOK.read_text(encoding="utf-8"))["cells"]
    meta = [c.get("metadata", {}).get("nbgrader", {}) for c in cells]
    answers = [m["grade_id"] for m in meta if m.get("solution") and not m.get("grade")]
    graded = {m["grade_id"]: "".join(c["source"]) for c, m in zip(cells, meta) if m.get("grade") and not m.get("solution")}
    assert answers == ["mlm_loss", "masked_copies", "conditional_log_probs", "pseudo_log_likelihood",
                       "single_index_estimate", "causal_log_probs", "conditionals_compatible", "bert_mask"]
    for name in answers:
        src = graded[f"test_{name}"]
        assert "### BEGIN HIDDEN TESTS" in src and "grader.checks.task2_pseudo_likelihood" in src, name
    manual = [m["grade_id"] for m in meta if m.get("solution") and m.get("grade")]
    assert manual == ["answer_a", "answer_b1", "answer_b2", "answer_c1", "answer_c2", "answer_c3", "answer_bert"]
    params = [c for c in cells if "parameters" in c.get("metadata", {}).get("tags", [])]
    assert len(params) == 1 and 'PRESET = "auto"' in "".join(params[0]["source"])


# ------------------------------------------------------------------------- the solution passes
def test_solution_passes_every_check(solution):
    s = solution
    checks.check_mlm_loss(s["mlm_loss"])
    checks.check_mlm_loss_expectation(s["mlm_loss"])
    checks.check_masked_copies(s["masked_copies"])
    checks.check_conditional_log_probs(s["conditional_log_probs"])
    checks.check_pseudo_log_likelihood(s["pseudo_log_likelihood"], s["pseudo_perplexity"])
    checks.check_single_index_estimate(s["single_index_estimate"])
    checks.check_causal_log_probs(s["causal_log_probs"], s["perplexity"])
    checks.check_bert_mask(s["bert_mask"])
    checks.check_conditionals_compatible(s["conditionals_compatible"])


def test_real_model_branches_of_the_checks(solution):
    """The hidden tests also run on the notebook's real models; exercise those branches on other tiny models."""
    s = solution
    mlm, mask_id = checks.tiny_masked_lm(seed=99, vocab_size=53)
    ids = torch.randint(0, mask_id, (20,), generator=torch.Generator().manual_seed(3))
    table = checks.reference_conditionals(mlm, ids, mask_id, dtype=torch.float32)
    checks.check_mlm_loss_expectation(s["mlm_loss"], table, ids)
    checks.check_conditional_log_probs(s["conditional_log_probs"], mlm, ids, mask_id)
    checks.check_pseudo_log_likelihood(s["pseudo_log_likelihood"], s["pseudo_perplexity"], mlm, ids, mask_id)
    causal = checks.tiny_causal_lm(seed=98, vocab_size=45)
    checks.check_causal_log_probs(s["causal_log_probs"], s["perplexity"], causal, ids, 0)


# ---------------------------------------------------------------------- wrong answers are caught
def test_mlm_loss_mistakes_are_caught(solution):
    right = solution["mlm_loss"]
    _fails(checks.check_mlm_loss, lambda lp, x, m: right(lp, x, m) / m.sum(-1).clamp(min=1))  # mean, not sum
    _fails(checks.check_mlm_loss, lambda lp, x, m: right(lp, x, m).double())  # dtype not kept
    _fails(checks.check_mlm_loss, lambda lp, x, m: -(lp.max(-1).values * m).sum(-1))  # ignores the targets


def test_batching_and_masking_mistakes_are_caught(solution):
    s = solution

    def one_by_one(model, ids, mask_id, positions=None, batch_size=16):
        return s["conditional_log_probs"](model, ids, mask_id, positions, batch_size=1)

    def unmasked(model, ids, mask_id, positions=None, batch_size=16):
        positions = torch.arange(len(ids)) if positions is None else torch.as_tensor(positions)
        with torch.no_grad():
            logits = model(input_ids=ids[None]).logits[0, positions]
        return torch.log_softmax(logits.float(), -1)

    _fails(checks.check_conditional_log_probs, one_by_one, match="batched forward passes")
    _fails(checks.check_conditional_log_probs, unmasked)

    def pll_mean(model, ids, mask_id, positions=None, batch_size=16):
        n = len(ids) if positions is None else len(positions)
        return s["pseudo_log_likelihood"](model, ids, mask_id, positions, batch_size) / n

    _fails(checks.check_pseudo_log_likelihood, pll_mean, s["pseudo_perplexity"])
    _fails(checks.check_pseudo_log_likelihood, s["pseudo_log_likelihood"], lambda pll, n: math.exp(-float(pll)))


def test_biased_single_index_estimators_are_caught(solution):
    right = solution["single_index_estimate"]

    def never_last(model, ids, mask_id, num_samples=1, positions=None, generator=None):
        scored = torch.arange(len(ids)) if positions is None else torch.as_tensor(positions)
        est = right(model, ids, mask_id, num_samples, scored[:-1], generator)
        return est * len(scored) / (len(scored) - 1)  # right scale, but U never hits the last position

    def without_factor_t(model, ids, mask_id, num_samples=1, positions=None, generator=None):
        n = len(ids) if positions is None else len(positions)
        return right(model, ids, mask_id, num_samples, positions, generator) / n

    def pass_per_sample(model, ids, mask_id, num_samples=1, positions=None, generator=None):
        return torch.cat([right(model, ids, mask_id, 1, positions, generator) for _ in range(num_samples)])

    _fails(checks.check_single_index_estimate, never_last)
    _fails(checks.check_single_index_estimate, without_factor_t)
    _fails(lambda f: checks.check_single_index_estimate(f, num_samples=50), pass_per_sample, match="ONE batched")


def test_causal_mistakes_are_caught(solution):
    s = solution

    def no_shift(model, ids, context_token_id=None):
        if context_token_id is not None:
            ids = torch.cat([ids.new_tensor([context_token_id]), ids])
        with torch.no_grad():
            lp = torch.log_softmax(model(input_ids=ids[None]).logits[0, 1:].float(), -1)
        return lp.gather(1, ids[1:, None]).squeeze(1)  # position t scored with the logits AT t (sees x_t)

    _fails(checks.check_causal_log_probs, no_shift, s["perplexity"])
    _fails(checks.check_causal_log_probs, s["causal_log_probs"], lambda ll, n: math.exp(-float(ll)) ** (1 / n) * 1.01)


def test_bert_mask_mistakes_are_caught(solution):
    right = solution["bert_mask"]

    def selects_specials(ids, specials, mask_id, vocab, q=0.15, generator=None):
        return right(ids, [], mask_id, vocab, q, generator)

    def always_mask(ids, specials, mask_id, vocab, q=0.15, generator=None):
        masked, labels = right(ids, specials, mask_id, vocab, q, generator)
        return torch.where(labels != -100, torch.full_like(ids, mask_id), ids), labels

    def labels_everywhere(ids, specials, mask_id, vocab, q=0.15, generator=None):
        masked, _ = right(ids, specials, mask_id, vocab, q, generator)
        return masked, ids.clone()

    for wrong in (selects_specials, always_mask, labels_everywhere):
        _fails(checks.check_bert_mask, wrong)


def test_compatibility_shortcuts_are_caught(solution):
    _fails(checks.check_conditionals_compatible, lambda pa, pb, atol=1e-6: True)
    _fails(checks.check_conditionals_compatible, lambda pa, pb, atol=1e-6: False)

    def full_support_only(pa, pb, atol=1e-6):  # the cross-ratio test crashes or lies on zeros
        return checks._cross_ratio_compatible(torch.as_tensor(pa, dtype=torch.float64),
                                              torch.as_tensor(pb, dtype=torch.float64))

    with pytest.raises((AssertionError, ValueError)):
        checks.check_conditionals_compatible(full_support_only)


# ------------------------------------------------------------------- the reference maths itself
def test_reference_causal_log_probs_match_the_library_loss():
    model = checks.tiny_causal_lm(seed=5)
    ids = torch.randint(0, 41, (12,), generator=torch.Generator().manual_seed(1))
    ref = checks.reference_causal_log_probs(model, ids)
    with torch.no_grad():
        loss = model(input_ids=ids[None], labels=ids[None]).loss.item()
    assert ref.shape == (11,) and ref.dtype == torch.float64
    assert math.isclose(-ref.mean().item(), loss, rel_tol=1e-5)


def test_reference_conditionals_are_distributions_that_depend_on_the_masked_copy():
    model, mask_id = checks.tiny_masked_lm(seed=4)
    ids = torch.randint(0, mask_id, (9,), generator=torch.Generator().manual_seed(2))
    table = checks.reference_conditionals(model, ids, mask_id)
    assert table.shape == (9, 37) and table.dtype == torch.float64
    assert torch.allclose(table.exp().sum(-1), torch.ones(9, dtype=torch.float64))
    with torch.no_grad():  # masking matters by whole nats: a solution that forgets it cannot pass
        unmasked = torch.log_softmax(model(input_ids=ids[None]).logits[0].double(), -1)
    assert (table - unmasked).abs().max() > 0.5


def test_the_pseudo_likelihood_identity_of_part_a_exactly():
    """E_M[loss] = q S(x), by enumerating all 2^T masks of a small table (no Monte Carlo)."""
    torch.manual_seed(0)
    t, q = 6, 0.3
    lp = torch.log_softmax(torch.randn(t, 5, dtype=torch.float64), -1)
    x = torch.randint(5, (t,))
    nll = -lp[torch.arange(t), x]
    masks = torch.tensor([[(m >> i) & 1 for i in range(t)] for m in range(2**t)], dtype=torch.float64)
    weights = (q ** masks.sum(1)) * ((1 - q) ** (t - masks.sum(1)))
    expected_loss = (weights * (masks @ nll)).sum()
    assert math.isclose(expected_loss.item(), q * nll.sum().item(), rel_tol=1e-12)


def test_the_sheet_example_is_incompatible_and_a_joint_is_compatible():
    pa = torch.tensor([[0.9, 0.1], [0.1, 0.9]], dtype=torch.float64)
    pb = torch.full((2, 2), 0.5, dtype=torch.float64)
    assert not checks._cross_ratio_compatible(pa, pb)
    joint = torch.tensor([[0.1, 0.2, 0.05], [0.3, 0.15, 0.2]], dtype=torch.float64)
    assert checks._cross_ratio_compatible(*checks._conditionals_of(joint))
