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

#: The start of every notebook's setup cell (grade_id ``setup``): on a hosted notebook (Colab, Kaggle,
#: Binder, a JupyterHub: wherever pip works) without the pack, it fetches the pack from ``PACK_URL``
#: (which ``python -m grader bundle`` stamps, see grader/bundle.py's ``stamp_pack_url``) and installs
#: its pinned requirements with ``utils/hosted_install.py``. One text for all five notebooks
#: (tests/test_hosted_setup.py checks it); :func:`with_setup_bootstrap` writes it into a cell.
SETUP_BOOTSTRAP = r'''
try:
    import utils.presets  # the course pack, installed as its README says (./pack.sh env)
except ImportError:  # a hosted notebook (Colab, Kaggle, Binder, a JupyterHub) without the pack: fetch it
    import os, sys, urllib.request, zipfile
    # the link to ex01-student.zip or its path here: `python -m grader bundle` writes it between the quotes
    PACK_URL = "" or os.environ.get("LAS_PACK_URL", "")
    if not PACK_URL:
        raise ImportError(
            "The course pack is not installed, and this notebook has no PACK_URL to fetch it from. What to do:\n"
            "- on your own computer: run ./pack.sh env in the unpacked ex01-student folder, then ./pack.sh lab;\n"
            "- on Colab, Kaggle, Binder or a JupyterHub: ask your lecturer for the link to ex01-student.zip, or "
            "upload ex01-student.zip (Colab puts it in /content/), and set PACK_URL to that link or path: between "
            "the quotes in this cell or, where the cell is read-only, with %env LAS_PACK_URL=... in a new cell "
            "above; then run this cell again;\n"
            "- lecturer, in the course repository: set pack_url in grader/bundle.toml to the zip's link and "
            "rerun `python -m grader bundle`."
        ) from None
    PACK_DIR = os.path.expanduser("~/ex01-student")
    print(f"The course pack is not installed: installing it from {PACK_URL} into {PACK_DIR}, with its pinned "
          "packages (1 to 3 minutes, once per runtime; up to 10 if PyTorch is missing too) ...")
    zip_path = urllib.request.urlretrieve(PACK_URL)[0] if "://" in PACK_URL else PACK_URL  # a link or a path
    with zipfile.ZipFile(zip_path) as pack_zip:
        # all but notebooks/: a notebook unpacked there earlier may hold your answers
        pack_zip.extractall(os.path.dirname(PACK_DIR), [n for n in pack_zip.namelist() if "/notebooks/" not in n])
    # The pack is imported from its folder, never built (`pip install -e` needs a recent setuptools and wheel,
    # which not every runtime has); pip installs only its pinned third-party requirements.
    sys.path.insert(0, PACK_DIR)
    sys.modules.pop("utils", None)  # a `utils` module of the runtime's own must not hide the pack's
    from utils.hosted_install import install_pinned_requirements
    install_pinned_requirements(PACK_DIR)  # keeps the runtime's torch and torchvision when it has both
'''.lstrip("\n")


def with_setup_bootstrap(source: str) -> str:
    """``source`` (a setup cell) with its bootstrap, the ``try:`` / ``import utils.presets`` /
    ``except ImportError:`` block at its top, replaced by :data:`SETUP_BOOTSTRAP` (``PACK_URL`` empty,
    as solutions/ keeps it). Raises ``ValueError`` when the cell has no such block."""
    lines = source.splitlines(keepends=True)
    start = next((i for i in range(len(lines) - 1) if lines[i].rstrip() == "try:"
                  and lines[i + 1].strip().startswith("import utils.presets")), None)
    if start is None:
        raise ValueError("no `try:` / `import utils.presets` bootstrap in this setup cell")
    end = start + 1
    while end < len(lines) and (not lines[end].strip() or lines[end][0] in " \t" or lines[end].startswith("except")):
        end += 1
    while end > start + 1 and not lines[end - 1].strip():  # blank lines after the block stay
        end -= 1
    return "".join(lines[:start]) + SETUP_BOOTSTRAP + "".join(lines[end:])


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
