"""Helpers for writing nbgrader source notebooks (solutions/ex01/*.ipynb) from Python.

Course authors may edit the notebooks in JupyterLab with nbgrader's "Create Assignment" toolbar;
these functions produce exactly the cell metadata that toolbar writes (schema_version 3), for
authors who prefer to generate a notebook from a script::

    from grader.authoring import md, code, answer, tests, manual, readonly, parameters, write_notebook
    write_notebook("solutions/ex01/task1_infonce.ipynb", [md("# Title"), parameters('PRESET = "auto"'), ...])

Cell kinds (see ../shared/REFERENCE.md, "Grading with nbgrader 0.9"):
- ``answer``: autograded answer, code between ``### BEGIN SOLUTION`` / ``### END SOLUTION``;
- ``tests``: autograder tests (locked, with points), hidden checks between
  ``### BEGIN HIDDEN TESTS`` / ``### END HIDDEN TESTS``;
- ``manual``: manually graded answer (markdown by default), solution text in the source;
- ``readonly``: locked cells students cannot change (setup, given code).
"""

from __future__ import annotations

import json
from pathlib import Path

import nbformat

_KERNEL = {"display_name": "Python 3", "language": "python", "name": "python3"}


def _meta(grade_id: str, *, grade: bool, solution: bool, locked: bool, points: float | None = None,
          task: bool = False) -> dict:
    meta = {"grade": grade, "grade_id": grade_id, "locked": locked, "schema_version": 3,
            "solution": solution, "task": task}
    if points is not None:
        meta["points"] = points
    return {"nbgrader": meta}


def _src(text: str) -> str:
    return text.strip("\n")


def md(text: str) -> nbformat.NotebookNode:
    """A plain markdown cell."""
    return nbformat.v4.new_markdown_cell(_src(text))


def code(text: str, *, tags: list[str] | None = None) -> nbformat.NotebookNode:
    """A plain code cell students may change (experiments, plots)."""
    cell = nbformat.v4.new_code_cell(_src(text))
    if tags:
        cell.metadata["tags"] = tags
    return cell


def parameters(text: str = 'PRESET = "auto"  # "auto", "smoke", "cpu", "gpu" or "full"') -> nbformat.NotebookNode:
    """The notebook's single parameters cell (tagged for papermill)."""
    return code(text, tags=["parameters"])


def readonly(grade_id: str, text: str, *, markdown: bool = False) -> nbformat.NotebookNode:
    """A locked cell (setup code or the statement of a question)."""
    cell = md(text) if markdown else code(text)
    cell.metadata.update(_meta(grade_id, grade=False, solution=False, locked=True))
    return cell


def answer(grade_id: str, text: str) -> nbformat.NotebookNode:
    """An autograded answer cell; ``text`` contains ``### BEGIN SOLUTION`` / ``### END SOLUTION``."""
    if "### BEGIN SOLUTION" not in text:
        raise ValueError(f"answer cell {grade_id!r} has no '### BEGIN SOLUTION' marker")
    cell = code(text)
    cell.metadata.update(_meta(grade_id, grade=False, solution=True, locked=False))
    return cell


def tests(grade_id: str, text: str, points: float) -> nbformat.NotebookNode:
    """An autograder test cell worth ``points`` (locked; may contain hidden tests)."""
    cell = code(text)
    cell.metadata.update(_meta(grade_id, grade=True, solution=False, locked=True, points=points))
    return cell


def manual(grade_id: str, text: str, points: float, *, markdown: bool = True) -> nbformat.NotebookNode:
    """A manually graded answer; ``text`` holds the model solution between the markers."""
    cell = md(text) if markdown else code(text)
    cell.metadata.update(_meta(grade_id, grade=True, solution=True, locked=False, points=points))
    return cell


def write_notebook(path: str | Path, cells: list) -> Path:
    """Write a source notebook with outputs cleared and stable formatting; checks unique grade ids."""
    ids = [c.metadata["nbgrader"]["grade_id"] for c in cells if "nbgrader" in c.metadata]
    dupes = {i for i in ids if ids.count(i) > 1}
    if dupes:
        raise ValueError(f"duplicate grade ids: {sorted(dupes)}")
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = _KERNEL
    nb.metadata["language_info"] = {"name": "python"}
    nb.cells = cells
    for i, cell in enumerate(nb.cells):
        cell["id"] = f"cell-{i:03d}"  # stable ids: regenerating a notebook gives a clean diff
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    nbformat.validate(nb)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(nb, indent=1, ensure_ascii=False, sort_keys=True) + "\n", encoding="utf-8")
    return path
