"""Start one student's sandboxed grading session (grader/session.py) and collect its records.

The plan the session reads on stdin (:func:`session_plan`: per notebook the cells of its full run and the
judge's plan), the command that starts it in the sandbox (:func:`session_command`), and the reader of its
numbered records with the caps on what one session may send (:func:`run_sandboxed`)."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

from .course import Course
from . import judge as judging
from .sandbox import join_cgroup, protections, session_prefix
from utils.notebook_cells import cell_role, cell_source, grade_id
from .probe import probe_source
from .process import kill_group, plan_process
from .policy import Policy, Settings, session_policy
from .results import Job


def session_cells(graded: dict, release: dict, mode: str = "light") -> list[dict]:
    """The code cells the full run executes, in order: index (position in ``graded``), id, role, source.

    A cell that is exactly one of the release's given cells (the course's demonstrations: training
    runs, ablations, plots) has role ``demo``: in the ``light`` mode the full run runs only its
    definitions, and the notebook shows the outputs the student submitted for it (grader/fullrun.py).
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


def session_plan(jobs: list[Job], settings: Settings, threads: int) -> tuple[dict, list[bytes]]:
    """What the sandboxed session gets on stdin: the plan (per notebook its cells and the judge's settings)
    and, per notebook, a sealed part (:func:`sealed_part`) that its grading process reads only after
    the full run. The run's label is its index, never the batch's seed: nothing in the sandbox holds the
    seed (a stack walk in a notebook once printed it into the feedback)."""
    notebooks = [{"stem": job.notebook, "cells": session_cells(job.graded, job.release, settings.full_run), "judge": {
        "isolate": "case", "case_timeout": settings.cell_timeout,
        "budget": settings.judge_budget, "load_seconds": settings.load_seconds,
        "statement_seconds": min(30, settings.load_seconds), "groups": judging.case_groups(job.notebook),
        "variants": {"student": judging.notebook_cells(job.release, job.graded)}}} for job in jobs]
    plan = {"notebooks": notebooks, "cell_timeout": settings.cell_timeout, "threads": threads,
            "notebook_timeout": settings.notebook_timeout, "judge_budget": settings.judge_budget,
            "max_output_lines": settings.max_output_lines, "setup_seconds": SETUP_SECONDS,
            "full_run": settings.full_run}
    return plan, [sealed_part(job.notebook, settings) for job in jobs]


def sealed_part(stem: str, settings: Settings) -> bytes:
    """What only the judge of notebook ``stem`` may know: its per-case seeds and its probes' source. The
    session moves it, unread, to the notebook's grading process, which reads it after the full run has
    ended: no code of the full run can find the hidden inputs, or rebuild them from the probes."""
    runs = [{"label": i, "case_seeds": run["case_seeds"]}
            for i, run in enumerate(judging.case_runs([settings.seed or 0], stem))]
    return json.dumps({"runs": runs, "probe_source": probe_source(stem)}).encode()


def session_command(settings: Settings, work: Path, threads: int,
                    policy: Policy | None = None) -> tuple[list[str], dict]:
    """(argv, environment) that start one student's session in the sandbox, under ``policy`` (default:
    built from ``settings`` now)."""
    env = judging.harness_env(threads)
    env.update((policy or session_policy(settings)).limits.to_env())
    prefix = session_prefix(settings.mode(), work, env, overlay=protections()["overlay"])
    outer_env = dict(env) if not prefix or prefix[0] != "bwrap" else {"PATH": os.environ.get("PATH", "")}
    return [*prefix, sys.executable, "-m", "grader.session", "-"], outer_env


def run_session(student: str, jobs: list[Job], settings: Settings, scratch: Path, course: Course,
                cgroup, policy: Policy) -> tuple[list[dict], str]:
    """Run grader/session.py for ``jobs`` in the student's sandbox; (records, the tail of its stderr)."""
    work = scratch / "session" / "work"
    work.mkdir(parents=True)
    for job in jobs:   # what the student's code sees in its working folder: its own notebooks
        shutil.copy(course.folder("submitted", student) / f"{job.notebook}.ipynb", work / f"{job.notebook}.ipynb")
    threads = settings.threads()
    plan, sealed = session_plan(jobs, settings, threads)
    cmd, env = session_command(settings, work, threads, policy)
    # the session keeps each notebook to its limits itself; this is the backstop
    timeout = 60 + len(jobs) * (settings.notebook_timeout + settings.judge_budget + SETUP_SECONDS)
    return run_sandboxed(cmd, plan, workdir=work, env=env, timeout=timeout,
                         preexec_fn=join_cgroup(cgroup), stems=[job.notebook for job in jobs], sealed=sealed)


#: Full-run outputs kept per student session: past this, a cell's outputs are replaced by a note (the
#: judge's records still count). Caps drop output, never grades.
OUTPUT_BYTES = 64 * 1024 ** 2
#: Everything else one session may send (the judge's records): past this the session is stopped, and
#: only the notebooks it had finished count.
RECORD_BYTES = 1024 ** 3


def run_sandboxed(cmd: list[str], plan: dict, *, workdir: Path, env: dict, timeout: float, preexec_fn=None,
                  stems: list[str] = (), sealed: list[bytes] = ()) -> tuple[list[dict], str]:
    """Run one session (``cmd``, the plan and its ``sealed`` parts on stdin) and collect its numbered
    records; (records, the tail of its stderr). Records count only in sequence (0, 1, 2, ...): at the first
    break (a forged or lost record, a session killed at the backstop ``timeout``), every notebook that had
    not sent its ``notebook_done`` gets a ``notebook_void`` record; the notebooks before it stand."""
    records: list[dict] = []
    problem = ""
    with plan_process(cmd, plan, workdir=workdir, env=env, timeout=timeout, preexec_fn=preexec_fn,
                      sealed=sealed) as (proc, run):
        outputs = others = 0
        for line in iter(lambda: proc.stdout.readline(judging.MAX_RECORD_BYTES + 1), b""):
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
        if problem:
            kill_group(proc)
    if not problem:
        if not records or records[-1].get("kind") != "done":
            problem = "the session did not finish (killed at the grader's time limit, or it crashed)"
        elif run["returncode"] != 0:
            problem = f"the session exited with status {run['returncode']}"
    if problem:
        finished = {r.get("stem") for r in records if r.get("kind") in ("notebook_done", "notebook_void")}
        records += [{"kind": "notebook_void", "stem": stem, "problem": problem} for stem in stems
                    if stem not in finished]
    return records, run["tail"]


#: Seconds a notebook's setup cell (imports, the model suite) may take inside a session.
SETUP_SECONDS = 120
