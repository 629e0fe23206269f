"""Autograde submissions so that one bad notebook never stops the batch.

Every (student, notebook) pair is one job in two parts:

* **the full run**: a scratch nbgrader course holding a snapshot of the gradebook and only that
  notebook (prepared by grader/submissions.py), executed by a separate ``nbgrader autograde``
  process whose kernel runs in the sandbox (grader/sandbox.py) with a per-cell timeout and a memory
  cap. It produces the executed notebook the TA and the feedback show, and the written answers for
  manual grading. It decides no autograded point.
* **the judge** (grader/judge.py): the student's answer cells, probed in a second sandboxed process
  (grader/probe.py), one forked process per case; the judge compares what came back with the
  solution's values in this process and writes the points of every autograded test cell.

Jobs run ``workers`` at a time; their scores are merged into the real gradebook one by one in this
process, so workers never fight over the sqlite file and no student's code ever sees it.

Each notebook ends with a status, and the student's status is the worst of them:
``unreadable`` > ``kernel died`` > ``timed out`` > ``tampered`` > ``review`` > ``graded``. Only
``unreadable`` (nothing to grade) costs points by itself; the others describe the full run or the
static audit (grader/audit.py) for the TA, and the judge's points stand.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from . import ASSIGNMENT
from .course import COURSE_ID, Course, add_students, nbgrader_env, snapshot_db, sync_assignment
from . import judge as judging
from .sandbox import (KERNEL_NAME, describe, join_cgroup, nproc_limit, pids_cgroup, probe_prefix, protections,
                      remove_cgroup, write_kernel_spec)
from .submissions import Unreadable, prepare, write

STATUS_ORDER = ["unreadable", "kernel died", "timed out", "tampered", "review", "graded"]


@dataclass
class Settings:
    """Limits of one autograde run."""

    cell_timeout: int = 60           # seconds per cell (nbgrader interrupts the cell, goes on), and per judge case
    notebook_timeout: int = 180      # hard wall limit of one notebook's full run (kernel hung, interrupt ignored)
    mem_gb: float = 6.0              # the kernel's memory cap
    workers: int = 1
    sandbox: str = "auto"            # auto | bwrap | unshare | none
    max_output_lines: int = 1000
    kernel_threads: int = 0          # torch/BLAS threads per kernel (0: CPU cores / workers)
    seed: int | None = None          # the judge's input seed (None: the grading folder's own, see judge_seed)
    judge_budget: int = 120          # one notebook's judge run: loading its top-level code and every case
    load_seconds: int = 60           # of which, at most, running the student's top-level statements (each at most 30 s)

    def threads(self) -> int:
        return self.kernel_threads or max(1, (os.cpu_count() or 1) // max(1, self.workers))

    def mode(self) -> str:
        if self.sandbox != "auto":
            return self.sandbox
        prot = protections()
        return "bwrap" if prot["bwrap"] else "unshare" if prot["network"] else "none"

    def protections(self) -> dict[str, bool]:
        prot = dict(protections())
        mode = self.mode()
        prot["filesystem"] = mode == "bwrap"
        prot["network"] = mode in ("bwrap", "unshare")
        return prot


@dataclass
class NotebookResult:
    student: str
    notebook: str
    status: str = "graded"
    reasons: list[str] = field(default_factory=list)
    grades: dict = field(default_factory=dict)      # grade_id -> (auto_score, needs_manual_grade)
    comments: dict = field(default_factory=dict)    # grade_id -> auto_comment
    autograded: Path | None = None                  # the executed notebook (in the scratch course)
    seconds: float = 0.0
    log: str = ""
    score: float = 0.0
    max_score: float = 0.0
    scratch: Path | None = None
    infra: bool = False                             # the kernel never started: the grader's fault
    full_run_ok: bool = False
    verdict: object = None                          # the judge's Verdict
    audit: list = field(default_factory=list)       # static audit findings (grader/audit.py)
    full_run_reason: str = ""                       # why the full run failed (feedback's note), "" if it did not


def _worst(statuses) -> str:
    statuses = list(statuses) or ["graded"]
    return min(statuses, key=STATUS_ORDER.index)


# ----------------------------------------------------------------------------- one job
def _job_env(scratch: Path, settings: Settings, notebook: str) -> dict:
    env = nbgrader_env()
    env.update(
        JUPYTER_PATH=str(write_kernel_spec(scratch / "jupyter")),
        JUPYTER_RUNTIME_DIR=str(scratch / "runtime"),
        TMPDIR=str(scratch / "runtime"),  # nbclient writes the connection file with tempfile
        JUPYTER_CONFIG_DIR=str(scratch / "jupyter-config"),
        JUPYTER_PLATFORM_DIRS="1",
        LAS_SANDBOX=json.dumps({"mode": settings.mode(), "workdir": str(scratch / "work"),
                                "overlay": protections()["overlay"]}),
        LAS_KERNEL_LIMITS=json.dumps(_limits(settings)),
        OMP_NUM_THREADS=str(settings.threads()),
    )
    env.pop("NBGRADER_EXECUTION", None)
    return env


def _limits(settings: Settings) -> dict:
    """The kernel's and the probe harness's setrlimit caps (grader/kernel.py apply_limits)."""
    limits = {"mem_bytes": int(settings.mem_gb * 1024 ** 3), "fsize_bytes": 2 * 1024 ** 3}
    if os.getuid() != 0:  # root ignores RLIMIT_NPROC: the pids cgroup caps it (sandbox.pids_cgroup)
        limits["nproc"] = nproc_limit()
    return limits


def _limit_grader_process(mem_bytes: int, cgroup: Path | None = None):
    join = join_cgroup(cgroup)

    def apply():
        import resource

        join()
        # nbgrader itself holds every output the kernel streams: cap it too (above the kernel's cap)
        cap = mem_bytes + 4 * 1024 ** 3
        resource.setrlimit(resource.RLIMIT_DATA, (cap, cap))
    return apply


def _run(cmd: list[str], *, cwd: Path, env: dict, timeout: float, mem_bytes: int,
         cgroup: Path | None = None) -> tuple[int | None, str]:
    """Run in its own session; on timeout kill the whole group (nbgrader and, through
    PR_SET_PDEATHSIG / bwrap --die-with-parent, its kernel). Returns (returncode or None, log)."""
    with tempfile.TemporaryFile() as out:
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True, preexec_fn=_limit_grader_process(mem_bytes, cgroup))
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            code = None
        out.seek(0, 2)
        size = out.tell()
        out.seek(max(0, size - 200_000))
        return code, out.read().decode("utf-8", "replace")


def grade_notebook(course: Course, student: str, notebook: str, settings: Settings, db_snapshot: Path,
                   workroot: Path, reference: dict | None = None) -> NotebookResult:
    """Autograde one notebook of one student: the full run, then the judge. Never raises for
    student faults. ``reference`` is the solution's evidence (judge.reference_records)."""
    result = NotebookResult(student, notebook)
    started = time.monotonic()
    submitted = course.folder("submitted", student) / f"{notebook}.ipynb"
    if not submitted.exists():
        result.reasons.append(f"{notebook}.ipynb not submitted (0 points)")
        result.grades = None  # zero everything
        return result
    try:
        prepared = prepare(submitted, course.release / f"{notebook}.ipynb")
    except Unreadable as exc:
        result.status, result.grades = "unreadable", None
        result.reasons.append(str(exc))
        return result
    if prepared.tampered:
        result.status = "tampered"
    result.reasons += prepared.tampered + prepared.notes
    _audit(prepared.notebook, notebook, result, course.release / f"{notebook}.ipynb")

    scratch = Path(tempfile.mkdtemp(prefix=f"{student}-{notebook}-", dir=workroot))
    result.scratch = scratch
    cgroup = pids_cgroup(scratch.name)
    try:
        executed = _full_run(course, student, notebook, settings, db_snapshot, scratch, prepared, submitted,
                             result, cgroup)
        verdict = _judge_run(course, notebook, settings, scratch, prepared.notebook, reference, result, cgroup)
    finally:
        remove_cgroup(cgroup)
    result.seconds = time.monotonic() - started
    _apply_verdict(course, notebook, verdict, executed, result)
    return result


def _instructor_cells_as_released(nb: dict, release_path: Path) -> set[str]:
    """grade_ids of the locked cells (setup, given code, tests) whose source is the release's own
    (the Colab pack URL line aside): the instructor's code, which the audit need not flag (nbgrader
    restores locked cells anyway; an edited one is still audited and reported as tampering)."""
    from .bundle import without_pack_url

    try:
        release = json.loads(release_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return set()

    def src(cell):
        text = cell.get("source", "")
        return without_pack_url("".join(text) if isinstance(text, list) else str(text)).strip()

    locked = {c["metadata"]["nbgrader"]["grade_id"]: src(c) for c in release.get("cells", [])
              if c.get("metadata", {}).get("nbgrader", {}).get("locked") and c["metadata"]["nbgrader"].get("grade_id")}
    same = set()
    for cell in nb.get("cells", []):
        meta = cell.get("metadata", {}) if isinstance(cell, dict) else {}
        gid = meta.get("nbgrader", {}).get("grade_id") if isinstance(meta.get("nbgrader"), dict) else None
        if gid in locked and src(cell) == locked[gid]:
            same.add(gid)
    return same


#: Caps of the static audit's child process (``python -m grader.audit``): an 11 kB cell of nested
#: ``"A".join([...])`` once took a grader holding the audit in its own process to 5 GiB and 43 s.
AUDIT_TIMEOUT = 20.0              # seconds of wall time
AUDIT_MEM_BYTES = 1024 ** 3       # address space (RLIMIT_AS)


class AuditUnfinished(Exception):
    """The audit's child process ran past its time or memory cap; the message says which."""


def _audit_cells(nb: dict) -> list:
    """What the audit reads of each cell (its type, source and grade_id), positions kept: outputs,
    which may be most of a 64 MB notebook, never travel to the child process."""
    cells = []
    for cell in nb.get("cells", []) if isinstance(nb, dict) else []:
        if not isinstance(cell, dict):
            cells.append(None)
            continue
        meta = cell.get("metadata")
        nbg = meta.get("nbgrader") if isinstance(meta, dict) else None
        gid = nbg.get("grade_id") if isinstance(nbg, dict) else None
        cells.append({"cell_type": cell.get("cell_type"), "source": cell.get("source", ""),
                      "metadata": {"nbgrader": {"grade_id": gid}} if isinstance(gid, str) else {}})
    return cells


def run_audit(nb: dict, answer_ids: set[str] | None, *, timeout: float = AUDIT_TIMEOUT,
              mem_bytes: int = AUDIT_MEM_BYTES) -> list:
    """grader/audit.py's findings for ``nb``, computed in a fresh child process under a memory cap
    (RLIMIT_AS) and a wall-time cap: no notebook can take the grader's memory or stall the batch.
    Raises :class:`AuditUnfinished` when a cap was hit, RuntimeError when the child failed otherwise."""
    from . import ROOT
    from .audit import OUT_OF_MEMORY, Finding

    request = json.dumps({"cells": _audit_cells(nb),
                          "answer_ids": sorted(answer_ids) if answer_ids is not None else None}).encode()
    cmd = [sys.executable, "-m", "grader.audit", f"--mem-bytes={int(mem_bytes)}",
           f"--cpu-seconds={int(timeout) + 1}"]
    try:
        proc = subprocess.run(cmd, input=request, capture_output=True, timeout=timeout, cwd=ROOT)
    except subprocess.TimeoutExpired:
        raise AuditUnfinished(f"it ran past its {timeout:g} s limit") from None
    if proc.returncode == OUT_OF_MEMORY or (proc.returncode != 0 and b"MemoryError" in proc.stderr[-2000:]):
        cap = f"{mem_bytes / 1024 ** 3:g} GiB" if mem_bytes >= 1024 ** 3 else f"{mem_bytes / 1024 ** 2:.0f} MiB"
        raise AuditUnfinished(f"it needed more than its {cap} memory cap")
    if proc.returncode in (-signal.SIGXCPU, -signal.SIGKILL):
        raise AuditUnfinished(f"it ran past its {timeout:g} s limit")
    try:
        if proc.returncode != 0:
            raise ValueError(proc.stderr.decode("utf-8", "replace").strip().splitlines()[-1][:200])
        return [Finding(str(c), int(line), str(what), str(code))
                for c, line, what, code in json.loads(proc.stdout)["findings"]]
    except (ValueError, KeyError, TypeError, IndexError) as exc:
        raise RuntimeError(f"the audit process failed (exit {proc.returncode}: {exc})") from None


def _audit(nb: dict, notebook: str, result: NotebookResult, release_path: Path | None = None, *,
           timeout: float = AUDIT_TIMEOUT, mem_bytes: int = AUDIT_MEM_BYTES) -> None:
    """The static audit: suspicious code keeps its points but asks a TA to look (status review).
    Locked cells exactly as released are the instructor's and are not audited. The audit runs in a
    child process under ``mem_bytes`` and ``timeout`` (:func:`run_audit`); past either, the notebook
    is marked review with a reason that says so, and the batch goes on."""
    try:
        answer_ids = None
        if release_path is not None:
            skip = _instructor_cells_as_released(nb, release_path)
            ids = {c.get("metadata", {}).get("nbgrader", {}).get("grade_id") for c in nb.get("cells", [])
                   if isinstance(c, dict) and isinstance(c.get("metadata", {}).get("nbgrader"), dict)}
            answer_ids = {i for i in ids if isinstance(i, str)} - skip
        findings = run_audit(nb, answer_ids, timeout=timeout, mem_bytes=mem_bytes)
    except AuditUnfinished as exc:
        result.reasons.append(f"{notebook}: the static audit could not finish ({exc}: the code is too large or "
                              "too convoluted to check automatically); the notebook needs a look by hand")
        result.status = "review" if result.status == "graded" else result.status
        return
    except Exception as exc:  # noqa: BLE001 - an audit that trips is itself worth a look
        result.reasons.append(f"{notebook}: the static audit failed ({exc.__class__.__name__}); look at it by hand")
        result.status = "review" if result.status == "graded" else result.status
        return
    if findings:
        from .audit import summarise

        if result.status == "graded":
            result.status = "review"
        result.reasons.append(f"{notebook}: {summarise(findings)}")
        result.audit = [f"{f.cell} line {f.line}: {f.what}: {f.code}" for f in findings[:50]]


def _full_run(course, student, notebook, settings, db_snapshot, scratch, prepared, submitted, result,
              cgroup) -> Path | None:
    """Execute the whole notebook with nbgrader in the sandboxed kernel; returns the executed
    notebook (or None) and records timeouts, a dead kernel and memory-cap hits in ``result``."""
    course_dir = scratch / "course"
    write(prepared.notebook, course_dir / "submitted" / student / ASSIGNMENT / f"{notebook}.ipynb")
    (scratch / "work").mkdir()
    (scratch / "runtime").mkdir()
    shutil.copy(submitted, scratch / "work" / f"{notebook}.ipynb")
    shutil.copy(db_snapshot, course_dir / "gradebook.db")
    db_url = f"sqlite:///{course_dir / 'gradebook.db'}"
    cmd = [sys.executable, "-m", "nbgrader", "autograde", ASSIGNMENT, "--force", f"--student={student}",
           f"--CourseDirectory.root={course_dir}", f"--CourseDirectory.db_url={db_url}",
           f"--CourseDirectory.course_id={COURSE_ID}",
           f"--ExecutePreprocessor.kernel_name={KERNEL_NAME}",
           f"--ExecutePreprocessor.timeout={settings.cell_timeout}",
           "--ExecutePreprocessor.interrupt_on_timeout=True",
           f"--ExecutePreprocessor.startup_timeout={max(120, settings.cell_timeout)}",
           "--KernelManager.transport=ipc",
           # absolute socket paths in a folder the sandbox binds (relative ones would resolve
           # against two different working directories)
           f"--KernelManager.ip={scratch / 'runtime' / 'kernel'}",
           "--OverwriteCells.add_missing_cells=True",
           f"--LimitOutput.max_lines={settings.max_output_lines}",
           "--Autograde.create_student=True"]
    code, log = _run(cmd, cwd=course_dir, env=_job_env(scratch, settings, notebook),
                     timeout=settings.notebook_timeout, mem_bytes=int(settings.mem_gb * 1024 ** 3), cgroup=cgroup)
    result.log = log
    executed = course_dir / "autograded" / student / ASSIGNMENT / f"{notebook}.ipynb"
    result.full_run_ok = code == 0 and executed.exists()
    if code is None:
        result.status = _worse(result.status, "timed out")
        result.reasons.insert(0, f"{notebook}: the full run was still going after the {settings.notebook_timeout} s "
                                 "limit per notebook (a loop that ignores interrupts?); its outputs are lost, "
                                 "the judge graded the functions")
        result.full_run_reason = result.reasons[0]
        return None
    if code != 0 or not executed.exists():
        result.infra = bool(re.search(r"Kernel died before replying to kernel_info|Kernel didn't respond", log))
        if re.search(r"CellTimeoutError|Timeout waiting for execute reply", log):
            result.status = _worse(result.status, "timed out")
            result.reasons.insert(0, f"{notebook}: a cell ran past {settings.cell_timeout} s and ignored the "
                                     "interrupt; the full run stopped there")
            result.full_run_reason = result.reasons[0]
        elif re.search(r"DeadKernelError|Kernel died|kernel died", log):
            result.status = _worse(result.status, "kernel died")
            result.reasons.insert(0, f"{notebook}: the kernel died in the full run (os._exit, a crash, or the "
                                     f"{settings.mem_gb:g} GB memory cap); look at it by hand")
            result.full_run_reason = result.reasons[0]
        else:
            # nbgrader itself tripped over what the notebook did (a patched json module, say): the judge
            # still grades the functions, and a TA should look
            result.status = _worse(result.status, "review")
            last = [ln for ln in log.splitlines() if "ERROR" in ln or "Error" in ln][-3:]
            result.reasons.insert(0, f"{notebook}: the full run failed inside nbgrader ({' | '.join(last)[-300:]}); "
                                     "the judge graded the functions; look at it by hand")
            result.full_run_reason = result.reasons[0]
        return None
    _inspect_outputs(executed, result, settings)
    _read_scores(db_url, student, notebook, result)
    result.autograded = executed
    return executed


def _judge_run(course, notebook, settings, scratch, nb, reference, result, cgroup):
    """Probe the answer cells in the sandbox and judge the evidence; None when there is no reference."""
    if reference is None:
        return None
    release = json.loads((course.release / f"{notebook}.ipynb").read_text(encoding="utf-8"))
    workdir = scratch / "judge"
    workdir.mkdir()
    threads = settings.threads()
    env = judging._harness_env(threads)
    env["LAS_KERNEL_LIMITS"] = json.dumps(_limits(settings))
    prefix = probe_prefix(settings.mode(), workdir, env, overlay=protections()["overlay"])
    # the sandbox gets each case's own seed, never the batch's (judge.case_runs)
    runs = judging.case_runs([settings.seed or 0], notebook)
    plan = {"stem": notebook, "runs": runs, "isolate": "case", "case_timeout": settings.cell_timeout,
            "budget": settings.judge_budget, "load_seconds": settings.load_seconds,
            "statement_seconds": min(30, settings.load_seconds), "groups": judging.case_groups(notebook),
            "variants": {"student": judging.notebook_cells(release, nb)}}
    secrets = (str(settings.seed or 0), *(str(v) for v in runs[0]["case_seeds"].values()))
    outer_env = dict(env) if not prefix or prefix[0] != "bwrap" else {"PATH": os.environ.get("PATH", "")}
    # the harness keeps to the budget itself; this is the backstop (interpreter start, setup cell, kill)
    timeout = settings.judge_budget + 60
    records, tail = judging.run_harness(plan, workdir=workdir, command_prefix=prefix, env=outer_env,
                                        timeout=timeout, threads=threads, preexec_fn=join_cgroup(cgroup))
    cases, header = judging.by_case(records, "student")
    void = judging.void_problem(records)
    if void:
        result.status = _worse(result.status, "review")
        result.reasons.append(f"{notebook}: the judge discarded every check ({void}); 0 autograded points; "
                              "look at it by hand")
    elif not cases:
        result.reasons.append(f"{notebook}: the judge got no evidence (the probe run failed: "
                              f"{tail.strip().splitlines()[-1][:200] if tail.strip() else 'no output'})")
    verdict = judging.judge(notebook, cases, reference, judging.points_per_test_cell(release), header, secrets)
    timed = sorted({c.cell for c in verdict.cases if not c.passed and "did not finish" in c.message})
    if timed:
        result.reasons.append(f"{notebook}: checks of {', '.join(timed)} ran past their time limit (0 for those checks)")
    budget = sorted({c.cell for c in verdict.cases if not c.passed and "was used up" in c.message})
    if budget:
        result.status = _worse(result.status, "timed out")
        result.reasons.append(f"{notebook}: the judge's {settings.judge_budget} s for this notebook ran out before the "
                              f"checks of {', '.join(budget)} (0 for those checks)")
    if verdict.dropped:
        shown = "; ".join(verdict.dropped[:5]) + (f"; and {len(verdict.dropped) - 5} more" if len(verdict.dropped) > 5 else "")
        result.reasons.append(f"{notebook}: the judge could not run {shown}")
        if any(e.get("kind") in ("timeout", "died", "budget") for e in header.get("not_run", []) if isinstance(e, dict)):
            result.status = _worse(result.status, "timed out")
    if verdict.tampered:
        result.status = _worse(result.status, "review")
        result.reasons.append(f"{notebook}: {verdict.tampered}; the judge discarded the checks after it")
    return verdict


def _apply_verdict(course, notebook, verdict, executed, result) -> None:
    """The judge's points replace whatever nbgrader read from the test cells' outputs."""
    manual = dict(result.grades or {})
    result.grades = {}
    if verdict is None:
        result.grades = None
        return
    release = json.loads((course.release / f"{notebook}.ipynb").read_text(encoding="utf-8"))
    for cell in release["cells"]:
        meta = (cell.get("metadata") or {}).get("nbgrader") or {}
        gid = meta.get("grade_id")
        if meta.get("grade") and meta.get("solution"):     # a written answer: the TA grades it
            result.grades[gid] = manual.get(gid, (None, True))
    for cell, pts in verdict.points.items():
        result.grades[cell] = (pts, False)
        result.comments[cell] = verdict.cell_report(cell)
    result.verdict = verdict
    if executed is not None:
        _annotate(executed, verdict)
        _insert_rubrics(executed, course.source / f"{notebook}.ipynb")


def _annotate(executed: Path, verdict) -> None:
    """Put the judge's per-case report under each test cell of the executed notebook (feedback)."""
    try:
        nb = json.loads(executed.read_text(encoding="utf-8"))
        for cell in nb["cells"]:
            gid = ((cell.get("metadata") or {}).get("nbgrader") or {}).get("grade_id")
            if gid in verdict.points and cell.get("cell_type") == "code":
                cell.setdefault("outputs", []).append(
                    {"output_type": "stream", "name": "stdout", "text": verdict.cell_report(gid) + "\n"})
        executed.write_text(json.dumps(nb, indent=1, ensure_ascii=False), encoding="utf-8")
    except (OSError, ValueError, KeyError, TypeError):
        pass


def _worse(a: str, b: str) -> str:
    return min(a, b, key=STATUS_ORDER.index)


def _inspect_outputs(executed: Path, result: NotebookResult, settings: Settings) -> None:
    """Timeouts and memory errors of the full run, read back from the executed notebook."""
    nb = json.loads(executed.read_text(encoding="utf-8"))
    timed_out: set[str] = set()
    for i, cell in enumerate(nb["cells"]):
        where = (cell.get("metadata", {}).get("nbgrader") or {}).get("grade_id") or f"cell {i}"
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error":
                ename, evalue = str(out.get("ename", "")), str(out.get("evalue", ""))
                if ename in ("CellTimeoutError", "KeyboardInterrupt", "TimeoutError") or "Timeout" in ename:
                    result.status = _worse(result.status, "timed out")
                    if where in timed_out:
                        continue
                    timed_out.add(where)
                    result.reasons.append(f"{where} ran past {settings.cell_timeout} s and was interrupted "
                                          "in the full run")
                elif ename == "MemoryError" or "can't allocate memory" in evalue or "out of memory" in evalue.lower():
                    result.reasons.append(f"{where} hit the {settings.mem_gb:g} GB memory cap")
    if "Timeout waiting for execute reply" in result.log and not any("interrupted" in r for r in result.reasons):
        result.status = _worse(result.status, "timed out")
        result.reasons.append(f"a cell ran past {settings.cell_timeout} s and was interrupted")


def _read_scores(db_url: str, student: str, notebook: str, result: NotebookResult) -> None:
    from nbgrader.api import Gradebook

    with Gradebook(db_url, COURSE_ID) as gb:
        sub = gb.find_submission_notebook(notebook, ASSIGNMENT, student)
        for grade in sub.grades:
            result.grades[grade.cell.name] = (grade.auto_score, grade.needs_manual_grade)
        for comment in sub.comments:
            result.comments[comment.cell.name] = comment.auto_comment


# ----------------------------------------------------------------------------- merging
def merge(course: Course, result: NotebookResult) -> tuple[float, float]:
    """Write one job's scores into the real gradebook and copy its executed notebook; returns
    (autograded score, autograded max) of that notebook."""
    from nbgrader.api import Gradebook, MissingEntry

    dest = course.folder("autograded", result.student) / f"{result.notebook}.ipynb"
    with Gradebook(course.db_url, COURSE_ID) as gb:
        try:
            gb.find_submission(ASSIGNMENT, result.student)
        except MissingEntry:
            with warnings.catch_warnings():  # nbgrader's add_submission trips a harmless SQLAlchemy warning
                warnings.simplefilter("ignore")
                gb.add_submission(ASSIGNMENT, result.student)
        sub = gb.find_submission_notebook(result.notebook, ASSIGNMENT, result.student)
        score = max_score = 0.0
        for grade in sub.grades:
            cell = grade.cell
            if result.grades is None:           # unreadable, died, timed out, missing: zero, say why
                grade.auto_score, grade.needs_manual_grade = 0.0, False
            else:
                auto, needs = result.grades.get(cell.name, (0.0, False))
                grade.auto_score, grade.needs_manual_grade = auto, needs
            autograded_test = not getattr(cell, "cell_type", None) == "markdown" and not _is_manual(gb, cell)
            if autograded_test:
                score += grade.auto_score or 0.0
                max_score += grade.max_score
        for comment in sub.comments:
            if result.grades is not None and comment.cell.name in result.comments:
                comment.auto_comment = result.comments[comment.cell.name]
        gb.db.commit()
    dest.parent.mkdir(parents=True, exist_ok=True)
    if result.autograded is not None and result.autograded.exists():
        from .feedback import strip_active_outputs

        # formgrader shows this copy in the TA's browser: nothing of the student's may run there
        try:
            executed = json.loads(result.autograded.read_text(encoding="utf-8"))
            result.autograded.write_text(json.dumps(strip_active_outputs(executed), ensure_ascii=False),
                                         encoding="utf-8")
        except (OSError, ValueError, TypeError, AttributeError):
            pass
        shutil.copy(result.autograded, dest)
    elif dest.exists():
        dest.unlink()  # never leave an older run's notebook behind for feedback
    return score, max_score


def _is_manual(gb, cell) -> bool:
    """A manually graded answer is a grade cell that is also a solution cell."""
    from nbgrader.api import SolutionCell

    return gb.db.query(SolutionCell).filter(SolutionCell.name == cell.name,
                                            SolutionCell.notebook_id == cell.notebook_id).count() > 0


# ----------------------------------------------------------------------------- the batch
def _insert_rubrics(executed: Path, source: Path) -> None:
    """Put each written answer's rubric (from the source notebook, grader/tiers.py) directly under the
    student's answer in the autograded notebook, where the TA grades it in formgrader. Cells a student
    tagged ``rubric`` are dropped first; feedback drops every rubric cell again (feedback.sanitise)."""
    from .tiers import RUBRIC_TAG, rubric_cells, strip_rubrics

    try:
        rubrics = rubric_cells(source)
        nb = strip_rubrics(json.loads(executed.read_text(encoding="utf-8")))
        cells = []
        for cell in nb["cells"]:
            cells.append(cell)
            gid = ((cell.get("metadata") or {}).get("nbgrader") or {}).get("grade_id")
            if gid in rubrics and cell.get("cell_type") == "markdown":
                cells.append({"cell_type": "markdown", "metadata": {"tags": [RUBRIC_TAG]},
                              "source": rubrics.pop(gid)})
        nb["cells"] = cells
        executed.write_text(json.dumps(nb, indent=1, ensure_ascii=False), encoding="utf-8")
    except (OSError, ValueError, KeyError, TypeError):
        pass


def autograde(course: Course, students: list[str] | None = None, settings: Settings | None = None,
              progress=print, sync: bool = True) -> dict[str, dict]:
    """Grade ``students`` (default: everyone in grading/submitted). Returns student -> status dict
    (also written to grading/status/<student>.json)."""
    settings = settings or Settings()
    notebooks = sync_assignment(course) if sync or not course.db_path.exists() else course.notebook_names()
    everyone = course.students()
    students = everyone if students is None else students
    missing = [s for s in students if s not in everyone]
    if missing:
        raise FileNotFoundError(f"no submission folder for {', '.join(missing)} under "
                                f"{course.grading / 'submitted'} (run `python -m grader collect` first)")
    add_students(course, students)
    prot = settings.protections()
    progress(f"sandbox: {settings.mode()} | {describe(prot)}")
    workroot = Path(tempfile.mkdtemp(prefix="las-autograde-"))
    try:
        snapshot = workroot / "gradebook.db"
        snapshot_db(course.db_path, snapshot)
        if settings.seed is None:
            settings.seed = judging.judge_seed(course.grading)
        references = {}
        for nb in notebooks:
            progress(f"judge: reference values of {nb} (the solution, outside the sandbox)")
            release = json.loads((course.release / f"{nb}.ipynb").read_text(encoding="utf-8"))
            solution = json.loads((course.source / f"{nb}.ipynb").read_text(encoding="utf-8"))
            references[nb] = judging.reference_records(nb, release, solution, settings.seed, workroot,
                                                       threads=settings.threads())
        results: dict[str, list[NotebookResult]] = {s: [] for s in students}
        jobs = [(s, nb) for s in students for nb in notebooks]
        with ThreadPoolExecutor(max(1, settings.workers)) as pool:
            futures = {pool.submit(grade_notebook, course, s, nb, settings, snapshot, workroot, references[nb]): (s, nb)
                       for s, nb in jobs}
            for done, future in enumerate(as_completed(futures), 1):
                s, nb = futures[future]
                try:
                    res = future.result()
                except Exception as exc:  # noqa: BLE001 - a grader bug must not stop the batch either
                    res = NotebookResult(s, nb, status="unreadable", grades=None,
                                         reasons=[f"{nb}: grading failed: {exc.__class__.__name__}: {exc}"])
                res.score, res.max_score = merge(course, res)
                results[s].append(res)
                progress(f"[{done}/{len(jobs)}] {s} {nb}: {res.status} {res.score:g}/{res.max_score:g} "
                         f"({res.seconds:.0f} s)")
                if res.scratch is not None:
                    shutil.rmtree(res.scratch, ignore_errors=True)
        ran = [r for rs in results.values() for r in rs if r.scratch is not None]
        if ran and all(r.infra for r in ran):
            raise RuntimeError("no grading kernel started (sandbox mode "
                               f"{settings.mode()!r}); try --sandbox none to check. nbgrader said:\n"
                               + ran[0].log[-2000:])
        statuses = record_statuses(course, results, prot)
        return statuses
    finally:
        shutil.rmtree(workroot, ignore_errors=True)


def _notebook_status(res: NotebookResult) -> dict:
    return {"status": res.status, "reasons": res.reasons, "score": res.score,
            "max_score": res.max_score, "seconds": round(res.seconds, 1),
            "judge": res.verdict.to_json() if res.verdict is not None else None,
            # the judge's report of each test cell, as the feedback shows it
            "reports": {cell: res.verdict.cell_report(cell) for cell in
                        res.verdict.points} if res.verdict is not None else None,
            "full_run_reason": res.full_run_reason,
            "audit": res.audit,
            # what nbgrader printed when the full run failed: the TA's
            # first stop when a status says "look at it by hand"
            "full_run_log": "" if res.full_run_ok else res.log[-4000:]}


def record_statuses(course: Course, results: dict[str, list[NotebookResult]], prot: dict,
                    update: bool = False) -> dict[str, dict]:
    """Write grading/status/<student>.json for every student of ``results``; with ``update`` the
    notebooks graded before (nbgrader's autograde button grades one notebook at a time) are kept."""
    statuses = {}
    for s, per_nb in results.items():
        collected = course.read_json("collect", s)
        notebooks = dict(course.read_json("status", s).get("notebooks", {})) if update else {}
        notebooks.update({res.notebook: _notebook_status(res) for res in per_nb})
        notebooks = dict(sorted(notebooks.items()))
        reasons = list(dict.fromkeys(list(collected.get("problems", [])) +
                                     [r for nb in notebooks.values() for r in nb.get("reasons", [])]))
        worst = _worst([nb.get("status", "graded") for nb in notebooks.values()] +
                       (["unreadable"] if collected.get("unreadable") else []))
        status = {
            "student": s,
            "status": worst,
            "reason": "; ".join(reasons),
            "notebooks": notebooks,
            "score": sum(nb.get("score", 0.0) for nb in notebooks.values()),
            "max_score": sum(nb.get("max_score", 0.0) for nb in notebooks.values()),
            "protections": prot,
            "graded_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        }
        course.write_json("status", s, status)
        statuses[s] = status
    return statuses
