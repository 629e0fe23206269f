"""The student's check before submitting: ``./pack.sh validate`` (``python -m utils.validate NB ...``).

For each notebook, two checks, then one verdict line:

1. **nbgrader's validation**, run in a fresh kernel exactly as the notebook's *Validate* button runs it:
   every cell runs top to bottom, the visible test cells pass, the written answers are filled in, and no
   locked or test cell was edited. nbgrader itself prints every failing cell in full (hundreds of lines on
   an unfilled notebook) and exits 0 even when validation fails; here each problem is one line, named by
   its cell (``--verbose`` adds nbgrader's full report).
2. **The grader's view** (utils/answer_loader.py): your cells loaded the way the grader loads them;
   names each line the grader could not run and each visible test that then fails.

The output ends with one line per notebook, ``ok  NAME: ...`` or ``FAILED  NAME: ...``, and the exit
status is 1 when any notebook has a problem (0 only when every notebook is ready to submit).
"""

from __future__ import annotations

import contextlib
import os
import sys

from utils.notebook_cells import cell_source, read_notebook, student_labels

#: at most this many problem lines per notebook and check; the rest are counted
SHOWN = 12


def _cell_names(path: str) -> list[tuple[str, str]]:
    """(stripped source, how the student finds the cell: utils.notebook_cells.student_labels) of a notebook's
    nbgrader cells, in notebook order, to name nbgrader's failing cells (several unanswered cells share the
    source "YOUR ANSWER HERE")."""
    cells = read_notebook(path).get("cells", [])
    return [(cell_source(cell).strip(), label) for cell, label in zip(cells, student_labels(cells)) if label]


def _first_error_line(raw: str) -> str:
    """The last line of a traceback that says what went wrong (``NameError: ...``), ANSI codes removed."""
    import re

    text = re.sub(r"\x1b\[[0-9;]*m", "", raw or "").strip()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for line in reversed(lines):
        if re.match(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit|NotImplemented\w*)\b", line):
            return line[:200]
    return (lines[-1] if lines else "no error message")[:200]


def nbgrader_problems(path: str, *, verbose: bool = False) -> list[str]:
    """nbgrader's validation of ``path`` as one line per problem; [] when it passes."""
    from nbgrader.validator import Validator

    os.environ.setdefault("MPLBACKEND", "Agg")
    validator = Validator()
    validator.width = 100
    if verbose:
        validator.stream = sys.stdout
        validator.validate_and_print(path)
    results = validator.validate(path)
    names = _cell_names(path)

    def named(source: str) -> str:
        # nbgrader reports cells in notebook order: take the first unused cell with this source
        for i, (src, label) in enumerate(names):
            if src == source.strip():
                del names[: i + 1]
                return label
        first = source.strip().splitlines()[0][:60] if source.strip() else ""
        return f"the cell starting `{first}`"

    problems = []
    for cell in results.get("type_changed", []):
        problems.append(f"{named(cell['source'])} was changed from a {cell['old_type']} cell to a "
                        f"{cell['new_type']} cell: change it back (Edit > Undo, or copy your text into a fresh "
                        "copy of the notebook)")
    for cell in results.get("changed", []):
        problems.append(f"{named(cell['source'])}, a locked or test cell, was edited: the grader restores it, "
                        "so put your code in your own cells")
    for cell in results.get("failed", []):
        error = _first_error_line(cell.get("raw_error", ""))
        if "You did not provide a response" in (cell.get("raw_error") or ""):
            problems.append(f"{named(cell['source'])} is still empty")
        elif error.startswith("NotImplementedError"):
            problems.append(f"{named(cell['source'])} stops at NotImplementedError: "
                            "the answer it runs or tests is not filled in yet")
        else:
            problems.append(f"{named(cell['source'])} fails: {error}")
    return problems


def grader_view_problems(path: str) -> list[str]:
    """The grader's view of ``path`` (utils/answer_loader.py, in its own process) as one line per problem."""
    from utils.answer_loader import check_notebook_isolated

    return check_notebook_isolated(path)


def _show(name: str, title: str, problems: list[str]) -> None:
    for line in problems[:SHOWN]:
        print(f"{name}: {title}: {line}")
    if len(problems) > SHOWN:
        print(f"{name}: {title}: ... and {len(problems) - SHOWN} more")


@contextlib.contextmanager
def _kernel_noise_hidden(verbose: bool):
    """Hide what the validation kernel writes to stderr (ipykernel's transport warning, nbgrader's log
    lines): the problems are reported one per line below. ``--verbose`` shows everything."""
    if verbose:
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    with open(os.devnull, "w") as devnull:
        os.dup2(devnull.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)


def validate(paths: list[str], *, verbose: bool = False) -> int:
    """Check each notebook in ``paths``; print the problems and one verdict line each; return the exit status."""
    verdicts, failed = [], 0
    for path in paths:
        name = os.path.basename(path)
        if not os.path.isfile(path):
            verdicts.append(f"FAILED  {name}: no such file ({path})")
            failed += 1
            continue
        print(f"== {name}: running it as nbgrader's Validate button does, then loading it as the grader does ...",
              flush=True)
        try:
            with _kernel_noise_hidden(verbose):
                nbgrader = nbgrader_problems(path, verbose=verbose)
        except Exception as exc:  # noqa: BLE001 - a corrupt notebook is a verdict, not a crash of the check
            nbgrader = [f"could not be read or run: {exc.__class__.__name__}: {str(exc)[:200]}"]
        # a test cell that nbgrader already reports as unfilled says nothing new in the grader's view
        unfilled = {p.split("`")[1] for p in nbgrader if "stops at NotImplementedError" in p}
        grader = [p for p in grader_view_problems(path)
                  if not (p.startswith("test cell `") and p.split("`")[1] in unfilled and p.endswith("NotImplementedError"))]
        _show(name, "nbgrader", nbgrader)
        _show(name, "grader's view", grader)
        if nbgrader or grader:
            failed += 1
            parts = [f"{len(nbgrader)} from nbgrader's validation" if nbgrader else "",
                     f"{len(grader)} in the grader's view" if grader else ""]
            verdicts.append(f"FAILED  {name}: " + " and ".join(p for p in parts if p) + " (listed above)")
        else:
            verdicts.append(f"ok  {name}: every cell runs, the visible tests pass, the grader runs every line")
    print("\n".join(verdicts))
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    verbose = "--verbose" in argv
    paths = [a for a in argv if a != "--verbose"]
    if not paths:
        print("usage: python -m utils.validate [--verbose] NOTEBOOK.ipynb ...", file=sys.stderr)
        return 2
    return validate(paths, verbose=verbose)


if __name__ == "__main__":
    raise SystemExit(main())
