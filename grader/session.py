"""One student's grading session: every notebook's full run and judge probes, in one sandboxed process.

``python -m grader.session -`` runs inside the student's sandbox (grader/sandbox.py session_prefix) and
reads a plan from stdin, written by grader/autograde.py:

    {"notebooks": [{"stem": "task1_infonce",
                    "cells": [{"index": 2, "id": "setup", "role": "setup", "source": "..."}, ...],
                    "judge": {<a grader/probe.py plan without "stem">}}, ...],
     "cell_timeout": 60, "notebook_timeout": 180, "max_output_lines": 1000, "threads": 1}

``cells`` are the code cells of the notebook as graded (the student's, with the release's locked cells
restored), in order, with their position in it. It writes JSON lines to its evidence channel, as the
probe harness does (numbered records, one "done" at the end): per notebook ``{"kind": "cell", ...}``
for every cell the full run executed (its outputs, as Jupyter stores them), one ``{"kind":
"full_run", "status": ...}``, the judge's header and case records (grader/probe.py), and ``{"kind":
"notebook_done"}`` -- or ``{"kind": "notebook_void", "problem": ...}`` when its grading process died.

Why one process per student: a fresh interpreter, the torch and transformers imports and every
notebook's setup cell (its model suite, its data) were paid twice per notebook, once by nbgrader's
kernel and once by the judge. Here:

* the session (pid 1 of the sandbox, not dumpable, never runs student code) imports the libraries once;
* per notebook it forks a **notebook process** that runs the release's parameters and setup cells
  (course code, trusted, their output captured for the setup cell), then forks
  * the **full run**: an IPython shell on that namespace executes every later cell in order, as
    Jupyter would (outputs, rich display, inline figures, tracebacks; a cell past ``cell_timeout`` is
    interrupted with KeyboardInterrupt, one that ignores it is killed), and streams each cell's
    outputs back; it decides no point;
  * the judge's **loader** and its per-case processes (grader/probe.py), from the same trusted state
    with the given cells' definitions added;
* the notebook process relays only well-formed records to the session, which numbers them.

Nothing of one student reaches another: every student has a session (and a sandbox) of their own. The
student's code runs only in the full run, the loader and the case processes, none of which holds
the evidence channel or the notebook process's pipe.
"""

from __future__ import annotations

import io
import json
import os
import signal
import sys
import time

from . import probe

#: Imported once per session, before any notebook: what several notebooks' setup cells and graded code use
#: (a library only one notebook needs, or only its demonstrations, costs the same imported where it is used).
PREIMPORT = ("numpy", "torch", "matplotlib", "matplotlib.pyplot", "seaborn", "pandas", "transformers", "tqdm.auto",
             "IPython.core.interactiveshell", "IPython.display", "matplotlib_inline.backend_inline", "utils",
             "utils.presets", "utils.plotting", "utils.data", "utils.device", "utils.vision", "utils.lm",
             "utils.scaling", "utils.critic", "utils.answer_loader", "utils.notebook_presets",
             # transformers imports its model classes lazily: two notebooks use each of these
             "transformers.models.gpt_neox.modeling_gpt_neox", "transformers.models.bert.modeling_bert")
GRACE = 5.0                      # seconds past a cell's limit before an ignored interrupt means a kill
MAX_CELL_RECORD = 16 * 1024 ** 2  # one cell's outputs, as the full run sends them
MAX_RELAY_RECORD = 30 * 1024 ** 2
CELL_KINDS = ("cell", "full_run", "header", "case", "notebook_done")


# --------------------------------------------------------------------------- the full run (student code)
MAX_STREAM_CHARS = 500_000   # what one cell's printing may hold (the rest is dropped, and that is said)


class _Capture(io.TextIOBase):
    """sys.stdout / sys.stderr of the full run: text becomes Jupyter stream outputs of the current cell."""

    def __init__(self, outputs: list, name: str):
        self.outputs, self.name = outputs, name

    def writable(self):
        return True

    def write(self, text):
        text = str(text)
        held = sum(len(o.get("text", "")) for o in self.outputs if o.get("output_type") == "stream")
        if held + len(text) > MAX_STREAM_CHARS:
            if not any(o.get("truncated") for o in self.outputs):
                self.outputs.append({"output_type": "stream", "name": "stderr", "truncated": True,
                                     "text": "\n[grader] Output truncated: this cell printed more than "
                                             f"{MAX_STREAM_CHARS:,} characters\n"})
            return len(text)
        if self.outputs and self.outputs[-1].get("output_type") == "stream" and self.outputs[-1]["name"] == self.name:
            self.outputs[-1]["text"] += text
        else:
            self.outputs.append({"output_type": "stream", "name": self.name, "text": text})
        return len(text)

    def flush(self):
        pass

    def isatty(self):
        return False


def _shell(names: dict, outputs_of):
    """An IPython shell on ``names`` whose display, results and tracebacks land in ``outputs_of()``."""
    from IPython.core.displayhook import DisplayHook
    from IPython.core.displaypub import DisplayPublisher
    from IPython.core.interactiveshell import InteractiveShell

    class Publisher(DisplayPublisher):
        def publish(self, data, metadata=None, source=None, *, transient=None, update=False, **kwargs):
            if len(outputs_of()) < 200:
                outputs_of().append({"output_type": "display_data", "data": data, "metadata": metadata or {}})

        def clear_output(self, wait=False):
            outputs_of().clear()

    class Results(DisplayHook):
        def write_output_prompt(self):
            pass

        def write_format_data(self, format_dict, md_dict=None):
            outputs_of().append({"output_type": "execute_result", "data": format_dict, "metadata": md_dict or {},
                                 "execution_count": self.shell.execution_count})

        def finish_displayhook(self):
            pass

    class Shell(InteractiveShell):
        def _showtraceback(self, etype, evalue, stb):
            outputs_of().append({"output_type": "error", "ename": getattr(etype, "__name__", str(etype)),
                                 "evalue": str(evalue)[:2000], "traceback": [str(x) for x in stb][-60:]})

    names.pop("display", None)
    # the singleton: IPython.display.display() and the inline backend publish through it
    shell = Shell.instance(user_ns=names, displayhook_class=Results, display_pub_class=Publisher)
    try:
        shell.enable_matplotlib("inline")
    except Exception:  # noqa: BLE001 - no inline backend: figures are simply not shown
        pass
    return shell


def _limit(outputs: list, max_lines: int) -> list:
    """nbgrader's LimitOutput: at most ``max_lines`` lines of each stream, at most 100 outputs."""
    for out in outputs:
        if out.get("output_type") == "stream":
            lines = out["text"].splitlines(keepends=True)
            if len(lines) > max_lines:
                out["text"] = "".join(lines[:max_lines]) + f"... Output truncated: {len(lines) - max_lines} more lines\n"
    return outputs[:100]


def _send_any(fd: int, record: dict) -> None:
    """probe._send for records of the full run, whose outputs may hold objects JSON does not know."""
    view = memoryview((json.dumps(record, default=str) + "\n").encode())
    while view:
        view = view[os.write(fd, view):]


def _interrupt(signum, frame):
    raise KeyboardInterrupt("the cell ran past its time limit and was interrupted by the grader")


def _full_run_child(cells: list[dict], names: dict, write_fd: int, cell_timeout: float, max_lines: int,
                    light: bool) -> None:
    """In the forked full-run process: execute ``cells`` in order and send each one's outputs."""
    try:
        os.setpgid(0, 0)
        probe._single_thread()
        devnull = os.open(os.devnull, os.O_RDWR)
        os.dup2(devnull, 0)
        current: list = []
        from utils.answer_loader import run_definitions

        shell = _shell(names, lambda: current)
        sys.stdout, sys.stderr = _Capture(current, "stdout"), _Capture(current, "stderr")
        signal.signal(signal.SIGALRM, _interrupt)
        for cell in cells:
            current.clear()
            _send_any(write_fd, {"k": "start", "index": cell["index"]})
            started = time.monotonic()
            signal.setitimer(signal.ITIMER_REAL, cell_timeout)
            try:
                if cell["role"] == "test" and light:   # the judge's report takes the visible checks' place
                    pass
                elif cell["role"] == "demo":   # the course's demonstration: its definitions only (light run)
                    for problem in run_definitions(cell["source"], cell["id"], names):
                        current.append({"output_type": "stream", "name": "stderr", "text": problem + "\n"})
                else:
                    shell.run_cell(cell["source"], store_history=True)
            except BaseException as exc:  # noqa: BLE001 - an interrupt between IPython's own handlers
                current.append({"output_type": "error", "ename": type(exc).__name__, "evalue": str(exc)[:2000],
                                "traceback": []})
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
            record = {"k": "cell", "index": cell["index"], "execution_count": shell.execution_count - 1,
                      "outputs": _limit(list(current), max_lines), "seconds": round(time.monotonic() - started, 3)}
            if len(json.dumps(record, default=str)) > MAX_CELL_RECORD:
                record["outputs"] = [{"output_type": "stream", "name": "stderr",
                                      "text": "(this cell's outputs were too large to keep)\n"}]
            _send_any(write_fd, record)
        _send_any(write_fd, {"k": "end"})
    finally:
        os._exit(0)


def run_full(cells: list[dict], names: dict, emit, *, cell_timeout: float, notebook_timeout: float,
             max_lines: int, light: bool = False) -> None:
    """Supervise the full run of ``cells`` (see the module docstring); emits one ``cell`` record per
    executed cell and one ``full_run`` record: status ok | timeout (a cell ignored its interrupt) |
    budget (the notebook ran past ``notebook_timeout``) | died (the process ended mid-cell) | forged
    (the notebook wrote into the full run's own pipe)."""
    pid, read_fd, write_fd = probe.fork_with_pipe()
    if pid == 0:
        _full_run_child(cells, names, write_fd, cell_timeout, max_lines, light)
    lines = probe._Lines(read_fd, MAX_CELL_RECORD + (1 << 20))
    expected = [c["index"] for c in cells]
    started = time.monotonic()
    deadline = started + notebook_timeout
    current, since, status = None, started, "ok"
    while True:
        until = min(deadline, since + cell_timeout + GRACE) if current is not None else deadline
        rec = lines.next(until)
        if isinstance(rec, dict):
            kind = rec.get("k")
            if kind == "start" and current is None and expected and rec.get("index") == expected[0]:
                current, since = expected[0], time.monotonic()
            elif kind == "cell" and current is not None and rec.get("index") == current \
                    and isinstance(rec.get("outputs"), list):
                emit({"kind": "cell", "index": current, "outputs": rec["outputs"],
                      "execution_count": rec.get("execution_count") if isinstance(rec.get("execution_count"), int) else None,
                      "seconds": rec.get("seconds") if isinstance(rec.get("seconds"), (int, float)) else None})
                expected.pop(0)
                current = None
            elif kind == "end" and current is None and not expected:
                break
            else:
                status = "forged"   # something in the notebook wrote into the full run's pipe: stop there
                break
            continue
        if rec == "timeout":
            status = "budget" if time.monotonic() >= deadline else "timeout"
        else:   # "eof": the process ended mid-notebook; "bad": a malformed line in its pipe
            status = "died" if rec == "eof" else "forged"
        break
    os.close(read_fd)
    probe._kill_loader(pid)
    stopped_at = current if current is not None else (expected[0] if expected and status != "ok" else None)
    emit({"kind": "full_run", "status": status, "index": stopped_at, "seconds": round(time.monotonic() - started, 3)})


# --------------------------------------------------------------------------- one notebook (trusted)
class _Collect(io.TextIOBase):
    def __init__(self):
        self.parts: list[str] = []

    def writable(self):
        return True

    def write(self, text):
        self.parts.append(str(text))
        return len(text)


def _notebook(nb: dict, plan: dict, write_fd: int) -> None:
    """The notebook process: the release's parameters and setup cells, the full run, then the judge."""
    try:
        probe._CLOSE_IN_CHILDREN[:] = [write_fd]   # the session's channel is closed; this pipe is closed below us
        emit = lambda record: probe._send(write_fd, record)  # noqa: E731
        names = probe.fresh_names()
        judge = dict(nb["judge"], stem=nb["stem"])
        trusted = next(iter(judge["variants"].values()), [])
        first = [c for c in trusted if c["role"] in ("parameters", "setup")]
        given = [c for c in trusted if c["role"] == "given"]
        out, err = _Collect(), _Collect()
        saved = sys.stdout, sys.stderr
        sys.stdout, sys.stderr = out, err
        try:
            setup_notes = probe._run_trusted(first, names)
        finally:
            sys.stdout, sys.stderr = saved
        outputs = [{"output_type": "stream", "name": name, "text": "".join(c.parts)}
                   for name, c in (("stdout", out), ("stderr", err)) if "".join(c.parts)]
        outputs += [{"output_type": "stream", "name": "stderr", "text": note + "\n"} for note in setup_notes]
        for cell in nb["cells"]:
            if cell["role"] == "setup":
                emit({"kind": "cell", "index": cell["index"], "outputs": outputs, "execution_count": None,
                      "seconds": None})
        # The student's parameters cell (PRESET = ..., MODEL_SUITE = ...) runs first in the full run, as
        # in Jupyter before the setup cell; the setup cell forced the smoke preset anyway (NBGRADER_EXECUTION).
        later = [c for c in nb["cells"] if c["role"] == "parameters"] + \
                [c for c in nb["cells"] if c["role"] not in ("parameters", "setup")]
        run_full(later, names, emit, cell_timeout=float(plan.get("cell_timeout", 60)),
                 notebook_timeout=float(plan.get("notebook_timeout", 180)),
                 max_lines=int(plan.get("max_output_lines", 1000)), light=plan.get("full_run") == "light")
        setup_notes += probe._run_trusted(given, names)
        probe.judge_variants(judge, names, setup_notes, emit)
        emit({"kind": "notebook_done"})
    finally:
        os._exit(0)


def _relay(pid: int, read_fd: int, stem: str, deadline: float, emit) -> str:
    """Forward the notebook process's records (only the kinds it may send, each once in order of
    sense) to the channel with ``stem`` added; returns "" or why the notebook's records stop short."""
    lines = probe._Lines(read_fd, MAX_RELAY_RECORD)
    started = time.monotonic()
    while True:
        rec = lines.next(deadline)
        if not isinstance(rec, dict):
            return {"eof": "its grading process ended early (os._exit in trusted code? the memory cap?)",
                    "timeout": "it ran past the time the grader allows a notebook",
                    "bad": "its grading process sent a malformed record"}[rec]
        kind = rec.get("kind")
        if kind not in CELL_KINDS:
            return f"its grading process sent a record it may not send ({str(kind)[:40]!r})"
        if kind == "notebook_done":
            emit({**rec, "stem": stem, "seconds": round(time.monotonic() - started, 3)})
            return ""
        emit({**rec, "stem": stem})


def run_session(plan: dict, emit) -> None:
    """Every notebook of ``plan``, one notebook process at a time; then ``{"kind": "done"}``."""
    started = time.monotonic()
    for name in PREIMPORT:
        try:
            __import__(name)
        except Exception:  # noqa: BLE001 - an optional library (transformers on a minimal install)
            pass
    threads = int(plan.get("threads") or 1)
    try:
        import torch

        torch.set_num_threads(max(1, threads))
    except Exception:  # noqa: BLE001
        pass
    emit({"kind": "ready", "seconds": round(time.monotonic() - started, 3)})   # the imports, once per student
    per_notebook = (float(plan.get("notebook_timeout", 180)) + float(plan.get("judge_budget", 120))
                    + float(plan.get("setup_seconds", 120)))
    for nb in plan["notebooks"]:
        pid, read_fd, write_fd = probe.fork_with_pipe()
        if pid == 0:
            _notebook(nb, plan, write_fd)
        problem = _relay(pid, read_fd, nb["stem"], time.monotonic() + per_notebook, emit)
        os.close(read_fd)
        probe._kill_loader(pid)   # as pid 1 of the sandbox: everything the notebook left behind dies too
        if problem:
            emit({"kind": "notebook_void", "stem": nb["stem"], "problem": problem})
    emit({"kind": "done"})


def main(argv: list[str] | None = None) -> None:
    probe.serve(run_session, "grader.session", argv)


if __name__ == "__main__":
    main()
