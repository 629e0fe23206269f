"""The probe harness: runs inside the grading sandbox and only collects evidence.

``python -m grader.probe PLAN.json`` reads a plan written by the judge (grader/judge.py):

    {"stem": "task1_infonce", "seed": 1234, "isolate": "case",
     "variants": {"alice": [{"id": "setup", "role": "setup", "source": "..."}, ...]},
     "cases": {"alice": ["info_nce_uniform", ...]}}          # optional: default every probe

and writes one JSON line per probed case to the file descriptor it was started with as stdout:
``{"kind": "case", "variant": ..., "seed": ..., "case": ..., "status": "ok" | "timeout" | "died" |
"bad-evidence", "value": <grader.evidence encoding>, "seconds": ...}``, after a header line that
lists the statements of answer cells the judge did not run.

How it keeps a submission from judging itself:

* It holds no reference implementation: the probes in ``grader/probes/<stem>.py`` only build
  inputs and call the student's functions; the judge compares outside the sandbox.
* The harness process (the parent) never runs student code. For every case it forks a child that
  loads the notebook's *definitions* (imports, functions, classes, constant assignments of the answer
  cells; the release's given cells; the setup cell already ran in the parent), runs one probe and
  sends back one encoded value through a pipe. Whatever a child does (patching torch, IPython-style
  hooks, ``os._exit``, an endless loop) ends with that child: the next case starts from the parent's
  pristine state, and the evidence channel (the parent's stdout) is closed in every child.
* The parent is not dumpable (``PR_SET_DUMPABLE 0``), so a child cannot read or write its memory
  through /proc; a child past its time limit is killed with its process group.
"""

from __future__ import annotations

import ast
import json
import os
import re
import select
import signal
import sys
import time
import zlib

from .evidence import MAX_CASE_BYTES, encode, raised

DEFAULT_TIMEOUT = 60.0
ALLOWED_CALLS = {"float", "int", "str", "bool", "tuple", "list", "dict", "set", "frozenset", "range", "len",
                 "abs", "min", "max", "round", "sorted", "complex", "Path", "dataclass", "field",
                 "namedtuple", "TypeVar", "NamedTuple", "defaultdict", "OrderedDict"}
ALLOWED_CALL_ROOTS = {"math", "collections", "typing", "functools", "dataclasses", "string", "re", "itertools",
                      "operator", "enum"}
# torch and numpy: only cheap constructors of small constants (a call like np.ones((40_000, 40_000))
# at the top of a cell is an experiment, not a definition)
ALLOWED_ARRAY_CALLS = {"tensor", "as_tensor", "array", "asarray", "float32", "float64", "int64", "int32", "dtype",
                       "device", "finfo", "iinfo", "log", "exp", "sqrt", "Generator", "get_default_dtype"}
_MAGIC = re.compile(r"^\s*[%!]")


# --------------------------------------------------------------------------- probe registry
class Probe:
    """One named case: ``fn(ns, gen)`` builds inputs from the torch.Generator ``gen``, calls the
    student's functions through ``ns`` and returns what they gave (the judge compares it)."""

    def __init__(self, name: str, fn, timeout: float):
        self.name, self.fn, self.timeout = name, fn, timeout


def probes(registry: dict):
    """Decorator factory for a probe module: ``probe = probes(PROBES)``, then ``@probe()``."""
    def probe(timeout: float = DEFAULT_TIMEOUT, name: str | None = None):
        def wrap(fn):
            key = name or fn.__name__
            if key in registry:
                raise ValueError(f"probe {key!r} defined twice")
            registry[key] = Probe(key, fn, timeout)
            return fn
        return wrap
    return probe


class Namespace:
    """Attribute access to the notebook's names, with a message a student can act on."""

    def __init__(self, names: dict, notes: list[str]):
        object.__setattr__(self, "_names", names)
        object.__setattr__(self, "_notes", notes)

    def __getattr__(self, item):
        names = object.__getattribute__(self, "_names")
        if item in names:
            return names[item]
        notes = object.__getattribute__(self, "_notes")
        hint = f" ({notes[0]})" if notes else ""
        raise NameError(f"{item} is not defined: keep the name and signature the task gives{hint}")


def attempt(fn, *args, **kwargs):
    """Call ``fn``; return its value, or the :class:`grader.evidence.Raised` record of its exception."""
    try:
        return fn(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - the exception is the evidence
        return raised(exc)


def case_seed(seed: int, case: str) -> int:
    """A per-case seed: the same case sees the same inputs under the same batch seed."""
    return (int(seed) * 1_000_003 + zlib.crc32(case.encode())) % (2 ** 31 - 1)


def load_probes(stem: str) -> dict:
    import importlib

    module = importlib.import_module(f"grader.probes.{stem}")
    return dict(module.PROBES)


# --------------------------------------------------------------------------- definitions only
def _strip_magics(source: str) -> str:
    return "\n".join("" if _MAGIC.match(line) else line for line in source.splitlines())


def _is_constant(node: ast.AST) -> bool:
    """An expression that only builds a value: literals, names, arithmetic, and calls to a short
    list of constructors (``math.log(2)``, ``torch.tensor([...])``), never an arbitrary call."""
    for sub in ast.walk(node):
        if isinstance(sub, (ast.Await, ast.Yield, ast.YieldFrom, ast.NamedExpr)):
            return False
        if isinstance(sub, ast.Call):
            f = sub.func
            if isinstance(f, ast.Name) and f.id in ALLOWED_CALLS:
                continue
            root = f
            while isinstance(root, ast.Attribute):
                root = root.value
            if isinstance(root, ast.Name) and root.id in ALLOWED_CALL_ROOTS and isinstance(f, ast.Attribute):
                continue
            if isinstance(root, ast.Name) and root.id in ("torch", "np", "numpy") and isinstance(f, ast.Attribute) \
                    and f.attr in ALLOWED_ARRAY_CALLS:
                continue
            return False
    return True


def _keep(stmt: ast.stmt) -> bool:
    if isinstance(stmt, (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef,
                         ast.Pass)):
        return True
    if isinstance(stmt, ast.Assign):
        return all(isinstance(t, (ast.Name, ast.Tuple)) for t in stmt.targets) and _is_constant(stmt.value)
    if isinstance(stmt, ast.AnnAssign):
        return isinstance(stmt.target, ast.Name) and (stmt.value is None or _is_constant(stmt.value))
    if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
        return True  # a docstring or a bare literal
    return False


def _quiet(stmt: ast.stmt) -> bool:
    """Statements not worth a note when dropped: a print, a display, a bare name."""
    if isinstance(stmt, ast.Expr):
        v = stmt.value
        if isinstance(v, (ast.Name, ast.Attribute, ast.Subscript)):
            return True
        if isinstance(v, ast.Call) and isinstance(v.func, ast.Name) and v.func.id in ("print", "display"):
            return True
    return False


def definitions(source: str, label: str) -> tuple[list, list[str]]:
    """Compile the definitions of one cell: a list of (code object, line) and notes on what was left out."""
    try:
        tree = ast.parse(_strip_magics(source), filename=label)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        return [], [f"{label} does not parse ({exc.__class__.__name__}: {str(exc)[:120]}); nothing in it was run"]
    kept, notes = [], []
    for stmt in tree.body:
        if isinstance(stmt, ast.If) and isinstance(stmt.test, ast.Name) and stmt.test.id == "TYPE_CHECKING":
            continue
        if isinstance(stmt, ast.Try) and all(_keep(s) for s in stmt.body):
            handlers_ok = all(all(_keep(s) for s in h.body) for h in stmt.handlers)
            if handlers_ok and not stmt.finalbody:
                kept.append(stmt)
                continue
        if _keep(stmt):
            kept.append(stmt)
        elif not _quiet(stmt):
            line = ast.get_source_segment(source, stmt) or ""
            line = line.strip().splitlines()[0] if line.strip() else type(stmt).__name__
            notes.append(f"{label} line {stmt.lineno}: `{line[:80]}` (top-level code: the judge runs only "
                         "imports, functions, classes and constants)")
    code = []
    for stmt in kept:
        try:
            code.append((compile(ast.Module(body=[stmt], type_ignores=[]), label, "exec"), stmt.lineno))
        except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
            notes.append(f"{label} line {stmt.lineno}: cannot compile ({exc.__class__.__name__})")
    return code, notes


# --------------------------------------------------------------------------- the harness
def _protect_parent() -> None:
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(4, 0, 0, 0, 0)   # PR_SET_DUMPABLE 0: no /proc/<pid>/mem, no ptrace from children
        libc.prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG: die with the grader
    except Exception:  # noqa: BLE001 - best effort (non-Linux)
        pass


def _run_trusted(cells: list[dict], names: dict) -> list[str]:
    """The parameters and setup cells (from the release, trusted) run fully in the parent."""
    notes = []
    for cell in cells:
        if cell["role"] == "parameters":
            names["PRESET"] = "smoke"
        elif cell["role"] == "setup":
            try:
                exec(compile(_strip_magics(cell["source"]), cell["id"], "exec"), names)  # noqa: S102
            except Exception as exc:  # noqa: BLE001
                notes.append(f"setup cell failed: {exc.__class__.__name__}: {exc}")
    return notes


def _prepare_variant(cells: list[dict]) -> tuple[list, list[str], list[str]]:
    """(compiled definitions in notebook order, notes about answer cells, notes about given cells)."""
    compiled, answer_notes, given_notes = [], [], []
    for cell in cells:
        if cell["role"] not in ("given", "answer"):
            continue
        code, notes = definitions(cell["source"], cell["id"])
        compiled += code
        if cell["role"] == "answer":
            answer_notes.extend(notes)
        else:  # the release's own cells: only a failure to parse is worth saying
            given_notes.extend(n for n in notes if "top-level code" not in n)
    return compiled, answer_notes, given_notes


def _child(compiled, names: dict, probe_list, seed: int, write_fd: int, out_fd: int) -> None:
    """In the forked child: load definitions, run the probes, send back the encoded values."""
    try:
        os.close(out_fd)
        os.setpgid(0, 0)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        import random

        import numpy as np
        import torch

        problems = []
        for code, line in compiled:
            try:
                exec(code, names)  # noqa: S102 - this is the point: the student's definitions, here only
            except BaseException as exc:  # noqa: BLE001
                problems.append(f"{code.co_filename} line {line}: {exc.__class__.__name__}: {str(exc)[:160]}")
        ns = Namespace(names, problems)
        results = []
        for probe in probe_list:
            cs = case_seed(seed, probe.name)
            torch.manual_seed(cs)
            np.random.seed(cs)
            random.seed(cs)
            gen = torch.Generator().manual_seed(cs)
            started = time.monotonic()
            try:
                value = probe.fn(ns, gen)
            except BaseException as exc:  # noqa: BLE001 - SystemExit and KeyboardInterrupt are evidence too
                value = raised(exc)
            results.append({"case": probe.name, "value": encode(value), "seconds": round(time.monotonic() - started, 3),
                             "problems": problems[:5]})
        data = json.dumps(results, allow_nan=True).encode()
        view = memoryview(data)
        while view:
            n = os.write(write_fd, view[:65536])
            view = view[n:]
    finally:
        os._exit(0)


def _read_child(pid: int, read_fd: int, timeout: float, limit: int) -> tuple[str, bytes]:
    """Collect one child's output; kill it (and its group) past ``timeout``. Returns (status, bytes).
    Reading stops when the child has exited and the pipe is drained, even if grandchildren it left
    behind still hold the pipe open."""
    deadline = time.monotonic() + timeout
    chunks, size, status, exited = [], 0, "ok", False
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            status = "timeout"
            break
        ready, _, _ = select.select([read_fd], [], [], 0.0 if exited else min(left, 0.2))
        if ready:
            chunk = os.read(read_fd, 1 << 16)
            if not chunk:
                break
            size += len(chunk)
            if size > limit:
                status = "bad-evidence"
                break
            chunks.append(chunk)
            continue
        if exited:
            break
        done, _ = os.waitpid(pid, os.WNOHANG)
        exited = done == pid
    os.close(read_fd)
    for target in (-pid, pid):  # the case's process group: whatever it started dies with it
        try:
            os.kill(target, signal.SIGKILL)
        except OSError:
            pass
    if not exited:
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass
    if status == "ok" and not chunks:
        status = "died"
    return status, b"".join(chunks)


def run_plan(plan: dict, emit) -> None:
    """Run every (variant, case); ``emit(record)`` receives each JSON record as it is ready."""
    stem = plan["stem"]
    seeds = [int(x) for x in plan.get("seeds", [plan.get("seed", 0)])]
    isolate = plan.get("isolate", "case")
    registry = load_probes(stem)
    variants: dict = plan["variants"]
    os.environ["NBGRADER_EXECUTION"] = os.environ.get("NBGRADER_EXECUTION", "autograde")
    os.environ.setdefault("LAS_PRESET", "smoke")
    names: dict = {"__name__": "__main__", "__builtins__": __builtins__}
    first = next(iter(variants.values()), [])
    setup_notes = _run_trusted(first, names)
    threads = int(os.environ.get("OMP_NUM_THREADS", "1") or 1)
    try:
        import torch

        torch.set_num_threads(max(1, threads))
    except Exception:  # noqa: BLE001
        pass
    out_fd = plan.get("_out_fd", 1)
    prepared = {variant: _prepare_variant(cells) for variant, cells in variants.items()}
    for seed, (variant, cells) in ((sd, vc) for sd in seeds for vc in variants.items()):
        compiled, answer_notes, given_notes = prepared[variant]
        wanted = plan.get("cases", {}).get(variant) or list(registry)
        unknown = [c for c in wanted if c not in registry]
        emit({"kind": "header", "variant": variant, "seed": seed, "dropped": answer_notes[:50],
              "given_problems": given_notes[:20] + setup_notes, "unknown": unknown})
        groups = [[registry[c]] for c in wanted if c in registry] if isolate == "case" else \
                 [[registry[c] for c in wanted if c in registry]]
        for group in groups:
            if not group:
                continue
            read_fd, write_fd = os.pipe()
            started = time.monotonic()
            pid = os.fork()
            if pid == 0:
                os.close(read_fd)
                _child(compiled, names, group, seed, write_fd, out_fd)
            os.close(write_fd)
            cap = float(plan.get("case_timeout") or 0) or None
            timeout = sum(min(p.timeout, cap) if cap else p.timeout for p in group)
            status, data = _read_child(pid, read_fd, timeout, MAX_CASE_BYTES * len(group) + (1 << 20))
            results = {}
            if status == "ok":
                try:
                    parsed = json.loads(data)
                    results = {r["case"]: r for r in parsed if isinstance(r, dict) and isinstance(r.get("case"), str)}
                except (ValueError, TypeError, RecursionError, KeyError):
                    status = "bad-evidence"
            elapsed = round(time.monotonic() - started, 3)
            for p in group:
                rec = results.get(p.name)
                record = {"kind": "case", "variant": variant, "seed": seed, "case": p.name}
                if rec is not None and "value" in rec:
                    record.update(status="ok", value=rec["value"], seconds=rec.get("seconds"),
                                  problems=[str(x)[:300] for x in (rec.get("problems") or [])[:5]])
                else:
                    record.update(status=status if status != "ok" else "died", seconds=elapsed,
                                  timeout=min(p.timeout, cap) if cap else p.timeout)
                emit(record)
    emit({"kind": "done"})


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    _protect_parent()
    out_fd = os.dup(1)   # the evidence channel; every child closes it
    os.dup2(2, 1)        # anything printed (by setup code) goes to stderr
    try:
        from .kernel import apply_limits

        apply_limits()
    except Exception as exc:  # noqa: BLE001
        print(f"grader.probe: could not apply limits: {exc}", file=sys.stderr)
    with open(argv[0], encoding="utf-8") as f:
        plan = json.load(f)
    plan["_out_fd"] = out_fd

    counter = iter(range(1 << 62))

    def emit(record: dict) -> None:
        # Every record carries its place in the stream: the judge accepts only 0, 1, 2, ... in order,
        # each once, ending with one "done" and a clean exit, so a record forged into the channel
        # (or a harness killed half-way) voids the run instead of scoring.
        record["seq"] = next(counter)
        data = (json.dumps(record, allow_nan=True) + "\n").encode()
        view = memoryview(data)
        while view:
            n = os.write(out_fd, view)
            view = view[n:]

    run_plan(plan, emit)


if __name__ == "__main__":
    main()
