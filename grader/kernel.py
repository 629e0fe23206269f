"""The grading kernel's entry point: ``python -m grader.kernel -f CONNECTION_FILE``.

It runs inside the sandbox (see grader/sandbox.py) before any student code and

* caps the kernel's memory, file size and core dumps with ``setrlimit`` (works everywhere),
* makes the kernel die with its parent (a killed grading job never leaves a kernel behind),
* starts its own session, so an interrupt reaches only the kernel and its children,
* then hands over to ipykernel.

This kernel runs the student's whole notebook (the "full run" whose outputs the TA and the feedback
show); it decides no points. Points come from the judge (grader/judge.py), which probes the
student's functions in a separate process (grader/probe.py, limited by the same
:func:`apply_limits`).

Limits come from ``$LAS_KERNEL_LIMITS`` (JSON: ``{"mem_bytes": ..., "fsize_bytes": ..., "nproc": ...}``).
"""

from __future__ import annotations

import json
import os
import sys


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


def _die_with_parent() -> None:
    """PR_SET_PDEATHSIG: SIGKILL this kernel when the process that launched it dies."""
    try:
        import ctypes
        import signal

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(signal.SIGKILL), 0, 0, 0)  # 1 = PR_SET_PDEATHSIG
    except Exception:  # noqa: BLE001 - best effort (non-Linux)
        pass


def main() -> None:
    _die_with_parent()
    try:
        os.setsid()
    except OSError:
        pass
    apply_limits()
    from ipykernel import kernelapp

    kernelapp.launch_new_instance(argv=sys.argv[1:])


if __name__ == "__main__":
    main()
