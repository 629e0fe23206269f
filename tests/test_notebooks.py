"""Every notebook, end to end: the solution executes cleanly in the smoke preset and earns full
marks; the unmodified student release earns zero on every autograded cell; the release committed
in notebooks/ is exactly what nbgrader generates from solutions/; every visible test cell says what
failed (assert messages with the actual values) and what passed (a final print)."""

from __future__ import annotations

import ast
import json

import pytest

from conftest import RELEASE, SOLUTIONS, graded_cells, solution_notebooks

NOTEBOOKS = [nb.stem for nb in solution_notebooks()]
CELLS = [(nb.stem, cell) for nb in solution_notebooks() for cell in graded_cells(nb)]


def test_there_are_notebooks_and_graded_cells():
    assert "task1_infonce" in NOTEBOOKS
    for nb in solution_notebooks():
        assert graded_cells(nb), f"{nb.name} has no autograded test cell"


@pytest.mark.parametrize("notebook", NOTEBOOKS)
def test_solution_executes_without_errors(roundtrips, notebook):
    executed = json.loads(roundtrips["solution"].autograded[notebook].read_text())
    errors = []
    for i, cell in enumerate(executed["cells"]):
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error":
                errors.append(f"cell {i}: {out.get('ename')}: {out.get('evalue')}")
    assert not errors, f"{notebook} (smoke preset, under autograde) raised:\n" + "\n".join(errors)


@pytest.mark.parametrize("notebook,cell", CELLS)
def test_solution_passes_every_autograded_cell(roundtrips, notebook, cell):
    score, max_score = roundtrips["solution"].scores[(notebook, cell)]
    assert max_score > 0
    assert score == max_score, f"the solution loses points in {notebook}:{cell}"


@pytest.mark.parametrize("notebook,cell", CELLS)
def test_release_stub_fails_every_autograded_cell(roundtrips, notebook, cell):
    score, max_score = roundtrips["release"].scores[(notebook, cell)]
    assert score == 0, f"{notebook}:{cell} passes on the unmodified release stub: the test cannot fail"


def test_export_scores(roundtrips):
    """nbgrader export agrees: solution = all autograded points, release = 0."""
    auto_points = sum(m for (nb, cell), (_, m) in roundtrips["solution"].scores.items()
                      if (nb, cell) in set(CELLS))
    (sol,) = roundtrips["solution"].export
    (rel,) = roundtrips["release"].export
    assert float(sol["score"]) == pytest.approx(auto_points)
    assert float(rel["score"]) == 0.0


def _normalised(path):
    return json.dumps(json.loads(path.read_text(encoding="utf-8")), sort_keys=True, indent=1)


def test_release_is_in_sync_with_solutions(tmp_path):
    """notebooks/ex01 must be exactly `python -m grader release` of solutions/ex01 (never hand-edited)."""
    from grader.release import generate_release

    fresh = generate_release(out_dir=tmp_path)
    committed = sorted(p.name for p in RELEASE.glob("*.ipynb"))
    generated = sorted(p.name for p in fresh.glob("*.ipynb"))
    assert committed == generated, "notebooks/ex01 and solutions/ex01 hold different notebooks: run `python -m grader release`"
    for name in generated:
        assert _normalised(RELEASE / name) == _normalised(fresh / name), (
            f"notebooks/ex01/{name} is out of sync with solutions/ex01: run `python -m grader release`")


@pytest.mark.parametrize("folder", [SOLUTIONS, RELEASE], ids=["solutions", "release"])
def test_committed_notebooks_have_no_outputs(folder):
    for nb in folder.glob("*.ipynb"):
        for cell in json.loads(nb.read_text())["cells"]:
            if cell["cell_type"] == "code":
                assert not cell.get("outputs") and cell.get("execution_count") is None, f"{nb.name} has outputs"


@pytest.mark.parametrize("notebook", NOTEBOOKS)
def test_one_parameters_cell_with_auto_preset(notebook):
    cells = json.loads((SOLUTIONS / f"{notebook}.ipynb").read_text())["cells"]
    params = [c for c in cells if "parameters" in c.get("metadata", {}).get("tags", [])]
    assert len(params) == 1, f"{notebook} needs exactly one cell tagged 'parameters'"
    assert 'PRESET = "auto"' in "".join(params[0]["source"])


#: A notebook opens on code a student reads (imports, preset, device, data), not on configuration:
#: the preset tables live in utils/notebook_presets.py, the hosted bootstrap's work in utils/hosted_install.py.
SETUP_CELL_MAX_LINES = 40


@pytest.mark.parametrize("folder", [SOLUTIONS, RELEASE], ids=["solutions", "release"])
def test_every_setup_cell_fits_a_screen(folder):
    """The setup cell (grade_id ``setup``) of every notebook has at most SETUP_CELL_MAX_LINES lines."""
    too_long = {}
    for nb in sorted(folder.glob("*.ipynb")):
        cells = json.loads(nb.read_text(encoding="utf-8"))["cells"]
        setup = [c for c in cells if c.get("metadata", {}).get("nbgrader", {}).get("grade_id") == "setup"]
        assert len(setup) == 1, f"{nb.name}: expected one setup cell, found {len(setup)}"
        source = setup[0]["source"] if isinstance(setup[0]["source"], str) else "".join(setup[0]["source"])
        if len(source.splitlines()) > SETUP_CELL_MAX_LINES:
            too_long[nb.name] = len(source.splitlines())
    assert not too_long, f"setup cells longer than {SETUP_CELL_MAX_LINES} lines: {too_long}"


def visible_test_cells(folder):
    """(notebook, grade_id, source) of every autograded test cell the student sees (grade, not solution)."""
    for nb in sorted(folder.glob("*.ipynb")):
        for cell in json.loads(nb.read_text(encoding="utf-8"))["cells"]:
            meta = cell.get("metadata", {}).get("nbgrader", {})
            if cell["cell_type"] == "code" and meta.get("grade") and not meta.get("solution"):
                source = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
                yield nb.stem, meta["grade_id"], source


def silent_checks(source: str) -> list[str]:
    """What keeps a test cell from talking: an assert without a message built from the actual values
    (an f-string), or a last statement that is not the print(...) saying what passed."""
    tree = ast.parse(source)
    problems = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assert):
            if node.msg is None:
                problems.append(f"line {node.lineno}: assert without a message")
            elif not any(isinstance(n, ast.FormattedValue) for n in ast.walk(node.msg)):
                problems.append(f"line {node.lineno}: assert message shows no actual value (use an f-string)")
    last = tree.body[-1] if tree.body else None
    if not (isinstance(last, ast.Expr) and isinstance(last.value, ast.Call)
            and isinstance(last.value.func, ast.Name) and last.value.func.id == "print"):
        problems.append("the last statement is not a print(...) of what passed")
    return problems


@pytest.mark.parametrize("folder", [SOLUTIONS, RELEASE], ids=["solutions", "release"])
def test_visible_test_cells_say_what_failed_and_what_passed(folder):
    """A wrong answer shows what was expected and what came; a right one prints what passed."""
    cells = list(visible_test_cells(folder))
    assert cells, f"no visible test cell in {folder}"
    problems = [f"{nb}:{gid}: {p}" for nb, gid, source in cells for p in silent_checks(source)]
    assert not problems, "silent test cells:\n  " + "\n  ".join(problems)
