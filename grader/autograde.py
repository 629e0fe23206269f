"""Autograde submissions so that one bad notebook never stops the batch.

Every student is one job (:func:`grade_student`): each submitted notebook is read defensively
(grader/submissions.py) and audited (grader/audit.py) here, then ONE sandboxed session of that student
(grader/session.py, in grader/sandbox.py's sandbox) runs, per notebook,

* **the full run**: the notebook executed as Jupyter would, in an IPython shell forked after the
  release's setup cell (light by default: the course's demonstration cells run only their definitions
  and keep the outputs the student submitted; see :data:`DEMO_NOTE`). It produces the executed notebook
  the TA and the feedback show, and the written answers for manual grading. It decides no autograded point.
* **the judge's probes** (grader/probe.py): the student's answer cells loaded once, one forked
  process per case; the judge (grader/judge.py) compares what came back with the solution's values in
  this process and writes the points of every autograded test cell.

The session imports the libraries once per student and runs each setup cell once for both steps, not once
per notebook and step.

Jobs run ``workers`` at a time; their scores are merged into the real gradebook one by one in this
process, so workers never fight over the sqlite file and no student's code ever sees it.

Each notebook ends with a status, and the student's status is the worst of them:
``unreadable`` > ``kernel died`` > ``timed out`` > ``tampered`` > ``review`` > ``graded``. Only
``unreadable`` (nothing to grade) costs points by itself; the others describe the full run or the
static audit (grader/audit.py) for the TA, and the judge's points stand.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from . import ASSIGNMENT
from .course import COURSE_ID, Course, add_students, sync_assignment
from . import judge as judging
from .sandbox import (cgroup_protections, describe, join_cgroup, nproc_limit, protections, remove_cgroup,
                      student_cgroups)
from .process import Limits
from .progress import BatchProgress
from .submissions import Unreadable, prepare, release_view
from utils.notebook_cells import cell_role, cell_source, grade_id, nbgrader_meta

STATUS_ORDER = ["unreadable", "kernel died", "timed out", "tampered", "review", "graded"]


@dataclass
class Settings:
    """Limits of one autograde run."""

    cell_timeout: int = 60           # seconds per cell (nbgrader interrupts the cell, goes on), and per judge case
    notebook_timeout: int = 180      # hard wall limit of one notebook's full run (session hung, interrupt ignored)
    mem_gb: float = 6.0              # the memory cap of each student's grading session
    workers: int = 1
    sandbox: str = "auto"            # auto | bwrap | unshare | none
    max_output_lines: int = 1000
    session_threads: int = 0         # torch/BLAS threads per grading session (0: CPU cores / workers)
    seed: int | None = None          # the judge's input seed (None: the grading folder's own, see judge_seed)
    judge_budget: int = 120          # one notebook's judge run: loading its top-level code and every case
    load_seconds: int = 60           # of which, at most, running the student's top-level statements (each at most 30 s)
    full_run: str = "light"          # light: the course's demonstration cells run their definitions only; full: every cell

    def threads(self) -> int:
        return self.session_threads or max(1, (os.cpu_count() or 1) // max(1, self.workers))

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
        groups = cgroup_protections()
        prot["cpu_cgroup"], prot["memory_cgroup"] = groups["cpu"], groups["memory"]
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
    infra: bool = False                             # no sandbox started: the grader's fault
    full_run_ok: bool = False
    verdict: object = None                          # the judge's Verdict
    audit: list = field(default_factory=list)       # static audit findings (grader/audit.py)
    full_run_reason: str = ""                       # why the full run failed (feedback's note), "" if it did not


def _worst(statuses) -> str:
    statuses = list(statuses) or ["graded"]
    return min(statuses, key=STATUS_ORDER.index)


# ----------------------------------------------------------------------------- one job
def session_limits(settings: Settings) -> Limits:
    """The setrlimit caps of a student's session, per process (grader/process.py ``Limits``)."""
    return Limits(mem_bytes=int(settings.mem_gb * 1024 ** 3), fsize_bytes=2 * 1024 ** 3,
                  nproc=None if os.getuid() == 0 else nproc_limit())   # root: the pids cgroup caps it


def grade_notebook(course: Course, student: str, notebook: str, settings: Settings, workroot: Path,
                   reference: dict | None = None) -> NotebookResult:
    """Autograde one notebook of one student (nbgrader's Autograde button grades one at a time):
    :func:`grade_student` with that notebook alone."""
    return grade_student(course, student, [notebook], settings, workroot, {notebook: reference})[0]


@dataclass
class Job:
    """One readable notebook of a student's session: as graded, and where its results go."""
    notebook: str
    graded: dict          # the submission with the release's locked cells restored
    release: dict
    result: NotebookResult


def grade_student(course: Course, student: str, notebooks: list[str], settings: Settings, workroot: Path,
                  references: dict[str, dict | None]) -> list[NotebookResult]:
    """Autograde every notebook of one student (one job of the batch); never raises for student faults.
    ``references`` maps each notebook to the solution's evidence (judge.reference_records).

    Each notebook is read defensively and audited here; then ONE sandboxed session
    (grader/session.py) runs every readable notebook's full run and judge probes, importing the
    libraries once and running each setup cell once for both; the judge's points are decided here,
    outside the sandbox."""
    started = time.monotonic()
    results = [NotebookResult(student, nb) for nb in notebooks]
    jobs: list[Job] = []
    for result in results:
        notebook = result.notebook
        submitted = course.folder("submitted", student) / f"{notebook}.ipynb"
        if not submitted.exists():
            result.reasons.append(f"{notebook}.ipynb not submitted (0 points)")
            result.grades = None  # zero everything
            continue
        release_path = course.release / f"{notebook}.ipynb"
        try:
            prepared = prepare(submitted, release_path)
        except Unreadable as exc:
            result.status, result.grades = "unreadable", None
            result.reasons.append(str(exc))
            continue
        if prepared.tampered:
            result.status = "tampered"
        result.reasons += prepared.tampered + prepared.notes
        audit_submission(prepared.notebook, notebook, result, release_path)
        release = json.loads(release_path.read_text(encoding="utf-8"))
        jobs.append(Job(notebook, release_view(prepared.notebook, release), release, result))
    if jobs:
        scratch = Path(tempfile.mkdtemp(prefix=f"{student}-", dir=workroot))
        # pids, CPU (the worker's share of the cores) and memory (all the session's processes together)
        cgroup = student_cgroups(scratch.name, cpus=settings.threads(),
                                 mem_bytes=int(settings.mem_gb * 1024 ** 3) + SESSION_MEMORY)
        try:
            records, tail = _run_session(student, jobs, settings, scratch, course, cgroup)
        finally:
            remove_cgroup(cgroup)
        # "infra": the sandbox never started (no "ready" record, sent before any student code runs):
        # the grader's fault, graded again by the next run. Anything after that is the student's.
        infra = not any(r.get("kind") == "ready" for r in records)
        from .feedback import secret_strings

        secrets = secret_strings(settings.seed or 0, [job.notebook for job in jobs])
        for job in jobs:
            job.result.scratch = scratch / job.notebook
            job.result.scratch.mkdir()
            job.result.infra = infra
            mine = [r for r in records if r.get("stem") == job.notebook or r.get("kind") == "void"]
            stops = sum(r.get("stopped") or 0 for r in mine if r.get("kind") == "notebook_done"
                        and isinstance(r.get("stopped"), int))
            if stops:
                job.result.status = worse_status(job.result.status, "review")
                job.result.reasons.append(f"{job.notebook}: code in the notebook stopped its own grading process "
                                          f"({stops} time{'s' if stops > 1 else ''}, SIGSTOP); the grader continued it "
                                          "each time (checks that ran out of time meanwhile score 0)")
            try:
                executed = _full_run_result(job, mine, "" if not infra else tail, settings, secrets)
                verdict = _verdict(job, mine, tail, settings, references.get(job.notebook))
                apply_verdict(course, job.notebook, verdict, executed, job.result)
                if executed is not None:   # the one write of the executed notebook
                    job.result.autograded = job.result.scratch / f"{job.notebook}.ipynb"
                    write_notebook(job.result.autograded, executed)
            except Exception as exc:  # noqa: BLE001 - this notebook's content tripped the grader: it alone
                job.result.status, job.result.grades, job.result.autograded = "review", None, None
                job.result.reasons.append(f"{job.notebook}: the grader could not process this notebook's results "
                                          f"({exc.__class__.__name__}); 0 autograded points; look at it by hand")
        shutil.rmtree(scratch / "session", ignore_errors=True)
    elapsed = time.monotonic() - started
    graded = [j.result for j in jobs]
    for result in results:   # each notebook's own time in the session, plus its share of the rest
        own = sum(r.get("seconds") or 0.0 for r in records if r.get("kind") == "notebook_done"
                  and r.get("stem") == result.notebook) if jobs else 0.0
        shared = elapsed - sum(r.get("seconds") or 0.0 for r in records if r.get("kind") == "notebook_done") if jobs else 0.0
        result.seconds = own + max(shared, 0.0) / max(1, len(graded)) if result in graded else 0.0
    return results


def _session_cells(graded: dict, release: dict, mode: str = "light") -> list[dict]:
    """The code cells the full run executes, in order: index (position in ``graded``), id, role, source.

    A cell that is exactly one of the release's given cells (the course's demonstrations: training
    runs, ablations, plots) has role ``demo``: in the ``light`` mode the full run runs only its
    definitions, and the notebook shows the outputs the student submitted for it (:func:`_demo_outputs`).
    Every other code cell (setup, answers, tests, and any cell the student wrote or edited) runs in full."""
    text = cell_source
    demos = {text(c).strip() for c in release["cells"] if c.get("cell_type") == "code" and cell_role(c) == "given"}
    cells = []
    for i, cell in enumerate(graded["cells"]):
        if cell.get("cell_type") != "code":
            continue
        role = cell_role(cell)
        if role == "given":
            role = "demo" if mode == "light" and text(cell).strip() in demos else "answer"
        cells.append({"index": i, "id": grade_id(cell) or f"cell {i + 1}", "role": role, "source": text(cell)})
    return cells


#: The first output of a demonstration cell the light full run did not execute.
DEMO_NOTE = ("[grader] The course's demonstration code in this cell was not re-run by the autograder (it grades "
             "no point: the judge grades your functions). The outputs below are the ones you submitted.\n")


def session_plan(jobs: list[Job], settings: Settings, threads: int) -> dict:
    """What the sandboxed session gets on stdin: per notebook its cells and the judge's plan with the
    per-case seeds. The run's label is its index, never the batch's seed: nothing in the sandbox holds
    the seed (a stack walk in a notebook once printed it into the feedback)."""
    notebooks = []
    for job in jobs:
        runs = [{"label": i, "case_seeds": run["case_seeds"]}
                for i, run in enumerate(judging.case_runs([settings.seed or 0], job.notebook))]
        notebooks.append({"stem": job.notebook, "cells": _session_cells(job.graded, job.release, settings.full_run), "judge": {
            "runs": runs, "isolate": "case", "case_timeout": settings.cell_timeout,
            "budget": settings.judge_budget, "load_seconds": settings.load_seconds,
            "statement_seconds": min(30, settings.load_seconds), "groups": judging.case_groups(job.notebook),
            "variants": {"student": judging.notebook_cells(job.release, job.graded)}}})
    return {"notebooks": notebooks, "cell_timeout": settings.cell_timeout, "threads": threads,
            "notebook_timeout": settings.notebook_timeout, "judge_budget": settings.judge_budget,
            "max_output_lines": settings.max_output_lines, "setup_seconds": SETUP_SECONDS,
            "full_run": settings.full_run}


def session_command(settings: Settings, work: Path, threads: int) -> tuple[list[str], dict]:
    """(argv, environment) that start one student's session in the sandbox."""
    from .sandbox import session_prefix

    env = judging._harness_env(threads)
    env.update(session_limits(settings).to_env())
    prefix = session_prefix(settings.mode(), work, env, overlay=protections()["overlay"])
    outer_env = dict(env) if not prefix or prefix[0] != "bwrap" else {"PATH": os.environ.get("PATH", "")}
    return [*prefix, sys.executable, "-m", "grader.session", "-"], outer_env


def _run_session(student: str, jobs: list[Job], settings: Settings, scratch: Path, course: Course,
                 cgroup) -> tuple[list[dict], str]:
    """Run grader/session.py for ``jobs`` in the student's sandbox; (records, the tail of its stderr)."""
    work = scratch / "session" / "work"
    work.mkdir(parents=True)
    for job in jobs:   # what the student's code sees in its working folder: its own notebooks
        shutil.copy(course.folder("submitted", student) / f"{job.notebook}.ipynb", work / f"{job.notebook}.ipynb")
    threads = settings.threads()
    plan = session_plan(jobs, settings, threads)
    cmd, env = session_command(settings, work, threads)
    # the session keeps each notebook to its limits itself; this is the backstop
    timeout = 60 + len(jobs) * (settings.notebook_timeout + settings.judge_budget + SETUP_SECONDS)
    return run_sandboxed(cmd, plan, workdir=work, env=env, timeout=timeout,
                         preexec_fn=join_cgroup(cgroup), stems=[job.notebook for job in jobs])


#: Full-run outputs kept per student session: past this, a cell's outputs are replaced by a note (the
#: judge's records still count). Caps drop output, never grades.
OUTPUT_BYTES = 64 * 1024 ** 2
#: Everything else one session may send (the judge's records): past this the session is stopped, and
#: only the notebooks it had finished count.
RECORD_BYTES = 1024 ** 3


def run_sandboxed(cmd: list[str], plan: dict, *, workdir: Path, env: dict, timeout: float, preexec_fn=None,
                  stems: list[str] = ()) -> tuple[list[dict], str]:
    """Run one session (``cmd``, the plan on stdin) and collect its numbered records; (records, the tail
    of its stderr). Records count only in sequence (0, 1, 2, ...): at the first break (a forged or
    lost record, a session killed at the backstop ``timeout``), every notebook that had not sent its
    ``notebook_done`` gets a ``notebook_void`` record; the notebooks before it stand."""
    records: list[dict] = []
    problem = ""
    with tempfile.TemporaryFile(dir=workdir) as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, stdin=subprocess.PIPE,
                                cwd=workdir, env=env, start_new_session=True, preexec_fn=preexec_fn)
        timer = threading.Timer(timeout, judging._kill_group, args=(proc,))
        timer.start()
        try:
            proc.stdin.write(json.dumps(plan).encode())
            proc.stdin.close()
        except (BrokenPipeError, OSError):
            pass
        outputs = others = 0
        try:
            while True:
                line = proc.stdout.readline(judging.MAX_RECORD_BYTES + 1)
                if not line:
                    break
                if len(line) > judging.MAX_RECORD_BYTES or not line.endswith(b"\n"):
                    problem = "the session sent a record longer than the grader accepts"
                    break
                try:
                    rec = json.loads(line)
                except (ValueError, RecursionError):
                    rec = None
                if not isinstance(rec, dict) or rec.get("seq") != len(records):
                    problem = f"record {len(records)} is out of sequence (a forged, lost or malformed record)"
                    break
                if rec.get("kind") == "cell":
                    outputs += len(line)
                    if outputs > OUTPUT_BYTES:
                        rec["outputs"] = [{"output_type": "stream", "name": "stderr", "text":
                                           f"[grader] The outputs of this cell were dropped: the notebooks printed "
                                           f"more than {OUTPUT_BYTES >> 20} MiB in all\n"}]
                else:
                    others += len(line)
                    if others > RECORD_BYTES:
                        problem = f"the session sent more than {RECORD_BYTES >> 20} MiB of records"
                        break
                records.append(rec)
        finally:
            timer.cancel()
            if problem:
                judging._kill_group(proc)
            try:
                returncode = proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                judging._kill_group(proc)
                returncode = proc.wait()
            judging._kill_group(proc)  # whatever the run left behind
        err.seek(0, 2)
        size = err.tell()
        err.seek(max(0, size - 4000))
        tail = err.read().decode("utf-8", "replace")
    if not problem:
        if not records or records[-1].get("kind") != "done":
            problem = "the session did not finish (killed at the grader's time limit, or it crashed)"
        elif returncode != 0:
            problem = f"the session exited with status {returncode}"
    if problem:
        finished = {r.get("stem") for r in records if r.get("kind") in ("notebook_done", "notebook_void")}
        records += [{"kind": "notebook_void", "stem": stem, "problem": problem} for stem in stems
                    if stem not in finished]
    return records, tail


#: A session's memory cgroup holds ``mem_gb`` (each process's own cap) plus this, for the libraries
#: every process of the session maps (torch, transformers) and the page cache it fills.
SESSION_MEMORY = 4 * 1024 ** 3
#: Load per core above which a student whose checks timed out is graded again by the next run (only
#: where no CPU cgroup keeps students apart), at most OVERLOAD_RETRIES times.
OVERLOAD = 1.5
OVERLOAD_RETRIES = 2


def overloaded(results: list, prot: dict) -> str:
    """Why the checks of a student that timed out may be the machine's fault ("" when they are not):
    no per-student CPU cgroup, and more runnable processes than cores over the last minute."""
    timed = any(r.verdict is not None and any(not c.passed and ("did not finish" in c.message or
                                                                "was used up" in c.message)
                                              for c in r.verdict.cases) for r in results)
    if not timed or prot.get("cpu_cgroup"):
        return ""
    try:
        load = os.getloadavg()[0] / max(1, os.cpu_count() or 1)
    except OSError:
        return ""
    return f"load {load:.1f} per core" if load > OVERLOAD else ""


#: Seconds a notebook's setup cell (imports, the model suite) may take inside a session.
SETUP_SECONDS = 120

def instructor_cells_as_released(nb: dict, release_path: Path) -> set[str]:
    """grade_ids of the locked cells (setup, given code, tests) whose source is the release's own
    (the Colab pack URL line aside): the instructor's code, which the audit need not flag (nbgrader
    restores locked cells anyway; an edited one is still audited and reported as tampering)."""
    from .bundle import without_pack_url

    try:
        release = json.loads(release_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return set()

    def src(cell):
        return without_pack_url(cell_source(cell)).strip()

    locked = {grade_id(c): src(c) for c in release.get("cells", [])
              if nbgrader_meta(c).get("locked") and grade_id(c)}
    same = set()
    for cell in nb.get("cells", []):
        gid = grade_id(cell)
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
        gid = grade_id(cell)
        cells.append({"cell_type": cell.get("cell_type"), "source": cell_source(cell),
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


def audit_submission(nb: dict, notebook: str, result: NotebookResult, release_path: Path | None = None, *,
           timeout: float = AUDIT_TIMEOUT, mem_bytes: int = AUDIT_MEM_BYTES) -> None:
    """The static audit: suspicious code keeps its points but asks a TA to look (status review).
    Locked cells exactly as released are the instructor's and are not audited. The audit runs in a
    child process under ``mem_bytes`` and ``timeout`` (:func:`run_audit`); past either, the notebook
    is marked review with a reason that says so, and the batch goes on."""
    try:
        answer_ids = None
        if release_path is not None:
            skip = instructor_cells_as_released(nb, release_path)
            ids = {grade_id(c) for c in nb.get("cells", []) if isinstance(c, dict)}
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


#: Caps on the outputs a student SUBMITTED under a demonstration cell (shown, never run, never evidence).
SUBMITTED_OUTPUTS = 20
SUBMITTED_TEXT = 20_000          # characters of text per cell
SUBMITTED_IMAGE = 1024 ** 2      # characters of base64 per image, and 2 MiB per cell in all
SUBMITTED_IMAGES = 2 * 1024 ** 2


def submitted_outputs(outputs, secrets: tuple = ()) -> list[dict]:
    """What a student submitted under a demonstration cell, as untrusted text and images: streams and
    plain text (capped), PNG/JPEG images (capped), an error as plain stderr text (never an error
    output, so nothing reads it as the full run's); no HTML, markdown, SVG or script (no overlay, no
    external image or link), never more than :data:`SUBMITTED_OUTPUTS` outputs."""
    from .feedback import BASE64, _text, scrub_value

    kept: list[dict] = []
    text_left, image_left = SUBMITTED_TEXT, SUBMITTED_IMAGES
    dropped = 0

    def text_of(value) -> str:
        nonlocal text_left
        value = _text(value) or ""
        cut, text_left = value[:max(text_left, 0)], text_left - len(value)
        return cut
    for out in outputs if isinstance(outputs, list) else []:
        if not isinstance(out, dict) or len(kept) >= SUBMITTED_OUTPUTS or text_left <= 0:
            dropped += 1
            continue
        kind = out.get("output_type")
        if kind == "stream":
            kept.append({"output_type": "stream", "name": "stderr" if out.get("name") == "stderr" else "stdout",
                         "text": text_of(out.get("text"))})
        elif kind == "error":
            kept.append({"output_type": "stream", "name": "stderr",
                         "text": text_of(f"{out.get('ename', '')}: {out.get('evalue', '')}"[:2000]) + "\n"})
        elif kind in ("display_data", "execute_result"):
            data = out.get("data") if isinstance(out.get("data"), dict) else {}
            shown = {}
            for mime in ("image/png", "image/jpeg"):
                image = _text(data.get(mime))
                if image and len(image) <= min(SUBMITTED_IMAGE, image_left) and BASE64.fullmatch(image):
                    shown[mime] = image
                    image_left -= len(image)
                    break
            if _text(data.get("text/plain")) is not None:
                shown["text/plain"] = text_of(data["text/plain"])
            if shown:
                kept.append({"output_type": "display_data", "data": shown, "metadata": {}})
            else:
                dropped += 1
        else:
            dropped += 1
    if dropped:
        kept.append({"output_type": "stream", "name": "stderr",
                     "text": f"[grader] {dropped} more submitted output(s) not shown (too large, or HTML/scripts)\n"})
    return scrub_value(kept, secrets)


def _run_output(out: dict) -> bool:
    return isinstance(out, dict) and out.get("output_type") in ("stream", "display_data", "execute_result", "error")


def write_notebook(path: Path, nb: dict) -> None:
    """An executed notebook as the grader writes it: ASCII JSON, so a lone surrogate a student printed
    (``print("\\ud800")``) is stored escaped instead of making the file unwritable."""
    path.write_text(json.dumps(nb, indent=1, ensure_ascii=True), encoding="utf-8")


def _full_run_result(job: Job, records: list[dict], tail: str, settings: Settings,
                     secrets: tuple = ()) -> dict | None:
    """The executed notebook from the session's cell records (None when no cell ran), and the full run's status (timeouts, a dead process, memory-cap hits) in ``job.result``. Every
    output is scrubbed of the batch's seeds; the statuses come from the session's own observations
    (the ``full_run`` record), never from what an output says."""
    from .feedback import scrub_value

    result, notebook = job.result, job.notebook
    result.log = tail
    nb = json.loads(json.dumps(job.graded))
    roles = {c["index"]: c["role"] for c in _session_cells(job.graded, job.release, settings.full_run)}
    submitted = {i: nb["cells"][i].get("outputs") for i in roles}
    for i in roles:   # a cell the full run did not reach shows no output
        nb["cells"][i]["outputs"], nb["cells"][i]["execution_count"] = [], None
    executed_cells = 0
    run_outputs: dict[int, list] = {}
    for rec in records:
        if rec.get("kind") == "cell" and rec.get("index") in roles and isinstance(rec.get("outputs"), list):
            i = rec["index"]
            outputs = scrub_value([o for o in rec["outputs"] if _run_output(o)][:100], secrets)
            run_outputs[i] = outputs
            if roles[i] == "demo":
                outputs = [*outputs, {"output_type": "stream", "name": "stdout", "text": DEMO_NOTE},
                           *submitted_outputs(submitted[i], secrets)]
            nb["cells"][i]["outputs"] = outputs
            count = rec.get("execution_count")
            nb["cells"][i]["execution_count"] = count if isinstance(count, int) and roles[i] != "demo" else None
            executed_cells += 1
    _manual_grades(job)
    full = next((r for r in records if r.get("kind") == "full_run"), None)
    status = full.get("status") if isinstance(full, dict) else "died"
    where = _cell_name(nb, full.get("index")) if isinstance(full, dict) else ""
    if status == "budget":
        result.status = worse_status(result.status, "timed out")
        result.reasons.insert(0, f"{notebook}: the full run was still going after the {settings.notebook_timeout} s "
                                 "limit per notebook (a loop that ignores interrupts?); the cells after it were not "
                                 "run, the judge graded the functions")
        result.full_run_reason = result.reasons[0]
    elif status == "timeout":
        result.status = worse_status(result.status, "timed out")
        result.reasons.insert(0, f"{notebook}: a cell ({where}) ran past {settings.cell_timeout} s and ignored the "
                                 "interrupt; the full run stopped there")
        result.full_run_reason = result.reasons[0]
    elif status == "forged":
        result.status = worse_status(result.status, "review")
        result.reasons.insert(0, f"{notebook}: something in the notebook wrote into the full run's own channel at "
                                 f"{where or 'its start'}; the full run stopped there (the judge graded the functions); "
                                 "look at it by hand")
        result.full_run_reason = result.reasons[0]
    elif status != "ok":
        result.status = worse_status(result.status, "kernel died")
        result.reasons.insert(0, f"{notebook}: the kernel died in the full run{f' at {where}' if where else ''} "
                                 f"(os._exit, a crash, or the {settings.mem_gb:g} GB memory cap); look at it by hand")
        result.full_run_reason = result.reasons[0]
    result.full_run_ok = status == "ok"
    interrupted = full.get("interrupted") if isinstance(full, dict) and isinstance(full.get("interrupted"), list) else []
    inspect_outputs(nb, run_outputs, interrupted, result, settings)
    return nb if executed_cells else None


def _cell_name(nb: dict, index) -> str:
    if not isinstance(index, int) or not 0 <= index < len(nb["cells"]):
        return ""
    return grade_id(nb["cells"][index]) or f"cell {index + 1}"


def _manual_grades(job: Job) -> None:
    """Written answers go to the TA, as nbgrader's SaveAutoGrades decides: an answer left exactly as
    released scores 0 and needs no grading (nbgrader.utils.determine_grade's checksum rule)."""
    import nbformat
    from nbgrader import utils as nbutils

    grades = dict(job.result.grades or {})
    for cell in job.graded["cells"]:
        flags = nbgrader_meta(cell)
        if not (flags.get("grade") and flags.get("solution")):
            continue
        try:
            node = nbformat.from_dict({**cell, "source": cell_source(cell)})
            unchanged = flags.get("checksum") and flags["checksum"] == nbutils.compute_checksum(node)
        except Exception:  # noqa: BLE001 - an odd cell is simply graded by hand
            unchanged = False
        grades[flags["grade_id"]] = (0.0, False) if unchanged else (None, True)
    job.result.grades = grades


def _verdict(job: Job, records: list[dict], tail: str, settings: Settings, reference: dict | None):
    """The judge's verdict on the session's evidence for this notebook; None without a reference."""
    if reference is None:
        return None
    result, notebook, release = job.result, job.notebook, job.release
    secrets = (str(settings.seed or 0), *(str(v) for v in judging.case_runs([settings.seed or 0], notebook)[0]["case_seeds"].values()))
    void = next((str(r.get("problem")) for r in records if r.get("kind") in ("void", "notebook_void")), "")
    if void:
        records = [{"kind": "void", "problem": void}]
    cases, header = judging.by_case(records, "student")
    void = judging.void_problem(records)
    if void:
        result.status = worse_status(result.status, "review")
        result.reasons.append(f"{notebook}: the judge discarded every check ({void}); 0 autograded points; "
                              "look at it by hand")
    elif not cases:
        result.reasons.append(f"{notebook}: the judge got no evidence (the probe run failed: "
                              f"{tail.strip().splitlines()[-1][:200] if tail.strip() else 'no output'})")
    verdict = judging.judge(notebook, cases, reference, judging.points_per_test_cell(release), header, secrets)
    timed = sorted({c.cell for c in verdict.cases if not c.passed and "did not finish" in c.message})
    if timed:
        # the light full run does not call the functions: a function that hangs shows here
        result.status = worse_status(result.status, "timed out")
        result.reasons.append(f"{notebook}: checks of {', '.join(timed)} ran past their time limit (0 for those checks)")
    cell_of = {case.probe: case.cell for case in judging.load_cases(notebook)}
    died = sorted({cell_of[name] for name, rec in cases.items() if rec.get("status") == "died" and name in cell_of})
    if died:
        result.status = worse_status(result.status, "kernel died")
        result.reasons.append(f"{notebook}: checks of {', '.join(died)} ended their grading process (os._exit, a crash "
                              f"or the {settings.mem_gb:g} GB memory cap; 0 for those checks)")
    budget = sorted({c.cell for c in verdict.cases if not c.passed and "was used up" in c.message})
    if budget:
        result.status = worse_status(result.status, "timed out")
        result.reasons.append(f"{notebook}: the judge's {settings.judge_budget} s for this notebook ran out before the "
                              f"checks of {', '.join(budget)} (0 for those checks)")
    if verdict.dropped:
        shown = "; ".join(verdict.dropped[:5]) + (f"; and {len(verdict.dropped) - 5} more" if len(verdict.dropped) > 5 else "")
        result.reasons.append(f"{notebook}: the judge could not run {shown}")
        if any(e.get("kind") in ("timeout", "died", "budget") for e in header.get("not_run", []) if isinstance(e, dict)):
            result.status = worse_status(result.status, "timed out")
    if verdict.tampered:
        result.status = worse_status(result.status, "review")
        result.reasons.append(f"{notebook}: {verdict.tampered}; the judge discarded the checks after it")
    return verdict


def apply_verdict(course, notebook, verdict, executed: dict | None, result) -> None:
    """The judge's points replace whatever nbgrader read from the test cells' outputs; the executed notebook
    (``executed``, None when nothing ran) gets the judge's reports and the rubrics, in place."""
    manual = dict(result.grades or {})
    result.grades = {}
    if verdict is None:
        result.grades = None
        return
    release = json.loads((course.release / f"{notebook}.ipynb").read_text(encoding="utf-8"))
    for cell in release["cells"]:
        flags = nbgrader_meta(cell)
        gid = flags.get("grade_id")
        if flags.get("grade") and flags.get("solution"):     # a written answer: the TA grades it
            result.grades[gid] = manual.get(gid, (None, True))
    for cell, pts in verdict.points.items():
        result.grades[cell] = (pts, False)
        result.comments[cell] = verdict.cell_report(cell)
    result.verdict = verdict
    if executed is not None:
        notebook_step(result, "the judge's report under each test cell", annotate_reports, executed, verdict)
        notebook_step(result, "the rubrics under the written answers", insert_rubrics, executed,
                       course.source / f"{notebook}.ipynb")


def notebook_step(result: NotebookResult, what: str, step, *args) -> None:
    """Run one step that rewrites the executed notebook: a failure is a reason on the notebook's status
    for the TA, never silent, and never costs a point."""
    try:
        step(*args)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        result.status = worse_status(result.status, "review")
        result.reasons.append(f"{result.notebook}: {what} could not be added to the executed notebook "
                              f"({exc.__class__.__name__}: {str(exc)[:120]}); the points stand")


def annotate_reports(nb: dict, verdict) -> None:
    """Put the judge's per-case report under each test cell of the executed notebook ``nb`` (feedback)."""
    for cell in nb["cells"]:
        gid = grade_id(cell)
        if gid in verdict.points and cell.get("cell_type") == "code":
            cell.setdefault("outputs", []).append(
                {"output_type": "stream", "name": "stdout", "text": verdict.cell_report(gid) + "\n"})


def worse_status(a: str, b: str) -> str:
    return min(a, b, key=STATUS_ORDER.index)


def inspect_outputs(nb: dict, run_outputs: dict[int, list], interrupted: list, result: NotebookResult,
                     settings: Settings) -> None:
    """Timeouts and memory errors of the full run: the cells the session itself interrupted at their
    time limit (``interrupted``, its own clock), and MemoryErrors among the outputs the full run made
    (``run_outputs``; never the outputs a student submitted under a demonstration cell)."""
    for index in dict.fromkeys(i for i in interrupted if isinstance(i, int)):
        result.status = worse_status(result.status, "timed out")
        result.reasons.append(f"{_cell_name(nb, index) or 'a cell'} ran past {settings.cell_timeout} s and was "
                              "interrupted in the full run")
    for index, outputs in run_outputs.items():
        for out in outputs:
            if out.get("output_type") == "error":
                ename, evalue = str(out.get("ename", "")), str(out.get("evalue", ""))
                if ename == "MemoryError" or "can't allocate memory" in evalue or "out of memory" in evalue.lower():
                    result.reasons.append(f"{_cell_name(nb, index) or 'a cell'} hit the {settings.mem_gb:g} GB "
                                          "memory cap")
                    break

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
    if dest.is_symlink() or (dest.exists() and not dest.is_file()):
        dest.unlink()
    if result.autograded is not None and result.autograded.is_file() and not result.autograded.is_symlink():
        from .feedback import strip_active_outputs

        # formgrader shows this copy in the TA's browser: nothing of the student's may run there. A
        # notebook that cannot be cleaned (whatever the reason) is not copied: the TA reads the reason.
        try:
            executed = json.loads(result.autograded.read_text(encoding="utf-8"))
            write_notebook(result.autograded, strip_active_outputs(executed))
            shutil.copyfile(result.autograded, dest, follow_symlinks=False)
        except Exception as exc:  # noqa: BLE001 - one student's content never stops the batch
            dest.unlink(missing_ok=True)
            result.reasons.append(f"{result.notebook}: the executed notebook could not be made safe to show "
                                  f"({exc.__class__.__name__}); it is not in autograded/, look at the submission by hand")
            result.status = worse_status(result.status, "review")
    elif dest.exists():
        dest.unlink()  # never leave an older run's notebook behind for feedback
    return score, max_score


def _is_manual(gb, cell) -> bool:
    """A manually graded answer is a grade cell that is also a solution cell."""
    from nbgrader.api import SolutionCell

    return gb.db.query(SolutionCell).filter(SolutionCell.name == cell.name,
                                            SolutionCell.notebook_id == cell.notebook_id).count() > 0


# ----------------------------------------------------------------------------- the batch
def insert_rubrics(nb: dict, source: Path) -> None:
    """Put each written answer's rubric (from the source notebook, grader/tiers.py) directly under the
    student's answer in the autograded notebook, where the TA grades it in formgrader. Cells a student
    tagged ``rubric`` are dropped first; feedback drops every rubric cell again (feedback.sanitise).
    In place; raises on a malformed notebook (the caller makes it a reason on the status)."""
    from .tiers import RUBRIC_TAG, rubric_cells, strip_rubrics

    rubrics = rubric_cells(source)
    cells = []
    for cell in strip_rubrics(nb)["cells"]:
        cells.append(cell)
        gid = grade_id(cell)
        if gid in rubrics and cell.get("cell_type") == "markdown":
            cells.append({"cell_type": "markdown", "metadata": {"tags": [RUBRIC_TAG]},
                          "source": rubrics.pop(gid)})
    nb["cells"] = cells


def autograde(course: Course, students: list[str] | None = None, settings: Settings | None = None,
              progress=print, sync: bool = True, *, regrade: bool = False, summary: dict | None = None,
              bar: bool = False) -> dict[str, dict]:
    """Grade ``students`` (default: everyone in grading/submitted), one job per student, ``workers`` at
    a time. Returns student -> status dict (grading/status/<student>.json).

    Each finished student is merged into the gradebook and their status file written at once, with a
    fingerprint of what was graded (grader/batch.py): a batch killed half-way loses only the students
    in flight, and running it again skips every student whose status carries the fingerprint of the
    present submission, assignment, grader, seed and settings (``regrade``: grade them all again).
    ``summary``, if given, receives the run's figures (graded, skipped, seconds, worker_seconds);
    ``bar`` shows a tqdm bar on a terminal's stderr (the progress lines still go to ``progress``)."""
    from .batch import batch_fingerprint, ensure_seed, grade_settings, student_fingerprint

    settings = settings or Settings()
    notebooks = sync_assignment(course) if sync or not course.db_path.exists() else course.notebook_names()
    students = _known_students(course, students)
    add_students(course, students)
    prot = settings.protections()
    progress(f"sandbox: {settings.mode()} | {describe(prot)}")
    if settings.seed is None:
        settings.seed = ensure_seed(course.grading)
    batch = batch_fingerprint(course, notebooks, settings.seed, grade_settings(settings))
    fingerprints = {s: student_fingerprint(course, s, notebooks, batch) for s in students}
    statuses = _graded_before(course, students, fingerprints, regrade, progress)
    todo = [s for s in students if s not in statuses]
    workroot = Path(tempfile.mkdtemp(prefix="las-autograde-"))
    sigterm = _sigterm_as_interrupt()   # scancel, kill, preemption: clean up as after Ctrl-C
    report = BatchProgress(progress, len(todo), bar=bar, workers=settings.workers)
    try:
        references = reference_values(course, notebooks if todo else [], settings, workroot, report.say)
        ran: list[NotebookResult] = []
        with ThreadPoolExecutor(max(1, settings.workers)) as pool, _cancel_pending_on_error(pool):
            futures = {pool.submit(grade_student, course, s, notebooks, settings, workroot, references): s
                       for s in todo}
            for future in as_completed(futures):
                s = futures[future]
                statuses[s], results = _finish_student(course, s, future, notebooks, prot, fingerprints[s], report)
                ran += [r for r in results if r.scratch is not None]
                report.student_done(s, statuses[s])
        if ran and all(r.infra for r in ran):
            # infra: no session sent its first record, which comes before any student code runs, so the
            # log is the sandbox's or Python's own (never a student's output)
            raise RuntimeError(f"no grading session started (sandbox mode {settings.mode()!r}): the sandbox or "
                               "the Python environment fails on this machine (check that `bwrap --unshare-all --ro-bind / / true` "
                               "works and that the environment imports); the session said:\n"
                               + ran[0].log[-2000:])
        figures = report.finish(skipped=len(students) - len(todo))
        if summary is not None:
            summary.update(figures)
        return {s: statuses[s] for s in students}
    finally:
        report.close()
        shutil.rmtree(workroot, ignore_errors=True)
        if sigterm is not None:
            signal.signal(signal.SIGTERM, sigterm)


def _known_students(course: Course, students: list[str] | None) -> list[str]:
    """``students`` (default: everyone with a submission folder); a name without one is the TA's error."""
    everyone = course.students()
    students = everyone if students is None else students
    missing = [s for s in students if s not in everyone]
    if missing:
        raise FileNotFoundError(f"no submission folder for {', '.join(missing)} under "
                                f"{course.grading / 'submitted'} (run `python -m grader collect` first)")
    return students


def _graded_before(course: Course, students: list[str], fingerprints: dict, regrade: bool, say) -> dict[str, dict]:
    """student -> status of those already graded with these inputs (none with ``regrade``), said in one line."""
    from .batch import is_finished

    statuses = {}
    for s in students:
        status = course.read_json("status", s)
        if not regrade and is_finished(status, fingerprints[s]):
            statuses[s] = status
    if statuses:
        names = sorted(statuses)
        say(f"skipped {len(names)} of {len(students)} students, graded before with these submissions, "
            f"assignment, grader, seed and settings (--regrade grades them again): "
            + ", ".join(names[:30]) + (f" and {len(names) - 30} more" if len(names) > 30 else ""))
    return statuses


def reference_values(course: Course, notebooks: list[str], settings: Settings, workroot: Path, say) -> dict:
    """notebook -> the judge's reference records: the solution's values for this batch's seed, computed
    outside the sandbox (or read from grading/cache/)."""
    references = {}
    for nb in notebooks:
        say(f"judge: reference values of {nb} (the solution, outside the sandbox)")
        release = json.loads((course.release / f"{nb}.ipynb").read_text(encoding="utf-8"))
        solution = json.loads((course.source / f"{nb}.ipynb").read_text(encoding="utf-8"))
        references[nb] = judging.reference_records(nb, release, solution, settings.seed, workroot,
                                                   threads=settings.threads(), cache_dir=course.grading / "cache")
    return references


def _finish_student(course: Course, s: str, future, notebooks: list[str], prot: dict, fingerprint: dict,
                    report: BatchProgress) -> tuple[dict, list[NotebookResult]]:
    """Merge one student's finished job into the gradebook and write their status file (last, with the
    fingerprint only when the grade is final); returns (status, results). A grader bug, an overloaded
    machine or a notebook that cannot be merged costs this student's status, never the batch."""
    from .batch import invalidate

    try:
        results = list(future.result())
        finished = not any(r.infra for r in results)
    except Exception as exc:  # noqa: BLE001 - a grader bug must not stop the batch either
        results = [NotebookResult(s, nb, status="unreadable", grades=None,
                                  reasons=[f"{nb}: grading failed: {exc.__class__.__name__}: {exc}"])
                   for nb in notebooks]
        finished = False   # the grader's fault, not the student's: the next run tries again
    retries = course.read_json("status", s).get("overload_retries", 0)
    retries = retries if isinstance(retries, int) else OVERLOAD_RETRIES
    overload = overloaded(results, prot) if finished and retries < OVERLOAD_RETRIES else ""
    if overload:   # checks timed out on a busy machine: the next run grades this student again
        finished = False
        for res in results:
            res.reasons.append(f"{res.notebook}: checks timed out while the machine was overloaded "
                               f"({overload}); the next autograde run grades this student again")
    invalidate(course, s)  # from here until the status is written, s is not finished
    for res in results:
        try:
            res.score, res.max_score = merge(course, res)
        except Exception as exc:  # noqa: BLE001 - one student's notebook never stops the batch
            res.status, res.grades, res.autograded = "review", None, None
            res.reasons.append(f"{res.notebook}: could not be merged into the gradebook "
                               f"({exc.__class__.__name__}); 0 autograded points; look at it by hand")
            res.score, res.max_score = merge(course, res)
        report.notebook_done(s, res)
    # written last: a status file with a fingerprint means every notebook above is merged
    status = record_statuses(course, {s: results}, prot, fingerprints={s: fingerprint} if finished else None)[s]
    if overload:
        status["overload_retries"] = retries + 1
        course.write_json("status", s, status)
    for res in results:
        if res.scratch is not None:
            shutil.rmtree(res.scratch, ignore_errors=True)
    return status, results


# ----------------------------------------------------------------------------- SIGTERM (grader/cluster)
def _sigterm_as_interrupt():
    """Make SIGTERM (Slurm's scancel and time limit, kill, a node's shutdown) raise KeyboardInterrupt
    like Ctrl-C, once, so the batch's ``finally`` removes its las-autograde-* scratch folder; later
    SIGTERMs are ignored while it cleans up. Returns the previous handler (None off the main thread,
    where signal handlers cannot be set)."""
    def interrupt(signum, frame):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise KeyboardInterrupt("SIGTERM")

    try:
        return signal.signal(signal.SIGTERM, interrupt)
    except ValueError:
        return None


@contextlib.contextmanager
def _cancel_pending_on_error(pool: ThreadPoolExecutor):
    """On an interrupt, students not started yet are not started (the pool's own exit would run them)."""
    try:
        yield
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)
        raise


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
                    update: bool = False, fingerprints: dict[str, dict] | None = None) -> dict[str, dict]:
    """Write grading/status/<student>.json for every student of ``results``; with ``update`` the
    notebooks graded before (nbgrader's autograde button grades one notebook at a time) are kept.
    ``fingerprints`` (grader/batch.py) marks students as finished; a status without one (``update``,
    a grader failure) is graded again by the next batch."""
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
        if fingerprints and s in fingerprints:
            status["fingerprint"] = fingerprints[s]
        course.write_json("status", s, status)
        statuses[s] = status
    return statuses
