"""Load a notebook's answers the way the grader does, and say what it could not run.

The grader's judge (in the course repository, inside the grading sandbox) and the student's own check
(``./pack.sh validate``, which runs ``python -m utils.answer_loader NOTEBOOK ...``) both use this
module, so what a student checks before submitting is what the grader does:

1. the parameters cell as the grader sets it (``PRESET = "smoke"``, ``MODEL_SUITE = "mini"``), then the
   setup cell, run in full;
2. the *given* cells (course code between the answers): only their definitions (imports,
   functions, classes, constants), because their experiments can take minutes;
3. every cell the student wrote or added: **every top-level statement, in notebook order**, as the
   student ran it, each under a time limit (``STATEMENT_SECONDS``). A statement that raises or runs
   past the limit is reported with its cell and line, and everything after it still runs.

Cells are dicts ``{"id": label, "role": role, "source": text}`` (roles from :func:`cell_role`).
Standard library only at import time.
"""

from __future__ import annotations

import ast
import json
import os
import re
import signal
import sys
import time
from dataclasses import dataclass, field

from utils.notebook_cells import cell_role, cell_source, grade_id, nbgrader_meta, student_labels  # noqa: F401 - cell_role: re-exported

#: what the parameters cell holds when the grader runs a notebook (nbgrader's autograding forces both:
#: utils/presets.py, utils/lm.py), so that the student's check loads the models the grader loads
GRADER_PARAMETERS = {"PRESET": "smoke", "MODEL_SUITE": "mini"}
STATEMENT_SECONDS = 30.0   # one top-level statement of a student's cell
LOAD_SECONDS = 60.0        # all of a notebook's top-level statements together
_MAGIC = re.compile(r"^\s*[%!]")
# cell magics whose body is not Python: the kernel hands it to another program, so does the grader
_FOREIGN_CELL_MAGICS = ("%%bash", "%%sh", "%%script", "%%html", "%%HTML", "%%javascript", "%%js", "%%latex",
                        "%%markdown", "%%svg", "%%writefile", "%%perl", "%%ruby", "%%system", "%%file")
_CHEAP_CALLS = {"float", "int", "str", "bool", "tuple", "list", "dict", "set", "frozenset", "range", "len", "abs",
                "min", "max", "round", "sorted", "complex", "Path", "dataclass", "field", "namedtuple", "TypeVar",
                "NamedTuple", "defaultdict", "OrderedDict"}
_CHEAP_ROOTS = {"math", "collections", "typing", "functools", "dataclasses", "string", "re", "itertools",
                "operator", "enum"}
_CHEAP_ARRAY_CALLS = {"tensor", "as_tensor", "array", "asarray", "float32", "float64", "int64", "int32", "dtype",
                      "device", "finfo", "iinfo", "log", "exp", "sqrt", "Generator", "get_default_dtype"}


# --------------------------------------------------------------------------- statements
@dataclass
class Statement:
    """One top-level statement of a cell: where it is, its first line, what it binds, its code."""

    cell: str
    line: int
    text: str
    binds: tuple
    code: object = None
    definition: bool = False   # a def, class or import: cheap to run, still loaded past the budget

    def where(self) -> str:
        return f"line {self.line} of cell `{self.cell}`, `{self.text}`"


@dataclass
class LoadReport:
    """What loading a notebook did: statements that failed or were skipped, with their reasons."""

    not_run: list = field(default_factory=list)   # {"cell", "line", "text", "binds", "why", "kind"}
    given_problems: list = field(default_factory=list)
    seconds: float = 0.0


def strip_magics(source: str) -> tuple[str, str]:
    """(Python source with IPython magics and shell escapes blanked, why the cell is not Python or '')."""
    first = source.lstrip().split("\n", 1)[0].strip()
    if first.startswith(_FOREIGN_CELL_MAGICS):
        return "", f"the cell magic {first.split()[0]} runs another program, not Python"
    lines = source.splitlines()
    return "\n".join("" if _MAGIC.match(line) else line for line in lines), ""


def _first_line(source: str, node: ast.AST) -> str:
    try:
        text = ast.get_source_segment(source, node) or ""
    except Exception:  # noqa: BLE001
        text = ""
    text = text.strip().splitlines()[0] if text.strip() else type(node).__name__
    return text if len(text) <= 80 else text[:77] + "..."


def _bound_names(node: ast.AST, out: list) -> None:
    """Names a top-level statement binds (assignments, defs, imports, loop targets, also inside if/try)."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        out.append(node.name)
        return
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        for alias in node.names:
            if alias.name != "*":
                out.append((alias.asname or alias.name).split(".")[0])
        return
    targets = []
    if isinstance(node, ast.Assign):
        targets = node.targets
    elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
        targets = [node.target]
    elif isinstance(node, (ast.For, ast.AsyncFor)):
        targets = [node.target]
    elif isinstance(node, (ast.With, ast.AsyncWith)):
        targets = [item.optional_vars for item in node.items if item.optional_vars is not None]
    for target in targets:
        for sub in ast.walk(target):
            if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store):
                out.append(sub.id)
    for child in ("body", "orelse", "finalbody", "handlers"):
        for sub in getattr(node, child, None) or []:
            if isinstance(sub, ast.stmt) or isinstance(sub, ast.excepthandler):
                for inner in (sub.body if isinstance(sub, ast.excepthandler) else [sub]):
                    _bound_names(inner, out)
    if isinstance(node, ast.Expr) and isinstance(node.value, ast.NamedExpr):
        out.append(node.value.target.id)


def statements(source: str, label: str) -> tuple[list[Statement], str]:
    """The top-level statements of one cell, compiled one by one, and why the cell cannot run ('' if it can)."""
    python, foreign = strip_magics(source)
    if foreign:
        return [], f"cell `{label}`: {foreign}; the grader does not run it"
    try:
        tree = ast.parse(python, filename=label)
    except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError) as exc:
        line = getattr(exc, "lineno", None)
        where = f" (line {line})" if line else ""
        return [], (f"cell `{label}` does not parse{where}: {exc.__class__.__name__}: {str(exc)[:120]}; "
                    "nothing in it was run")
    out = []
    for node in tree.body:
        binds: list = []
        _bound_names(node, binds)
        stmt = Statement(label, node.lineno, _first_line(python, node), tuple(dict.fromkeys(binds)),
                         definition=isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef,
                                                      ast.Import, ast.ImportFrom)))
        try:
            stmt.code = compile(ast.Module(body=[node], type_ignores=[]), label, "exec")
        except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError) as exc:
            return [], f"cell `{label}` does not compile: {exc.__class__.__name__}: {str(exc)[:120]}"
        out.append(stmt)
    return out, ""


def _is_cheap(node: ast.AST) -> bool:
    for sub in ast.walk(node):
        if isinstance(sub, (ast.Await, ast.Yield, ast.YieldFrom, ast.NamedExpr, ast.Lambda)):
            return False
        if isinstance(sub, ast.Call):
            f = sub.func
            if isinstance(f, ast.Name) and f.id in _CHEAP_CALLS:
                continue
            root = f
            while isinstance(root, ast.Attribute):
                root = root.value
            if isinstance(root, ast.Name) and isinstance(f, ast.Attribute) and (
                    root.id in _CHEAP_ROOTS or (root.id in ("torch", "np", "numpy") and f.attr in _CHEAP_ARRAY_CALLS)):
                continue
            return False
    return True


def is_definition(node: ast.stmt) -> bool:
    """Imports, functions, classes and cheap constants: what the grader runs of the course's given cells."""
    if isinstance(node, (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Pass)):
        return True
    if isinstance(node, ast.Assign):
        return all(isinstance(t, (ast.Name, ast.Tuple)) for t in node.targets) and _is_cheap(node.value)
    if isinstance(node, ast.AnnAssign):
        return isinstance(node.target, ast.Name) and (node.value is None or _is_cheap(node.value))
    if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
        return True
    if isinstance(node, ast.Try):
        return all(is_definition(s) for s in node.body) and not node.finalbody and \
            all(all(is_definition(s) for s in h.body) for h in node.handlers)
    return False


def run_definitions(source: str, label: str, names: dict) -> list[str]:
    """Run only the definitions of a (course-written, trusted) given cell into ``names``; problems found."""
    python, foreign = strip_magics(source)
    if foreign:
        return []
    try:
        tree = ast.parse(python, filename=label)
    except SyntaxError as exc:
        return [f"given cell {label} does not parse: {exc}"]
    problems = []
    for node in tree.body:
        if not is_definition(node):
            continue
        try:
            exec(compile(ast.Module(body=[node], type_ignores=[]), label, "exec"), names)  # noqa: S102
        except Exception as exc:  # noqa: BLE001
            if isinstance(node, (ast.Assign, ast.AnnAssign)):
                continue   # a value of the cell's experiment (which is not run): not a definition
            problems.append(f"given cell {label} line {node.lineno}: {exc.__class__.__name__}: {str(exc)[:160]}")
    return problems


# --------------------------------------------------------------------------- running statements
class StatementTimeout(BaseException):
    """Raised in a statement that runs past its time limit (BaseException: ``except Exception`` in
    the student's code does not swallow it)."""


def _on_alarm(signum, frame):
    raise StatementTimeout()


def run_statement(stmt: Statement, names: dict, seconds: float) -> str:
    """Run one statement into ``names`` within ``seconds``; '' when it ran, else why it did not."""
    previous = signal.signal(signal.SIGALRM, _on_alarm)
    signal.setitimer(signal.ITIMER_REAL, max(0.05, seconds))
    try:
        exec(stmt.code, names)  # noqa: S102 - the student's code, as the student ran it
        return ""
    except StatementTimeout:
        return f"ran past its time limit ({seconds:.0f} s)"
    except SystemExit as exc:
        return f"raised SystemExit({str(exc)[:60]})"
    except BaseException as exc:  # noqa: BLE001
        try:
            message = str(exc)
        except Exception:  # noqa: BLE001
            message = ""
        message = message if len(message) <= 200 else message[:197] + "..."
        return f"raised {exc.__class__.__name__}" + (f": {message}" if message else "")
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def not_run_entry(stmt: Statement, why: str, kind: str) -> dict:
    return {"cell": stmt.cell, "line": stmt.line, "text": stmt.text, "binds": list(stmt.binds), "why": why,
            "kind": kind}


def describe(entry: dict) -> str:
    """One sentence a student acts on, for a statement the grader could not run."""
    return f"line {entry['line']} of your cell `{entry['cell']}`, `{entry['text']}`, {entry['why']}"


def explain_name_error(message: str, not_run: list[dict]) -> str:
    """For ``NameError: name 'x' is not defined``: the statement that would have defined ``x``."""
    match = re.search(r"name '([A-Za-z_][A-Za-z0-9_]*)' is not defined", message or "") or \
        re.search(r"^([A-Za-z_][A-Za-z0-9_]*) is not defined", message or "")
    if not match:
        return ""
    name = match.group(1)
    for entry in reversed(not_run):
        if name in entry.get("binds", []):
            return f"`{name}` is not defined because {describe(entry)} when the grader ran it"
    return ""


# --------------------------------------------------------------------------- the student's check
def source_digest(text: str) -> str:
    """A short digest of a cell's source text (:func:`cell_source`; leading and trailing blanks ignored)."""
    import hashlib

    return hashlib.sha256(str(text).strip().encode("utf-8")).hexdigest()[:16]


def notebook_cells(nb: dict) -> list[dict]:
    """The cells of a notebook in the loader's form ``{"id", "role", "source"}`` (code cells only).
    A cell without nbgrader metadata is the course's given code when the release recorded its source
    (``las_given_cells`` in the notebook's metadata), else a cell the student added or changed."""
    given = set((nb.get("metadata") or {}).get("las_given_cells") or [])
    labels = student_labels(nb.get("cells", []))
    cells = []
    for i, cell in enumerate(nb.get("cells", [])):
        if cell.get("cell_type") != "code":
            continue
        role = cell_role(cell)
        if role == "given" and not nbgrader_meta(cell) and source_digest(cell_source(cell)) not in given:
            role = "answer"   # a cell the student added: part of the answer
        cells.append({"id": grade_id(cell) or f"cell {i + 1}", "role": role,
                      "source": cell_source(cell), "label": labels[i] or f"cell {i + 1}"})
    return cells


def load(cells: list[dict], names: dict, *, statement_seconds: float = STATEMENT_SECONDS,
         load_seconds: float = LOAD_SECONDS, run_setup: bool = True) -> LoadReport:
    """Load ``cells`` into ``names`` as the grader does (see the module docstring)."""
    report = LoadReport()
    started = time.monotonic()
    for cell in cells:
        role = cell["role"]
        if role == "parameters":
            names.update(GRADER_PARAMETERS)
        elif role == "setup" and run_setup:
            python, _ = strip_magics(cell["source"])
            exec(compile(python, cell["id"], "exec"), names)  # noqa: S102
        elif role == "given":
            report.given_problems += run_definitions(cell["source"], cell["id"], names)
        elif role == "answer":
            stmts, problem = statements(cell["source"], cell["id"])
            if problem:
                report.not_run.append({"cell": cell["id"], "line": 1, "text": "", "binds": [], "why": problem,
                                       "kind": "syntax"})
            for stmt in stmts:
                left = load_seconds - (time.monotonic() - started)
                if left <= 0:
                    report.not_run.append(not_run_entry(stmt, "was not run: the notebook's top-level code used up "
                                                        f"its {load_seconds:g} s", "budget"))
                    continue
                why = run_statement(stmt, names, min(statement_seconds, left))
                if why:
                    report.not_run.append(not_run_entry(stmt, why, "timeout" if "time limit" in why else "error"))
    report.seconds = time.monotonic() - started
    return report


def check_notebook(path: str, *, statement_seconds: float = STATEMENT_SECONDS) -> list[str]:
    """The student's check of one notebook: every line the grader would not run, and every visible
    test that fails when the answers are loaded as the grader loads them. [] when all is well."""
    os.environ.setdefault("LAS_PRESET", "smoke")
    os.environ.setdefault("MPLBACKEND", "Agg")
    with open(path, encoding="utf-8") as f:
        nb = json.load(f)
    cells = notebook_cells(nb)
    graded = {"__name__": "__main__"}
    report = load([c for c in cells if c["role"] != "test"], graded, statement_seconds=statement_seconds)
    problems = [f"the grader could not run {describe(e)}" for e in report.not_run]
    # The visible tests see the notebook as you ran it (the given cells' experiments included), but
    # call your functions as the grader loaded them: a function that needs something only the given
    # cells' experiments define fails here as it would in grading.
    ran = {"__name__": "__main__"}
    for cell in cells:
        if cell["role"] == "test":
            continue
        python, foreign = strip_magics(cell["source"])
        if foreign or cell["role"] == "parameters":
            if cell["role"] == "parameters":
                ran.update(GRADER_PARAMETERS)
            continue
        try:
            exec(compile(python, cell["id"], "exec"), ran)  # noqa: S102
        except BaseException:  # noqa: BLE001 - reported through the grader's load above, or by nbgrader
            pass
    student_names = {k: v for k, v in graded.items() if not k.startswith("__")}
    for cell in cells:
        if cell["role"] != "test":
            continue
        scope = {**ran, **student_names}
        python, _ = strip_magics(cell["source"])
        try:
            exec(compile(python, cell["id"], "exec"), scope)  # noqa: S102
        except BaseException as exc:  # noqa: BLE001
            message = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ""
            hint = explain_name_error(message, report.not_run) if isinstance(exc, NameError) else ""
            problems.append(f"{cell.get('label', cell['id'])} fails with your answers loaded as the grader loads them: "
                            f"{exc.__class__.__name__}" + (f": {message}" if message else "") +
                            (f" ({hint})" if hint else ""))
    return problems


def check_notebook_isolated(path: str) -> list[str]:
    """:func:`check_notebook` of ``path`` in a fresh interpreter (the student's code must not touch the
    caller's); a check that itself crashes is reported as one problem."""
    import subprocess

    proc = subprocess.run([sys.executable, "-m", "utils.answer_loader", "--one", path], capture_output=True,
                          text=True)
    lines = proc.stdout.strip().splitlines()
    try:
        return list(json.loads(lines[-1]))
    except (IndexError, ValueError):   # no output, or not the JSON line: the check itself crashed
        return [f"the check itself failed: {(proc.stderr.strip().splitlines() or ['no output'])[-1][:300]}"]


def main(argv: list[str] | None = None) -> int:
    """``python -m utils.answer_loader NOTEBOOK ...``: one line per notebook, details above it;
    exit status 1 when any notebook has a problem."""
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--one":
        problems = check_notebook(argv[1])
        print(json.dumps(problems))
        return 0
    bad = 0
    verdicts = []
    for path in argv:
        problems = check_notebook_isolated(path)
        name = os.path.basename(path)
        for p in problems:
            print(f"{name}: {p}")
        verdicts.append(f"{'FAILED' if problems else 'ok'}  {name}" +
                        (f": {len(problems)} problem(s) above" if problems else ": the grader runs every line"))
        bad += bool(problems)
    print("\n".join(verdicts))
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
