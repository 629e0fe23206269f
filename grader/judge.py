"""The judge: decides every autograded point, in the grader's own process.

The student's code never decides a grade. For one notebook the judge

1. builds the cells the probe harness loads: the release's parameters, setup and given cells (from
   the release, so edits there change nothing) and the student's answer cells (:func:`notebook_cells`);
2. runs the harness (grader/probe.py) on them inside the sandbox, one forked process per case,
   and reads back only encoded values (grader/evidence.py): what each function returned or raised;
3. runs the same harness on the solution, outside the sandbox, once per batch and seed
   (:func:`reference_records`): the reference never enters the sandbox;
4. compares the two with the named cases of ``grader/checks/<stem>.py``, each worth a share of its
   test cell's points (:func:`judge`). Missing or malformed evidence fails its case.

A warning, stderr output or a display value cannot change anything here: they are not evidence.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import json
import os
import re
import sys
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path

from utils.answer_loader import explain_name_error
from utils.notebook_cells import cell_role, cell_source, cell_tags, grade_id, is_graded, is_locked, nbgrader_meta

from . import ROOT
from .course import cache_folder, write_atomic
from .cases import CASE_KINDS, Case, case_kind  # noqa: F401 - re-exported: the case table's leaf module
from .evidence import EvidenceError, Raised, decode
from .process import kill_group, plan_process
from .probe import case_seed, load_probes, probe_source

MAX_RECORD_BYTES = 30 * 1024 ** 2
MAX_TOTAL_BYTES = 400 * 1024 ** 2


# --------------------------------------------------------------------------- the cases
def load_cases(stem: str) -> list[Case]:
    return list(importlib.import_module(f"grader.checks.{stem}").CASES)


def function_of(stem: str) -> dict[str, str]:
    """probe -> the graded function it exercises (``FUNCTIONS`` of grader/checks/<stem>.py); a
    probe the table does not list counts as a function of its own test cell."""
    table = getattr(importlib.import_module(f"grader.checks.{stem}"), "FUNCTIONS", {}) or {}
    out = {probe: fn for fn, probes in table.items() for probe in probes}
    return {c.probe: out.get(c.probe, f"cell {c.cell}") for c in load_cases(stem)}


def main_cases(stem: str) -> dict[str, tuple[str, ...]]:
    """function -> its MAIN value probes (``MAIN`` of grader/checks/<stem>.py): the value cases that say what
    the function computes on ordinary inputs. A function the table gives no main cases falls back to every
    value case of its own (tests/test_judge_gates.py requires the declaration wherever a gate is needed)."""
    declared = getattr(importlib.import_module(f"grader.checks.{stem}"), "MAIN", {}) or {}
    fn = function_of(stem)
    values = list(dict.fromkeys(c.probe for c in load_cases(stem) if case_kind(c) == "value"))
    return {f: tuple(declared.get(f, [p for p in values if fn[p] == f])) for f in fn.values()}


def value_gates(stem: str) -> list[tuple[str, ...]]:
    """For each case of ``load_cases(stem)``, in order, the probes whose VALUE cases must all pass for it
    to score: its ``requires``, and for a case that is not a value case the MAIN value probes of its function
    (:func:`main_cases`). A failed value case costs its own share only. A probe several cases read counts
    as passed when every value case reading it passed."""
    fn, main = function_of(stem), main_cases(stem)
    gates = []
    for c in load_cases(stem):
        needs = list(c.requires)
        if case_kind(c) != "value":
            needs += [v for v in main.get(fn[c.probe], ()) if v not in needs]
        gates.append(tuple(needs))
    return gates


# --------------------------------------------------------------------------- cells to probe
def notebook_cells(release: dict, answers: dict | None) -> list[dict]:
    """The code cells the harness loads: first the release's parameters, setup and given cells
    (trusted: the student's copies of them are ignored), then, in the student's order, every answer
    cell and every cell the student added or left unmarked (a helper in an extra cell is part of the
    answer); never the student's copy of a locked or test cell."""
    cells = [{"id": grade_id(cell) or f"release cell {i}", "role": cell_role(cell), "source": cell_source(cell)}
             for i, cell in enumerate(release["cells"]) if cell_role(cell) in ("parameters", "setup", "given")]
    release_sources = {c["source"].strip() for c in cells}
    locked = {grade_id(c) for c in release["cells"] if is_locked(c) or is_graded(c)} - {None}
    student_cells = answers.get("cells", []) if isinstance(answers, dict) else []
    for i, cell in enumerate(student_cells if isinstance(student_cells, list) else []):
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        gid = grade_id(cell)
        if gid in locked or "parameters" in cell_tags(cell):
            continue
        source = cell_source(cell)
        if not gid and source.strip() in release_sources:
            continue  # the student's unchanged copy of a given cell: the release's already loaded
        cells.append({"id": gid or f"cell {i + 1}", "role": "answer", "source": source})
    return cells


def points_per_test_cell(release: dict) -> dict[str, float]:
    """grade_id -> points of every autograded test cell of the release."""
    return {grade_id(c): float(nbgrader_meta(c).get("points") or 0) for c in release["cells"]
            if cell_role(c) == "test"}


# --------------------------------------------------------------------------- running the harness
def harness_env(threads: int) -> dict:
    kept = ("PATH", "LANG", "LC_ALL", "HOME", "TZ", "LAS_BUILD_DIR", "LAS_DEVICE", "CUDA_VISIBLE_DEVICES")
    return {**{k: v for k, v in os.environ.items() if k in kept},
            "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads),
            "PYTHONDONTWRITEBYTECODE": "1", "PYTHONHASHSEED": "0", "LAS_PRESET": "smoke",
            "NBGRADER_EXECUTION": "autograde", "MPLBACKEND": "Agg"}


def run_harness(plan: dict, *, workdir: Path, command_prefix: list[str] | None = None, env: dict | None = None,
                timeout: float = 900.0, threads: int = 1, preexec_fn=None) -> tuple[list[dict], str]:
    """Run ``python -m grader.probe`` on ``plan`` (optionally wrapped by ``command_prefix``, the
    sandbox) and return (records, the tail of its stderr). Never raises for what the student did:
    a harness that dies or runs past ``timeout`` leaves the cases it did not report missing."""
    workdir.mkdir(parents=True, exist_ok=True)
    if "stem" in plan and "probe_source" not in plan:   # the sandbox holds no probe module of its own
        plan = {**plan, "probe_source": probe_source(plan["stem"])}
    # the plan goes in on stdin: the sandbox sees the per-case seeds it needs, never a file to reread
    cmd = [*(command_prefix or []), sys.executable, "-m", "grader.probe", "-"]
    full_env = harness_env(threads) if env is None else env
    records: list[dict] = []
    with plan_process(cmd, plan, workdir=workdir, env=full_env, timeout=timeout, preexec_fn=preexec_fn) as (proc, run):
        total = 0
        for line in iter(lambda: proc.stdout.readline(MAX_RECORD_BYTES + 1), b""):
            total += len(line)
            if total > MAX_TOTAL_BYTES:
                kill_group(proc)
                break
            if len(line) > MAX_RECORD_BYTES or not line.endswith(b"\n"):
                # an over-long record: skip the rest of it
                while line and not line.endswith(b"\n"):
                    line = proc.stdout.readline(1 << 20)
                continue
            try:
                rec = json.loads(line)
            except (ValueError, RecursionError):
                continue
            if isinstance(rec, dict):
                records.append(rec)
    problem = stream_problem(records, run["returncode"])
    if problem:
        # nothing of a run whose stream was tampered with or cut short is evidence
        records = [{"kind": "void", "problem": problem}]
    return records, run["tail"]


def case_runs(seeds: list[int], stem: str) -> list[dict]:
    """The plan's runs: per seed, a label and every case's own seed (derived here, outside the
    sandbox, so the batch seed never enters it)."""
    names = list(load_probes(stem))
    return [{"label": int(seed), "case_seeds": {c: case_seed(seed, c) for c in names}} for seed in seeds]


def case_groups(stem: str) -> dict[str, str]:
    """probe -> its test cell (a looping function's other cases then fail fast)."""
    return {c.probe: c.cell for c in load_cases(stem)}


def stream_problem(records: list[dict], returncode: int | None) -> str:
    """Why a harness run's records cannot be trusted ('' when they can): records numbered 0, 1, 2 ...
    each exactly once, in order, ending with one "done", from a harness that exited cleanly."""
    for i, rec in enumerate(records):
        if rec.get("seq") != i:
            return f"record {i} is out of sequence (a forged or duplicated record in the evidence channel)"
    if not records or records[-1].get("kind") != "done" or sum(r.get("kind") == "done" for r in records) != 1:
        return "the probe run did not finish (killed, timed out, or its channel was tampered with)"
    if returncode != 0:
        return f"the probe run exited with status {returncode}"
    return ""


def void_problem(records: list[dict]) -> str:
    return next((str(r.get("problem")) for r in records if r.get("kind") == "void"), "")


def by_case(records: list[dict], variant: str, seed: int | None = None) -> tuple[dict[str, dict], dict]:
    """(case name -> record, header) of one variant (and seed, when a run had several)."""
    cases, header = {}, {}
    for rec in records:
        if rec.get("variant") != variant or (seed is not None and rec.get("seed") != seed):
            continue
        if rec.get("kind") == "case" and isinstance(rec.get("case"), str):
            cases.setdefault(rec["case"], rec)
        elif rec.get("kind") == "header":
            header = rec
    return cases, header


_REFERENCE_CACHE: dict[tuple, dict[str, dict]] = {}
_REFERENCE_LOCK = threading.Lock()          # guards _KEY_LOCKS
_KEY_LOCKS: dict[tuple, threading.Lock] = {}   # one per notebook and seed: two notebooks' references run side by side


def code_digest() -> str:
    """A digest of what makes a reference record (the disk cache's key): grader/, utils/ and the torch version."""
    h = hashlib.sha256()
    for folder in ("grader", "utils"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            h.update(path.relative_to(ROOT).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    with contextlib.suppress(Exception):   # no torch metadata: the digest still covers the code
        h.update(version("torch").encode())
    return h.hexdigest()


def reference_cache_dir(default: Path | None = None) -> Path | None:
    """Where reference records persist between runs: ``$LAS_REFERENCE_CACHE`` when set (``off`` turns the
    disk cache off), else ``default`` (the batch's grading folder). Never under build/: the sandbox sees
    build/cache, and a reference record holds the expected values of hidden inputs."""
    return cache_folder("LAS_REFERENCE_CACHE", default)


def reference_records(stem: str, release: dict, solution: dict, seed: int, workroot: Path,
                      threads: int = 1, cache_dir: Path | None = None) -> dict[str, dict]:
    """The solution's evidence for every case, cached per process and, with ``cache_dir`` (see
    :func:`reference_cache_dir`), on disk, keyed by the notebook contents, the seed and :func:`code_digest`.
    Runs outside the sandbox (our code). Raises RuntimeError when the solution itself fails a probe,
    because then no student can be judged fairly."""
    key = (stem, seed, hashlib.sha256(json.dumps([release, solution], sort_keys=True).encode()).hexdigest())
    cache_dir = reference_cache_dir(cache_dir)
    with _REFERENCE_LOCK:
        lock = _KEY_LOCKS.setdefault(key, threading.Lock())
    with lock:
        if key in _REFERENCE_CACHE:
            return _REFERENCE_CACHE[key]
        disk = None
        if cache_dir is not None:
            name = hashlib.sha256(json.dumps([*key, code_digest()]).encode()).hexdigest()[:32]
            disk = Path(cache_dir) / f"references-{stem}-{name}.json"
            with contextlib.suppress(OSError, ValueError):   # absent or unreadable: compute it again
                cases = json.loads(disk.read_text(encoding="utf-8"))
                if isinstance(cases, dict) and {c.probe for c in load_cases(stem)} <= set(cases):
                    _REFERENCE_CACHE[key] = cases
                    return cases
        plan = {"stem": stem, "runs": case_runs([seed], stem), "isolate": "variant",
                "groups": case_groups(stem), "variants": {"reference": notebook_cells(release, solution)}}
        records, tail = run_harness(plan, workdir=Path(tempfile.mkdtemp(prefix=f"ref-{stem}-", dir=workroot)),
                                    threads=threads)
        if void_problem(records):
            raise RuntimeError(f"the reference run of {stem} failed: {void_problem(records)}\n{tail[-2000:]}")
        cases, _ = by_case(records, "reference")
        broken = [name for name, rec in cases.items() if rec.get("status") != "ok"]
        missing = sorted({c.probe for c in load_cases(stem)} - set(cases))
        if broken or missing:
            raise RuntimeError(f"the reference run of {stem} failed (probes {broken + missing}); "
                               f"the harness said:\n{tail[-2000:]}")
        _REFERENCE_CACHE[key] = cases
        if disk is not None:
            with contextlib.suppress(OSError):   # a read-only grading folder: the cache is an optimisation only
                write_atomic(disk, json.dumps(cases), private=True)
        return cases


# --------------------------------------------------------------------------- judging
@dataclass
class CaseResult:
    cell: str
    name: str
    says: str
    weight: float
    passed: bool
    message: str = ""


@dataclass
class Verdict:
    stem: str
    points: dict[str, float] = field(default_factory=dict)      # test cell -> points awarded
    max_points: dict[str, float] = field(default_factory=dict)  # test cell -> points possible
    cases: list[CaseResult] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)            # student statements that failed or were skipped
    problems: list[str] = field(default_factory=list)           # problems with the evidence itself
    tampered: str = ""                                          # why the evidence stream was cut off, if it was

    @property
    def score(self) -> float:
        return round(sum(self.points.values()), 4)

    @property
    def max_score(self) -> float:
        return sum(self.max_points.values())

    def cell_report(self, cell: str) -> str:
        """Plain-text report of one test cell's cases (for the feedback): no inputs, no reference."""
        rows = [c for c in self.cases if c.cell == cell]
        lines = [f"Autograder: {self.points.get(cell, 0):g} / {self.max_points.get(cell, 0):g} points "
                 f"({sum(c.passed for c in rows)} of {len(rows)} checks passed)"]
        lines += [f"  [PASS] {c.says}" if c.passed else f"  [FAIL] {c.says}: {c.message}" for c in rows]
        if self.dropped and not all(c.passed for c in rows):
            lines.append("  The grader runs every line of your cells, as you ran them; these it could not run:")
            lines += [f"    - {d}" for d in self.dropped[:10]]
        return "\n".join(lines)

    def to_json(self) -> dict:
        return {"score": self.score, "max_score": self.max_score, "points": self.points,
                "cases": [{"cell": c.cell, "case": c.name, "passed": c.passed, "message": c.message}
                          for c in self.cases],
                "not_run": self.dropped[:20], "definition_errors": self.problems[:10]}


def _student_value(rec: dict | None):
    """Decode a student's record, or raise AssertionError saying why there is no value."""
    if rec is None:
        raise AssertionError("no result (the grading run stopped before this check)")
    why = {"timeout": f"did not finish within {rec.get('timeout', '?')} s",
           "died": "the process running it exited or crashed (os._exit, a segfault or the memory cap)",
           "budget": f"not run: the grader's time for this notebook ({rec.get('budget', '?')} s) was used up "
                     "by slow top-level code or checks before it"}
    status = str(rec.get("status"))
    if status != "ok":
        raise AssertionError(why.get(status, "its result could not be read back (too large or malformed)"))
    try:
        return decode(rec.get("value"))
    except (EvidenceError, ValueError, TypeError, RecursionError) as exc:
        raise AssertionError(f"its result could not be read back ({str(exc)[:100]})") from None


_PATH = re.compile(r"(?:/[A-Za-z0-9_.+@-]+){2,}/?")


def scrub(text: str, secrets: tuple = (), limit: int = 500) -> str:
    """A student-controlled message as it may reach a page: host paths shortened to their last
    part, the batch's seeds blanked, at most ``limit`` characters."""
    text = _PATH.sub(lambda m: ".../" + m.group(0).rstrip("/").rsplit("/", 1)[-1], str(text))
    for secret in secrets:
        if secret and len(str(secret)) >= 4:
            text = text.replace(str(secret), "<hidden>")
    return text if len(text) <= limit else text[:limit - 3] + "..."


def judge(stem: str, student: dict[str, dict], reference: dict[str, dict], points: dict[str, float],
          header: dict | None = None, secrets: tuple = ()) -> Verdict:
    """Score every case of ``stem``; a test cell earns points x (passed weight / total weight).
    ``secrets`` (the batch's seeds) never appear in a message."""
    verdict = Verdict(stem, points=dict.fromkeys(points, 0.0), max_points=dict(points))
    header = header or {}
    not_run = [e for e in header.get("not_run", []) if isinstance(e, dict)]
    verdict.dropped = [scrub(x, secrets, 300) for x in header.get("dropped", [])][:50]
    if header.get("tampered"):
        verdict.tampered = scrub(header["tampered"], secrets, 300)
        verdict.problems.append(verdict.tampered)
    totals: dict[str, float] = {}
    judged: list[tuple[bool, tuple, CaseResult]] = []   # (a value case?, its gate probes, its result)
    for case, needs in zip(load_cases(stem), value_gates(stem)):
        if case.cell not in points:
            continue
        totals[case.cell] = totals.get(case.cell, 0.0) + case.weight
        rec = student.get(case.probe)
        for p in (rec or {}).get("problems") or []:
            if p not in verdict.problems:
                verdict.problems.append(str(p)[:300])
        got = None
        try:
            got = _student_value(rec)
            ref = decode(reference[case.probe]["value"])
            case.check(got, ref)
            ok, message = True, ""
        except AssertionError as exc:
            ok, message = False, str(exc)[:500] or "wrong result"
        except Exception as exc:  # noqa: BLE001 - a check that trips over odd evidence fails the case
            ok, message = False, f"the result could not be checked ({exc.__class__.__name__})"
        if not ok and isinstance(got, Raised) and got.is_a("NameError"):
            because = explain_name_error(got.message, not_run)
            if because and because not in message:
                message = f"{message}; {because}"
        message = scrub(message, secrets, 700)
        verdict.cases.append(CaseResult(case.cell, case.probe, case.says, case.weight, ok, message))
        judged.append((case_kind(case) == "value", needs, verdict.cases[-1]))
    # A property, a rule or given code earns points only next to a function that computes: a stub that
    # raises ValueError for everything, or returns noise of the right shape, collects nothing.
    # probe -> did every value case reading it pass (every case, for a probe no value case reads). A gate
    # probe of a test cell not in ``points`` counts as failed (a sweep of one cell judges its gates' cells too).
    value_probes = {r.name for is_value, _, r in judged if is_value}
    status: dict[str, bool] = {}
    for is_value, _, result in judged:
        if is_value or result.name not in value_probes:
            status[result.name] = status.get(result.name, True) and result.passed
    for _, needs, result in judged:
        if result.passed and needs and not all(status.get(n) for n in needs):
            result.passed, result.message = False, "scores only once the function returns correct values"
    for cell, pts in points.items():
        if totals.get(cell):
            won = sum(r.weight for r in verdict.cases if r.passed and r.cell == cell)
            verdict.points[cell] = round(pts * won / totals[cell], 2)
    return verdict


# --------------------------------------------------------------------------- sweeps (tests, QA)
def sweep(stem: str, release: dict, solution: dict, variants: dict[str, dict], seeds: list[int],
          cells: dict[str, list[str]] | None = None, workroot: Path | None = None,
          timeout: float = 1800.0, jobs: int | None = None) -> dict[tuple[str, int], Verdict]:
    """Judge notebooks we wrote ourselves (mutants, honest variants, the release) against the solution over
    several seeds, in unsandboxed harness runs (``jobs`` side by side, default one per core, each with a share
    of the seeds and, with fewer seeds than jobs, of the variants): {(variant, seed): Verdict}. ``cells``
    limits a variant to the cases of some test cells (a mutant's own cell, say)."""
    cases = load_cases(stem)
    plan_cases = {name: [c.probe for cell in wanted for c in cases if c.cell == cell]
                  for name, wanted in (cells or {}).items()}
    reference = notebook_cells(release, solution)
    all_cells = {name: notebook_cells(release, nb) for name, nb in variants.items()}
    jobs = max(1, jobs or (os.cpu_count() or 1))
    n_chunks = max(1, min(jobs, len(seeds)))
    seed_chunks = [list(seeds)[i::n_chunks] for i in range(n_chunks)]
    groups = max(1, min(len(all_cells), jobs // n_chunks))   # every run loads the reference too
    units = [(chunk, list(all_cells)[g::groups]) for chunk in seed_chunks for g in range(groups)]

    def one(i: int) -> tuple[list[dict], str]:
        chunk, names = units[i]
        plan = {"stem": stem, "runs": case_runs(chunk, stem), "isolate": "variant",
                "cases": {n: c for n, c in plan_cases.items() if n in names}, "groups": case_groups(stem),
                "variants": {"__reference__": reference, **{n: all_cells[n] for n in names}}}
        workdir = Path(tempfile.mkdtemp(prefix=f"sweep-{stem}-{i}-", dir=workroot))
        return run_harness(plan, workdir=workdir, timeout=timeout)

    with ThreadPoolExecutor(len(units)) as pool:   # one harness per core
        results = list(pool.map(one, range(len(units))))
    records, tail = [], ""
    for recs, t in results:
        if void_problem(recs):
            raise RuntimeError(f"{stem}: the sweep's probe run failed: {void_problem(recs)}\n{t[-3000:]}")
        records += recs
        tail = t
    points = points_per_test_cell(release)
    out = {}
    for seed in seeds:
        reference, _ = by_case(records, "__reference__", seed)
        broken = sorted(n for n, r in reference.items() if r.get("status") != "ok")
        if broken or not reference:
            raise RuntimeError(f"{stem}: the solution failed probes {broken} at seed {seed}:\n{tail[-3000:]}")
        for name in variants:
            got, header = by_case(records, name, seed)
            wanted = (cells or {}).get(name)
            pts = {c: p for c, p in points.items() if wanted is None or c in wanted}
            out[(name, seed)] = judge(stem, got, reference, pts, header)
    return out


def cell_reports(stem: str, entry: dict, release: dict) -> dict[str, str]:
    """test cell -> the judge's per-case report (``Verdict.cell_report``), from the student's status
    file: as autograde stored it, or rebuilt from the judge's cases for a status written before that."""
    reports = entry.get("reports")
    if isinstance(reports, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in reports.items()):
        return reports
    judged = entry.get("judge") or {}
    says = {case.probe: case.says for case in load_cases(stem)}
    cases = [CaseResult(str(c.get("cell")), str(c.get("case")), says.get(c.get("case"), str(c.get("case"))), 1.0,
                        bool(c.get("passed")), str(c.get("message") or ""))
             for c in judged.get("cases") or [] if isinstance(c, dict)]
    points = {str(k): float(v) for k, v in (judged.get("points") or {}).items() if isinstance(v, (int, float))}
    verdict = Verdict(stem, points=points, max_points=points_per_test_cell(release), cases=cases)
    return {cell: verdict.cell_report(cell) for cell in verdict.max_points}
