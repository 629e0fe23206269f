"""The core path fits a week (a line and written-answer budget), extensions are optional and
scored apart, and every written answer has a rubric the TA sees and the student never does.

The conventions live in grader/extras/tiers.py; these tests read them off the source notebooks."""

from __future__ import annotations

import json

import pytest

from conftest import RELEASE, SOLUTIONS, graded_cells, solution_notebooks
from fixtures.nbgrader_cells import answer, manual, md, tests as autograder_tests

from grader.extras import tiers
from grader.extras.bundle import solution_blocks
from grader.course import Course
from grader.extras.export import gradebook_rows
from grader.pageclean import sanitise
from utils.notebook_cells import rubric_cells

ALL_SOURCES = sorted(SOLUTIONS.glob("*.ipynb"))


def _nb(cells) -> dict:
    return {"cells": [json.loads(json.dumps(c)) for c in cells]}


def _tag(cell, *names):
    cell.metadata["tags"] = list(names)
    return cell


def _rubric(gid, points, items, *extra_tags):
    body = "\n".join(f"- **{p:g} point{'s' if p != 1 else ''}**: item" for p in items)
    return _tag(md(f"**Rubric: `{gid}` ({points:g} points)**\n{body}"), "rubric", *extra_tags)


# ------------------------------------------------------------------------------ the proxy itself
def test_proxy_counts_core_and_extension_apart():
    nb = _nb([
        answer("f", "def f():\n    ### BEGIN SOLUTION\n    # a comment\n    x = 1\n\n    return x\n    ### END SOLUTION"),
        manual("answer_a", "### BEGIN SOLUTION\ntext\n### END SOLUTION", 2),
        _rubric("answer_a", 2, [1, 1]),
        autograder_tests("test_f", "assert f() == 1", 3),
        _tag(answer("g", "def g():\n    ### BEGIN SOLUTION\n    return 2\n    ### END SOLUTION"), "extension"),
        _tag(autograder_tests("test_g", "assert g() == 2", 1.5), "extension"),
    ])
    p = tiers.core_proxy(nb)
    assert (p["core_lines"], p["extension_lines"]) == (2, 1)
    assert (p["core_written"], p["extension_written"]) == (1, 0)
    assert (p["core_points"], p["extension_points"]) == (5.0, 1.5)
    assert tiers.grade_tiers(nb) == {"answer_a": "core", "test_f": "core", "test_g": "extension"}


def test_the_pack_core_fits_the_budget():
    totals = {"core_lines": 0, "core_written": 0}
    table = []
    for path in ALL_SOURCES:
        p = tiers.core_proxy(path)
        totals["core_lines"] += p["core_lines"]
        totals["core_written"] += p["core_written"]
        table.append(f"{path.stem}: {p['core_lines']} core lines, {p['core_written']} core written answers")
    print("\n".join(table))
    assert totals["core_lines"] <= tiers.MAX_CORE_LINES, (
        f"the core asks for {totals['core_lines']} solution lines (limit {tiers.MAX_CORE_LINES}):\n" + "\n".join(table))
    assert totals["core_written"] <= tiers.MAX_CORE_WRITTEN, (
        f"the core asks for {totals['core_written']} written answers (limit {tiers.MAX_CORE_WRITTEN}):\n"
        + "\n".join(table))


def _core_hours(path) -> float:
    """The core's expected time the notebook's first cell states ("Core: about 1.75 h")."""
    import re

    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    text = "".join(next(c for c in cells if c["cell_type"] == "markdown")["source"])
    found = re.search(r"Core: about ([0-9.]+) h", text)
    assert found, f"{path.name}: the first cell states no 'Core: about <hours> h'"
    return float(found.group(1))


CORE_STEMS = [p.stem for p in ALL_SOURCES if p.stem != "bonus_masked_pretraining_bayes"]


def _kinds(stem) -> dict:
    return tiers.core_points_by_kind(SOLUTIONS / f"{stem}.ipynb", stem)


def test_interface_rules_are_at_most_a_tenth_of_the_core_and_given_code_earns_nothing():
    """Input validation, typing and random-state rules ("rule" cases) weigh at most 10 % of the core's
    autograded points; judge cases on given code ("given") weigh nothing."""
    kinds = {stem: _kinds(stem) for stem in CORE_STEMS}
    table = "\n".join(f"{stem}: " + ", ".join(f"{k} {v:.2f}" for k, v in k_.items()) for stem, k_ in kinds.items())
    total = sum(sum(k.values()) for k in kinds.values())
    rules = sum(k["rule"] for k in kinds.values())
    print(table)
    assert total > 0
    assert rules / total <= tiers.MAX_CORE_RULE_SHARE + 1e-9, (
        f"rule cases earn {rules:.2f} of {total:.2f} core autograded points ({rules / total:.0%}; limit "
        f"{tiers.MAX_CORE_RULE_SHARE:.0%}):\n{table}")
    assert all(k["given"] == 0 for k in kinds.values()), f"given code earns points:\n{table}"


def test_a_case_on_given_code_weighs_nothing():
    from grader.judge import case_kind, load_cases

    heavy = [(stem, c.probe, c.weight) for stem in CORE_STEMS + ["bonus_masked_pretraining_bayes"]
             for c in load_cases(stem) if case_kind(c) == "given" and c.weight != 0]
    assert not heavy, f"cases on given code must weigh 0: {heavy}"


def test_the_share_of_rule_points_can_fail():
    """The accounting counts an error-expecting case as a rule, whatever kind it claims."""
    from grader.compare import expect_raises
    from grader.judge import Case, case_kind

    assert case_kind(Case("t", "p", "raises", expect_raises("ValueError"))) == "rule"
    assert case_kind(Case("t", "p", "values", lambda got, ref: None)) == "value"
    with pytest.raises(ValueError):
        case_kind(Case("t", "p", "x", lambda got, ref: None, kind="shape"))


def test_core_points_follow_the_hours():
    """Each notebook's share of the core's points is within 6 percentage points of its share of the hours,
    and the hours add up to the 8 the README promises."""
    hours = {p.stem: _core_hours(p) for p in ALL_SOURCES if p.stem in CORE_STEMS}
    points = {stem: tiers.core_proxy(SOLUTIONS / f"{stem}.ipynb")["core_points"] for stem in CORE_STEMS}
    assert abs(sum(hours.values()) - 8) <= 0.25, f"core hours add up to {sum(hours.values())}, not 8: {hours}"
    for stem in CORE_STEMS:
        h, p = hours[stem] / sum(hours.values()), points[stem] / sum(points.values())
        assert abs(h - p) <= 0.06, f"{stem}: {p:.0%} of the core points for {h:.0%} of the hours ({points}, {hours})"


def test_every_notebook_has_extensions_or_says_none_and_states_its_time():
    for path in ALL_SOURCES:
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        first_md = next(c for c in cells if c["cell_type"] == "markdown")
        text = "".join(first_md["source"])
        assert "Core: about" in text or "optional" in text.lower(), f"{path.name}: the first cell states no expected time"


@pytest.mark.parametrize("path", ALL_SOURCES, ids=lambda p: p.stem)
def test_extensions_come_last_so_the_core_runs_top_to_bottom(path):
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    flags = [tiers.is_extension(c) for c in cells]
    if not any(flags):
        return
    first = flags.index(True)
    late_core = [i for i in range(first, len(cells)) if not flags[i]]
    assert not late_core, f"{path.name}: core cells {late_core} come after the extension section starts (cell {first})"
    if first > 0:   # a notebook that is all extension (the bonus) needs no section heading
        head = "".join(cells[first]["source"])
        assert cells[first]["cell_type"] == "markdown" and "Extensions (optional)" in head, (
            f"{path.name}: the extension section must open with a '## Extensions (optional)' markdown cell")


def test_the_bonus_is_an_extension():
    bonus = SOLUTIONS / "bonus_masked_pretraining_bayes.ipynb"
    assert set(tiers.grade_tiers(bonus).values()) == {"extension"}


# ------------------------------------------------------------------------------ rubrics
@pytest.mark.parametrize("path", ALL_SOURCES, ids=lambda p: p.stem)
def test_every_written_answer_has_a_rubric(path):
    problems = tiers.rubric_problems(path)
    assert not problems, f"{path.name}:\n  " + "\n  ".join(problems)


def test_the_rubric_check_can_fail():
    written = manual("answer_a", "### BEGIN SOLUTION\ntext\n### END SOLUTION", 2)
    assert tiers.rubric_problems(_nb([written, _rubric("answer_a", 2, [1, 0.5, 0.5])])) == []
    cases = {
        "no rubric": [written, md("just text")],
        "wrong total": [written, _rubric("answer_a", 2, [1, 0.5])],
        "other cell": [written, _rubric("answer_b", 2, [1, 1])],
        "one item": [written, _rubric("answer_a", 2, [2])],
        "tiers differ": [_tag(manual("answer_a", "### BEGIN SOLUTION\nx\n### END SOLUTION", 2), "extension"),
                         _rubric("answer_a", 2, [1, 1])],
        "orphan": [md("intro"), _rubric("answer_a", 2, [1, 1])],
    }
    for name, cells in cases.items():
        assert tiers.rubric_problems(_nb(cells)), f"{name}: the rubric check found nothing wrong"


def test_rubrics_never_reach_students():
    """Not in the release, not in the feedback page's source, and the bundle's leak check knows them."""
    rubric_text = [t for path in ALL_SOURCES for t in rubric_cells(path).values()]
    assert rubric_text, "no rubric cells in the source notebooks"
    for nb in RELEASE.glob("*.ipynb"):
        cells = json.loads(nb.read_text(encoding="utf-8"))["cells"]
        assert not any(tiers.is_rubric(c) for c in cells), f"{nb.name}: a rubric cell in the release"
        text = "\n".join("".join(c["source"]) for c in cells)
        assert "**Rubric:" not in text, f"{nb.name}: rubric text in the release"
    # feedback drops the rubric cells autograde put under the answers
    page = sanitise({"cells": [_tag(md("**Rubric: `a` (1 point)**"), "rubric"), md("the student's answer")]})
    assert [c["source"] for c in page["cells"]] == ["the student's answer"]
    assert any(where.endswith("(rubric)") for where, _, _ in solution_blocks())


def test_autograde_puts_each_rubric_under_its_answer(tmp_path):
    from grader.steps import StepContext, insert_rubrics

    source = SOLUTIONS / "task1_infonce.ipynb"
    rubrics = rubric_cells(source)
    release = json.loads((RELEASE / "task1_infonce.ipynb").read_text(encoding="utf-8"))
    release["cells"].insert(0, _tag(md("**Rubric: `answer_a` (99 points)** a student's fake"), "rubric"))
    cells = insert_rubrics(release, StepContext(source=source))["cells"]
    assert not any("a student's fake" in "".join(c["source"]) for c in cells)
    for i, cell in enumerate(cells):
        gid = (cell["metadata"].get("nbgrader") or {}).get("grade_id")
        if gid in rubrics:
            assert tiers.is_rubric(cells[i + 1]) and cells[i + 1]["source"] == rubrics[gid]
    assert sum(tiers.is_rubric(c) for c in cells) == len(rubrics)


def _step_context(student: str):
    from grader.results import Job, NotebookResult
    from grader.steps import StepContext

    release = json.loads((RELEASE / "task1_infonce.ipynb").read_text(encoding="utf-8"))
    result = NotebookResult(student, "task1_infonce", grades={"test_info_nce_loss": (3.0, False)})
    return release, StepContext(Job("task1_infonce", release, release, result), source=SOLUTIONS / "task1_infonce.ipynb")


def test_a_failed_notebook_step_is_a_reason_not_silence():
    """A step that cannot rewrite the executed notebook leaves the points alone and says so on the
    notebook's status for the TA; the later steps still run. After a failed *required* step there is no
    executed notebook (the TA reads the reason), and nothing is raised either way."""
    from grader.steps import Step, insert_rubrics, run_steps

    def rubrics_on_a_malformed_notebook(nb, ctx):
        return insert_rubrics({"cells": 5}, ctx)

    def marks(nb, ctx):
        nb["cells"].append(md("the last step ran"))
        return nb

    def recurses(nb, ctx):
        raise RecursionError("maximum recursion depth exceeded")

    release, ctx = _step_context("ann")
    steps = (Step("a step that works", lambda nb, c: nb),
             Step("the rubrics under the written answers", rubrics_on_a_malformed_notebook), Step("the end", marks))
    nb = run_steps(json.loads(json.dumps(release)), ctx, steps)
    assert ctx.result.status == "review" and ctx.result.grades == {"test_info_nce_loss": (3.0, False)}
    assert "the rubrics under the written answers could not be added" in ctx.result.reasons[0], ctx.result.reasons
    assert "the points stand" in ctx.result.reasons[0]
    assert nb is not None and nb["cells"][-1]["source"] == "the last step ran"

    release, ctx = _step_context("bob")
    assert run_steps(release, ctx, (Step("the cleaning", recurses, required=True), Step("the end", marks))) is None
    assert ctx.result.status == "review" and "no executed notebook" in ctx.result.reasons[0]
    assert ctx.result.grades == {"test_info_nce_loss": (3.0, False)}

    release, ctx = _step_context("cat")
    assert run_steps(release, ctx, (Step("a step that works", lambda nb, c: nb),)) is release
    assert ctx.result.status == "graded" and not ctx.result.reasons


def test_the_notebook_steps_are_preprocessor_shaped_and_short():
    """Every step of the executed notebook is ``step(notebook, context) -> notebook``, at most 40 lines,
    with a docstring; the chain ends with the cleaning a TA's browser needs, and the full run comes first."""
    import inspect

    from grader.steps import NOTEBOOK_STEPS, attach_full_run, strip_active

    assert NOTEBOOK_STEPS[0].run is attach_full_run and NOTEBOOK_STEPS[-1].run is strip_active
    assert NOTEBOOK_STEPS[0].required and NOTEBOOK_STEPS[-1].required
    for step in NOTEBOOK_STEPS:
        params = list(inspect.signature(step.run).parameters)
        assert params == ["nb", "ctx"], (step.what, params)
        lines, _ = inspect.getsourcelines(step.run)
        assert len(lines) <= 40 and inspect.getdoc(step.run), step.what


def test_the_steps_annotate_and_clean_a_notebook():
    """The judge's report goes under its own test cell, and active content a student put in a markdown
    cell or an output is gone after the chain's cleaning step."""
    from grader.steps import annotate_reports, strip_active

    class Verdict:
        points = {"test_info_nce_loss": 3.0}

        def cell_report(self, cell):
            return f"report of {cell}"

    release, ctx = _step_context("dan")
    ctx.verdict = Verdict()
    nb = annotate_reports(json.loads(json.dumps(release)), ctx)
    tests = [c for c in nb["cells"] if (c["metadata"].get("nbgrader") or {}).get("grade_id") == "test_info_nce_loss"]
    assert [o["text"] for o in tests[0]["outputs"]] == ["report of test_info_nce_loss\n"]
    assert sum(bool(c.get("outputs")) for c in nb["cells"] if c["cell_type"] == "code") == 1
    nb["cells"].append(md('<script>alert(1)</script><div style="position:fixed">mask</div>'))
    tests[0]["outputs"].append({"output_type": "display_data", "metadata": {},
                                "data": {"text/html": "<img src=x onerror=alert(1)>", "text/plain": "x"}})
    dump = json.dumps(strip_active(nb, ctx))
    assert "<script" not in dump and "onerror" not in dump and "position:fixed" not in dump


# ------------------------------------------------------------------------------ export
def test_export_reports_core_and_extension_apart(roundtrips):
    sol = roundtrips["solution"]
    course = Course(grading=sol.course, source=sol.course / "source" / "ex01")
    tier_of = {(path.stem, gid): t for path in solution_notebooks() for gid, t in tiers.grade_tiers(path).items()}
    expected = {"core": 0.0, "extension": 0.0}
    for (nb, gid), (_, max_score) in sol.scores.items():
        if (nb, gid) in tier_of:
            expected[tier_of[(nb, gid)]] += max_score
    for name, run in roundtrips.items():
        course = Course(grading=run.course, source=run.course / "source" / "ex01")
        (row,) = gradebook_rows(course, [run.student]).values()
        assert row["core_max"] == pytest.approx(expected["core"]), name
        assert row["extension_max"] == pytest.approx(expected["extension"]), name
        assert row["core_max"] + row["extension_max"] == pytest.approx(row["max_score"]), name
        assert row["core_score"] + row["extension_score"] == pytest.approx(row["score"]), name
    sol_row = gradebook_rows(Course(grading=sol.course, source=sol.course / "source" / "ex01"), [sol.student])[sol.student]
    auto = {"core": 0.0, "extension": 0.0}
    for path in solution_notebooks():
        for gid in graded_cells(path):        # autograded test cells only
            auto[tier_of[(path.stem, gid)]] += sol.scores[(path.stem, gid)][0]
    assert sol_row["core_score"] >= auto["core"] > 0
    if expected["extension"]:
        assert sol_row["extension_score"] > 0
    rel = roundtrips["release"]
    rel_row = gradebook_rows(Course(grading=rel.course, source=rel.course / "source" / "ex01"), [rel.student])[rel.student]
    assert rel_row["core_score"] == 0 and rel_row["extension_score"] == 0


@pytest.mark.parametrize("path", ALL_SOURCES, ids=lambda p: p.stem)
def test_no_core_cell_uses_a_name_an_extension_answer_defines(path):
    """A student who skips the extensions leaves their stubs raising NotImplementedError: the core must
    not call anything they define (checked on the names in the code, not by running it)."""
    import ast

    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    defined = set()
    for cell in cells:
        if tiers.is_extension(cell) and tiers.is_code_answer(cell):
            tree = ast.parse("".join(cell["source"]))
            defined |= {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    used = {}
    for i, cell in enumerate(cells):
        if cell["cell_type"] != "code" or tiers.is_extension(cell):
            continue
        src = "\n".join(line for line in "".join(cell["source"]).splitlines() if not line.lstrip().startswith(("%", "!")))
        names = {n.id for n in ast.walk(ast.parse(src)) if isinstance(n, ast.Name)}
        names |= {n.attr for n in ast.walk(ast.parse(src)) if isinstance(n, ast.Attribute)}
        for name in names & defined:
            used.setdefault(name, []).append(i)
    assert not used, f"{path.name}: core cells use names an extension answer defines: {used}"
