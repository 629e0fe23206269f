"""One student's grading session: every notebook's full run and judge probes, in one sandboxed process.

``python -m grader.session -`` runs inside the student's sandbox (grader/sandbox.py session_prefix) and
reads a plan from stdin, written by grader/launch.py (``session_plan``):

    {"notebooks": [{"stem": "task1_infonce",
                    "cells": [{"index": 2, "id": "setup", "role": "setup", "source": "..."}, ...],
                    "judge": {<a grader/probe.py plan without "stem", "runs", "probe_source">}}, ...],
     "cell_timeout": 60, "notebook_timeout": 180, "max_output_lines": 1000, "threads": 1,
     "sealed": [<bytes of each notebook's sealed part>, ...]}

followed on stdin by the sealed parts (grader/launch.py ``sealed_part``: the case seeds and the probes'
source), which stay in the kernel (the pipe, then a memfd) until each notebook's process reads its own
after its full run. ``cells`` are the code cells of the notebook as graded (the student's, with the
release's locked cells restored), in order, with their position in it.

Its evidence channel gets numbered records (grader/process.py lists their kinds), one "done" at the end: per
notebook a ``cell`` record for every cell the full run executed (its outputs, as Jupyter stores them), one
``full_run``, the judge's records (grader/probe.py), and ``notebook_done`` -- or ``notebook_void`` (its ``problem``)
when its grading process died. One process per student, so the imports and each setup cell are paid once:

* the session (pid 1 of the sandbox, not dumpable, never runs student code) imports the libraries once;
* per notebook it forks a **notebook process** that runs the release's parameters and setup cells (course
  code, trusted, their output captured for the setup cell), then forks
  * the **full run**: an IPython shell on that namespace executes every later cell in order, as Jupyter
    would (a cell past ``cell_timeout`` is interrupted with KeyboardInterrupt, one that ignores it is
    killed), and streams each cell's outputs back; it decides no point;
  * the judge's **loader** and its per-case processes (grader/probe.py), from the same trusted state with
    the given cells' definitions added;
* the notebook process relays only well-formed records to the session, which numbers them.

Every student has a session (and a sandbox) of their own. The student's code runs only in the full run, the loader
and the case processes, none of which holds the evidence channel or the notebook process's pipe."""

from __future__ import annotations

import contextlib
import io
import json
import os
import secrets
import shutil
import signal
import sys
import time

from IPython.core.displayhook import DisplayHook
from IPython.core.displaypub import DisplayPublisher
from IPython.core.interactiveshell import InteractiveShell

from utils.answer_loader import run_definitions
from . import probe, process

#: Imported once per session, before any notebook: what every notebook's setup cell and graded code use
#: (a library only some notebooks use is in OPTIONAL_IMPORTS: a Task-1 class does not pay for it).
PREIMPORT = ("numpy", "torch", "matplotlib", "matplotlib.pyplot", "tqdm.auto",
             "IPython.core.interactiveshell", "IPython.display", "matplotlib_inline.backend_inline", "utils",
             "utils.presets", "utils.plotting", "utils.data", "utils.device", "utils.vision", "utils.scaling",
             "utils.critic", "utils.answer_loader", "utils.notebook_presets")
#: The language-model libraries, and the notebooks that use them: about 3 s of a session's start
#: (transformers imports its model classes lazily: both notebooks use each of these).
LANGUAGE_MODELS = ("transformers", "utils.lm", "transformers.models.gpt_neox.modeling_gpt_neox",
                   "transformers.models.bert.modeling_bert")
LANGUAGE_MODEL_NOTEBOOKS = ("task2_pseudo_likelihood", "taskB_pythia_scaling")
#: Data frames: about 0.45 s of a session's start, for the notebooks that tabulate with pandas.
DATA_FRAMES = ("pandas",)
DATA_FRAME_NOTEBOOKS = ("task2_pseudo_likelihood", "taskA_simclr", "taskB_pythia_scaling")
#: (modules, the notebooks that use them): imported once, before any notebook, when the session's plan holds
#: one of those notebooks (tests/test_grader_units.py checks each list against the notebooks' own imports).
OPTIONAL_IMPORTS = ((LANGUAGE_MODELS, LANGUAGE_MODEL_NOTEBOOKS), (DATA_FRAMES, DATA_FRAME_NOTEBOOKS))


def session_imports(stems) -> list[str]:
    """The modules a session imports once, before its notebooks ``stems``."""
    stems = set(stems)
    return [*PREIMPORT, *(name for modules, users in OPTIONAL_IMPORTS if stems & set(users) for name in modules)]


GRACE = 5.0                      # seconds past a cell's limit before an ignored interrupt means a kill
MAX_CELL_RECORD = 16 * 1024 ** 2  # one cell's outputs, as the full run sends them
MAX_RELAY_RECORD = 30 * 1024 ** 2
STOP_POLL = 1.0                  # seconds between the relay's looks for a stopped notebook process
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
    with contextlib.suppress(Exception):   # no inline backend: figures are simply not shown
        shell.enable_matplotlib("inline")
    return shell


def _limit(outputs: list, max_lines: int) -> list:
    """nbgrader's LimitOutput: at most ``max_lines`` lines of each stream, at most 100 outputs."""
    for out in outputs:
        if out.get("output_type") == "stream":
            lines = out["text"].splitlines(keepends=True)
            if (extra := len(lines) - max_lines) > 0:
                out["text"] = "".join(lines[:max_lines]) + f"... Output truncated: {extra} more lines\n"
    return outputs[:100]


def _interrupt(signum, frame):
    raise KeyboardInterrupt("the cell ran past its time limit and was interrupted by the grader")


def _full_run_child(order_fd: int, names: dict, write_fd: int, max_lines: int) -> None:
    """In the forked full-run process: execute each cell the supervisor orders, in turn, and send its
    outputs with the order's nonce (a cell cannot write the record of a cell it has not been given)."""
    try:
        os.setpgid(0, 0)
        process.default_signals()
        # a cell's time limit: KeyboardInterrupt from SIGALRM, so a loop that ignores SIGINT is interrupted
        # too; the supervisor keeps its own clock (what it reports) and kills a cell that outlives both
        signal.signal(signal.SIGALRM, _interrupt)
        process.single_thread()
        os.dup2(os.open(os.devnull, os.O_RDWR), 0)
        current: list = []
        shell = _shell(names, lambda: current)
        sys.stdout, sys.stderr = _Capture(current, "stdout"), _Capture(current, "stderr")
        orders = process.RecordReader(order_fd, 1 << 40)   # the supervisor's, one at a time: no limit
        while True:
            order = orders.next(float("inf"))   # a dict, or "eof" when the supervisor closed the pipe
            if not isinstance(order, dict) or "cell" not in order:
                break
            cell, nonce = order["cell"], order["nonce"]
            current.clear()
            started = time.monotonic()
            signal.setitimer(signal.ITIMER_REAL, float(order["timeout"]))
            try:
                if cell["role"] == "demo":   # the course's demonstration: its definitions only (light run)
                    for problem in run_definitions(cell["source"], cell["id"], names):
                        current.append({"output_type": "stream", "name": "stderr", "text": problem + "\n"})
                else:
                    shell.run_cell(cell["source"], store_history=True)
            except BaseException as exc:  # noqa: BLE001 - an interrupt between IPython's own handlers
                current.append({"output_type": "error", "ename": type(exc).__name__, "evalue": str(exc)[:2000],
                                "traceback": []})
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
            record = {"k": "cell", "index": cell["index"], "nonce": nonce,
                      "execution_count": shell.execution_count - 1,
                      "outputs": _limit(list(current), max_lines), "seconds": round(time.monotonic() - started, 3)}
            if len(json.dumps(record, default=str)) > MAX_CELL_RECORD:
                record["outputs"] = [{"output_type": "stream", "name": "stderr",
                                      "text": "(this cell's outputs were too large to keep)\n"}]
            process.send_record(write_fd, record, default=str)   # outputs may hold objects JSON does not know
    finally:
        os._exit(0)


def run_full(cells: list[dict], names: dict, emit, *, cell_timeout: float, notebook_timeout: float,
             max_lines: int, light: bool = False) -> None:
    """Supervise the full run of ``cells`` (see the module docstring); emits one ``cell`` record per
    executed cell and one ``full_run`` record: status ok | timeout (a cell ignored its interrupt) |
    budget (the notebook ran past ``notebook_timeout``) | died (the process ended mid-cell) | forged
    (a record that is not the answer to the present order), and ``interrupted``: the cells that ran
    past their time limit by this supervisor's own clock (not by anything the student's process says).

    The supervisor gives the full-run process one cell at a time, each with a fresh random nonce, and
    accepts only that cell's record carrying that nonce: what a cell writes into the pipe ahead of time
    (the "outputs" of the cells after it) is forged, never shown. In the light run the test cells are not
    given to the student's process at all: the judge's report is their only output."""
    order_read, order_write = os.pipe()
    pid, read_fd, write_fd = process.fork_with_pipe()
    if pid == 0:
        os.close(order_write)
        _full_run_child(order_read, names, write_fd, max_lines)
    os.close(order_read)
    lines = process.RecordReader(read_fd, MAX_CELL_RECORD + (1 << 20))
    started = time.monotonic()
    deadline = started + notebook_timeout
    status, stopped_at, interrupted = "ok", None, []
    for cell in cells:
        if cell["role"] == "test" and light:   # the judge's report takes the visible checks' place
            emit({"kind": "cell", "index": cell["index"], "outputs": [], "execution_count": None, "seconds": 0.0})
            continue
        nonce = secrets.token_hex(16)
        try:
            process.send_record(order_write, {"cell": cell, "nonce": nonce, "timeout": cell_timeout})
        except OSError:
            status, stopped_at = "died", cell["index"]
            break
        since, stopped = time.monotonic(), False
        while True:
            rec = lines.next(min(deadline, since + cell_timeout + (GRACE if stopped else 0.0)))
            if isinstance(rec, dict):
                if rec.get("k") == "cell" and rec.get("index") == cell["index"] and rec.get("nonce") == nonce \
                        and isinstance(rec.get("outputs"), list):
                    count = rec.get("execution_count")
                    took = rec.get("seconds")
                    emit({"kind": "cell", "index": cell["index"], "outputs": rec["outputs"],
                          "execution_count": count if isinstance(count, int) and not isinstance(count, bool) else None,
                          "seconds": took if isinstance(took, (int, float)) and not isinstance(took, bool) else None})
                else:
                    status = "forged"   # something in the notebook wrote into the full run's pipe: stop there
                break
            if rec == "timeout" and time.monotonic() < deadline and not stopped:
                stopped = True   # the cell's time is up (its own timer interrupts it): wait GRACE more
                interrupted.append(cell["index"])
                continue
            # "eof": the process ended mid-notebook; "bad": a malformed line in its pipe
            late = "budget" if time.monotonic() >= deadline else "timeout"
            status = {"eof": "died", "bad": "forged"}.get(rec, late)
            break
        if status != "ok":
            stopped_at = cell["index"]
            break
    os.close(order_write)
    os.close(read_fd)
    process.kill_process(pid)
    emit({"kind": "full_run", "status": status, "index": stopped_at, "interrupted": interrupted,
          "seconds": round(time.monotonic() - started, 3)})


# --------------------------------------------------------------------------- one notebook (trusted)
class _Collect(io.StringIO):
    """The setup cell's sys.stdout or sys.stderr: everything it writes, as text."""

    def write(self, text):
        return super().write(str(text))


_IN_NAMESPACE = False   # set by run_session: the session is pid 1 of its own pid namespace (bubblewrap)


def _notebook(nb: dict, plan: dict, write_fd: int, folder: str, sealed_fd: int) -> None:
    """The notebook process: the release's parameters and setup cells, the full run, then the judge.
    It runs no student code itself, ignores the signals student code could send it
    (process.TRUSTED_IGNORES), and works in a folder of its own: nothing a notebook before it wrote there.
    The judge's secrets (case seeds, probe source) wait unread in ``sealed_fd`` until the full run is over."""
    try:
        process.ignore_signals()
        # the session's channel is closed; this pipe and the sealed part are closed below us
        process.CLOSE_IN_CHILDREN[:] = [write_fd, *([sealed_fd] if sealed_fd >= 0 else [])]
        with contextlib.suppress(OSError):
            os.chdir(folder)
        emit = lambda record: process.send_record(write_fd, record)  # noqa: E731
        names = probe.fresh_names()
        judge = dict(nb["judge"], stem=nb["stem"])
        trusted = next(iter(judge["variants"].values()), [])
        first = [c for c in trusted if c["role"] in ("parameters", "setup")]
        given = [c for c in trusted if c["role"] == "given"]
        out, err = _Collect(), _Collect()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            setup_notes = probe.run_trusted(first, names)
        process.ignore_signals()   # whatever handler the setup cell's libraries installed
        outputs = [{"output_type": "stream", "name": name, "text": c.getvalue()}
                   for name, c in (("stdout", out), ("stderr", err)) if c.getvalue()]
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
        # end what the full run left running (busy children would slow the judge's cases): only inside the
        # sandbox's pid namespace, whose pid 1 is the session; elsewhere pid 1 is the machine's init, and
        # kill(-1) would reach every process of this user
        if os.getppid() == 1 and _IN_NAMESPACE:
            process.kill_namespace()
        if sealed_fd >= 0:
            judge.update(process.read_sealed(sealed_fd))
        setup_notes += probe.run_trusted(given, names)
        probe.judge_variants(judge, names, setup_notes, emit)
        emit({"kind": "notebook_done"})
    finally:
        os._exit(0)


def _relay(pid: int, read_fd: int, stem: str, deadline: float, emit) -> str:
    """Forward the notebook process's records (only the kinds it may send, each once in order of
    sense) to the channel with ``stem`` added; returns "" or why the notebook's records stop short.

    Code in the notebook can stop its own grading process (SIGSTOP cannot be ignored). Waiting for the
    notebook's whole time would cost minutes: the relay looks every second and continues a stopped
    process at once; ``notebook_done`` then says how often (``stopped``), for the TA."""
    lines = process.RecordReader(read_fd, MAX_RELAY_RECORD)
    started, stops = time.monotonic(), 0
    while True:
        rec = lines.next(min(deadline, time.monotonic() + STOP_POLL))
        if rec == "timeout" and time.monotonic() < deadline:
            if process.is_stopped(pid):
                stops += 1
                process.signal_group(pid, signal.SIGCONT)
            continue
        if not isinstance(rec, dict):
            return {"eof": "its grading process ended early (os._exit in trusted code? the memory cap?)",
                    "timeout": "it ran past the time the grader allows a notebook",
                    "bad": "its grading process sent a malformed record"}[rec]
        kind = rec.get("kind")
        if kind not in CELL_KINDS:
            return f"its grading process sent a record it may not send ({str(kind)[:40]!r})"
        if kind == "notebook_done":
            emit({**rec, "stem": stem, "seconds": round(time.monotonic() - started, 3), "stopped": stops})
            return ""
        emit({**rec, "stem": stem})


def _fresh_folder(base: str, i: int, stem: str) -> str:
    """A new working folder for one notebook, holding only the student's copy of that notebook."""
    folder = os.path.join(base, f".run-{i}")
    try:
        os.mkdir(folder, 0o700)
        source = os.path.join(base, f"{stem}.ipynb")
        if os.path.isfile(source) and not os.path.islink(source):
            shutil.copyfile(source, os.path.join(folder, f"{stem}.ipynb"))
    except OSError:
        return base
    return folder


def run_session(plan: dict, emit) -> None:
    """Every notebook of ``plan``, one notebook process at a time; then ``{"kind": "done"}``."""
    global _IN_NAMESPACE
    _IN_NAMESPACE = os.getpid() == 1
    started = time.monotonic()
    base = os.getcwd()
    for name in session_imports(nb["stem"] for nb in plan["notebooks"]):
        with contextlib.suppress(Exception):   # an optional library (transformers on a minimal install)
            __import__(name)
    process.ignore_signals()   # the libraries' own handlers (a handler would let a signal reach pid 1)
    threads = int(plan.get("threads") or 1)
    with contextlib.suppress(Exception):
        sys.modules["torch"].set_num_threads(max(1, threads))   # imported above (PREIMPORT)
    emit({"kind": "ready", "seconds": round(time.monotonic() - started, 3)})   # the imports, once per student
    per_notebook = (float(plan.get("notebook_timeout", 180)) + float(plan.get("judge_budget", 120))
                    + float(plan.get("setup_seconds", 120)))
    sealed = plan.get("sealed") or []
    for i, nb in enumerate(plan["notebooks"]):
        folder = _fresh_folder(base, i, nb["stem"])
        sealed_fd = process.sealed_file(plan["sealed_fd"], sealed[i]) if i < len(sealed) else -1
        pid, read_fd, write_fd = process.fork_with_pipe()
        if pid == 0:
            _notebook(nb, plan, write_fd, folder, sealed_fd)
        if sealed_fd >= 0:
            os.close(sealed_fd)
        try:
            problem = _relay(pid, read_fd, nb["stem"], time.monotonic() + per_notebook, emit)
        except Exception as exc:  # noqa: BLE001 - this notebook's records stop here; the next one goes on
            problem = f"its records could not be relayed ({exc.__class__.__name__})"
        os.close(read_fd)
        process.kill_process(pid)   # as pid 1 of the sandbox: everything the notebook left behind dies too
        if problem:
            emit({"kind": "notebook_void", "stem": nb["stem"], "problem": problem})
    emit({"kind": "done"})


def main(argv: list[str] | None = None) -> None:
    process.serve(run_session, "grader.session", argv)


if __name__ == "__main__":
    main()
