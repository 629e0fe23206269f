"""Task 2 (pseudo-likelihood): the notebook's shape, the solution against independent float64 references
(one masked copy or one prefix per forward pass), and the maths the reference formulas rest on.

Fast (tiny random transformers, no notebook execution, no model suite). Whether the judge's cases accept
the solution and honest variants and reject the mutants, on every seed, is tests/test_judge.py's job; the
nbgrader round trip of the whole notebook is in test_notebooks.py.
"""

from __future__ import annotations

import json
import math

import pytest
import torch

from conftest import SOLUTIONS
from references import task2_pseudo_likelihood as task2_refs

from grader import tiers
from grader.judge import load_cases

NOTEBOOK = SOLUTIONS / "task2_pseudo_likelihood.ipynb"


@pytest.fixture(scope="module")
def solution():
    """The notebook's autograded answer cells, executed (solutions included) in a fresh namespace."""
    from utils.notebook_cells import cell_role, grade_id, notebook_cells, run_cells

    answers = [grade_id(c) for c in notebook_cells(NOTEBOOK) if cell_role(c) == "answer"]
    return run_cells(NOTEBOOK, answers, {"math": math, "torch": torch})


# ------------------------------------------------------------------------------ the notebook's shape
def test_every_answer_has_a_test_cell_judged_by_cases():
    cells = json.loads(NOTEBOOK.read_text(encoding="utf-8"))["cells"]
    meta = [c.get("metadata", {}).get("nbgrader", {}) for c in cells]
    answers = [m["grade_id"] for m in meta if m.get("solution") and not m.get("grade")]
    graded = {m["grade_id"]: "".join(c["source"]) for c, m in zip(cells, meta) if m.get("grade") and not m.get("solution")}
    assert answers == ["mlm_loss", "masked_copies", "conditional_log_probs", "pseudo_log_likelihood",
                       "single_index_estimate", "causal_log_probs", "conditionals_compatible", "bert_mask"]
    judged = {c.cell for c in load_cases("task2_pseudo_likelihood")}
    for name in answers:
        assert f"test_{name}" in graded and f"test_{name}" in judged, name
        assert "### BEGIN HIDDEN TESTS" not in graded[f"test_{name}"], name  # the judge decides, outside the kernel
    manual = [m["grade_id"] for m in meta if m.get("solution") and m.get("grade")]
    assert manual == ["answer_a", "answer_b2", "answer_c1", "answer_c3", "answer_c2", "answer_bert"]
    params = [c for c in cells if "parameters" in c.get("metadata", {}).get("tags", [])]
    assert len(params) == 1 and 'PRESET = "auto"' in "".join(params[0]["source"])


def test_core_and_extension_tiers():
    """Issue #14: the core fits its budget, the compatibility solve, (c)(ii) and the BERT part are extensions in a
    final section, no core cell calls an extension function, and every written answer has its rubric."""
    cells = json.loads(NOTEBOOK.read_text(encoding="utf-8"))["cells"]
    assert tiers.grade_tiers(NOTEBOOK) == {
        **dict.fromkeys(["answer_a", "test_mlm_loss", "test_masked_copies", "test_conditional_log_probs",
                         "test_pseudo_log_likelihood", "answer_b2", "test_single_index_estimate", "answer_c1",
                         "test_causal_log_probs", "answer_c3"], "core"),
        **dict.fromkeys(["test_conditionals_compatible", "answer_c2", "answer_bert", "test_bert_mask"], "extension")}
    proxy = tiers.core_proxy(NOTEBOOK)
    assert proxy["core_lines"] <= 62 and proxy["core_written"] <= 4, proxy
    assert (proxy["core_points"], proxy["extension_points"]) == (25, 10), proxy
    assert tiers.rubric_problems(NOTEBOOK) == []
    start = next(i for i, c in enumerate(cells) if "".join(c["source"]).startswith("## Extensions (optional)"))
    assert all(not tiers.is_extension(c) for c in cells[:start])
    assert all(tiers.is_extension(c) for c in cells[start:])
    core_code = "\n".join("".join(c["source"]) for c in cells[:start] if c["cell_type"] == "code")
    for name in ("conditionals_compatible", "bert_mask"):
        assert name not in core_code, name
    assert "Core: about 2 h. Extensions (optional): about" in "".join(cells[0]["source"])


def test_errata_of_issue_14_are_in_the_notebook():
    text = "\n".join("".join(c["source"]) for c in json.loads(NOTEBOOK.read_text(encoding="utf-8"))["cells"])
    assert "p(u \\mid v) = 1" in text and "p(v \\mid u) = 0" in text  # the sheet's own example
    assert "the sheet's two-token example" not in text
    assert "84.4" in text and "84.3" in text and "84.2" in text  # Table 8 on MNLI
    assert "0 % `[MASK]`" in text
    assert "not** one pass" in text and "biased" in text  # L_MLM / q
    assert "NaN" in text and "columns" in text.lower() and "encoder-decoder" in text


# ------------------------------------------------------- the solution against independent references
def test_solution_conditionals_and_pll_match_the_one_copy_reference(solution):
    s = solution
    model, mask_id = task2_refs.tiny_masked_lm(seed=99, vocab_size=53)
    ids = torch.randint(0, mask_id, (20,), generator=torch.Generator().manual_seed(3))
    ref = task2_refs.reference_conditionals(model, ids, mask_id)
    table = s["conditional_log_probs"](model, ids, mask_id, batch_size=6)
    assert table.dtype == torch.float32 and table.shape == ref.shape
    assert (table.double() - ref).abs().max() < 1e-4
    positions = torch.tensor([2, 17, 9])
    pll = s["pseudo_log_likelihood"](model, ids, mask_id, positions=positions, batch_size=2)
    assert pll.shape == () and pll.dtype == torch.float32
    assert math.isclose(pll.item(), ref[positions, ids[positions]].sum().item(), abs_tol=1e-3)
    assert math.isclose(s["pseudo_perplexity"](pll, 3), math.exp(-pll.item() / 3), rel_tol=1e-9)


def test_solution_single_index_estimate_is_unbiased(solution):
    model, mask_id = task2_refs.tiny_masked_lm(seed=13)
    ids = torch.randint(0, mask_id, (11,), generator=torch.Generator().manual_seed(17))
    nll = -task2_refs.reference_conditionals(model, ids, mask_id)[torch.arange(11), ids]
    est = solution["single_index_estimate"](model, ids, mask_id, num_samples=6000,
                                            generator=torch.Generator().manual_seed(1)).double()
    assert est.shape == (6000,)
    assert ((est.unsqueeze(1) - 11 * nll.unsqueeze(0)).abs().min(1).values < 1e-3).all()
    assert abs(est.mean().item() - nll.sum().item()) <= 5 * est.std().item() / math.sqrt(6000)


def test_solution_causal_log_probs_match_the_prefix_reference(solution):
    model = task2_refs.tiny_causal_lm(seed=98, vocab_size=45)
    ids = torch.randint(1, 45, (14,), generator=torch.Generator().manual_seed(3))
    for ctx in (None, 0):
        ref = task2_refs.reference_causal_log_probs(model, ids, ctx)
        out = solution["causal_log_probs"](model, ids, context_token_id=ctx)
        assert out.dtype == torch.float32 and out.shape == ref.shape
        assert (out.double() - ref).abs().max() < 2e-4


def test_solution_mlm_loss_expectation_is_q_times_s(solution):
    gen = torch.Generator().manual_seed(7)
    lp = torch.log_softmax(2 * torch.randn(19, 11, generator=gen), -1)
    x = torch.randint(11, (19,), generator=gen)
    s = -lp.double()[torch.arange(19), x].sum().item()
    masks = torch.rand(20000, 19, generator=gen) < 0.15
    losses = solution["mlm_loss"](lp, x, masks).double()
    assert abs(losses.mean().item() - 0.15 * s) <= 5 * losses.std().item() / math.sqrt(20000)


def test_solution_conditionals_compatible_agrees_with_the_cross_ratio(solution):
    gen = torch.Generator().manual_seed(41)
    for na, nb in [(2, 2), (3, 5), (6, 4)]:
        joint = torch.rand(na, nb, generator=gen, dtype=torch.float64) + 0.05
        pa, pb = task2_refs.conditionals_of(joint / joint.sum())
        assert solution["conditionals_compatible"](pa, pb) is True
        pa2 = torch.rand(na, nb, generator=gen, dtype=torch.float64) + 0.05
        pa2 = pa2 / pa2.sum(0, keepdim=True)
        assert solution["conditionals_compatible"](pa2, pb) is task2_refs.cross_ratio_compatible(pa2, pb)
    # the sheet's example, p(u|v) = 1 and p(v|u) = 0: the supports differ, no joint
    sheet_a_given_b = torch.tensor([[1.0, 0.5], [0.0, 0.5]], dtype=torch.float64)
    sheet_b_given_a = torch.tensor([[0.0, 1.0], [0.5, 0.5]], dtype=torch.float64)
    assert solution["conditionals_compatible"](sheet_a_given_b, sheet_b_given_a) is False


# ------------------------------------------------------------------- the reference maths itself
def test_reference_causal_log_probs_match_the_library_loss():
    model = task2_refs.tiny_causal_lm(seed=5)
    ids = torch.randint(0, 41, (12,), generator=torch.Generator().manual_seed(1))
    ref = task2_refs.reference_causal_log_probs(model, ids)
    with torch.no_grad():
        loss = model(input_ids=ids[None], labels=ids[None]).loss.item()
    assert ref.shape == (11,) and ref.dtype == torch.float64
    assert math.isclose(-ref.mean().item(), loss, rel_tol=1e-5)


def test_reference_conditionals_are_distributions_that_depend_on_the_masked_copy():
    model, mask_id = task2_refs.tiny_masked_lm(seed=4)
    ids = torch.randint(0, mask_id, (9,), generator=torch.Generator().manual_seed(2))
    table = task2_refs.reference_conditionals(model, ids, mask_id)
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


def test_the_full_support_example_is_incompatible_and_a_joint_is_compatible():
    """The 0.9/0.1-against-1/2 example of (c)(i) (the sheet's own example, p(u|v) = 1 and p(v|u) = 0, has
    different supports and is the notebook's visible test)."""
    pa = torch.tensor([[0.9, 0.1], [0.1, 0.9]], dtype=torch.float64)
    pb = torch.full((2, 2), 0.5, dtype=torch.float64)
    assert not task2_refs.cross_ratio_compatible(pa, pb)
    joint = torch.tensor([[0.1, 0.2, 0.05], [0.3, 0.15, 0.2]], dtype=torch.float64)
    assert task2_refs.cross_ratio_compatible(*task2_refs.conditionals_of(joint))
