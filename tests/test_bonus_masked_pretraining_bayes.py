"""Numeric tests of the bonus notebook on masked pre-training and the marginal likelihood
(solutions/ex01/bonus_masked_pretraining_bayes.ipynb) and of the judge's cases for it
(grader/probes/ and grader/checks/bonus_masked_pretraining_bayes.py, run here in-process).

The solution functions are taken from the notebook's answer cells (so these tests exercise exactly
what is graded). The tests check

- Proposition 1 exactly: summed over all mask sizes, the enumerated masked scores equal log p(x);
- the Monte-Carlo sum lands within 3 standard errors of log p(x), and the reported standard errors
  are calibrated (about 95 % of estimates within 2 SE over many seeds);
- every case passes the solution, fails the release stub, and rejects the usual mistakes (the talk's slide erratum,
  an elementwise Normal, wrong mask-size weighting, a fixed mask ratio), which miss by a wide
  margin, so a 3-SE test cannot confuse them with Monte-Carlo noise.
All randomness is seeded: the tests are deterministic.
"""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from references import bonus_masked_pretraining_bayes as bonus_refs

from grader.checks import bonus_masked_pretraining_bayes as ref
from grader.evidence import decode, encode, raised
from grader.probe import Namespace, case_seed
from grader.probes.bonus_masked_pretraining_bayes import PROBES

NOTEBOOK = Path(__file__).resolve().parents[1] / "solutions" / "ex01" / "bonus_masked_pretraining_bayes.ipynb"
ANSWER_CELLS = ("ppca_log_marginal", "gaussian_conditional", "masked_score", "masked_pretraining_objective")
DTYPE = torch.float64


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Tiny matrices: one thread is much faster (the notebook's setup cell does the same)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _cells_by_id() -> dict[str, str]:
    cells = json.loads(NOTEBOOK.read_text(encoding="utf-8"))["cells"]
    return {c["metadata"]["nbgrader"]["grade_id"]: "".join(c["source"])
            for c in cells if "nbgrader" in c.get("metadata", {})}


@pytest.fixture(scope="module")
def sol() -> dict:
    """The notebook's solution functions (answer cells and the given closed-form ML helper)."""
    ns = {"math": math, "torch": torch, "np": np}
    cells = _cells_by_id()
    for grade_id in (*ANSWER_CELLS, "closed_form_ml"):
        exec(compile(cells[grade_id], f"<{grade_id}>", "exec"), ns)
    return ns


# ------------------------------------------------------------------------------------------------
# Deliberately wrong implementations (the mistakes the checks must catch)
# ------------------------------------------------------------------------------------------------

def elementwise_log_marginal(x, W, mu, sigma2):
    """The talk's snippet: independent Normals with the marginal variances."""
    var = (W ** 2).sum(1) + sigma2
    return torch.distributions.Normal(mu, var.sqrt()).log_prob(x).sum(-1)


def _blocks(mu, S, x, masked_idx):
    M = torch.as_tensor(masked_idx)
    R = torch.tensor([i for i in range(S.shape[0]) if i not in set(M.tolist())], dtype=torch.long)
    return M, R


def slide_conditional_plus(mu, S, x, masked_idx):
    """The slide's covariance S_MM + S_MR S_RR^-1 S_RM (mean correct)."""
    M, R = _blocks(mu, S, x, masked_idx)
    if len(R) == 0:
        return mu[M].expand(*x.shape[:-1], len(M)), S[M][:, M]
    gain = torch.linalg.solve(S[R][:, R], S[R][:, M])
    return mu[M] + (x[..., R] - mu[R]) @ gain, S[M][:, M] + S[M][:, R] @ gain


def slide_conditional_transpose(mu, S, x, masked_idx):
    """The slide's mean mu_M + S_MR^T S_RR^-1 (x_R - mu_R): only conforms when |M| = |R|."""
    M, R = _blocks(mu, S, x, masked_idx)
    S_MR, S_RR = S[M][:, R], S[R][:, R]
    gain = torch.linalg.solve(S_RR, S[R][:, M])
    mean = mu[M] + (x[..., R] - mu[R]) @ (S_MR.T @ torch.linalg.inv(S_RR)).T
    return mean, S[M][:, M] - S[M][:, R] @ gain


def _covariance(W, sigma2):
    return W @ W.T + sigma2 * torch.eye(W.shape[0], dtype=W.dtype)


def _per_mask_scores(x, W, mu, sigma2, m, n_masks, generator, value):
    S = _covariance(W, sigma2)
    D = W.shape[0]
    if not 1 <= m <= D:
        raise ValueError(f"m must be in [1, {D}], got {m}")
    samples = torch.stack([value(x, mu, S, torch.randperm(D, generator=generator)[:m]) for _ in range(n_masks)])
    return samples.mean(), samples.std() / math.sqrt(n_masks)


def _conditional(mu, S, x, M):
    """p(x_M | x_R) by a plain solve (the tests' own helper for building wrong variants quickly)."""
    M, R = _blocks(mu, S, x, M)
    if len(R) == 0:
        return mu[M].expand(*x.shape[:-1], len(M)), S[M][:, M]
    gain = torch.linalg.solve(S[R][:, R], S[R][:, M])
    return mu[M] + (x[..., R] - mu[R]) @ gain, S[M][:, M] - S[M][:, R] @ gain


def _conditional_logp(x, mu, S, M):
    """Per-coordinate log p(x_j | x_R) for j in M, (..., m) (correct maths)."""
    mean, cov = _conditional(mu, S, x, M)
    var = torch.diagonal(cov)
    return -0.5 * (torch.log(2 * math.pi * var) + (x[..., M] - mean) ** 2 / var)


def score_without_1_over_m(x, W, mu, sigma2, m, n_masks, generator=None):
    """Sums the masked log-probabilities instead of averaging them over the mask."""
    return _per_mask_scores(x, W, mu, sigma2, m, n_masks, generator,
                            lambda x, mu, S, M: _conditional_logp(x, mu, S, M).sum(-1).mean())


def score_joint_conditional(x, W, mu, sigma2, m, n_masks, generator=None):
    """(1/m) log p(x_M | x_R) jointly: the masked coordinates see each other."""
    def value(x, mu, S, M):
        mean, cov = _conditional(mu, S, x, M)
        L = torch.linalg.cholesky(cov)
        white = torch.linalg.solve_triangular(L, (x[..., M] - mean).reshape(-1, len(M)).T, upper=False)
        logp = -0.5 * (len(M) * math.log(2 * math.pi) + 2 * torch.log(torch.diagonal(L)).sum() + (white ** 2).sum(0))
        return logp.mean() / len(M)
    return _per_mask_scores(x, W, mu, sigma2, m, n_masks, generator, value)


def score_pseudo_likelihood(x, W, mu, sigma2, m, n_masks, generator=None):
    """Every masked x_j conditioned on ALL other coordinates (masked ones included)."""
    def value(x, mu, S, M):
        # p(x_j | x_-j) from the precision matrix: variance 1/P_jj, mean x_j - (P (x - mu))_j / P_jj.
        P = torch.linalg.inv(S)
        var = 1 / torch.diagonal(P)
        mean = x - ((x - mu) @ P) * var
        logp = -0.5 * (torch.log(2 * math.pi * var) + (x - mean) ** 2 / var)
        return logp[..., M].mean(-1).mean()
    return _per_mask_scores(x, W, mu, sigma2, m, n_masks, generator, value)


def score_slide_covariance(x, W, mu, sigma2, m, n_masks, generator=None):
    """Correct weighting, but the slide's '+' conditional covariance."""
    def value(x, mu, S, M):
        mean, cov = slide_conditional_plus(mu, S, x, M)
        var = torch.diagonal(cov)
        return (-0.5 * (torch.log(2 * math.pi * var) + (x[..., M] - mean) ** 2 / var)).mean(-1).mean()
    return _per_mask_scores(x, W, mu, sigma2, m, n_masks, generator, value)


def objective_from(score, sizes=lambda D: range(1, D + 1), combine="sum", scale=1.0):
    """A cumulative objective built from ``score`` over mask ``sizes``, summed or averaged."""
    def objective(x, W, mu, sigma2, n_masks, generator=None):
        est, se = zip(*(score(x, W, mu, sigma2, m, n_masks, generator) for m in sizes(W.shape[0])))
        est, se = torch.stack(est), torch.stack(se)
        if combine == "mean":
            return est.mean(), se.pow(2).sum().sqrt() / len(est)
        return scale * est.sum(), scale * se.pow(2).sum().sqrt()
    return objective


# ------------------------------------------------------------------------------------------------
# Proposition 1, exactly and by Monte Carlo
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("D,K,sigma2,N", [(4, 1, 0.5, 1), (6, 2, 0.1, 3), (7, 3, 0.02, 1)])
def test_proposition_1_holds_exactly_by_enumeration(D, K, sigma2, N):
    W, mu, _ = bonus_refs.random_ppca(D, K, sigma2, seed=D)
    x = bonus_refs.ppca_samples(W, mu, sigma2, N, seed=10 + D)
    total = sum(ref.exact_masked_score(x, W, mu, sigma2, m)[0] for m in range(1, D + 1))
    assert total == pytest.approx(float(np.mean(ref.ref_log_marginal(x, W, mu, sigma2))), abs=1e-9)


def test_solution_conditionals_reproduce_log_p_by_enumeration(sol):
    """The same identity, built from the solution's own gaussian_conditional."""
    D, K, sigma2 = 5, 2, 0.2
    W, mu, _ = bonus_refs.random_ppca(D, K, sigma2, seed=3)
    x = bonus_refs.ppca_samples(W, mu, sigma2, 1, seed=4)[0]
    S = _covariance(W, sigma2)
    total = 0.0
    for m in range(1, D + 1):
        values = []
        for M in itertools.combinations(range(D), m):
            mean, cov = sol["gaussian_conditional"](mu, S, x, torch.tensor(M))
            var = torch.diagonal(cov)
            values.append((-0.5 * (torch.log(2 * math.pi * var) + (x[list(M)] - mean) ** 2 / var)).mean())
        total += torch.stack(values).mean().item()
    exact = sol["ppca_log_marginal"](x, W, mu, sigma2).item()
    assert total == pytest.approx(exact, abs=1e-10)


@pytest.mark.parametrize("seed", range(5))
def test_monte_carlo_sum_within_three_standard_errors(sol, seed):
    W, mu, sigma2 = bonus_refs.random_ppca(6, 2, 0.1, seed=1000 + seed)
    x = bonus_refs.ppca_samples(W, mu, sigma2, 1, seed=2000 + seed)[0]
    est, se, exact, z = bonus_refs.objective_matches_log_marginal(sol["masked_pretraining_objective"], x, W, mu,
                                                                   sigma2, n_masks=100, seed=seed)
    assert z < 3, f"sum_m S(x; m) = {est:.4f} +- {se:.4f}, log p(x) = {exact:.4f} ({z:.2f} SE)"


def test_standard_errors_are_calibrated(sol):
    """Over 40 seeded repeats about 95 % of estimates fall within 2 SE (at least 34 of 40)."""
    W, mu, sigma2 = bonus_refs.random_ppca(5, 2, 0.1, seed=5)
    x = bonus_refs.ppca_samples(W, mu, sigma2, 1, seed=6)[0]
    z = [bonus_refs.objective_matches_log_marginal(sol["masked_pretraining_objective"], x, W, mu, sigma2, 40, s)[3]
         for s in range(40)]
    assert sum(zi < 2 for zi in z) >= 34, f"z-scores {np.round(z, 2)}"
    assert max(z) > 0.5, "every estimate suspiciously close: is the standard error too large?"


# ------------------------------------------------------------------------------------------------
# The judge's cases: pass the solution, reject the usual mistakes
# ------------------------------------------------------------------------------------------------

def _probe_value(funcs: dict, probe: str, seed: int):
    """What a probe returns for ``funcs`` under a batch seed, through the evidence codec (as the judge sees it)."""
    cs = case_seed(seed, probe)
    torch.manual_seed(cs)
    try:
        value = PROBES[probe].fn(Namespace(dict(funcs), []), torch.Generator().manual_seed(cs))
    except Exception as exc:  # noqa: BLE001 - an exception escaping a probe is evidence
        value = raised(exc)
    return decode(encode(value))


def failed_cases(sol: dict, cell: str, seed: int = 0, **replaced) -> dict[str, str]:
    """Judge in-process the solution's functions, some ``replaced``, on the cases of ``test_<cell>``
    against the solution: {probe: message} of the cases that fail."""
    funcs = {**sol, **replaced}
    failed = {}
    for case in ref.CASES:
        if case.cell != f"test_{cell}":
            continue
        try:
            case.check(_probe_value(funcs, case.probe, seed), _probe_value(sol, case.probe, seed))
        except AssertionError as exc:
            failed[case.probe] = str(exc)
    return failed


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("name", ANSWER_CELLS)
def test_cases_pass_on_the_solution(sol, name, seed):
    assert failed_cases(sol, name, seed) == {}


@pytest.mark.parametrize("name", ANSWER_CELLS)
def test_cases_fail_on_the_release_stub(sol, name):
    def stub(*args, **kwargs):
        raise NotImplementedError()

    cases = [c.probe for c in ref.CASES if c.cell == f"test_{name}"]
    assert sorted(failed_cases(sol, name, **{name: stub})) == sorted(cases)


def talk_snippet_log_marginal(x, W, mu, sigma2):
    """The talk's code: a 1-D Normal with the covariance matrix as its elementwise scale."""
    S = _covariance(W, sigma2)
    return torch.distributions.Normal(mu, S, validate_args=False).log_prob(x).sum(-1)


def talk_snippet_as_written(x, W, mu, sigma2):
    """The talk's code as written: Normal(torch.zeros(D), S), which validates its scale (S has negative entries)."""
    S = _covariance(W, sigma2)
    return torch.distributions.Normal(torch.zeros(W.shape[0], dtype=W.dtype), S).log_prob(x)


def talk_snippet_unvalidated(x, W, mu, sigma2):
    """The same without validation: a D x D array of elementwise log-densities for one x."""
    S = _covariance(W, sigma2)
    return torch.distributions.Normal(mu, S.abs(), validate_args=False).log_prob(x)


@pytest.mark.parametrize("wrong,probes", [(talk_snippet_as_written, ("lm_batch", "lm_single")),
                                          (talk_snippet_unvalidated, ("lm_single",))])
def test_the_talk_snippet_hears_the_erratum(sol, wrong, probes):
    """The hidden tests say the erratum of (a) back: Normal is 1-D, p(x) is ONE MultivariateNormal."""
    failed = failed_cases(sol, "ppca_log_marginal", ppca_log_marginal=wrong)
    for probe in probes:
        assert "MultivariateNormal(mu, covariance_matrix=S)" in failed.get(probe, ""), failed


def test_the_erratum_check_spares_right_answers(sol):
    """A right answer never hears the erratum (the solution's values, and MultivariateNormal itself)."""
    def mvn(x, W, mu, sigma2):
        return torch.distributions.MultivariateNormal(mu, covariance_matrix=_covariance(W, sigma2)).log_prob(x)

    assert failed_cases(sol, "ppca_log_marginal") == {}
    assert failed_cases(sol, "ppca_log_marginal", ppca_log_marginal=mvn) == {}


@pytest.mark.parametrize("wrong", [elementwise_log_marginal, talk_snippet_log_marginal])
def test_independent_normals_are_rejected(sol, wrong):
    failed = failed_cases(sol, "ppca_log_marginal", ppca_log_marginal=wrong)
    assert "lm_batch" in failed
    if wrong is elementwise_log_marginal:
        assert "ONE multivariate normal" in failed["lm_batch"]
    # the feedback must not repeat the notebook's old misquote of the talk's code
    assert not any("S_jj" in message or ".diagonal()" in message for message in failed.values())


@pytest.mark.parametrize("wrong,message", [(slide_conditional_plus, "erratum"),
                                           (slide_conditional_transpose, "cond_mean")])
def test_slide_erratum_is_rejected(sol, wrong, message):
    failed = failed_cases(sol, "gaussian_conditional", gaussian_conditional=wrong)
    assert message in failed.get("gc_values", ""), failed


@pytest.mark.parametrize("wrong", [score_without_1_over_m, score_joint_conditional, score_pseudo_likelihood,
                                   score_slide_covariance])
def test_wrong_masked_scores_are_rejected(sol, wrong):
    assert "ms_estimate" in failed_cases(sol, "masked_score", masked_score=wrong)


WRONG_OBJECTIVES = {
    "average over m": objective_from(lambda *a: ref_score(*a), combine="mean"),
    "forgets m = D": objective_from(lambda *a: ref_score(*a), sizes=lambda D: range(1, D)),
    "fixed 15 % ratio x D": objective_from(lambda *a: ref_score(*a), sizes=lambda D: [max(1, round(0.15 * D))],
                                           scale=6.0),
    "no 1/m": objective_from(score_without_1_over_m),
    "joint conditional": objective_from(score_joint_conditional),
    "pseudo-likelihood": objective_from(score_pseudo_likelihood),
    "slide covariance": objective_from(score_slide_covariance),
}


def ref_score(x, W, mu, sigma2, m, n_masks, generator=None):
    """A correct masked score built from the reference conditional (for the wrong objectives)."""
    return _per_mask_scores(x, W, mu, sigma2, m, n_masks, generator,
                            lambda x, mu, S, M: _conditional_logp(x, mu, S, M).mean(-1).mean())


def test_reference_score_is_correct(sol):
    """Guard for the tests below: the helper they perturb passes every masked_score case itself."""
    assert failed_cases(sol, "masked_score", masked_score=ref_score) == {}


@pytest.mark.parametrize("name", sorted(WRONG_OBJECTIVES))
def test_wrong_objectives_miss_by_a_wide_margin(sol, name):
    """Each mistake lands at least 10 SE from log p(x) on a problem like the judge's, so the judge's 4-SE test
    separates it from Monte-Carlo noise with room to spare; and the judge's cases reject it."""
    W, mu, sigma2 = bonus_refs.random_ppca(6, 2, 0.1, seed=51)
    x = bonus_refs.ppca_samples(W, mu, sigma2, 1, seed=61)[0]
    _, _, _, z = bonus_refs.objective_matches_log_marginal(WRONG_OBJECTIVES[name], x, W, mu, sigma2, n_masks=100,
                                                           seed=71)
    assert z > 10, f"{name}: only {z:.1f} SE from log p(x)"
    assert failed_cases(sol, "masked_pretraining_objective", masked_pretraining_objective=WRONG_OBJECTIVES[name])


@pytest.mark.parametrize("reported_se", [0.0, 0.01, 1e6])
def test_the_objective_estimate_is_held_to_four_true_standard_errors(reported_se):
    """mo_estimate: the sum lands within 4 standard errors of log p(x), measured with the TRUE standard error
    (every mask enumerated), whatever number the student reports: 3.9 of them passes, 4.1 fails, so does a NaN
    estimate; a zero, small or huge reported standard error changes nothing (mo_standard_error checks it)."""
    W, mu, sigma2 = bonus_refs.random_ppca(5, 2, 0.3, seed=5)
    x = bonus_refs.ppca_samples(W, mu, sigma2, 2, seed=6)
    record = {"x": x, "W": W, "mu": mu, "sigma2": float(sigma2), "n_masks": [100]}
    exact = float(np.mean(ref.ref_log_marginal(x, W, mu, sigma2)))
    true_se = ref.exact_objective_se(x, W, mu, sigma2, 100)

    def graded(value: float) -> None:
        call = (torch.tensor(value, dtype=DTYPE), torch.tensor(reported_se, dtype=DTYPE))
        ref.check_objective_estimate([{**record, "calls": [call]}], [{**record, "calls": [None]}])

    graded(exact + 3.9 * true_se)
    graded(exact - 3.9 * true_se)
    for wrong in (exact + 4.1 * true_se, exact - 4.1 * true_se, float("nan")):
        with pytest.raises(AssertionError, match="standard errors from the exact log p|not finite"):
            graded(wrong)


# ------------------------------------------------------------------------------------------------
# Input validation and the given helpers
# ------------------------------------------------------------------------------------------------

def test_bad_inputs_raise_clear_value_errors(sol):
    W, mu, sigma2 = bonus_refs.random_ppca(4, 2, 0.5, seed=0)
    S = _covariance(W, sigma2)
    with pytest.raises(ValueError, match=r"\(4,\) or \(N, 4\)"):
        sol["ppca_log_marginal"](torch.zeros(5, dtype=DTYPE), W, mu, sigma2)
    with pytest.raises(ValueError, match="mu should be"):
        sol["ppca_log_marginal"](torch.zeros(4, dtype=DTYPE), W, mu[:2], sigma2)
    with pytest.raises(ValueError, match="repeated"):
        sol["gaussian_conditional"](mu, S, torch.zeros(4, dtype=DTYPE), torch.tensor([1, 1]))
    with pytest.raises(ValueError, match=r"\[0, 4\)"):
        sol["gaussian_conditional"](mu, S, torch.zeros(4, dtype=DTYPE), torch.tensor([4]))
    with pytest.raises(ValueError, match="between 1 and D"):
        sol["masked_score"](torch.zeros(4, dtype=DTYPE), W, mu, sigma2, 0, 10)
    with pytest.raises(ValueError, match="n_masks >= 2"):
        sol["masked_score"](torch.zeros(4, dtype=DTYPE), W, mu, sigma2, 1, 1)


def test_closed_form_ml_is_a_stationary_point_of_the_likelihood(sol):
    """The notebook's Tipping-Bishop solution: zero gradient, and no random rotation does better."""
    W_true, mu_true, sigma2 = bonus_refs.random_ppca(6, 2, 0.1, seed=8)
    X = bonus_refs.ppca_samples(W_true, mu_true, sigma2, 300, seed=9)
    W, mu, s2 = sol["ppca_closed_form_ml"](X, 2)
    W = W.clone().requires_grad_(True)
    log_s2 = torch.tensor(math.log(s2), dtype=DTYPE, requires_grad=True)
    mu = mu.clone().requires_grad_(True)
    loglik = sol["ppca_log_marginal"](X, W, mu, log_s2.exp()).mean()
    loglik.backward()
    for name, p in (("W", W), ("mu", mu), ("log sigma2", log_s2)):
        assert p.grad.abs().max() < 1e-8, f"gradient wrt {name} at the ML solution: {p.grad}"
    # Perturbing the solution lowers the likelihood.
    g = torch.Generator().manual_seed(0)
    for _ in range(5):
        W2 = W.detach() + 0.05 * torch.randn(W.shape, generator=g, dtype=DTYPE)
        assert sol["ppca_log_marginal"](X, W2, mu.detach(), s2).mean() < loglik.detach()
    angle = sol["largest_principal_angle_deg"](W.detach(), W.detach() @ torch.tensor([[0.0, 1.0], [-1.0, 0.0]],
                                                                                        dtype=DTYPE))
    assert angle == pytest.approx(0.0, abs=1e-5), "a rotation W -> W Q spans the same subspace"


# ------------------------------------------------------------------------------------------------
# Hollow answers: every property kept, nothing computed, nothing earned
# ------------------------------------------------------------------------------------------------
HOLLOW = {
    "ppca_log_marginal": '''
def ppca_log_marginal(x, W, mu, sigma2):
    """A constant of the right shape that stays differentiable in W, mu and sigma2; the shape checks kept."""
    W, mu, x = torch.as_tensor(W), torch.as_tensor(mu), torch.as_tensor(x)
    D = W.shape[0]
    if W.dim() != 2 or mu.shape != (D,) or x.dim() not in (1, 2) or x.shape[-1] != D:
        raise ValueError("shapes do not fit")
    return x.new_zeros(x.shape[:-1]) + 0 * (W.sum() + mu.sum() + sigma2)
''',
    "gaussian_conditional": '''
def gaussian_conditional(mu, S, x, masked_idx):
    """Always the marginal N(mu_M, S_MM): right only when nothing is observed; the checks kept."""
    D = mu.shape[-1]
    if mu.dim() != 1 or S.shape != (D, D) or x.dim() not in (1, 2) or x.shape[-1] != D:
        raise ValueError("shapes do not fit")
    M = torch.as_tensor(masked_idx).long().view(-1)
    if M.numel() == 0 or (M < 0).any() or (M >= D).any() or len(set(M.tolist())) != M.numel():
        raise ValueError("bad masked_idx")
    return mu[M].expand(*x.shape[:-1], len(M)), S[M[:, None], M]
''',
    "masked_score": '''
def masked_score(x, W, mu, sigma2, m, n_masks, generator=None):
    """One random number from the generator (reproducible, the global state untouched), differentiable in
    W, mu and sigma2, with a small standard error; the range checks kept."""
    if not 1 <= m <= W.shape[0] or n_masks < 2:
        raise ValueError("m or n_masks out of range")
    u = torch.rand((), generator=generator, dtype=W.dtype)
    return u + 0 * (W.sum() + mu.sum() + sigma2), torch.tensor(0.1, dtype=W.dtype)
''',
    "masked_pretraining_objective": '''
def masked_pretraining_objective(x, W, mu, sigma2, n_masks, generator=None):
    """Noise from the generator with an enormous standard error: 'within three standard errors' of anything."""
    return torch.rand((), generator=generator, dtype=W.dtype), torch.tensor(1e6, dtype=W.dtype)
''',
}


@pytest.mark.slow
def test_hollow_answers_score_nothing_on_any_test_cell(tmp_path):
    """Each answer cell replaced by a hollow answer that keeps the properties the checks look at (shapes,
    gradients reaching the parameters, the generator used and the global state untouched, the input
    checks) but computes nothing: a constant, the answer for the trivial input, one random number, noise
    with an inflated standard error. Each test cell scores 0 on every seed (grader.judge.sweep, as
    tests/test_judge_gates.py uses it)."""
    from grader import ROOT
    from grader.judge import points_per_test_cell, sweep
    from grader.mutants import student_copy

    stem = "bonus_masked_pretraining_bayes"
    release = json.loads((ROOT / "notebooks" / "ex01" / f"{stem}.ipynb").read_text())
    solution = json.loads(NOTEBOOK.read_text())
    hollow, todo = student_copy(release, solution), dict(HOLLOW)
    for cell in hollow["cells"]:
        gid = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        if gid in todo:
            cell["source"] = todo.pop(gid)
    assert not todo, f"answer cells not found: {sorted(todo)}"
    cells = sorted(points_per_test_cell(release))
    verdicts = sweep(stem, release, solution, {"hollow": hollow}, [0, 1, 2], cells={"hollow": cells},
                     workroot=tmp_path)
    for seed in (0, 1, 2):
        v = verdicts[("hollow", seed)]
        earned = {cell: pts for cell, pts in v.points.items() if pts}
        assert not earned, f"seed {seed}: hollow answers earned {earned}: " \
                           f"{[(c.name, c.message) for c in v.cases if c.passed]}"
