"""Every requirement the task text states has a visible check: a green visible test must
not be followed by lost points.

The judge's cases (grader/checks/<stem>.py, each with its ``says``) are the stated requirements of the
graded functions, grouped by function in the checks module's ``FUNCTIONS``. For each case a mutant of
grader/mutants/<stem>.py with ``visible=True`` and ``case=<that probe>`` breaks it, and the release's
visible test cell must FAIL on the student copy with that mutant; ``WITHOUT_MUTANT`` below lists the
cases the visible test checks although no mistake inside an answer can break them, and why. The same
test cells must PASS on the solution's answers and on every honest variant
(tests/fixtures/honest/<stem>.py, correct answers in other styles), so a visible check never asks for
more than the text states.

The harness does not execute whole notebooks per variant. One worker process per notebook (this file
run as a script) loads what the grader loads (utils/answer_loader.py): the parameters cell with
``PRESET = "smoke"``, the setup cell, the definitions of the given cells and, in full, the locked given
cells whose values a test cell reads (Task 2's models, the bonus's data), and the solution's answer
cells, in notebook order. At each test cell it forks one process per variant from that state; the
child replaces the answer cell by the variant's and runs the release's test cell. About a minute on
two cores for the five notebooks.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
if str(REPO / "tests") not in sys.path:
    sys.path.insert(0, str(REPO / "tests"))

STEMS = sorted(p.stem for p in (REPO / "solutions" / "ex01").glob("*.ipynb"))
CHILD_SECONDS = 60           # one variant's answer cell and test cell
MARKER = "@@visible-checks@@"

# Judge cases that the visible test checks although no mistake inside the answer can break them, and why (the key
# is "<stem>:<probe>"). Every other case needs a visible mutant; a case without any visible check would need a reason
# here too, and there is none today.
WITHOUT_MUTANT: dict[str, str] = {
    "taskA_simclr:head_defaults": "the defaults hidden_dim=1024, out_dim=128 are given code (the signature, outside the "
                                  "solution block): no answer changes them; the visible test checks ProjectionHead(512)",
    # parts given inside the answer cells (the core's size, and points for ideas): no mistake in the
    # student's part (the standardisation, the accuracy; the pure fit) can break them
    "taskA_simclr:probe_rejects": "the shape checks of linear_probe_accuracy are given code",
    "taskA_simclr:probe_deterministic": "the probe's seeded shuffle is given code",
    "taskA_simclr:probe_test_set_unused": "the probe's training loop (on x_train only) is given code",
    "taskB_pythia_scaling:fit_irreducible": "fit_power_law's irreducible=True branch is given code",
    "taskB_pythia_scaling:fit_rejects_bad_input": "fit_power_law's input checks are given code",
    "taskB_pythia_scaling:tokens_seen_rejects_negative": "tokens_seen's input checks are given code",
    "taskB_pythia_scaling:predict_rejects_bad_split": "predict_held_out's check of n_fit is given code",
    "taskB_pythia_scaling:optimal_rejects_bad_budget": "compute_optimal's check of the budget is given code",
    "task1_infonce:info_nce_rejects_1d": "info_nce_loss's input check is given code",
    "task1_infonce:nce_rejects_no_negative": "nce_loss's input check is given code",
    "task1_infonce:cosine_rejects_batch_mismatch": "cosine_scores's input checks are given code",
    "task1_infonce:cosine_rejects_bad_temperature": "cosine_scores's input checks are given code",
    "task1_infonce:gaussian_mi_rejects_rho_one": "gaussian_mutual_information's input check is given code",
    "task1_infonce:mi_bound_rejects_per_sample": "infonce_mi_lower_bound's input check is given code",
    "taskA_simclr:nt_xent_rejects_shapes": "nt_xent_loss's shape check is given code",
    "taskA_simclr:nt_xent_rejects_temperature": "nt_xent_loss's temperature check is given code",
    "taskA_simclr:knn_rejects_k": "knn_accuracy's check of k is given code",
}


def cases_of(mutant) -> list[str]:
    """The judge cases (probes) a mutant names: ``case`` holds one, or several separated by commas (a mistake
    in a function that a given function builds on shows in that function's test cell too)."""
    return [c.strip() for c in mutant.case.split(",") if c.strip()]


# =============================================================================== the worker (a subprocess)
def _meta(cell: dict) -> dict:
    return (cell.get("metadata") or {}).get("nbgrader") or {}


def _source(cell: dict) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else str(src)


def _loaded_names(source: str) -> set[str]:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def _run_cell(source: str, label: str, names: dict) -> list[str]:
    """Every top-level statement of a student's cell, as the grader loads it; what it could not run."""
    from utils.answer_loader import run_statement, statements

    stmts, problem = statements(source, label)
    problems = [problem] if problem else []
    for stmt in stmts:
        why = run_statement(stmt, names, 30.0)
        if why:
            problems.append(f"{stmt.where()} {why}")
    return problems


def _child(names: dict, variant: dict, test_source: str, test_id: str, write_fd: int) -> None:
    """In a forked process: the variant's answer cell(s), then the test cell; one JSON record back."""
    import signal

    result = {"passed": False, "error": "", "seconds": 0.0, "cpu_seconds": 0.0}
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        signal.alarm(CHILD_SECONDS)
        import torch

        torch.set_num_threads(1)
        started, started_cpu = time.perf_counter(), time.process_time()
        for name in variant["unbind"]:
            names.pop(name, None)
        notes = []
        for i, src in enumerate(variant["cells"]):
            notes += _run_cell(src, f"{variant['cell']}#{i}", names)
        result["not_run"] = notes
        signal.alarm(CHILD_SECONDS)   # again: the loader's per-statement timer above replaced it
        try:
            exec(compile(test_source, test_id, "exec"), names)  # noqa: S102 - the release's test cell
            result["passed"] = True
        except BaseException as exc:  # noqa: BLE001 - a failing test is the evidence
            message = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            result["error"] = f"{exc.__class__.__name__}: {message}"[:400]
        result["seconds"] = round(time.perf_counter() - started, 3)
        # the budget is CPU time: wall time on a shared CI machine measures the neighbours too (one thread here)
        result["cpu_seconds"] = round(time.process_time() - started_cpu, 3)
    finally:
        os.write(write_fd, json.dumps(result).encode())
        os._exit(0)


def _fork_run(names: dict, variant: dict, test_source: str, test_id: str) -> dict:
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        _child(names, variant, test_source, test_id, write_fd)
    os.close(write_fd)
    chunks = []
    while True:
        chunk = os.read(read_fd, 1 << 16)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(read_fd)
    _, status = os.waitpid(pid, 0)
    try:
        return json.loads(b"".join(chunks))
    except ValueError:
        return {"passed": False, "died": True, "error": f"the process died (wait status {status})", "seconds": 0.0,
                "cpu_seconds": 0.0}


def worker(stem: str) -> dict:
    """Load ``stem`` once as the grader does and run its visible test cells on every variant."""
    os.environ.update(LAS_PRESET="smoke", NBGRADER_EXECUTION="autograde", MPLBACKEND="Agg")
    from fixtures import honest
    from grader.judge import load_cases
    from grader.mutants import load as load_mutants, student_copy
    from utils.answer_loader import cell_role, run_definitions, statements, strip_magics

    release = json.loads((REPO / "notebooks" / "ex01" / f"{stem}.ipynb").read_text(encoding="utf-8"))
    solution = json.loads((REPO / "solutions" / "ex01" / f"{stem}.ipynb").read_text(encoding="utf-8"))
    base = student_copy(release, solution)
    answers = {_meta(c)["grade_id"]: _source(c) for c in base["cells"] if cell_role(c) == "answer"}
    mutants = [m for m in load_mutants(stem) if m.visible]
    cell_of = {c.probe: c.cell for c in load_cases(stem)}
    honest_entries = honest.load(stem) if stem in honest.stems() else []
    tests = [c for c in base["cells"] if cell_role(c) == "test"]
    needed = set().union(*(_loaded_names(_source(c)) for c in tests)) if tests else set()

    started = time.perf_counter()
    names: dict = {"__name__": "__main__"}
    results, load_seconds = [], 0.0
    for i, cell in enumerate(base["cells"]):
        if cell.get("cell_type") != "code":
            continue
        role, src, gid = cell_role(cell), strip_magics(_source(cell))[0], _meta(cell).get("grade_id") or f"cell {i}"
        if role == "parameters":
            exec(compile(src, gid, "exec"), names)  # noqa: S102
            names["PRESET"] = "smoke"
        elif role == "setup":
            exec(compile(src, gid, "exec"), names)  # noqa: S102
        elif role == "given":
            stmts, _ = statements(src, gid)
            binds = {b for s in stmts for b in s.binds}
            if _meta(cell).get("locked") and binds & needed:
                exec(compile(src, gid, "exec"), names)  # noqa: S102 - the course's code, in full
            else:
                run_definitions(src, gid, names)
        elif role == "answer":
            exec(compile(src, gid, "exec"), names)  # noqa: S102 - the solution's answer
        elif role == "test":
            if not load_seconds:
                load_seconds = time.perf_counter() - started
            cell_id = gid[len("test_"):] if gid.startswith("test_") else None
            answer = answers.get(cell_id)
            unbind = sorted({b for s in statements(answer, cell_id)[0] for b in s.binds}) if answer else []
            variants = [{"kind": "solution", "name": "the solution's answer", "cell": cell_id,
                         "cells": [answer] if answer else [], "unbind": unbind}]
            for m in mutants:   # every mutant that names a case of this test cell
                if any(cell_of.get(p) == gid for p in cases_of(m)):
                    copy_nb = student_copy(release, solution, m)
                    src_m = next(_source(c) for c in copy_nb["cells"] if _meta(c).get("grade_id") == m.cell)
                    bound = sorted({b for s in statements(answers[m.cell], m.cell)[0] for b in s.binds})
                    variants.append({"kind": "mutant", "name": m.name, "case": m.case, "cell": m.cell,
                                     "cells": [src_m], "unbind": bound})
            for h in honest_entries:
                if h.cell == cell_id:
                    variants.append({"kind": "honest", "name": h.name, "cell": cell_id,
                                     "cells": [*h.before, h.source, *h.after], "unbind": unbind})
            for k, v in enumerate(variants):
                rec = _fork_run(names, v, src, gid)
                rec.update(test=gid, kind=v["kind"], name=v["name"], case=v.get("case", ""), cell=v["cell"])
                results.append(rec)
                if k == 0 and rec["passed"]:
                    # then the test cell runs here too, as in the notebook: what it loads or initialises on first
                    # use (torch.distributions, scipy, a tokenizer) is then ready in every forked variant
                    try:
                        exec(compile(src, gid, "exec"), names)  # noqa: S102
                    except BaseException:  # noqa: BLE001 - the forked run above already reported the solution
                        pass
    return {"stem": stem, "load_seconds": round(load_seconds, 2),
            "seconds": round(time.perf_counter() - started, 2), "results": results}


def run_worker(stem: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "LC_ALL", "TZ", "LAS_BUILD_DIR")}
    env.update(PYTHONPATH=f"{REPO}{os.pathsep}{REPO / 'tests'}", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1",
               PYTHONHASHSEED="0", MPLBACKEND="Agg")
    proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), stem], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=900)
    out = proc.stdout.split(MARKER)
    if proc.returncode != 0 or len(out) < 2:
        raise RuntimeError(f"the visible-check worker for {stem} failed ({proc.returncode}):\n"
                           f"{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    return json.loads(out[-1])


# =============================================================================== the requirements
def requirements(stem: str) -> dict[str, list[tuple[str, str]]]:
    """function -> [(probe, says)]: the judge's cases of each graded function, in the checks' order."""
    import importlib

    module = importlib.import_module(f"grader.checks.{stem}")
    says: dict[str, list[str]] = {}
    for case in module.CASES:
        says.setdefault(case.probe, []).append(case.says)
    return {fn: [(p, "; ".join(says[p])) for p in probes] for fn, probes in module.FUNCTIONS.items()}


def coverage(stem: str) -> dict[str, list[tuple[str, str, list[str]]]]:
    """function -> [(probe, says, names of the visible mutants that break it)]."""
    from grader.mutants import load

    by_case: dict[str, list[str]] = {}
    for m in load(stem):
        if m.visible:
            for probe in cases_of(m):
                by_case.setdefault(probe, []).append(m.name)
    return {fn: [(p, s, by_case.get(p, [])) for p, s in reqs] for fn, reqs in requirements(stem).items()}


def report_lines() -> list[str]:
    lines = []
    for stem in STEMS:
        for fn, reqs in coverage(stem).items():
            covered = sum(1 for p, _, names in reqs if names or f"{stem}:{p}" in WITHOUT_MUTANT)
            lines.append(f"{stem}: {fn}: {covered} of {len(reqs)} stated requirements checked visibly")
            for p, says, names in reqs:
                if not names:
                    why = WITHOUT_MUTANT.get(f"{stem}:{p}")
                    lines.append(f"    {p} ({says}): " + (f"checked visibly, no mutant: {why}" if why else
                                                           "NOT CHECKED VISIBLY (no visible mutant, no reason given)"))
    return lines


@pytest.mark.parametrize("stem", STEMS)
def test_visible_mutants_name_a_requirement_of_their_function(stem):
    """A visible mutant names the judge case(s) it breaks: cases of the function it mutates (or of a given function
    built on it, like Task A's augment_batch), the first one a case of its own test cell."""
    import importlib

    from grader.mutants import SOLUTIONS, answer_cells, function_at, graded_functions, load

    module = importlib.import_module(f"grader.checks.{stem}")
    function_of = {p: fn for fn, probes in module.FUNCTIONS.items() for p in probes}
    cell_of = {c.probe: c.cell for c in module.CASES}
    cells = answer_cells(json.loads((SOLUTIONS / f"{stem}.ipynb").read_text(encoding="utf-8")))
    written = {fn for src in cells.values() for fn in graded_functions(src)} | set(cells)
    problems = []
    for m in load(stem):
        cases = cases_of(m)
        if m.visible and not cases:
            problems.append(f"{m.name!r}: visible=True needs the case it breaks")
        for probe in cases:
            if probe not in function_of:
                problems.append(f"{m.name!r}: case {probe!r} is not a probe of grader/checks/{stem}.py")
                continue
            fn = function_at(cells[m.cell], cells[m.cell].index(m.find)) or m.cell
            owner = function_of[probe]
            if owner != fn and owner in written and fn in module.FUNCTIONS:
                problems.append(f"{m.name!r} mutates {fn} but names {probe!r}, a case of {owner}")
        if cases and cases[0] in cell_of and cell_of[cases[0]] != f"test_{m.cell}":
            problems.append(f"{m.name!r}: its first case {cases[0]!r} is not a case of test_{m.cell}")
    assert not problems, "\n".join(problems)


def test_every_stated_requirement_has_a_visible_check():
    """Every judge case of every graded function is broken by a visible mutant, or WITHOUT_MUTANT says why none
    can; prints per function how many stated requirements the visible test cells check."""
    lines = report_lines()
    print("\n".join(lines))
    out = REPO / "build" / "test-output"
    out.mkdir(parents=True, exist_ok=True)
    (out / "visible_checks.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    missing = [line.strip() for line in lines if "NOT CHECKED VISIBLY" in line]
    assert not missing, "stated requirements without a visible check:\n" + "\n".join(missing)


@pytest.fixture(scope="module")
def worker_results():
    order = sorted(STEMS, key=lambda s: s not in ("task2_pseudo_likelihood", "taskA_simclr"))
    with ThreadPoolExecutor(2) as pool:
        return dict(zip(order, pool.map(run_worker, order)))


@pytest.mark.slow
@pytest.mark.parametrize("stem", STEMS)
def test_visible_tests_pass_on_the_solution_and_honest_answers_and_fail_on_visible_mutants(stem, worker_results):
    report = worker_results[stem]
    rows = report["results"]
    print(f"{stem}: loaded in {report['load_seconds']} s, {len(rows)} test-cell runs in {report['seconds']} s")
    slow = sorted((r["cpu_seconds"], r["seconds"], r["test"]) for r in rows if r["kind"] == "solution")[-3:]
    print(f"  slowest test cells on the solution (CPU s, wall s): {slow}")
    problems = []
    for r in rows:
        where = f"{r['test']} with {r['kind']} {r['name']!r}"
        if r["kind"] in ("solution", "honest") and not r["passed"]:
            problems.append(f"{where} fails: {r['error']}" + (f" (not run: {r['not_run']})" if r.get("not_run") else ""))
        if r["kind"] == "mutant" and (r["passed"] or r.get("died")):
            problems.append(f"{where} ({r['case']}) passes the visible test" if r["passed"] else f"{where}: {r['error']}")
        if r["kind"] == "solution" and r["cpu_seconds"] > 2.0:
            problems.append(f"{r['test']} takes {r['cpu_seconds']} CPU-s on the solution (keep it under 2 s)")
    from grader.mutants import load

    tested = {(r["cell"], r["name"]) for r in rows if r["kind"] == "mutant"}
    for m in load(stem):
        if m.visible and (m.cell, m.name) not in tested:
            problems.append(f"visible mutant {m.name!r} of {m.cell} has no test cell test_{m.cell} to run")
    assert not problems, "\n".join(problems)


if __name__ == "__main__":
    import torch

    torch.set_num_threads(1)
    summary = worker(sys.argv[1])
    sys.stdout.write("\n" + MARKER + json.dumps(summary) + "\n")
    sys.stdout.flush()
