"""The judge on every converted notebook, without nbgrader (the real command line is tested in
tests/test_grader.py): over 6 seeds the solution earns full marks on every draw and every mutant
of grader/mutants/<stem>.py loses points on every draw; the unmodified release earns nothing; every
honest variant of tests/fixtures/honest/<stem>.py earns full marks."""

from __future__ import annotations

import json

import pytest

from conftest import sweep_seeds
from fixtures import honest
from grader import ROOT
from grader.judge import load_cases, sweep, points_per_test_cell
from grader.mutants import load as load_mutants, student_copy

SOLUTIONS = ROOT / "solutions" / "ex01"
RELEASE = ROOT / "notebooks" / "ex01"
STEMS = sorted(p.stem for p in (ROOT / "grader" / "probes").glob("*.py") if p.stem != "__init__")
# 6 seeds keep the suite within its time budget (./pack.sh test fast: 1, $LAS_SWEEP_SEEDS);
# `python -m grader mutants` (QA before a release) sweeps 20.
SEEDS = sweep_seeds(6)


def _load(stem):
    return (json.loads((RELEASE / f"{stem}.ipynb").read_text()), json.loads((SOLUTIONS / f"{stem}.ipynb").read_text()))


def _test_cell_of(answer_cell: str, points: dict) -> list[str]:
    """The test cell of an answer cell (test_<id>), or every test cell when there is none."""
    return [f"test_{answer_cell}"] if f"test_{answer_cell}" in points else list(points)


@pytest.mark.parametrize("stem", STEMS)
def test_every_test_cell_has_cases_and_every_case_a_probe(stem):
    from grader.probe import load_probes

    release, _ = _load(stem)
    points = points_per_test_cell(release)
    cases = load_cases(stem)
    probes = load_probes(stem)
    assert {c.cell for c in cases} == set(points), "every autograded test cell needs cases, and only those"
    assert {c.probe for c in cases} == set(probes), "every probe is used by a case, every case has a probe"
    from grader.judge import case_kind

    assert all(c.says and (c.weight > 0 or case_kind(c) == "given") for c in cases), \
        "every case says what it checks and weighs something, except a check of given code (weight 0)"


@pytest.mark.slow
@pytest.mark.parametrize("stem", STEMS)
def test_solution_mutants_and_release_over_the_seeds(stem, tmp_path):
    release, solution = _load(stem)
    points = points_per_test_cell(release)
    full = sum(points.values())
    mutants = load_mutants(stem)
    variants = {"solution": student_copy(release, solution), "release": release}
    cells = {}
    for i, m in enumerate(mutants):
        variants[f"mutant{i:02d}"] = student_copy(release, solution, m)
        cells[f"mutant{i:02d}"] = _test_cell_of(m.cell, points)
    verdicts = sweep(stem, release, solution, variants, SEEDS, cells=cells, workroot=tmp_path)
    for seed in SEEDS:
        v = verdicts[("solution", seed)]
        assert v.score == pytest.approx(full), f"seed {seed}: solution lost {[c for c in v.cases if not c.passed]}"
        assert v.dropped == [], f"seed {seed}: the judge could not run lines of the solution: {v.dropped}"
        r = verdicts[("release", seed)]
        assert r.score == 0 and not any(c.passed for c in r.cases), \
            f"seed {seed}: the release stub passes {[c.name for c in r.cases if c.passed]}"
    survivors = []
    for i, m in enumerate(mutants):
        for seed in SEEDS:
            v = verdicts[(f"mutant{i:02d}", seed)]
            if v.score >= v.max_score - 1e-9:
                survivors.append(f"{m.cell}: {m.name} (seed {seed})")
    assert not survivors, "mutants that kept full marks:\n" + "\n".join(survivors)


@pytest.mark.slow
@pytest.mark.parametrize("stem", [s for s in honest.stems() if s in STEMS])
def test_honest_variants_get_full_marks(stem, tmp_path):
    release, solution = _load(stem)
    base = student_copy(release, solution)
    variants = {f"{h.cell}: {h.name}": honest.apply(base, h) for h in honest.load(stem)}
    seeds = [0, 7][:len(sweep_seeds(2))]
    verdicts = sweep(stem, release, solution, variants, seeds, workroot=tmp_path)
    lost = []
    for (name, seed), v in verdicts.items():
        if v.score < v.max_score - 1e-9:
            lost.append(f"{name} (seed {seed}): " + "; ".join(f"{c.says}: {c.message}" for c in v.cases if not c.passed))
    assert not lost, "honest variants lost points:\n" + "\n".join(lost)


@pytest.mark.parametrize("stem", STEMS)
def test_the_release_loads_without_a_problem(stem, tmp_path):
    """The release's own setup and given cells load in the judge without an error for everyone (their
    experiments' values are not definitions), and the solution's cells run every line."""
    from grader.judge import by_case, notebook_cells, run_harness
    from grader.probe import load_probes

    release, solution = _load(stem)
    first = next(iter(load_probes(stem)))
    plan = {"stem": stem, "seed": 0, "isolate": "variant", "cases": {"s": [first]},
            "variants": {"s": notebook_cells(release, student_copy(release, solution))}}
    records, tail = run_harness(plan, workdir=tmp_path)
    cases, header = by_case(records, "s")
    assert header["given_problems"] == [], header["given_problems"]
    assert header["not_run"] == [] and cases[first]["status"] == "ok", (header, tail[-2000:])


def test_a_sweep_with_fewer_seeds_than_jobs_splits_its_variants(tmp_path, monkeypatch):
    """One seed on two jobs: each harness run gets the reference and half of the variants, and every
    variant still gets its verdict (the fast tier's sweeps run this way)."""
    import grader.judge as judging

    stem = "task1_infonce"
    release, solution = _load(stem)
    plans = []
    real = judging.run_harness

    def spy(plan, **kwargs):
        plans.append(sorted(plan["variants"]))
        return real(plan, **kwargs)

    monkeypatch.setattr(judging, "run_harness", spy)
    variants = {"solution": student_copy(release, solution), "release": release}
    verdicts = judging.sweep(stem, release, solution, variants, [0], workroot=tmp_path, jobs=2)
    assert sorted(plans) == [["__reference__", "release"], ["__reference__", "solution"]]
    full = sum(points_per_test_cell(release).values())
    assert verdicts[("solution", 0)].score == pytest.approx(full) and verdicts[("release", 0)].score == 0


def test_the_sweep_seed_knob(monkeypatch):
    from conftest import sweep_seeds

    monkeypatch.delenv("LAS_SWEEP_SEEDS", raising=False)
    assert sweep_seeds(6) == list(range(6))
    monkeypatch.setenv("LAS_SWEEP_SEEDS", "2")
    assert sweep_seeds(6) == [0, 1]
    for bad in ("0", "two", "-1"):
        monkeypatch.setenv("LAS_SWEEP_SEEDS", bad)
        with pytest.raises(pytest.UsageError, match="LAS_SWEEP_SEEDS"):
            sweep_seeds(6)
