"""Gates and generators in the judge's tables (grader/checks/<stem>.py).

* An error case ("raises ValueError when ...") scores only next to a function that computes: its
  ``requires`` names at least two value cases of the SAME function (``FUNCTIONS`` of the checks module
  says which function each probe exercises), so a function that answers the one trivial input and
  raises everywhere else collects nothing of the error cases.
* A graded function whose text says its randomness comes from a given ``generator`` has cases for the
  three consequences: the same seed gives the same draws, another seed other draws, and the global
  random states (torch, NumPy, ``random``) are left alone.

The sweeps judge hand-written wrong answers against the solution with ``grader.judge.sweep``, as
tests/test_judge.py does for the mutants.
"""

from __future__ import annotations

import ast
import copy
import importlib
import json

import pytest

from conftest import sweep_seeds
from grader import ROOT
from grader.judge import load_cases, points_per_test_cell, sweep
from grader.mutants import answer_cells, graded_functions, student_copy

SOLUTIONS = ROOT / "solutions" / "ex01"
RELEASE = ROOT / "notebooks" / "ex01"
STEMS = sorted(p.stem for p in (ROOT / "grader" / "probes").glob("*.py") if p.stem != "__init__")
SEEDS = sweep_seeds(3)   # ./pack.sh test fast: 1 ($LAS_SWEEP_SEEDS)


def _load(stem):
    return (json.loads((RELEASE / f"{stem}.ipynb").read_text()), json.loads((SOLUTIONS / f"{stem}.ipynb").read_text()))


def _expects_error(case) -> bool:
    return bool(getattr(case.check, "expects_error", False))


def _function_of(stem) -> dict[str, str]:
    functions = importlib.import_module(f"grader.checks.{stem}").FUNCTIONS
    out = {}
    for fn, probes in functions.items():
        for p in probes:
            assert p not in out, f"{stem}: probe {p} listed under {out[p]} and {fn}"
            out[p] = fn
    return out


# ------------------------------------------------------------------------------ the tables
@pytest.mark.parametrize("stem", STEMS)
def test_every_probe_belongs_to_one_function(stem):
    function_of = _function_of(stem)
    probes = {c.probe for c in load_cases(stem)}
    missing, unknown = sorted(probes - set(function_of)), sorted(set(function_of) - probes)
    assert not missing and not unknown, \
        f"FUNCTIONS of grader/checks/{stem}.py must list every probe once: missing {missing}, unknown {unknown}"


@pytest.mark.parametrize("stem", STEMS)
def test_every_case_that_is_not_a_value_case_is_gated_on_the_values_of_its_function(stem):
    """Derived from the case table: a property, rule or given-code case scores only when every value case
    of its own function passes, and there is at least one such value case to pass."""
    from grader.judge import case_kind, value_gates

    cases = load_cases(stem)
    function_of = _function_of(stem)
    gates = value_gates(stem)
    problems = []
    for case, gate in zip(cases, gates):
        if case_kind(case) == "value":
            continue
        fn = function_of[case.probe]
        own_values = {c.probe for c in cases if case_kind(c) == "value" and function_of[c.probe] == fn}
        if not own_values:
            problems.append(f"{case.probe} ({case_kind(case)}): {fn} has no value case to gate it on")
        missing = own_values - set(gate)
        if missing:
            problems.append(f"{case.probe}: not gated on {sorted(missing)}")
    assert not problems, "\n".join(problems)


def test_the_gate_is_derived_and_can_fail(monkeypatch):
    """A property case of a function whose value case fails scores nothing, without any ``requires``."""
    import types

    from grader import judge as judge_mod
    from grader.evidence import encode
    from grader.judge import Case

    def equal(got, ref):
        assert got == ref, "wrong"

    module = types.SimpleNamespace(
        CASES=[Case("t", "f_values", "values", equal), Case("t", "f_shape", "shape", equal, kind="property"),
               Case("t", "g_values", "values", equal)],
        FUNCTIONS={"f": ("f_values", "f_shape"), "g": ("g_values",)})
    monkeypatch.setattr(judge_mod.importlib, "import_module", lambda name: module)
    ok = {"status": "ok", "value": encode(1)}
    wrong = {"status": "ok", "value": encode(2)}
    reference = {"f_values": ok, "f_shape": ok, "g_values": ok}
    hollow = judge_mod.judge("x", {"f_values": wrong, "f_shape": ok, "g_values": ok}, reference, {"t": 3.0})
    assert {c.name: c.passed for c in hollow.cases} == {"f_values": False, "f_shape": False, "g_values": True}
    assert hollow.points["t"] == 1.0
    right = judge_mod.judge("x", {"f_values": ok, "f_shape": ok, "g_values": wrong}, reference, {"t": 3.0})
    assert {c.name: c.passed for c in right.cases} == {"f_values": True, "f_shape": True, "g_values": False}
    # one call, checked twice: the property case reading the same probe as a failed value case scores nothing
    module.CASES = [Case("t", "f_call", "values", lambda got, ref: (_ for _ in ()).throw(AssertionError("wrong"))),
                    Case("t", "f_call", "one forward pass", equal, kind="property")]
    module.FUNCTIONS = {"f": ("f_call",)}
    shared = judge_mod.judge("x", {"f_call": ok}, {"f_call": ok}, {"t": 2.0})
    assert [c.passed for c in shared.cases] == [False, False] and shared.points["t"] == 0


@pytest.mark.parametrize("stem", STEMS)
def test_every_requirement_names_a_case(stem):
    cases = load_cases(stem)
    probes = {c.probe for c in cases}
    missing = [(c.probe, n) for c in cases for n in c.requires if n not in probes]
    assert not missing, f"requires naming no case: {missing}"


def _generator_functions(stem) -> list[str]:
    """The graded functions of the solution that take a ``generator`` argument."""
    _, solution = _load(stem)
    out = []
    for source in answer_cells(solution).values():
        graded = graded_functions(source)
        for node in ast.parse(source).body:
            if isinstance(node, ast.FunctionDef) and node.name in graded:
                args = node.args
                if "generator" in [a.arg for a in args.posonlyargs + args.args + args.kwonlyargs]:
                    out.append(node.name)
    return out


@pytest.mark.parametrize("stem", STEMS)
def test_functions_with_a_generator_have_the_three_draw_checks(stem):
    """Each comparator says what it checks about the draws in its ``draws`` attribute."""
    function_of = _function_of(stem)
    missing = []
    for fn in _generator_functions(stem):
        kinds = set()
        for case in load_cases(stem):
            if function_of[case.probe] == fn:
                kinds |= set(getattr(case.check, "draws", ()))
        lacking = {"same seed", "other seed", "global state"} - kinds
        if lacking:
            missing.append(f"{fn}: no case for {sorted(lacking)}")
    assert not missing, "\n".join(missing)


def test_the_generator_functions_are_found():
    found = {stem: _generator_functions(stem) for stem in STEMS}
    assert found["task2_pseudo_likelihood"] == ["single_index_estimate", "bert_mask"]
    assert set(found["taskA_simclr"]) == {"simclr_train_step", "random_resized_crop_flip", "colour_distort"}
    assert found["bonus_masked_pretraining_bayes"] == ["masked_score", "masked_pretraining_objective"]


# ------------------------------------------------------------------------------ sweeps
def _with_answer(notebook: dict, cell: str, source: str) -> dict:
    nb = copy.deepcopy(notebook)
    hits = 0
    for c in nb["cells"]:
        if ((c.get("metadata") or {}).get("nbgrader") or {}).get("grade_id") == cell:
            c["source"] = source
            hits += 1
    assert hits == 1, f"answer cell {cell!r} found {hits} times"
    return nb


def _judge(stem, variants: dict[str, tuple[str, str]], cell: str, tmp_path):
    """{(name, seed): Verdict} of answer-cell replacements ``name -> (answer cell, source)``, judged on ``cell``."""
    release, solution = _load(stem)
    base = student_copy(release, solution)
    notebooks = {name: _with_answer(base, answer, source) for name, (answer, source) in variants.items()}
    assert cell in points_per_test_cell(release)
    return sweep(stem, release, solution, notebooks, SEEDS, cells={name: [cell] for name in notebooks},
                 workroot=tmp_path)


TRIVIAL_INFO_NCE = '''
def info_nce_loss(scores, positive_index=None):
    """log(K+1) for equal scores, the one input it knows; a ValueError for everything else."""
    if scores.dim() == 2 and bool((scores == scores.flatten()[0]).all()):
        return math.log(scores.shape[1])
    raise ValueError("not supported")
'''

TRIVIAL_INFO_NCE_TENSOR = '''
def info_nce_loss(scores, positive_index=None):
    if scores.dim() == 2 and bool((scores == scores.flatten()[0]).all()):
        return torch.tensor(math.log(scores.shape[1]), dtype=scores.dtype)
    raise ValueError("not supported")
'''

TRIVIAL_NCE = '''
def nce_loss(scores):
    """The NCE loss for equal scores only (then every logit is s - log K); a ValueError otherwise."""
    if scores.dim() == 2 and scores.shape[1] > 1 and bool((scores == scores.flatten()[0]).all()):
        k = scores.shape[1] - 1
        logit = float(scores.flatten()[0]) - math.log(k)
        return torch.tensor(-(F.logsigmoid(torch.tensor(logit)) + k * F.logsigmoid(torch.tensor(-logit))).item(),
                            dtype=scores.dtype)
    raise ValueError("not supported")
'''


@pytest.mark.slow
def test_a_trivial_info_nce_and_nce_earn_nothing(tmp_path):
    verdicts = _judge("task1_infonce", {"info_nce": ("info_nce_loss", TRIVIAL_INFO_NCE),
                                        "info_nce_tensor": ("info_nce_loss", TRIVIAL_INFO_NCE_TENSOR)},
                      "test_info_nce_loss", tmp_path)
    verdicts.update(_judge("task1_infonce", {"nce": ("nce_loss", TRIVIAL_NCE)}, "test_nce_loss", tmp_path))
    for seed in SEEDS:
        for name, cell in (("info_nce", "test_info_nce_loss"), ("nce", "test_nce_loss")):
            v = verdicts[(name, seed)]
            assert v.points[cell] == 0, f"{name} (seed {seed}) earned {v.points[cell]}: " \
                                        f"{[c.name for c in v.cases if c.passed]}"
        # a tensor for equal scores: the trivial case scores only next to real values as well
        v = verdicts[("info_nce_tensor", seed)]
        assert v.points["test_info_nce_loss"] == 0, [c.name for c in v.cases if c.passed]


_BERT_MASK = '''
def bert_mask(input_ids, special_token_ids, mask_token_id, vocab_size, q=0.15, generator=None):
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"q must lie in [0, 1], got {q}")
{setup}    ids = input_ids.long()
    specials = torch.as_tensor(list(special_token_ids), dtype=torch.long)
    special = torch.isin(ids, specials)
    selected = (torch.rand(ids.shape{g}) < q) & ~special
    action = torch.rand(ids.shape{g})
    random_tokens = torch.randint(vocab_size, ids.shape{g})
    masked = ids.clone()
    masked[selected & (action < 0.8)] = mask_token_id
    swap = selected & (action >= 0.8) & (action < 0.9)
    masked[swap] = random_tokens[swap]
    labels = torch.where(selected, ids, torch.full_like(ids, -100))
    return masked, labels
'''
OWN_GENERATOR = _BERT_MASK.replace("{setup}", "    generator = torch.Generator().manual_seed(1234)\n").replace(
    "{g}", ", generator=generator")
GLOBAL_RNG = _BERT_MASK.replace("{setup}", "").replace("{g}", "")
HONEST = _BERT_MASK.replace("{setup}", "").replace("{g}", ", generator=generator")


@pytest.mark.slow
def test_bert_mask_from_its_own_generator_or_the_global_one_loses_points(tmp_path):
    variants = {"own": ("bert_mask", OWN_GENERATOR), "global": ("bert_mask", GLOBAL_RNG), "honest": ("bert_mask", HONEST)}
    verdicts = _judge("task2_pseudo_likelihood", variants, "test_bert_mask", tmp_path)
    for seed in SEEDS:
        honest = verdicts[("honest", seed)]
        assert honest.score == honest.max_score, [(c.name, c.message) for c in honest.cases if not c.passed]
        own = verdicts[("own", seed)]
        failed = {c.name for c in own.cases if not c.passed}
        assert own.score < own.max_score and "bert_mask_seeds_differ" in failed, failed
        glob = verdicts[("global", seed)]
        failed = {c.name for c in glob.cases if not c.passed}
        assert glob.score < glob.max_score and {"bert_mask_global_state", "bert_mask_generator"} <= failed, failed
