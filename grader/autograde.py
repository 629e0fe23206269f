"""Autograde submissions so that one bad notebook never stops the batch.

Every student is one job (:func:`grade_student`): each submitted notebook is read defensively
(grader/submissions.py) and audited (grader/audit.py) here, then ONE sandboxed session of that student
(grader/session.py, in grader/sandbox.py's sandbox) runs, per notebook,

* **the full run**: the notebook executed as Jupyter would, in an IPython shell forked after the
  release's setup cell (light by default: the course's demonstration cells run only their definitions
  and keep the outputs the student submitted; see grader/launch.py ``DEMO_NOTE``). It produces the executed notebook
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

Where each step lives, in the order a notebook meets them:

==========================  =====================================================================
grader/submissions.py        read the submission defensively; the release view (locked cells as released)
grader/audit_step.py         the static audit, in a capped child process
grader/launch.py             the student's session: its plan, its command, its numbered records
grader/scoring.py            the judge's verdict, the written answers' grades, the gradebook merge
grader/steps.py              the executed notebook, step by step (nbgrader-preprocessor shaped)
grader/fullrun.py            the first step: the executed notebook from the session's cell records
grader/results.py            settings, each notebook's result, the statuses and the status files
grader/progress.py           what the TA sees while the batch runs
==========================  =====================================================================
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

from . import judge as judging
from .audit_step import audit_submission
from .batch import batch_fingerprint, grade_settings, invalidate, is_finished, student_fingerprint
from .course import Course, add_students, sync_assignment
from .fullrun import write_notebook
from .launch import run_session
from .progress import BatchProgress
from .policy import Settings, session_policy
from .results import Job, NotebookResult, record_statuses
from .sandbox import describe, remove_cgroup, student_cgroups
from .seed import ensure_seed, secret_strings
from .scoring import apply_verdict, judge_verdict, merge, written_answer_grades
from .steps import StepContext, run_steps
from .submissions import Unreadable, prepare, release_view

def grade_notebook(course: Course, student: str, notebook: str, settings: Settings, workroot: Path,
                   reference: dict | None = None) -> NotebookResult:
    """Autograde one notebook of one student (nbgrader's Autograde button grades one at a time):
    :func:`grade_student` with that notebook alone."""
    return grade_student(course, student, [notebook], settings, workroot, {notebook: reference})[0]


def grade_student(course: Course, student: str, notebooks: list[str], settings: Settings, workroot: Path,
                  references: dict[str, dict | None]) -> list[NotebookResult]:
    """Autograde every notebook of one student (one job of the batch); never raises for student faults.
    ``references`` maps each notebook to the solution's evidence (judge.reference_records). Each notebook
    is read and audited here, runs in the student's one session, and is judged here (:func:`judge_job`)."""
    started = time.monotonic()
    results = [NotebookResult(student, nb) for nb in notebooks]
    jobs = [job for job in (read_submission(course, student, result) for result in results) if job is not None]
    records: list[dict] = []
    if jobs:
        scratch = Path(tempfile.mkdtemp(prefix=f"{student}-", dir=workroot))
        records, tail = run_session_of(course, student, jobs, settings, scratch)
        # "infra": the sandbox never started (no "ready" record, sent before any student code runs):
        # the grader's fault, graded again by the next run. Anything after that is the student's.
        infra = not any(r.get("kind") == "ready" for r in records)
        secrets = secret_strings(settings.seed or 0, [job.notebook for job in jobs])
        for job in jobs:
            mine = [r for r in records if r.get("stem") == job.notebook or r.get("kind") == "void"]
            job.result.scratch, job.result.infra = scratch / job.notebook, infra
            job.result.scratch.mkdir()
            context = StepContext(job, mine, "" if not infra else tail, settings, secrets,
                                  course.source / f"{job.notebook}.ipynb", None)
            judge_job(context, tail, references.get(job.notebook))
        shutil.rmtree(scratch / "session", ignore_errors=True)
    share_seconds(results, jobs, records, time.monotonic() - started)
    return results


def read_submission(course: Course, student: str, result: NotebookResult) -> Job | None:
    """One notebook of a student read defensively (grader/submissions.py) and audited: its Job for the
    session, or None (not submitted, unreadable: ``result`` says why, with no points)."""
    notebook = result.notebook
    submitted = course.folder("submitted", student) / f"{notebook}.ipynb"
    if not submitted.exists():
        result.flag(None, f"{notebook}.ipynb not submitted (0 points)")
        result.grades = None  # zero everything
        return None
    release_path = course.release / f"{notebook}.ipynb"
    try:
        prepared = prepare(submitted, release_path)
    except Unreadable as exc:
        result.grades = None
        result.flag("unreadable", str(exc))
        return None
    for reason in prepared.tampered + prepared.notes:
        result.flag("tampered" if prepared.tampered else None, reason)
    audit_submission(prepared.notebook, notebook, result, release_path)
    release = json.loads(release_path.read_text(encoding="utf-8"))
    return Job(notebook, release_view(prepared.notebook, release), release, result)


def run_session_of(course: Course, student: str, jobs: list[Job], settings: Settings,
                   scratch: Path) -> tuple[list[dict], str]:
    """The student's one sandboxed session in ``scratch``, in cgroups of its own: (its records, its log's tail)."""
    policy = session_policy(settings)   # pids, CPU and memory for the session; each process's own limits
    cgroup = student_cgroups(scratch.name, cpus=policy.cpus, mem_bytes=policy.memory_bytes, pids=policy.pids)
    try:
        return run_session(student, jobs, settings, scratch, course, cgroup, policy)
    finally:
        remove_cgroup(cgroup)


def judge_job(context: StepContext, tail: str, reference: dict | None) -> None:
    """One notebook after the session: the judge's points from its records, then the executed notebook
    (grader/steps.py), written once. A notebook whose results trip the grader costs its own points only.
    ``tail``: the session's log, which the judge reads even where the steps do not show it."""
    job, records = context.job, context.records
    stops = sum(r["stopped"] for r in records if r.get("kind") == "notebook_done" and isinstance(r.get("stopped"), int))
    if stops:
        job.result.flag("review", f"{job.notebook}: code in the notebook stopped its own grading process "
                        f"({stops} time{'s' if stops > 1 else ''}, SIGSTOP); the grader continued it "
                        "each time (checks that ran out of time meanwhile score 0)")
    try:
        written_answer_grades(job)
        context.verdict = judge_verdict(job, records, tail, context.settings, reference)
        apply_verdict(job, context.verdict)
    except Exception as exc:  # noqa: BLE001 - this notebook's content tripped the grader: it alone
        context.verdict, job.result.grades = None, None
        job.result.flag("review", f"{job.notebook}: the grader could not process this notebook's results "
                        f"({exc.__class__.__name__}); 0 autograded points; look at it by hand")
    executed = run_steps(job.graded, context)
    if executed is not None:   # the one write of the executed notebook
        job.result.autograded = job.result.scratch / f"{job.notebook}.ipynb"
        write_notebook(job.result.autograded, executed)


def share_seconds(results: list[NotebookResult], jobs: list[Job], records: list[dict], elapsed: float) -> None:
    """Each notebook's seconds: its own time in the session, plus its share of the rest of ``elapsed``."""
    graded = [j.result for j in jobs]
    done = [r for r in records if r.get("kind") == "notebook_done"]
    shared = elapsed - sum(r.get("seconds") or 0.0 for r in done)
    for result in results:
        own = sum(r.get("seconds") or 0.0 for r in done if r.get("stem") == result.notebook)
        result.seconds = own + max(shared, 0.0) / max(1, len(graded)) if result in graded else 0.0


#: Load per core above which a student whose checks timed out is graded again by the next run (only
#: where no CPU cgroup keeps students apart), at most OVERLOAD_RETRIES times.
OVERLOAD = 1.5
OVERLOAD_RETRIES = 2


def overloaded(results: list, prot: dict) -> str:
    """Why the checks of a student that timed out may be the machine's fault ("" when they are not):
    no per-student CPU cgroup, and more runnable processes than cores over the last minute."""
    timed = any(not c.passed and ("did not finish" in c.message or "was used up" in c.message)
                for r in results if r.verdict is not None for c in r.verdict.cases)
    if not timed or prot.get("cpu_cgroup"):
        return ""
    try:
        load = os.getloadavg()[0] / max(1, os.cpu_count() or 1)
    except OSError:
        return ""
    return f"load {load:.1f} per core" if load > OVERLOAD else ""


def autograde(course: Course, students: list[str] | None = None, settings: Settings | None = None,
              progress=print, sync: bool = True, *, regrade: bool = False, summary: dict | None = None,
              bar: bool = False) -> dict[str, dict]:
    """Grade ``students`` (default: everyone in grading/submitted), one job per student, ``workers`` at
    a time. Returns student -> status dict (grading/status/<student>.json).

    Each finished student is merged and their status file written at once, with a fingerprint of what was
    graded (grader/batch.py): a batch killed half-way loses only the students in flight, and a rerun skips
    every student graded with the same inputs (``regrade``: grade them all again). ``summary`` receives the
    run's figures (graded, skipped, seconds, worker_seconds); ``bar`` shows a tqdm bar on a terminal."""
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
        references = reference_values(course, course.handed_in(todo, notebooks), settings, workroot, report.say)
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
    read = {s: course.read_json("status", s) for s in students}
    statuses = {s: status for s, status in read.items() if not regrade and is_finished(status, fingerprints[s])}
    if statuses:
        names = sorted(statuses)
        say(f"skipped {len(names)} of {len(students)} students, graded before with these submissions, "
            f"assignment, grader, seed and settings (--regrade grades them again): "
            + ", ".join(names[:30]) + (f" and {len(names) - 30} more" if len(names) > 30 else ""))
    return statuses


def reference_values(course: Course, notebooks: list[str], settings: Settings, workroot: Path, say) -> dict:
    """notebook -> the judge's reference records for this batch's seed (judge.reference_records, cached in
    grading/cache/), ``settings.workers`` at a time, for the notebooks the batch's students handed in only:
    a notebook nobody submitted is graded 0 without the judge."""
    def one(nb: str) -> dict:
        say(f"judge: reference values of {nb} (the solution, outside the sandbox)")
        release = json.loads((course.release / f"{nb}.ipynb").read_text(encoding="utf-8"))
        solution = json.loads((course.source / f"{nb}.ipynb").read_text(encoding="utf-8"))
        return judging.reference_records(nb, release, solution, settings.seed, workroot,
                                         threads=settings.threads(), cache_dir=course.grading / "cache")

    with ThreadPoolExecutor(max(1, min(settings.workers, len(notebooks)))) as pool:
        return dict(zip(notebooks, pool.map(one, notebooks)))


def _finish_student(course: Course, s: str, future, notebooks: list[str], prot: dict, fingerprint: dict,
                    report: BatchProgress) -> tuple[dict, list[NotebookResult]]:
    """Merge one student's finished job into the gradebook and write their status file (last, with the
    fingerprint only when the grade is final); returns (status, results). A grader bug, an overloaded
    machine or a notebook that cannot be merged costs this student's status, never the batch."""
    try:
        results = list(future.result())
        finished = not any(r.infra for r in results)
    except Exception as exc:  # noqa: BLE001 - a grader bug must not stop the batch either
        results = [NotebookResult(s, nb, grades=None) for nb in notebooks]
        for res in results:
            res.flag("unreadable", f"{res.notebook}: grading failed: {exc.__class__.__name__}: {exc}")
        finished = False   # the grader's fault, not the student's: the next run tries again
    retries = course.read_json("status", s).get("overload_retries", 0)
    retries = retries if isinstance(retries, int) else OVERLOAD_RETRIES
    overload = overloaded(results, prot) if finished and retries < OVERLOAD_RETRIES else ""
    if overload:   # checks timed out on a busy machine: the next run grades this student again
        finished = False
        for res in results:
            res.flag(None, f"{res.notebook}: checks timed out while the machine was overloaded "
                     f"({overload}); the next autograde run grades this student again")
    invalidate(course, s)  # from here until the status is written, s is not finished
    for res in results:
        try:
            res.score, res.max_score = merge(course, res)
        except Exception as exc:  # noqa: BLE001 - one student's notebook never stops the batch
            res.grades, res.autograded = None, None
            res.flag("review", f"{res.notebook}: could not be merged into the gradebook "
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


def _sigterm_as_interrupt():
    """Make SIGTERM (Slurm's scancel, kill, a node's shutdown) raise KeyboardInterrupt like Ctrl-C, once, so the
    batch's ``finally`` removes its scratch folder; later SIGTERMs are ignored while it cleans up. Returns the
    previous handler (None off the main thread, where signal handlers cannot be set)."""
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
