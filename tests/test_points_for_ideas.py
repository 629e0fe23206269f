"""Points follow ideas (issue #50): what each judge case checks decides its kind, interface rules weigh little.

* Every case whose text or comparator is about an interface convention (a dtype, a return type, a
  generator, the global random state, an input left unchanged, an error) is a "rule" (or a weightless
  "given" check) and names the convention in ``checks`` (grader/cases.py RULE_CHECKS).
* The core's rule cases earn at most 10 % of its autograded points, computed by grader/extras/tiers.py's own
  :func:`~grader.extras.tiers.core_rule_share`.
* Reweighting never moves points between cells: each core test cell's cases share exactly the cell's
  nbgrader points, and the comment above them in grader/probes/<stem>.py says those points.
* The core notebooks' student release holds at most 8,500 words of markdown (counted from the files).

Each test first shows on a planted input that it can fail.
"""

from __future__ import annotations

import json
import re

import pytest

from grader import ROOT
from grader.extras import tiers
from grader.cases import RULE_CHECKS, Case, case_kind, rule_check
from grader.compare import expect_raises, expect_same
from grader.judge import load_cases
from utils.notebook_cells import nbgrader_meta, notebook_cells

SOLUTIONS = ROOT / "solutions" / "ex01"
STEMS = sorted(p.stem for p in (ROOT / "grader" / "checks").glob("*.py") if p.stem != "__init__")
CORE_STEMS = tiers.core_stems(SOLUTIONS)


def _equal(got, ref):
    assert got == ref


# ------------------------------------------------------------------------------ what a case checks
#: Words that make a case's text about an interface convention, outside its parentheses (a value case may name
#: its result's type in parentheses: "exp(-PLL / T) (a Python float)"); each maps to a RULE_CHECKS tag.
INTERFACE_WORDS = {
    "dtype": re.compile(r"\bdtype\b|\bprecision\b|\b(?:int|float)(?:16|32|64) (?:array|tensor)s?\b", re.I),
    "return type": re.compile(r"\bPython (?:float|int|bool)s?\b|\bdetached\b", re.I),
    "generator": re.compile(r"\bgenerator\b|\bseed(?:s|ed)?\b", re.I),
    "global state": re.compile(r"\bglobal random\b", re.I),
    "mutation": re.compile(r"\b(?:left|is|are|stays?|remains?) unchanged\b|\bnot modified\b|\bin place\b", re.I),
    "raises": re.compile(r"\b[A-Z]\w*Error\b|\braises?\b"),
}
_PARENTHESES = re.compile(r"\([^()]*\)")


def _outside_parentheses(text: str) -> str:
    while _PARENTHESES.search(text):
        text = _PARENTHESES.sub(" ", text)
    return text


def interface_topics(case: Case) -> set[str]:
    """What interface convention ``case`` is about, read off its text (outside parentheses), its comparator
    (an error-expecting check, a check of draws, ``draws``, a comparator of a convention, ``interface``) and
    its own ``checks`` tag."""
    text = _outside_parentheses(case.says)
    topics = {tag for tag, pattern in INTERFACE_WORDS.items() if pattern.search(text)}
    check = case.check
    if getattr(check, "expects_error", False):
        topics.add("raises")
    draws = set(getattr(check, "draws", ()))
    if draws & {"same seed", "other seed"}:
        topics.add("generator")
    if "global state" in draws:
        topics.add("global state")
    if getattr(check, "interface", ""):
        topics.add(check.interface)
    if case.checks:
        topics.add(case.checks)
    return topics


def mis_kinded(cases) -> list[str]:
    """Cases about an interface convention that are neither a "rule" nor weightless given code, or that do
    not name their convention in ``checks``."""
    problems = []
    for c in cases:
        topics = interface_topics(c)
        if not topics:
            continue
        try:
            kind = case_kind(c)
        except ValueError as err:
            problems.append(str(err))
            continue
        if kind not in ("rule", "given"):
            problems.append(f"{c.probe}: about {sorted(topics)}, but kind {kind!r} (make it a rule)")
        elif rule_check(c) not in RULE_CHECKS:
            problems.append(f"{c.probe}: about {sorted(topics)}, but names no convention in checks=")
    return problems


def test_the_interface_scan_catches_planted_cases():
    def drawn(got, ref):
        assert got == ref
    drawn.draws = ("same seed", "other seed")

    planted = [
        Case("t", "dtype_kept", "the input's dtype kept (float32)", _equal, kind="property"),
        Case("t", "python_float", "returns a Python float", _equal),
        Case("t", "seeded", "two calls give the same draws", drawn, kind="property"),
        Case("t", "untouched", "the caller's tensors are left unchanged", _equal, kind="property"),
        Case("t", "tagged_value", "values", _equal, checks="dtype"),
        Case("t", "raises_untagged", "a ValueError for bad input", _equal, kind="rule"),
    ]
    problems = mis_kinded(planted)
    assert [p.split(":")[0] for p in problems] == [c.probe for c in planted], problems
    fine = [Case("t", "values", "mean loss (0-dim, dtype kept)", expect_same()),
            Case("t", "rule", "the input's dtype kept (float32)", _equal, weight=0.5, kind="rule", checks="dtype"),
            Case("t", "given", "a ValueError for bad input (given code)", expect_raises("ValueError"), weight=0,
                 kind="given", checks="raises"),
            Case("t", "raises", "a ValueError for bad input", expect_raises("ValueError"))]   # "raises" by its check
    assert mis_kinded(fine) == []


@pytest.mark.parametrize("stem", STEMS)
def test_every_case_about_an_interface_convention_is_a_rule(stem):
    problems = mis_kinded(load_cases(stem))
    assert not problems, f"grader/probes/{stem}.py:\n" + "\n".join(problems)


def test_a_rule_tag_is_one_of_the_conventions_and_makes_a_rule():
    with pytest.raises(ValueError, match="interface rule"):
        case_kind(Case("t", "p", "x", _equal, checks="dtype"))
    with pytest.raises(ValueError, match="not one of"):
        case_kind(Case("t", "p", "x", _equal, kind="rule", checks="shape"))
    assert case_kind(Case("t", "p", "x", _equal, kind="rule", checks="input form")) == "rule"
    tags = {rule_check(c) for stem in STEMS for c in load_cases(stem) if case_kind(c) in ("rule", "given")}
    assert tags - {""} <= set(RULE_CHECKS), tags


# ------------------------------------------------------------------------------ the share of rules
def _notebook(cells: list[dict]) -> dict:
    return {"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}


def _test_cell(grade_id: str, points: float) -> dict:
    return {"cell_type": "code", "source": "", "outputs": [], "execution_count": None,
            "metadata": {"nbgrader": {"grade": True, "grade_id": grade_id, "points": points, "solution": False,
                                      "locked": True}}}


def _markdown(text: str) -> dict:
    return {"cell_type": "markdown", "source": text, "metadata": {}}


def test_the_rule_share_can_fail(tmp_path, monkeypatch):
    """A planted notebook whose one core cell gives half its points to a rule reads 50 %, over the limit."""
    from grader import judge

    folder = tmp_path / "ex01"
    folder.mkdir()
    (folder / "planted.ipynb").write_text(json.dumps(_notebook([_test_cell("test_f", 10)])))
    planted = [Case("test_f", "f_values", "values", _equal),
               Case("test_f", "f_dtype", "the input's dtype kept", _equal, kind="rule", checks="dtype")]
    monkeypatch.setattr(judge, "load_cases", lambda stem: planted)
    monkeypatch.setattr(tiers, "load_cases", lambda stem: planted)   # tiers binds the judge's name at import
    kinds, share = tiers.core_rule_share(folder)
    assert kinds["rule"] == pytest.approx(5.0) and share == pytest.approx(0.5)
    assert share > tiers.MAX_CORE_RULE_SHARE


def test_interface_rules_weigh_at_most_a_tenth_of_the_core():
    kinds, share = tiers.core_rule_share(SOLUTIONS)
    table = ", ".join(f"{k} {v:.2f}" for k, v in kinds.items())
    assert share <= tiers.MAX_CORE_RULE_SHARE + 1e-9, \
        f"rule cases earn {share:.1%} of the core's autograded points (limit {tiers.MAX_CORE_RULE_SHARE:.0%}): {table}"
    assert kinds["given"] == 0, table
    by_check = {}
    for stem in CORE_STEMS:
        for tag, pts in tiers.core_points_by_check(SOLUTIONS / f"{stem}.ipynb", stem).items():
            by_check[tag] = by_check.get(tag, 0.0) + pts
    assert sum(by_check.values()) == pytest.approx(kinds["rule"]), (by_check, table)


# ------------------------------------------------------------------------------ cell points
_CELL_COMMENT = re.compile(r"#.*\bthe test cell's (?P<points>[0-9.]+) points?\b")
_CASE_CELL = re.compile(r"@probe\(\s*\"(?P<cell>[A-Za-z0-9_]+)\"")


def declared_cell_points(source: str) -> dict[str, float]:
    """{test cell: points} from the comments "...: the test cell's N points" of a probes module: each comment
    holds for the cell of the first case declared after it (``@probe("<cell>", ...)``)."""
    out, pending = {}, None
    for line in source.splitlines():
        m = _CELL_COMMENT.search(line)
        if m:
            pending = float(m["points"])
            continue
        c = _CASE_CELL.search(line)
        if c and pending is not None:
            out.setdefault(c["cell"], pending)
            pending = None
    return out


def cell_point_problems(nb, cases, declared: dict[str, float]) -> list[str]:
    """What is wrong with the split of the test cells' points over their cases: a cell whose cases do not share
    exactly its nbgrader points (all weights 0, or no case), or a comment that says other points."""
    problems = []
    for cell in notebook_cells(nb):
        m = nbgrader_meta(cell)
        if not (m.get("grade") and cell.get("cell_type") == "code"):
            continue
        gid, pts = m["grade_id"], float(m.get("points") or 0)
        mine = [c for c in cases if c.cell == gid]
        total = sum(c.weight for c in mine)
        shared = sum(pts * c.weight / total for c in mine) if total else 0.0
        if abs(shared - pts) > 1e-9:
            problems.append(f"{gid}: its cases share {shared:g} of its {pts:g} points")
        if gid in declared and declared[gid] != pts:
            problems.append(f"{gid}: the checks say {declared[gid]:g} points, the notebook {pts:g}")
    return problems


def test_the_cell_point_check_can_fail():
    nb = _notebook([_test_cell("test_f", 3), _test_cell("test_g", 2)])
    source = ('# f: the test cell\'s 3 points, shared by the weights below\n@probe("test_f", "f_values", ...)\n'
              '# g: the test cell\'s 4 points\n@probe("test_g", "g_values", ...)\n')
    declared = declared_cell_points(source)
    assert declared == {"test_f": 3.0, "test_g": 4.0}
    cases = [Case("test_f", "f_values", "values", _equal, weight=2),
             Case("test_f", "f_dtype", "dtype", _equal, weight=0.5, kind="rule", checks="dtype"),
             Case("test_g", "g_given", "a ValueError (given code)", expect_raises("ValueError"), weight=0,
                  kind="given", checks="raises")]
    assert cell_point_problems(nb, cases, declared) == [
        "test_g: its cases share 0 of its 2 points", "test_g: the checks say 4 points, the notebook 2"]
    assert cell_point_problems(nb, cases[:2] + [Case("test_g", "g", "v", _equal)], {"test_f": 3.0}) == []


@pytest.mark.parametrize("stem", STEMS)
def test_every_test_cell_shares_exactly_its_points(stem):
    """Weights are shares: whatever the reweighting, each test cell's cases share exactly the points its
    nbgrader metadata gives (which only the notebook sets), as the probes module's comments say."""
    source = (ROOT / "grader" / "probes" / f"{stem}.py").read_text()
    declared = declared_cell_points(source)
    nb = SOLUTIONS / f"{stem}.ipynb"
    problems = cell_point_problems(nb, load_cases(stem), declared)
    test_cells = {nbgrader_meta(c)["grade_id"] for c in notebook_cells(nb)
                  if nbgrader_meta(c).get("grade") and c.get("cell_type") == "code"}
    problems += [f"{cell}: no comment says its points" for cell in sorted(test_cells - set(declared))]
    assert not problems, f"grader/probes/{stem}.py:\n" + "\n".join(problems)


# ------------------------------------------------------------------------------ the words
def test_the_word_count_reads_the_release_and_can_fail(tmp_path, monkeypatch):
    """Markdown words of the planted release's core notebook, math included; code cells and notebooks
    without core points do not count; 9,000 words are over the limit."""
    import grader

    (tmp_path / "solutions" / "ex01").mkdir(parents=True)
    (tmp_path / "notebooks" / "ex01").mkdir(parents=True)
    for stem, points in (("core", 2), ("bonus", 0)):
        (tmp_path / "solutions" / "ex01" / f"{stem}.ipynb").write_text(
            json.dumps(_notebook([_test_cell(f"test_{stem}", points)])))
    long_text = " ".join(["word"] * 8998) + " $\\log p(x)$"
    code = {"cell_type": "code", "source": "many words in a code cell", "metadata": {}, "outputs": [],
            "execution_count": None}
    (tmp_path / "notebooks" / "ex01" / "core.ipynb").write_text(
        json.dumps(_notebook([_markdown(long_text), code, _markdown(["a\n", "b"])])))
    (tmp_path / "notebooks" / "ex01" / "bonus.ipynb").write_text(json.dumps(_notebook([_markdown("x " * 50)])))
    monkeypatch.setattr(grader, "ROOT", tmp_path)
    monkeypatch.setattr(tiers, "ROOT", tmp_path)   # tiers binds the package's name at import
    words = tiers.core_markdown_words(tmp_path / "solutions" / "ex01")
    assert words == {"core": 9002}
    assert sum(words.values()) > tiers.MAX_CORE_MARKDOWN_WORDS


def test_the_core_release_reads_in_at_most_8500_words():
    """The student release of the core notebooks (notebooks/ex01, every markdown cell, math included)."""
    words = tiers.core_markdown_words(SOLUTIONS)
    assert set(words) == set(CORE_STEMS) and len(words) == 4, words
    total = sum(words.values())
    assert total <= tiers.MAX_CORE_MARKDOWN_WORDS, \
        f"the core release has {total:,} words of markdown (limit {tiers.MAX_CORE_MARKDOWN_WORDS:,}): {words}"


def test_tiers_prints_the_share_by_kind_and_the_words(capsys):
    tiers.main([])
    out = capsys.readouterr().out
    kinds, _ = tiers.core_rule_share(SOLUTIONS)
    assert re.search(r"by what each case checks.*value [0-9.]+ .*property .*rule [0-9.]+ .*given", out), out
    assert f"rule {kinds['rule']:.2f}" in out
    total = sum(tiers.core_markdown_words(SOLUTIONS).values())
    assert f"core markdown words (student release): {total} (limit 8,500)" in out
