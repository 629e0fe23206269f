"""The probe harness: runs inside the grading sandbox and only collects evidence.

``python -m grader.probe -`` reads a plan written by the judge (grader/judge.py) on stdin:

    {"stem": "task1_infonce", "isolate": "case",
     "runs": [{"label": 0, "case_seeds": {"info_nce_uniform": 81234, ...}}],
     "variants": {"alice": [{"id": "setup", "role": "setup", "source": "..."}, ...]},
     "cases": {"alice": ["info_nce_uniform", ...]},          # optional: default every probe
     "groups": {"info_nce_uniform": "test_info_nce_loss", ...},
     "case_timeout": 20, "budget": 120, "load_seconds": 60, "statement_seconds": 30}

and writes JSON lines to the file descriptor it was started with as stdout: per (run, variant) a
header (the statements it could not run, with cell, line, text, the names they bind and why) and one
``{"kind": "case", ..., "status": "ok" | "timeout" | "died" | "bad-evidence" | "budget", "value": ...}``
per case, then ``{"kind": "done"}``.

What the judge runs is what the student ran:

* The harness process (the parent) never runs student code. It runs the release's parameters and
  setup cells and the definitions of its given cells (course code), then forks a **loader** that runs
  every top-level statement of the student's cells in notebook order, once, each under a time limit
  (utils/answer_loader.py, the same code the student's ``./pack.sh validate`` uses). From that loaded
  state the loader forks one process per case, which runs one probe and sends back one encoded value.
* The parent supervises: a statement that hangs past its limit or ends the loader is skipped by a
  fresh loader (and reported), a case that hangs costs that case, the whole (run, variant) has a
  budget, and a record out of protocol voids the rest. The evidence channel (the parent's stdout) is
  closed in every process that runs student code; records the loader relays are only values the
  student's code produced, which the judge compares outside the sandbox.
* It holds no reference implementation and never the batch's seed: the probes in
  ``grader/probes/<stem>.py`` only build inputs from the per-case seed the judge derived.
* The parent is not dumpable (``PR_SET_DUMPABLE 0``), so no child can read or write its memory
  through /proc; inside bubblewrap it is pid 1 and kills everything left after each loader.
"""

from __future__ import annotations

import ast
import contextlib
import hashlib
import importlib
import json
import os
import random
import signal
import sys
import time
import types
from pathlib import Path

from utils.answer_loader import (describe, explain_name_error, not_run_entry, run_definitions, run_statement,
                                 statements, strip_magics)
from .evidence import MAX_CASE_BYTES, encode, raised
from .process import (RecordReader, close_inherited, default_signals, kill_process, read_child, send_record,
                      serve, single_thread)


# --------------------------------------------------------------------------- the notebook's names
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
        because = explain_name_error(f"name '{item}' is not defined", notes)
        hint = next((f" ({n['why']})" for n in notes if isinstance(n, dict) and n.get("kind") == "syntax"), "")
        raise NameError(because or f"{item} is not defined: keep the name and signature the task gives{hint}")


def case_seed(seed: int, case: str) -> int:
    """A per-case seed: the same case sees the same inputs under the same batch seed. A one-way hash,
    so the case seeds a sandbox receives (or a page shows) do not give back the batch seed, and with it
    the inputs of every other case and notebook."""
    digest = hashlib.sha256(f"las-case-seed\0{int(seed)}\0{case}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % (2 ** 31 - 1)


def probe_source(stem: str) -> str:
    """The text of ``grader/probes/<stem>.py``: the sandbox gets it in the sealed part of a plan, never
    as a file the full run could read."""
    return (Path(__file__).parent / "probes" / f"{stem}.py").read_text(encoding="utf-8")


def load_probes(stem: str, source: str | None = None) -> dict:
    """The probes of notebook ``stem``: from ``source`` (the text a plan brought) or, outside the sandbox,
    from grader/probes/<stem>.py."""
    if source is None:
        return dict(importlib.import_module(f"grader.probes.{stem}").PROBES)
    module = types.ModuleType(f"grader.probes.{stem}")
    sys.modules[module.__name__] = module   # dataclasses and pickling look a module up by name
    exec(compile(source, f"grader/probes/{stem}.py", "exec"), module.__dict__)  # noqa: S102 - the course's probes
    return dict(module.PROBES)


# --------------------------------------------------------------------------- the harness
_loads, _fork = json.loads, os.fork   # taken before any student code runs in a forked process
MAX_ATTEMPTS = 6        # loader processes per (run, variant): the first, and restarts after a statement or case hung
GRACE = 3.0             # seconds the harness waits past a limit before it kills the loader itself
FAST_FAIL = 5.0         # after a case of a test cell timed out, its other cases get this long


def run_trusted(cells: list[dict], names: dict) -> list[str]:
    """The release's parameters and setup cells in full, and its given cells' definitions: course
    code, run once in the parent before any student code."""
    notes = []
    for cell in cells:
        if cell["role"] == "parameters":
            names["PRESET"] = "smoke"
        elif cell["role"] == "setup":
            try:
                exec(compile(strip_magics(cell["source"])[0], cell["id"], "exec"), names)  # noqa: S102
            except Exception as exc:  # noqa: BLE001
                notes.append(f"setup cell failed: {exc.__class__.__name__}: {exc}")
        elif cell["role"] == "given":
            notes += run_definitions(cell["source"], cell["id"], names)
    return notes


def _run_probe(probe, names: dict, not_run: list, seed: int):
    """Seed torch, NumPy and ``random`` with the case's seed and run the probe on the loaded notebook;
    its value, or the Raised record of what it raised."""
    torch, np = sys.modules["torch"], sys.modules["numpy"]   # loaded with the probes (grader/probes/__init__.py)
    torch.manual_seed(seed)
    np.random.seed(seed % (2 ** 32))
    random.seed(seed)
    try:
        return probe.fn(Namespace(names, not_run), torch.Generator().manual_seed(seed))
    except BaseException as exc:  # noqa: BLE001 - SystemExit and KeyboardInterrupt are evidence too
        return raised(exc)


def _case_child(probe, names: dict, not_run: list, seed: int, write_fd: int) -> None:
    """In a forked case process: run one probe on the loaded notebook, send back the encoded value."""
    try:
        single_thread()
        started = time.monotonic()
        value = _run_probe(probe, names, not_run, seed)
        send_record(write_fd, {"case": probe.name, "value": encode(value), "seconds": round(time.monotonic() - started, 3)})
    finally:
        os._exit(0)


def _loader(cells: list[dict], names: dict, cases: list, seeds: dict, timeouts: dict, groups: dict, skip: dict,
            load_seconds: float, statement_seconds: float, isolate: str, send_fd: int, given: dict) -> None:
    """The loader process: runs every top-level statement of the student's cells once (skipping those
    that hung or killed an earlier loader), puts back the course's ``given`` functions and classes a
    student's cell redefined (each such statement is named), then probes the cases, each in a process forked
    from the loaded state (``isolate == "case"``) or all here (``"variant"``: our own notebooks, in sweeps)."""
    try:
        close_inherited()
        os.setpgid(0, 0)
        default_signals()
        devnull = os.open(os.devnull, os.O_RDWR)
        os.dup2(devnull, 0)
        os.dup2(devnull, 1)
        for stream in (sys.stdout, sys.stderr):   # printing a lone surrogate is not a failing statement
            with contextlib.suppress(AttributeError, ValueError, OSError):
                stream.reconfigure(errors="backslashreplace")
        single_thread()
        stmts, not_run = [], []
        for cell in cells:
            found, problem = statements(cell["source"], cell["id"])
            if problem:
                not_run.append({"cell": cell["id"], "line": 1, "text": "", "binds": [], "why": problem,
                                "kind": "syntax"})
            stmts += found
        started = time.monotonic()
        for i, stmt in enumerate(stmts):
            if i in skip:
                not_run.append(skip[i])
                continue
            left = load_seconds - (time.monotonic() - started)
            limit = min(statement_seconds, left)
            if left <= 0:
                if not stmt.definition:
                    not_run.append(not_run_entry(stmt, "was not run: the top-level code before it used up the "
                                                 f"grader's {load_seconds:g} s for loading a notebook", "budget"))
                    continue
                limit = 2.0
            send_record(send_fd, {"k": "stmt", "i": i, "entry": not_run_entry(stmt, "", "")})
            why = run_statement(stmt, names, limit)
            if why:
                not_run.append(not_run_entry(stmt, why, "timeout" if "time limit" in why else "error"))
            for name in set(stmt.binds) & set(given):
                not_run.append(not_run_entry(stmt, f"redefines `{name}`, which the course gives: the grader used "
                                             f"the course's `{name}`", "given"))
        for name, value in given.items():   # the course's given code, whatever a cell above or below it did
            names[name] = value
        signal.signal(signal.SIGALRM, signal.SIG_DFL)
        send_record(send_fd, {"k": "loaded", "not_run": not_run[:200], "seconds": round(time.monotonic() - started, 3)})
        slow_groups = set()
        for probe in cases:
            slow = groups.get(probe.name) in slow_groups   # another case of its test cell timed out
            timeout = min(timeouts[probe.name], FAST_FAIL) if slow else timeouts[probe.name]
            send_record(send_fd, {"k": "case_start", "case": probe.name})
            if isolate == "variant":
                value = _run_probe(probe, names, not_run, seeds[probe.name])
                send_record(send_fd, {"k": "case", "case": probe.name, "status": "ok", "value": encode(value)})
                continue
            read_fd, write_fd = os.pipe()
            started_case = time.monotonic()
            pid = _fork()
            if pid == 0:
                os.close(read_fd)
                os.close(send_fd)
                _case_child(probe, names, not_run, seeds[probe.name], write_fd)
            os.close(write_fd)
            status, data = read_child(pid, read_fd, timeout, MAX_CASE_BYTES + (1 << 20))
            record = {"k": "case", "case": probe.name, "status": status, "timeout": timeout,
                      "seconds": round(time.monotonic() - started_case, 3)}
            if status == "ok":
                try:
                    parsed = _loads(data)
                    record.update(value=parsed["value"], seconds=parsed.get("seconds"))
                except (ValueError, TypeError, KeyError, RecursionError):
                    record["status"] = "bad-evidence"
            if status == "timeout":
                slow_groups.add(groups.get(probe.name))
            send_record(send_fd, record)
        send_record(send_fd, {"k": "end"})
    finally:
        os._exit(0)


def run_variant(cells: list[dict], names: dict, cases: list, seeds: dict, *, case_timeout: float | None,
                groups: dict, budget: float, load_seconds: float, statement_seconds: float,
                isolate: str, given: dict | None = None) -> tuple[dict, dict]:
    """Load one notebook's student cells and probe ``cases`` (see :func:`_loader`), in loader processes
    this (trusted) process supervises: a statement or case that hangs or ends its process costs that
    statement or case, and a fresh loader goes on without it. Returns ({case: record}, info)."""
    skip, results = {}, {}
    pending = list(cases)
    info = {"not_run": [], "load_seconds": 0.0, "tampered": "", "restarts": 0}
    timeouts = {p.name: min(p.timeout, case_timeout) if case_timeout else p.timeout for p in cases}
    deadline = time.monotonic() + budget
    load_left = load_seconds
    attempt, outcome = 0, ""
    while pending and attempt < MAX_ATTEMPTS and time.monotonic() < deadline:
        attempt += 1
        read_fd, write_fd = os.pipe()
        pid = _fork()
        if pid == 0:
            os.close(read_fd)
            _loader(cells, names, pending, seeds, timeouts, groups, dict(skip), load_left, statement_seconds,
                    isolate, write_fd, given or {})
        os.close(write_fd)
        lines = RecordReader(read_fd, MAX_CASE_BYTES + (2 << 20))
        phase, current, since = "load", None, time.monotonic()
        load_started = since
        while True:
            if phase == "load":
                until = min(since + statement_seconds + GRACE, load_started + max(load_left, 0) + 2 * GRACE + 2.0)
            elif current is not None:
                until = since + timeouts[current] + GRACE
            else:
                until = time.monotonic() + 30.0
            rec = lines.next(min(until, deadline))
            if isinstance(rec, dict):
                kind = rec.get("k")
                if kind == "stmt" and phase == "load" and isinstance(rec.get("i"), int) \
                        and isinstance(rec.get("entry"), dict):
                    current, since = rec, time.monotonic()
                elif kind == "loaded" and phase == "load" and isinstance(rec.get("not_run"), list):
                    info["not_run"] = [e for e in rec["not_run"] if isinstance(e, dict)][:200]
                    info["load_seconds"] = rec.get("seconds") if isinstance(rec.get("seconds"), (int, float)) else 0.0
                    load_left -= time.monotonic() - load_started
                    phase, current = "cases", None
                elif kind == "case_start" and phase == "cases" and pending and rec.get("case") == pending[0].name \
                        and current is None:
                    current, since = pending[0].name, time.monotonic()
                elif kind == "case" and phase == "cases" and current is not None and rec.get("case") == current:
                    status = rec.get("status") if rec.get("status") in ("ok", "timeout", "died") else "bad-evidence"
                    results[current] = {"status": status, "value": rec.get("value"), "seconds": rec.get("seconds"),
                                        "timeout": timeouts[current]}
                    pending.pop(0)
                    current = None
                elif kind == "end" and phase == "cases" and not pending:
                    outcome = "end"
                else:
                    outcome = "tampered"
                    info["tampered"] = ("the grading process of this notebook received a record it did not expect "
                                        f"({str(kind)[:40]!r}): something in the notebook wrote into the grader's "
                                        "channel")
                if outcome:
                    break
                continue
            # no record: the loader hung, died, or wrote garbage
            if rec == "bad":
                info["tampered"] = "the grading process of this notebook sent malformed records"
                outcome = "tampered"
                break
            if time.monotonic() >= deadline:
                outcome = "budget"
                break
            hung = rec == "timeout"
            if phase == "load":
                if isinstance(current, dict):
                    skip[current["i"]] = {**current["entry"], "kind": "timeout" if hung else "died",
                                          "why": "ran past its time limit and could not be interrupted" if hung else
                                          "ended the grading process (os._exit, a crash or the memory cap)"}
                    load_left -= time.monotonic() - load_started
                else:   # hung or died before its first statement (reading the cells themselves)
                    outcome = "load-failed"
                    info["not_run"] = [{"cell": cells[0]["id"] if cells else "?", "line": 1, "text": "", "binds": [],
                                        "kind": "died", "why": "the grader could not even read your cells "
                                        "(they are too large or too deeply nested); nothing was run"}]
                break
            if current is not None:
                results[current] = {"status": "timeout" if hung else "died", "timeout": timeouts[current],
                                    "seconds": round(time.monotonic() - since, 3)}
                pending.pop(0)
            elif pending:
                results[pending[0].name] = {"status": "died", "timeout": timeouts[pending[0].name]}
                pending.pop(0)
            break
        os.close(read_fd)
        kill_process(pid)
        if outcome:   # "end", "tampered", "budget" or "load-failed": else a fresh loader goes on
            break
        info["restarts"] += 1
    left = ({"status": "died"} if outcome == "load-failed" else {"status": "bad-evidence"} if info["tampered"]
            else {"status": "budget", "budget": budget})
    for probe in pending:
        results[probe.name] = {**left, "timeout": timeouts[probe.name]}
    return results, info


def run_plan(plan: dict, emit) -> None:
    """Run every (run, variant); ``emit(record)`` receives each JSON record as it is ready. ``plan["runs"]``
    brings every case's seed, derived by the judge outside the sandbox: the batch's own seed never enters it."""
    names: dict = fresh_names()
    first = next(iter(plan["variants"].values()), [])
    setup_notes = run_trusted([c for c in first if c["role"] in ("parameters", "setup", "given")], names)
    judge_variants(plan, names, setup_notes, emit)
    emit({"kind": "done"})


def fresh_names() -> dict:
    """An empty ``__main__`` namespace for one notebook, with the grading environment set."""
    os.environ["NBGRADER_EXECUTION"] = os.environ.get("NBGRADER_EXECUTION", "autograde")
    os.environ.setdefault("LAS_PRESET", "smoke")
    return {"__name__": "__main__", "__builtins__": __builtins__}


def given_definitions(cells: list[dict]) -> set[str]:
    """The functions and classes the course's given cells define (top-level ``def`` and ``class``): what a
    student's cell may not replace for the judge."""
    found = set()
    for cell in (c for c in cells if c.get("role") == "given"):
        with contextlib.suppress(SyntaxError):   # a given cell that does not parse defines nothing
            tree = ast.parse(strip_magics(cell["source"])[0])
            found |= {node.name for node in tree.body
                      if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    return found


def judge_variants(plan: dict, names: dict, setup_notes: list, emit) -> None:
    """Every (run, variant) of ``plan`` on the trusted namespace ``names`` (the release's parameters,
    setup and given definitions already run into it): a header and one record per case each."""
    isolate = plan.get("isolate", "case")
    registry = load_probes(plan["stem"], plan.get("probe_source"))
    names.setdefault("display", lambda *args, **kwargs: None)  # IPython's display(), a no-op out of a kernel
    threads = int(os.environ.get("OMP_NUM_THREADS", "1") or 1)
    with contextlib.suppress(Exception):   # a notebook without torch
        sys.modules["torch"].set_num_threads(max(1, threads))
    cap = float(plan.get("case_timeout") or 0) or None
    groups = {k: str(v) for k, v in (plan.get("groups") or {}).items()}
    runs = plan.get("runs") or [  # our own tests and sweeps may name plain seeds
        {"label": sd, "case_seeds": {c: case_seed(sd, c) for c in registry}} for sd in plan.get("seeds", [plan.get("seed", 0)])]
    for run in runs:
        label, seeds = run["label"], {k: int(v) for k, v in run["case_seeds"].items()}
        for variant, cells in plan["variants"].items():
            wanted = plan.get("cases", {}).get(variant) or list(registry)
            unknown = [c for c in wanted if c not in registry or c not in seeds]
            cases = [registry[c] for c in wanted if c in registry and c in seeds]
            student = [c for c in cells if c["role"] == "answer"]
            given = {name: names[name] for name in given_definitions(cells) if name in names}
            results, info = run_variant(
                student, names, cases, seeds, case_timeout=cap, groups=groups,
                budget=float(plan.get("budget") or 1800.0), load_seconds=float(plan.get("load_seconds") or 60.0),
                statement_seconds=float(plan.get("statement_seconds") or 30.0), isolate=isolate, given=given)
            not_run = info["not_run"]
            emit({"kind": "header", "variant": variant, "seed": label, "not_run": not_run,
                  "dropped": [describe(e) for e in not_run if all(k in e for k in ("line", "cell", "text", "why"))],
                  "given_problems": setup_notes[:20], "unknown": unknown, "tampered": info["tampered"],
                  "load_seconds": info["load_seconds"], "restarts": info["restarts"]})
            for probe in cases:
                emit({"kind": "case", "variant": variant, "seed": label, "case": probe.name, **results[probe.name]})


def main(argv: list[str] | None = None) -> None:
    serve(run_plan, "grader.probe", argv)


if __name__ == "__main__":
    main()
