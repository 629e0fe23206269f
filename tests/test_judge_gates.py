"""Gates and generators in the judge's tables (grader/checks/<stem>.py).

* Every case that is not a value case (a property, a rule, given code) scores only next to a function that
  computes: it is gated on the MAIN value cases of its function (``MAIN`` of the checks module: what the
  function computes on ordinary inputs; ``FUNCTIONS`` says which function each probe exercises), so a
  function that returns noise, a constant or its input collects nothing of them. An edge-case value
  (stability, degenerate inputs) gates nothing: one edge-case bug loses exactly that case's share.
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


def gate_problems(cases, functions: dict, main: dict) -> list[str]:
    """What is wrong with the gates of a case table (``CASES``, ``FUNCTIONS``, ``MAIN``): a function with a case
    that is not a value case and no main value case; a main probe that no value case reads, or that belongs to
    another function while the function has value cases of its own (only given code built on other functions,
    Task A's augment_batch, borrows their main cases); a ``requires`` naming anything but a main case of the
    case's own function (an edge-case value must gate nothing)."""
    from grader.judge import case_kind

    function_of = {p: fn for fn, probes in functions.items() for p in probes}
    values = {c.probe for c in cases if case_kind(c) == "value"}
    own_values = {fn: {p for p in values if function_of.get(p) == fn} for fn in functions}
    problems = [f"MAIN names {fn}, which FUNCTIONS does not list" for fn in main if fn not in functions]
    for fn in functions:
        gated = [c.probe for c in cases if function_of.get(c.probe) == fn and case_kind(c) != "value"]
        mains = tuple(main.get(fn, ()))
        if gated and not mains:
            problems.append(f"{fn}: {sorted(set(gated))} not value cases, and no main value case (MAIN) to gate them")
        for p in mains:
            if p not in values:
                problems.append(f"{fn}: main case {p} is no value case")
            elif function_of.get(p) != fn and own_values[fn]:
                problems.append(f"{fn}: main case {p} belongs to {function_of.get(p)}")
    for c in cases:
        fn = function_of.get(c.probe)
        mains = set(main.get(fn, ())) or own_values.get(fn, set())
        stray = [r for r in c.requires if r not in mains]
        if stray:
            problems.append(f"{c.probe}: requires {stray}, not main value cases of {fn}")
    return problems


@pytest.mark.parametrize("stem", STEMS)
def test_every_case_that_is_not_a_value_case_is_gated_on_the_main_values_of_its_function(stem):
    """Derived from the case table: a property, rule or given-code case scores only when the main value cases
    of its function pass; every function with such a case declares main value cases."""
    from grader.judge import case_kind, main_cases, value_gates

    module = importlib.import_module(f"grader.checks.{stem}")
    cases = load_cases(stem)
    problems = gate_problems(cases, module.FUNCTIONS, getattr(module, "MAIN", {}))
    function_of = _function_of(stem)
    main = main_cases(stem)
    for case, gate in zip(cases, value_gates(stem)):
        wanted = set(case.requires) | (set(main[function_of[case.probe]]) if case_kind(case) != "value" else set())
        if set(gate) != wanted or (case_kind(case) != "value" and not gate):
            problems.append(f"{case.probe} ({case_kind(case)}): gated on {sorted(gate)}, not {sorted(wanted)}")
    assert not problems, "\n".join(problems)


def test_the_gate_scan_catches_a_planted_table():
    from grader.judge import Case

    def equal(got, ref):
        assert got == ref

    cases = [Case("t", "f_values", "values", equal), Case("t", "f_edge", "edge values", equal),
             Case("t", "f_shape", "shape", equal, kind="property"), Case("t", "g_shape", "shape", equal, kind="property"),
             Case("t", "g_values", "values", equal), Case("t", "f_rule", "raises", equal, kind="rule",
                                                          requires=("f_edge",))]
    functions = {"f": ("f_values", "f_edge", "f_shape", "f_rule"), "g": ("g_values", "g_shape")}
    assert gate_problems(cases, functions, {"f": ("f_values",), "g": ("g_values",)}) == \
        ["f_rule: requires ['f_edge'], not main value cases of f"]
    problems = gate_problems(cases[:5], functions, {"f": ("f_values",)})
    assert problems == ["g: ['g_shape'] not value cases, and no main value case (MAIN) to gate them"]
    assert gate_problems(cases[:5], functions, {"f": ("f_shape",), "g": ("f_values",)}) == \
        ["f: main case f_shape is no value case", "g: main case f_values belongs to f"]


def test_the_tables_are_derived_from_the_cases():
    """FUNCTIONS and MAIN come from the cases, in their order: a case's function is its test cell's unless it names
    one, a probe read by several cases is listed once, ``main=True`` marks the main value cases, and given code
    borrows the main cases of the functions it is built on. A probe of two functions, or a main case that is no
    value case, is refused."""
    from grader.cases import Case, function_tables

    def equal(got, ref):
        assert got == ref

    cases = [Case("test_f", "f_shape", "shape", equal, kind="property"),
             Case("test_f", "f_values", "values", equal, main=True),
             Case("test_f", "f_values", "one pass", equal, kind="property"),
             Case("test_two", "g_values", "values", equal, function="g", main=True),
             Case("test_two", "h_values", "values", equal, function="h"),
             Case("test_both", "both_shape", "shape", equal, kind="property", function="both")]
    functions, main = function_tables(cases, borrows={"both": ("g", "f")})
    assert list(functions.items()) == [("f", ("f_shape", "f_values")), ("g", ("g_values",)), ("h", ("h_values",)),
                                       ("both", ("both_shape",))]
    assert list(main.items()) == [("f", ("f_values",)), ("g", ("g_values",)), ("both", ("g_values", "f_values"))]
    with pytest.raises(ValueError, match="f_values: a case of f and of g"):
        function_tables(cases + [Case("test_g", "f_values", "v", equal)])
    with pytest.raises(ValueError, match="main=True on a property case"):
        function_tables([Case("test_f", "f_shape", "shape", equal, kind="property", main=True)])


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


def _table_verdicts(stem, monkeypatch, failing_sets: list[set[str]]):
    """The judge on ``stem``'s real case table (kinds, weights, FUNCTIONS, MAIN, requires) and the release's
    points, with every case's own check replaced by one that fails exactly when the case's probe is in the
    failing set: one Verdict per set. What a failed case costs, and what it takes with it, is the table's."""
    import dataclasses
    import types

    from grader import judge as judge_mod
    from grader.evidence import encode
    from grader.judge import case_kind

    module = importlib.import_module(f"grader.checks.{stem}")
    failing: set[str] = set()

    def check_of(probe):
        def check(got, ref):
            assert probe not in failing, "wrong"
        return check

    table = types.SimpleNamespace(
        CASES=[dataclasses.replace(c, check=check_of(c.probe), kind=case_kind(c)) for c in module.CASES],
        FUNCTIONS=module.FUNCTIONS, MAIN=getattr(module, "MAIN", {}))
    monkeypatch.setattr(judge_mod.importlib, "import_module", lambda name: table)
    release, _ = _load(stem)
    points = points_per_test_cell(release)
    ok = {c.probe: {"status": "ok", "value": encode(1)} for c in module.CASES}
    out = []
    for fails in failing_sets:
        failing.clear()
        failing.update(fails)
        out.append(judge_mod.judge(stem, ok, ok, points))
    monkeypatch.undo()
    return points, out


def _edge_values(stem) -> list[str]:
    """The value cases of ``stem`` that are no main case and that nothing requires: edge-case values."""
    from grader.judge import case_kind, main_cases

    cases = load_cases(stem)
    main = {p for probes in main_cases(stem).values() for p in probes}
    required = {r for c in cases for r in c.requires}
    return sorted({c.probe for c in cases if case_kind(c) == "value"} - main - required)


def _share(stem, probe, points) -> tuple[str, float]:
    cases = load_cases(stem)
    cell = next(c.cell for c in cases if c.probe == probe)
    total = sum(c.weight for c in cases if c.cell == cell)
    lost = sum(c.weight for c in cases if c.probe == probe)
    return cell, round(points[cell] * (total - lost) / total, 2)


@pytest.mark.parametrize("stem", STEMS)
def test_one_edge_case_bug_loses_exactly_that_cases_share(stem, monkeypatch):
    """A failed value costs its own share: an answer right everywhere but one edge-case value (stability, a
    degenerate input, an option) keeps every other case, its properties and rules included."""
    edges = _edge_values(stem)
    assert edges, f"{stem}: no edge-case value case"
    points, verdicts = _table_verdicts(stem, monkeypatch, [{e} for e in edges])
    for edge, v in zip(edges, verdicts):
        cell, left = _share(stem, edge, points)
        assert [c.name for c in v.cases if not c.passed] == [c.name for c in v.cases if c.name == edge], \
            f"{edge} failed, and with it {[c.name for c in v.cases if not c.passed and c.name != edge]}"
        assert v.points == {**points, cell: left}, (edge, v.points)


@pytest.mark.parametrize("stem", STEMS)
def test_an_answer_that_computes_nothing_right_earns_nothing_beyond_values(stem, monkeypatch):
    """A hollow answer (noise, a constant, its input) of any function, extensions included, fails its value
    cases; whatever its shapes, generator use or error messages, every case that is not a value case of that
    function (and of given code built on it) then scores 0; so does one that fails only the main cases."""
    from grader.judge import case_kind, function_of, main_cases

    fn = function_of(stem)
    cases = load_cases(stem)
    main = main_cases(stem)
    functions = sorted({fn[c.probe] for c in cases if case_kind(c) != "value"})
    sets = [(f, {c.probe for c in cases if fn[c.probe] == f and case_kind(c) == "value"} or set(main[f]))
            for f in functions] + [(f, set(main[f])) for f in functions]
    _, verdicts = _table_verdicts(stem, monkeypatch, [failing for _, failing in sets])
    for (f, failing), v in zip(sets, verdicts):
        hit = {g for g in functions if set(main[g]) & failing}   # f, and given code built on it
        assert f in hit
        leaks = [(c.name, kind) for c, kind in zip(v.cases, [case_kind(c) for c in cases])
                 if c.passed and kind != "value" and fn[c.name] in hit]
        assert not leaks, f"{stem}: {f} computes nothing right, yet scores {leaks}"
    if stem == "taskA_simclr":   # noise from the crop alone voids the given augment_batch's properties too
        assert {g for g in functions if set(main[g]) & set(main["random_resized_crop_flip"])} >= {"augment_batch"}


def test_item_one_examples_lose_their_own_case_only(monkeypatch):
    """Issue "Fair to the last point", item 1: a batch-wide log-sum-exp (InfoNCE stability), the 80/10/10 split
    by position among the selected tokens (bert_mask replacements), an oversize crop box clipped rather than
    drawn again (Task A redraw) each lose their one case and nothing else."""
    for stem, probe in (("task1_infonce", "info_nce_float64_stable"), ("task2_pseudo_likelihood", "bert_mask_replacements"),
                        ("taskA_simclr", "crop_redraw")):
        assert probe in _edge_values(stem)
        points, (v,) = _table_verdicts(stem, monkeypatch, [{probe}])
        cell, left = _share(stem, probe, points)
        assert {c.name for c in v.cases if not c.passed} == {probe} and v.points[cell] == left


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


@pytest.mark.slow
def test_answers_that_ignore_the_tables_earn_nothing_on_conditionals_compatible(tmp_path, monkeypatch):
    """Issue #51: True or False from a call counter, a fixed pattern, a seeded random stream, the dtype, the
    shape, the tolerance or a constant (tests/fixtures/hollow_answers.py) fails every value case of
    conditionals_compatible, so its gated cases score nothing either: 0 of the cell's points. Each case runs
    in a process of its own, as in grading, so a counter starts afresh in every case."""
    from fixtures.hollow_answers import CALL_ORDER_COMPATIBLE
    from grader import judge as judge_mod

    real = judge_mod.run_harness
    monkeypatch.setattr(judge_mod, "run_harness", lambda plan, **kwargs: real({**plan, "isolate": "case"}, **kwargs))
    variants = {name: ("conditionals_compatible", source) for name, source in CALL_ORDER_COMPATIBLE.items()}
    verdicts = _judge("task2_pseudo_likelihood", variants, "test_conditionals_compatible", tmp_path)
    for (name, seed), v in verdicts.items():
        assert v.points["test_conditionals_compatible"] == 0, \
            f"{name} (seed {seed}) earned {v.points['test_conditionals_compatible']}: {[c.name for c in v.cases if c.passed]}"


@pytest.mark.slow
def test_a_table_of_the_published_pythia_counts_earns_nothing(tmp_path):
    """Issue #51: count_parameters that looks up the published counts of the Pythia sizes (and returns nonsense
    for any other configuration) earns nothing: the Pythia-architecture case draws sizes no Pythia model has."""
    from fixtures.hollow_answers import PYTHIA_LOOKUP

    verdicts = _judge("taskB_pythia_scaling", {"lookup": ("count_parameters", PYTHIA_LOOKUP)}, "test_count_parameters",
                      tmp_path)
    for (name, seed), v in verdicts.items():
        assert v.points["test_count_parameters"] == 0, \
            f"{name} (seed {seed}) earned {v.points['test_count_parameters']}: {[c.name for c in v.cases if c.passed]}"


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


# ------------------------------------------------------------------------------ edge-case bugs and hollow answers
@pytest.mark.slow
@pytest.mark.parametrize("stem", STEMS)
def test_a_solution_with_one_edge_case_bug_loses_exactly_that_cases_share(stem, tmp_path):
    """The mutants of grader/mutants/<stem>.py marked ``edge=True``, whose one bug is an edge case, each lose their
    own case's share and nothing more (issue "Fair to the last point", item 1). The bonus's is a rule (an input
    form, issue #50): a rule's bug, too, costs its own share only."""
    from grader.mutants import load as load_mutants

    edge = [m for m in load_mutants(stem) if m.edge]
    assert edge, f"grader/mutants/{stem}.py marks no mutant edge=True"
    _loses_exactly_its_case(stem, edge, tmp_path)


#: Per notebook, mutants (grader/mutants/<stem>.py: answer cell, name) whose one bug is a dtype: each loses its
#: dtype rule's share and nothing more (issue #51: the value cases compare values only, so a dtype slip is not
#: charged twice). The bonus has no dtype rule.
DTYPE_MUTANTS = {
    "task1_infonce": (("info_nce_loss", "returns float32 whatever the input dtype"),
                      ("info_nce_loss", "returns float64 whatever the input dtype"),
                      ("nce_loss", "returns float32 whatever the input dtype"),
                      ("n_pair_loss", "returns float32 whatever the input dtype"),
                      ("mi_functions", "bound in float32 (a float64 mean loss loses its digits)")),
    "task2_pseudo_likelihood": (("mlm_loss", "always returns float32"), ("mlm_loss", "always returns float64")),
    "taskA_simclr": (("nt_xent_loss_loop", "the loss computed in float64 and returned as float64"),
                     ("nt_xent_loss_loop", "returns float32 whatever the input dtype"),
                     ("nt_xent_loss", "returns float64 whatever the input dtype"),
                     ("nt_xent_loss", "returns float32 whatever the input dtype")),
    "taskB_pythia_scaling": (("bookkeeping", "array path in float64 (right values, not an int64 array)"),),
}


@pytest.mark.slow
@pytest.mark.parametrize("stem", sorted(DTYPE_MUTANTS))
def test_a_solution_whose_one_bug_is_a_dtype_loses_exactly_the_dtype_rules_share(stem, tmp_path):
    from grader.judge import case_kind
    from grader.mutants import load as load_mutants

    mutants = {(m.cell, m.name): m for m in load_mutants(stem)}
    chosen = [mutants[key] for key in DTYPE_MUTANTS[stem]]
    rules = {c.probe for c in load_cases(stem) if case_kind(c) == "rule" and c.checks == "dtype"}
    assert {m.case for m in chosen} <= rules, [m.case for m in chosen]
    _loses_exactly_its_case(stem, chosen, tmp_path, kind="rule")


def _loses_exactly_its_case(stem, mutants, tmp_path, kind: str | None = None):
    """Each mutant, judged on its case's test cell over the seeds, fails its ``case`` (with ``kind``, the one of
    that kind: a rule may read the probe of a value case again) and nothing else, and keeps every other share of
    the cell's points."""
    from grader.judge import case_kind

    release, solution = _load(stem)
    points = points_per_test_cell(release)
    cases = load_cases(stem)
    variants, cells, expected = {}, {}, {}
    for m in mutants:
        name = f"{m.cell}: {m.name}"
        cell = next(c.cell for c in cases if c.probe == m.case)
        total = sum(c.weight for c in cases if c.cell == cell)
        lost = sum(c.weight for c in cases if c.probe == m.case and kind in (None, case_kind(c)))
        variants[name] = student_copy(release, solution, m)
        cells[name] = [cell]
        expected[name] = (m.case, cell, round(points[cell] * (total - lost) / total, 2))
    verdicts = sweep(stem, release, solution, variants, SEEDS, cells=cells, workroot=tmp_path, jobs=1)
    for (name, seed), v in verdicts.items():
        case, cell, left = expected[name]
        failed = sorted({c.name for c in v.cases if not c.passed})
        assert failed == [case] and v.points[cell] == left, \
            f"{name} (seed {seed}): failed {failed}, {v.points[cell]} of {points[cell]}, expected {left}: " \
            + "; ".join(f"{c.name}: {c.message}" for c in v.cases if not c.passed)


_CROP_HEAD = '''
def random_resized_crop_flip(images, size=32, *, scale=(0.2, 1.0), ratio=(3 / 4, 4 / 3), flip_p=0.5, generator=None):
    if images.dim() != 4 or images.shape[1] != 3 or not images.is_floating_point():
        raise ValueError(f"images must be a float tensor [N, 3, H, W], got {images.dtype} {tuple(images.shape)}")
    n = images.shape[0]
    where = generator.device if generator is not None else images.device
'''
CROP_NOISE = _CROP_HEAD + '''    return torch.rand(n, 3, size, size, generator=generator, device=where).to(images.device, images.dtype)
'''
CROP_CONSTANT = _CROP_HEAD + '''    return torch.full((n, 3, size, size), 0.5, dtype=images.dtype, device=images.device)
'''
CROP_RESIZE_FLIP = _CROP_HEAD + '''    import torch.nn.functional as F
    x = F.interpolate(images, size=(size, size), mode="bilinear", align_corners=False)
    flip = (torch.rand(n, generator=generator, device=where) < flip_p).to(images.device).view(n, 1, 1, 1)
    return torch.where(flip, x.flip(-1), x)
'''
_COLOUR_HEAD = '''
def grayscale(images: torch.Tensor) -> torch.Tensor:
    """[N, 3, H, W] -> [N, 1, H, W] luma with the ITU-R 601 weights (as torchvision)."""
    return (0.299 * images[:, 0] + 0.587 * images[:, 1] + 0.114 * images[:, 2]).unsqueeze(1)


def colour_distort(images, *, jitter=(0.4, 0.4, 0.4, 0.1), jitter_p=0.8, gray_p=0.2, generator=None):
    if images.dim() != 4 or images.shape[1] != 3 or not images.is_floating_point():
        raise ValueError(f"images must be a float tensor [N, 3, H, W], got {images.dtype} {tuple(images.shape)}")
    where = generator.device if generator is not None else images.device
'''
COLOUR_IDENTITY = _COLOUR_HEAD + '''    return images.clone()
'''
COLOUR_NOISE = _COLOUR_HEAD + '''    return torch.rand(images.shape, generator=generator, device=where).to(images.device, images.dtype)
'''
COLOUR_CONSTANT = _COLOUR_HEAD + '''    return torch.full_like(images, 0.5)
'''
HOLLOW_TASK_A = {
    "crop noise": {"random_resized_crop_flip": CROP_NOISE},
    "crop constant": {"random_resized_crop_flip": CROP_CONSTANT},
    "crop = resize + flip, colour = identity": {"random_resized_crop_flip": CROP_RESIZE_FLIP,
                                                "colour_distort": COLOUR_IDENTITY},
    "colour noise": {"colour_distort": COLOUR_NOISE},
    "colour constant": {"colour_distort": COLOUR_CONSTANT},
}


@pytest.mark.slow
def test_hollow_task_a_augmentations_score_nothing_but_values(tmp_path):
    """Issue items 2 and 9: crop and colour functions that return noise, a constant, the resized image or their
    input earn 0 on every case that is not a value case (shape, identity, independence, generator, global
    state, input check), and so does the given augment_batch built on them."""
    from grader.judge import case_kind, function_of

    stem = "taskA_simclr"
    release, solution = _load(stem)
    base = student_copy(release, solution)
    cells = ["test_random_resized_crop_flip", "test_colour_distort", "test_augment_batch"]
    variants = {}
    for name, answers in HOLLOW_TASK_A.items():
        nb = base
        for answer, source in answers.items():
            nb = _with_answer(nb, answer, source)
        variants[name] = nb
    verdicts = sweep(stem, release, solution, variants, SEEDS, cells={n: cells for n in variants},
                     workroot=tmp_path, jobs=1)
    fn = function_of(stem)
    kinds = {}
    for c in load_cases(stem):
        kinds.setdefault(c.probe, set()).add(case_kind(c))
    for (name, seed), v in verdicts.items():
        hollow = set(HOLLOW_TASK_A[name]) | {"augment_batch"}
        leaks = [c.name for c in v.cases if c.passed and fn[c.name] in hollow and kinds[c.name] != {"value"}]
        assert not leaks, f"{name} (seed {seed}) scores {leaks}"
        # by name, not by kind: a shape, identity or generator case declared a value case would leak here
        earned = sorted(c.name for c in v.cases if c.passed and fn[c.name] in hollow)
        assert set(earned) <= HOLLOW_MAY_EARN, f"{name} (seed {seed}) scores {earned}: {v.points}"


#: What a hollow answer above may earn: a resize + flip does flip each image with probability flip_p, left-right.
HOLLOW_MAY_EARN = {"crop_flip_rate", "crop_flip_reverses"}
