"""The static audit of a submitted notebook (grader/audit.py), run in a capped child process: its
findings go on the notebook's status for the TA and never decide a point."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

from utils.hosted_install import without_pack_url
from utils.notebook_cells import cell_source, grade_id, is_locked

from . import ROOT
from .audit import OUT_OF_MEMORY, Finding, summarise
from .results import NotebookResult


def instructor_cells_as_released(nb: dict, release_path: Path) -> set[str]:
    """grade_ids of the locked cells (setup, given code, tests) whose source is the release's own
    (the Colab pack URL line aside): the instructor's code, which the audit need not flag (nbgrader
    restores locked cells anyway; an edited one is still audited and reported as tampering)."""
    try:
        release = json.loads(release_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return set()

    def src(cell):
        return without_pack_url(cell_source(cell)).strip()

    locked = {grade_id(c): src(c) for c in release.get("cells", [])
              if is_locked(c) and grade_id(c)}
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
        result.flag("review", f"{notebook}: the static audit could not finish ({exc}: the code is too large or "
                    "too convoluted to check automatically); the notebook needs a look by hand")
        return
    except Exception as exc:  # noqa: BLE001 - an audit that trips is itself worth a look
        result.flag("review", f"{notebook}: the static audit failed ({exc.__class__.__name__}); look at it by hand")
        return
    if findings:
        worse = result.status not in ("graded", "review")   # e.g. kernel died: the audit must still show
        result.flag("review", f"{notebook}: " + ("ALSO FOR REVIEW (the status above is worse, the audit flagged "
                    "code too): " if worse else "") + summarise(findings))
        result.audit = [f"{f.cell} line {f.line}: {f.what}: {f.code}" for f in findings[:50]]
