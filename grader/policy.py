"""The settings of an autograde run and the one sandbox policy built from them.

Every limit a student's grading session runs under is written once: the TA's are the fields of
:class:`Settings` (the command line shows their defaults: ``--mem-gb`` is ``Settings.mem_gb``), the
grader's own around them are below (:data:`SESSION_MEMORY`, :data:`FILE_BYTES`). :func:`session_policy`
builds a session's :class:`Policy` from them once; the session's cgroups (grader/sandbox.py) and its
per-process limits (grader/process.py ``Limits``, applied inside the sandbox) both come from it. What the
sandbox itself gives a session (its tmpfs sizes, the pids cap) is written in grader/sandbox.py."""

from __future__ import annotations

import os
from dataclasses import dataclass

from .process import Limits
from .sandbox import PIDS_MAX, cgroup_protections, nproc_limit, protections

#: A session's memory cgroup holds ``mem_gb`` (each process's own cap) plus this, for the libraries
#: every process of the session maps (torch, transformers) and the page cache it fills.
SESSION_MEMORY = 4 * 1024 ** 3
#: The largest file a process of a session may write (RLIMIT_FSIZE).
FILE_BYTES = 2 * 1024 ** 3


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
    seed: int | None = None          # the judge's input seed (None: the grading folder's own, grader/seed.py)
    judge_budget: int = 120          # one notebook's judge run: loading its top-level code and every case
    load_seconds: int = 60           # of which, at most, running the student's top-level statements (each at most 30 s)
    full_run: str = "light"          # light: the course's demonstration cells run only their definitions; full: all

    def threads(self) -> int:
        return self.session_threads or max(1, (os.cpu_count() or 1) // max(1, self.workers))

    def mode(self) -> str:
        if self.sandbox != "auto":
            return self.sandbox
        prot = protections()
        return "bwrap" if prot["bwrap"] else "unshare" if prot["network"] else "none"

    def protections(self) -> dict[str, bool]:
        """This machine's protections (grader/sandbox.py ``protections``) as this run's sandbox mode uses them."""
        mode, groups = self.mode(), cgroup_protections()
        return {**protections(), "filesystem": mode == "bwrap", "network": mode in ("bwrap", "unshare"),
                "cpu_cgroup": groups["cpu"], "memory_cgroup": groups["memory"]}


@dataclass(frozen=True)
class Policy:
    """Every limit of one student's session, built once from the settings (:func:`session_policy`)."""

    limits: Limits          # per process, applied inside the sandbox before any student code runs
    cpus: float             # the session's CPU cgroup: the worker's share of the cores
    memory_bytes: int       # the session's memory cgroup: all its processes together
    pids: int = PIDS_MAX    # the session's pids cgroup


def session_policy(settings: Settings) -> Policy:
    """The policy of a session under ``settings``. RLIMIT_NPROC counts this user's tasks now (root is
    exempt from it: the pids cgroup caps it there), so a policy is built when its session starts."""
    mem_bytes = int(settings.mem_gb * 1024 ** 3)
    limits = Limits(mem_bytes=mem_bytes, fsize_bytes=FILE_BYTES, nproc=None if os.getuid() == 0 else nproc_limit())
    return Policy(limits, cpus=settings.threads(), memory_bytes=mem_bytes + SESSION_MEMORY)
