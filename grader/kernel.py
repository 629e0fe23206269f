"""Process limits of the grading sandbox: :func:`apply_limits`, called by the judge's probe harness
(grader/probe.py) and by each student's grading session (grader/session.py) before any student code
runs; every process they fork inherits the caps.

Limits come from ``$LAS_KERNEL_LIMITS`` (JSON: ``{"mem_bytes": ..., "fsize_bytes": ..., "nproc": ...}``).
"""

from __future__ import annotations

import json
import os


def apply_limits() -> None:
    import resource

    limits = json.loads(os.environ.get("LAS_KERNEL_LIMITS", "{}"))
    mem = limits.get("mem_bytes")
    if mem:
        # RLIMIT_DATA counts heap and private anonymous mappings (every tensor and array) but not
        # the shared libraries torch maps, so it caps real memory without breaking imports.
        resource.setrlimit(resource.RLIMIT_DATA, (mem, mem))
        # Address space as a backstop, with room for the libraries' mappings.
        address = mem + 8 * 1024 ** 3
        resource.setrlimit(resource.RLIMIT_AS, (address, address))
    fsize = limits.get("fsize_bytes")
    if fsize:
        resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    nproc = limits.get("nproc")
    if nproc:
        # RLIMIT_NPROC counts every task of the real user id on the machine, so the cap is what
        # this user already runs plus a margin (threads count too: torch's pools need a few dozen).
        resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
