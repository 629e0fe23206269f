"""The pack's one reading of a notebook's cells: source, metadata, tags, role, rubric and extension.

Every module that looks inside a cell goes through here (a layout test of the course repository enforces it), so a
change of convention (a new tag, a new role) is made once. Cells are the plain dicts of a notebook's
JSON (``nb["cells"]``); nbformat's ``NotebookNode`` cells are dicts too. Every reader tolerates a
malformed cell (a submission is untrusted): a missing or ill-typed field reads as empty.

Also here: reading a notebook, writing it in the pack's stable JSON (how the committed notebooks are
formatted), and :func:`run_cells`, the named cells of a notebook executed into a namespace.

Ships to students (``utils/answer_loader.py`` needs it); standard library only.
"""

from __future__ import annotations

import json
from pathlib import Path

EXTENSION_TAG = "extension"    # a graded cell of the optional extensions (the course repository's tiers of core and extensions)
RUBRIC_TAG = "rubric"          # a TA's rubric under a written answer: never in the release
PARAMETERS_TAG = "parameters"  # papermill's parameters cell


# --------------------------------------------------------------------------- one cell
def cell_metadata(cell) -> dict:
    """The cell's ``metadata`` dict ({} when missing or not a dict)."""
    meta = cell.get("metadata") if isinstance(cell, dict) else None
    return meta if isinstance(meta, dict) else {}


def nbgrader_meta(cell) -> dict:
    """The cell's nbgrader metadata (``grade_id``, ``grade``, ``solution``, ``locked``, ``points``), or {}."""
    meta = cell_metadata(cell).get("nbgrader")
    return meta if isinstance(meta, dict) else {}


def grade_id(cell) -> str | None:
    """The cell's nbgrader ``grade_id`` when it is a non-empty string, else None."""
    gid = nbgrader_meta(cell).get("grade_id")
    return gid if isinstance(gid, str) and gid else None


def cell_tags(cell) -> list:
    """The cell's Jupyter tags, as a new list ([] when missing or not a list)."""
    tags = cell_metadata(cell).get("tags")
    return list(tags) if isinstance(tags, list) else []


def cell_source(cell) -> str:
    """The cell's source as one string: a list of lines is joined (items that are not strings are
    skipped), anything else that is not a string reads as ''."""
    src = cell.get("source", "") if isinstance(cell, dict) else ""
    if isinstance(src, list):
        return "".join(s for s in src if isinstance(s, str))
    return src if isinstance(src, str) else ""


def is_locked(cell) -> bool:
    """A cell nbgrader restores as released when it grades (the task text, setup, given code, tests)."""
    return bool(nbgrader_meta(cell).get("locked"))


def is_graded(cell) -> bool:
    """A cell that carries points: an autograded test or a manually graded answer."""
    return bool(nbgrader_meta(cell).get("grade"))


def is_test(cell) -> bool:
    """An autograded test cell: code with points and no solution region."""
    return cell.get("cell_type") == "code" and is_graded(cell) and not nbgrader_meta(cell).get("solution")


def is_manually_graded(cell) -> bool:
    """An answer the TA grades: points and a solution region (a written answer, or such a code cell)."""
    meta = nbgrader_meta(cell)
    return bool(meta.get("grade") and meta.get("solution"))


def is_written_answer(cell) -> bool:
    """A manually graded answer in markdown: what the student writes in words."""
    return cell.get("cell_type") == "markdown" and is_manually_graded(cell)


def is_rubric(cell) -> bool:
    return RUBRIC_TAG in cell_tags(cell)


def is_extension(cell) -> bool:
    return EXTENSION_TAG in cell_tags(cell)


def cell_role(cell) -> str:
    """parameters | setup | answer | test | written | given | markdown, from the nbgrader metadata:
    a code cell tagged ``parameters``; the code cell ``setup``; an answer (solution, no points); a test
    (points); a written answer (a markdown solution); any other code cell is the course's given code."""
    meta = nbgrader_meta(cell)
    if cell.get("cell_type") != "code":
        return "written" if meta.get("solution") else "markdown"
    if PARAMETERS_TAG in cell_tags(cell):
        return "parameters"
    if meta.get("grade_id") == "setup":
        return "setup"
    if meta.get("solution") and not meta.get("grade"):
        return "answer"
    if meta.get("grade"):
        return "test"
    return "given"


def student_labels(cells: list) -> list:
    """How a student finds each of ``cells`` (a notebook's cells, in order): the section heading above it and,
    for code, the function it defines or tests, e.g. 'the test cell of `nce_loss` in \u201c(b) InfoNCE and NCE\u201d';
    None for a cell without a grade id. Messages to students name cells this way, never by the hidden
    grade id."""
    import re

    labels, section, last_defined = [], "", ""
    for cell in cells:
        source = cell_source(cell)
        if cell.get("cell_type") == "markdown" and not grade_id(cell):
            headings = [ln.lstrip("#").strip() for ln in source.splitlines() if ln.startswith("#")]
            section = headings[-1] if headings else section
        if not grade_id(cell):
            labels.append(None)
            continue
        where = f" in \u201c{section[:70]}\u201d" if section else ""
        defined = re.search(r"^def\s+([A-Za-z_]\w*)", source, re.M)
        if cell.get("cell_type") == "markdown":
            label = f"the written answer{where}"
        elif is_test(cell):
            label = f"the test cell of `{last_defined}`{where}" if last_defined else f"the test cell{where}"
        elif defined:
            label = f"the cell defining `{defined.group(1)}`{where}"
            last_defined = defined.group(1)
        else:
            first = next((ln.strip() for ln in source.splitlines() if ln.strip() and not ln.strip().startswith("#")), "")
            label = f"the cell starting `{first[:50]}`{where}"
        labels.append(label)
    return labels


# --------------------------------------------------------------------------- a notebook
def read_notebook(path) -> dict:
    """The notebook at ``path`` as a dict (its JSON, UTF-8)."""
    return json.loads(Path(path).read_text(encoding="utf-8"))


def notebook_cells(nb) -> list:
    """The cells of ``nb``: a notebook dict, or a path to read."""
    if isinstance(nb, (str, Path)):
        nb = read_notebook(nb)
    return nb["cells"]


def write_notebook_json(path, data: dict) -> None:
    """Write a notebook dict with the pack's stable formatting (sorted keys, indent 1, a final newline)."""
    Path(path).write_text(json.dumps(data, indent=1, ensure_ascii=False, sort_keys=True) + "\n", encoding="utf-8")


def drop_rubrics(nb: dict) -> dict:
    """``nb`` without its rubric cells (in place; returned for chaining)."""
    nb["cells"] = [c for c in nb["cells"] if not is_rubric(c)]
    return nb


def rubric_cells(nb) -> dict[str, str]:
    """{grade_id of a written answer: the markdown of the rubric cell directly under it} of ``nb``."""
    cells = notebook_cells(nb)
    return {nbgrader_meta(c)["grade_id"]: cell_source(cells[i + 1]) for i, c in enumerate(cells)
            if is_written_answer(c) and i + 1 < len(cells) and is_rubric(cells[i + 1])}


def run_cells(notebook, grade_ids, namespace: dict | None = None) -> dict:
    """Execute the code cells of ``notebook`` (a path or a dict) whose grade_id is in ``grade_ids``, in
    notebook order, into ``namespace`` (a new dict by default), and return it: e.g. a solution's function
    cells without its experiments. Raises RuntimeError naming the cells the notebook lacks."""
    name = Path(notebook).name if isinstance(notebook, (str, Path)) else "notebook"
    namespace = {} if namespace is None else namespace
    found = set()
    for cell in notebook_cells(notebook):
        gid = grade_id(cell)
        if gid in grade_ids and cell.get("cell_type") == "code":
            exec(compile(cell_source(cell), f"<{name}:{gid}>", "exec"), namespace)  # noqa: S102 - course code
            found.add(gid)
    missing = set(grade_ids) - found
    if missing:
        raise RuntimeError(f"{name} lacks the cells {sorted(missing)}")
    return namespace
