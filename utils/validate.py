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

From a cell of the notebook itself (Google Colab has neither a terminal for ``./pack.sh`` nor nbgrader's
*Validate* button)::

    from utils.validate import check_this_notebook; check_this_notebook()

runs this same check, ``python -m utils.validate NOTEBOOK``, in a process of its own, on the notebook as the
editor holds it (Colab: fetched from the browser, saved or not) or as last saved (Jupyter), and prints
the same lines and verdict (:func:`check_this_notebook`).
"""

from __future__ import annotations

import contextlib
import os
import sys

from utils.notebook_cells import cell_source, grade_id, nbgrader_meta, read_notebook, student_labels

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
        problems.append(failed_cell_line(named(cell["source"]), cell.get("raw_error") or ""))
    return problems


def failed_cell_line(label: str, raw_error: str) -> str:
    """One failing cell of nbgrader's validation, named as the student finds it, with what went wrong."""
    error = _first_error_line(raw_error)
    if "You did not provide a response" in raw_error:
        return f"{label} is still empty"
    if error.startswith("NotImplementedError"):
        return f"{label} stops at NotImplementedError: the answer it runs or tests is not filled in yet"
    return f"{label} fails: {error}"


def _label_in_folder(cell, index: int) -> str:
    """How the student finds ``cell``, cell ``index`` of the notebook being validated: the notebook of the
    working folder (nbgrader validates in the notebook's own folder) whose cell ``index`` has its grade id."""
    for path in sorted(os.listdir(".")):
        try:
            cells = read_notebook(path).get("cells", []) if path.endswith(".ipynb") else []
        except (OSError, ValueError):
            continue
        if index < len(cells) and grade_id(cells[index]) == grade_id(cell):
            return student_labels(cells)[index]
    return "a test cell"


def short_failure(cell, cell_index: int, **_) -> None:
    """nbgrader's Validate button, as short as ``./pack.sh validate``: its server extension shows every failing
    cell's whole source and traceback (about 180 lines on a half-done notebook). Set as nbclient's
    ``c.Execute.on_cell_error`` hook (in the course's and the bundle's nbgrader configuration), this makes
    a failing graded cell, in the copy nbgrader validates in memory, its label (:func:`_label_in_folder`)
    and one error line: the line ``./pack.sh validate`` prints. Only under nbgrader's validation, and only
    for a cell as released (its checksum matching; an edited cell stays as it is, for nbgrader to report as
    changed)."""
    from nbgrader.utils import compute_checksum, is_grade

    meta = nbgrader_meta(cell)
    if os.environ.get("NBGRADER_EXECUTION") != "validate" or not is_grade(cell) \
            or meta.get("checksum") != compute_checksum(cell):
        return
    errors = [o for o in cell.outputs if o.get("output_type") == "error"]
    raw = "\n".join("\n".join(o.get("traceback", [])) for o in errors)
    cell.source = _label_in_folder(cell, cell_index)
    if errors:   # nbgrader reads the error output's traceback (and any stderr, dropped here)
        errors[-1]["traceback"] = [failed_cell_line(cell.source, raw)]
        cell.outputs = errors[-1:]
    meta["checksum"] = compute_checksum(cell)


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
    before = os.environ.get(CHECKING)
    os.environ[CHECKING] = "1"  # the kernels and the grader's view below inherit it (see check_this_notebook)
    try:
        return _validate(paths, verbose=verbose)
    finally:   # a caller in the same process (a test, a notebook) is not left "under a check"
        if before is None:
            os.environ.pop(CHECKING, None)
        else:
            os.environ[CHECKING] = before


def _validate(paths: list[str], *, verbose: bool) -> int:
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


# ------------------------------------------------------------------ from inside the notebook
#: set while notebooks are being checked: a check_this_notebook() cell in a notebook under check does nothing
CHECKING = "LAS_VALIDATING"
#: seconds to wait for Colab's browser tab to send the notebook
COLAB_TIMEOUT_S = 60
#: where a hosted runtime without nbgrader gets the pinned nbgrader for the check (a virtual environment
#: on top of the runtime's packages: the runtime's own Jupyter, which its notebook server runs on, is
#: never touched; see utils/hosted_install.py)
CHECK_ENV = os.path.join(os.path.expanduser("~"), ".cache", "las-validate")


def _pack_root() -> str:
    """The folder holding the pack's ``utils/`` (the unpacked bundle, or the course repository)."""
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def colab_notebook() -> tuple[str, dict] | None:
    """``(file name, notebook)`` of the notebook open in Google Colab, as its editor holds it (unsaved
    edits included), or None outside Colab. Raises ``RuntimeError`` when Colab does not answer."""
    try:
        from google.colab import _message  # only Colab's kernel has it
    except ImportError:
        return None
    reply = _message.blocking_request("get_ipynb", request="", timeout_sec=COLAB_TIMEOUT_S)
    if not reply or not isinstance(reply.get("ipynb"), dict):
        raise RuntimeError(f"Colab did not send the notebook within {COLAB_TIMEOUT_S} s ({reply!r:.100}): run the "
                           "cell again; if it keeps failing, File > Download .ipynb and check that file with "
                           "./pack.sh validate on a computer with the pack")
    notebook = reply["ipynb"]
    name = os.path.basename(notebook.get("metadata", {}).get("colab", {}).get("name") or "this_notebook.ipynb")
    return (name if name.endswith(".ipynb") else name + ".ipynb"), notebook


def jupyter_notebook_path() -> str | None:
    """The path of the notebook this kernel runs, where the front end tells it (JupyterLab and Notebook 7
    set ``JPY_SESSION_NAME``, VS Code ``__vsc_ipynb_file__``), else None."""
    try:
        from IPython import get_ipython
        shell = get_ipython()
    except ImportError:
        shell = None
    candidates = [os.environ.get("JPY_SESSION_NAME", "")]
    if shell is not None:
        candidates += [str(shell.user_ns.get(name, "")) for name in ("__vsc_ipynb_file__", "__session__")]
    return next((c for c in candidates if c.endswith(".ipynb") and os.path.isfile(c)), None)


def checking_python(pack_root: str | None = None) -> str:
    """A Python that runs ``python -m utils.validate``: this one when it has nbgrader (the student's
    ``./pack.sh env``, or any environment with the pack's Jupyter stack); else (Colab and other hosted
    runtimes, where the pack's install leaves Jupyter alone) a virtual environment in :data:`CHECK_ENV`
    that sees the runtime's packages and adds the pack's pinned Jupyter stack (nbgrader & co.), made once
    per runtime (about a minute)."""
    import importlib.util
    import subprocess

    if importlib.util.find_spec("nbgrader") is not None:
        return sys.executable
    from utils.hosted_install import JUPYTER_STACK, canonical, pins

    with open(os.path.join(pack_root or _pack_root(), "requirements.txt"), encoding="utf-8") as f:
        pinned = pins(f.read())
    wanted = [f"{name}=={pinned[canonical(name)]}" for name in JUPYTER_STACK if canonical(name) in pinned]
    python = os.path.join(CHECK_ENV, "bin", "python")
    stamp = os.path.join(CHECK_ENV, ".las-" + "-".join(sorted(wanted)).replace("=", ""))
    if os.path.exists(stamp):
        return python
    print(f"First check in this runtime: installing nbgrader for it into {CHECK_ENV} (about a minute, once) ...",
          flush=True)
    steps = [[sys.executable, "-m", "venv", "--clear", "--without-pip", "--system-site-packages", CHECK_ENV],
             [python, "-m", "pip", "install", "--disable-pip-version-check", "-q", *wanted]]  # the runtime's pip
    for command in steps:
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            last = next((ln for ln in reversed((done.stdout + done.stderr).splitlines()) if ln.strip()), "")
            raise RuntimeError(f"could not install nbgrader for the check ({' '.join(command[:4])} ...: {last[:200]}); "
                               "this runtime needs internet access to PyPI")
    os.makedirs(CHECK_ENV, exist_ok=True)
    open(stamp, "w").close()
    return python


def check_this_notebook(path: str | None = None, *, verbose: bool = False) -> bool:
    """Check the notebook this is called from as ``./pack.sh validate`` does, from one of its cells: the
    same command (``python -m utils.validate [--verbose] FILE``, in a process of its own), so the same
    problem lines and the same verdict line. The notebook is ``path`` when given, else on Google Colab
    the notebook as its editor holds it (fetched from the browser: no need to save), else the file the
    Jupyter front end names (its last saved state: save first). Returns True when it is ready to submit.

    The check runs every cell in a fresh kernel, so it takes as long as *Restart and run all* (plus
    seconds to load your answers as the grader does). The cell may stay in the notebook: while the notebook
    is being checked (``$LAS_VALIDATING``) or run by nbgrader (``$NBGRADER_EXECUTION``) it does nothing."""
    import subprocess
    import tempfile

    if os.environ.get(CHECKING) or os.environ.get("NBGRADER_EXECUTION"):
        print("check_this_notebook(): skipped while the notebook is being checked or graded")
        return True

    root = _pack_root()
    with tempfile.TemporaryDirectory(prefix="las-check-") as scratch:
        if path is None:
            fetched = colab_notebook()
            if fetched is not None:
                name, notebook = fetched
                path = os.path.join(scratch, name)
                from utils.notebook_cells import write_notebook_json

                write_notebook_json(path, notebook)
            else:
                path = jupyter_notebook_path()
                if path is None:
                    raise RuntimeError("cannot tell which notebook this is: pass its path, e.g. "
                                       "check_this_notebook('notebooks/ex01/task1_infonce.ipynb')")
                print(f"(checking {path} as last saved: save it first, Ctrl+S)", flush=True)
        python = checking_python(root)
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p))
        env.pop("MPLBACKEND", None)  # the kernel's inline backend must not leak into the check's kernels
        command = [python, "-m", "utils.validate", *(["--verbose"] if verbose else []), os.path.abspath(path)]
        with subprocess.Popen(command, cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, bufsize=1) as check:
            for line in check.stdout:
                print(line, end="", flush=True)
        return check.returncode == 0


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
