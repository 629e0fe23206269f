"""The grading processes' plumbing, shared by the probe harness (grader/probe.py) and the session
(grader/session.py): one place for how trusted processes protect themselves, fork children that run
student code, exchange records and clean up.

Records are JSON objects, one per line (``send_record`` writes, ``RecordReader`` reads). Their
vocabularies, by channel:

* the **evidence channel** (a harness's or session's stdout, written by ``serve``'s ``emit``): numbered
  records (``seq`` 0, 1, 2, ...) that the grader outside the sandbox reads; the probe harness's kinds are
  ``header``, ``case``, ``done`` (grader/probe.py), the session's add ``ready``, ``cell``, ``full_run``,
  ``notebook_done`` (with ``stopped``), ``notebook_void`` (grader/session.py);
* a **loader's pipe** to its harness: ``k`` = ``stmt``, ``loaded``, ``case_start``, ``case``, ``end``;
* a **case child's pipe** to its loader: one encoded value (``read_child`` collects it);
* the **full run's pipes**: orders ``{"cell", "nonce", "timeout"}`` in, ``k`` = ``cell`` records out.

No process that runs student code holds the evidence channel (``CLOSE_IN_CHILDREN``, closed by ``close_inherited``
in every child). The functions below capture ``os.write`` and friends when this module is imported, before any
student code runs, so a notebook that replaces them changes nothing here."""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import resource
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

_dumps = json.dumps
_write, _read, _fork, _close = os.write, os.read, os.fork, os.close
CLOSE_IN_CHILDREN: list[int] = []   # the evidence channel: no process that runs student code holds it


def close_inherited() -> None:
    """In a forked child: close every descriptor of ``CLOSE_IN_CHILDREN``."""
    for fd in CLOSE_IN_CHILDREN:
        with contextlib.suppress(OSError):
            os.close(fd)


LIMITS_ENV = "LAS_SANDBOX_LIMITS"


@dataclass(frozen=True)
class Limits:
    """Every ``setrlimit`` cap of a sandboxed grading process (the probe harness, a student's session),
    built once outside the sandbox (grader/policy.py ``session_policy``), carried in one environment
    variable and applied by :func:`serve` before any student code runs; every forked process inherits them.
    None leaves a limit as it is."""

    mem_bytes: int | None = None      # RLIMIT_DATA (heap and private mappings), RLIMIT_AS 8 GiB above it
    fsize_bytes: int | None = None    # RLIMIT_FSIZE: the largest file a process may write
    nproc: int | None = None          # RLIMIT_NPROC (root ignores it: the pids cgroup caps it there)

    def to_env(self) -> dict[str, str]:
        return {LIMITS_ENV: json.dumps(asdict(self))}

    @classmethod
    def from_env(cls, env=None) -> "Limits":
        data = json.loads((os.environ if env is None else env).get(LIMITS_ENV) or "{}")
        return cls(**{key: data.get(key) for key in ("mem_bytes", "fsize_bytes", "nproc")})

    def apply(self) -> None:
        if self.mem_bytes:
            # RLIMIT_DATA counts heap and private anonymous mappings (every tensor and array) but not the
            # shared libraries torch maps, so it caps real memory without breaking imports; the address
            # space is a backstop, with room for the libraries' mappings.
            resource.setrlimit(resource.RLIMIT_DATA, (self.mem_bytes, self.mem_bytes))
            address = self.mem_bytes + 8 * 1024 ** 3
            resource.setrlimit(resource.RLIMIT_AS, (address, address))
        if self.fsize_bytes:
            resource.setrlimit(resource.RLIMIT_FSIZE, (self.fsize_bytes, self.fsize_bytes))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if self.nproc:
            # RLIMIT_NPROC counts every task of the real user id on the machine: the cap is what this user
            # already runs plus a margin (threads count too: torch's pools need a few dozen).
            resource.setrlimit(resource.RLIMIT_NPROC, (self.nproc, self.nproc))


def kill_namespace() -> None:
    """SIGKILL every process this one may signal, then reap the children: only for pid 1 of a sandbox's
    own pid namespace, where that means everything the student's code left behind."""
    with contextlib.suppress(OSError):
        os.kill(-1, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass


def protect_parent() -> None:
    with contextlib.suppress(Exception):   # best effort (non-Linux)
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(4, 0, 0, 0, 0)   # PR_SET_DUMPABLE 0: no /proc/<pid>/mem, no ptrace from children
        libc.prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG: die with the grader


#: Signals no process inside the sandbox may use to stop a trusted grading process (the harness or
#: session, pid 1 of the sandbox, and each notebook process): ignored there. Inside a pid namespace the
#: kernel already drops a signal to pid 1 whose action is the default; Python installs a handler for
#: SIGINT, so without this one ``os.kill(1, signal.SIGINT)`` from a notebook stopped every grading.
#: SIGKILL and SIGSTOP cannot be ignored: pid 1 is immune to them from inside, and a notebook process
#: stopped or killed costs that notebook only. Every process that runs student code gets the defaults back.
TRUSTED_IGNORES = tuple(getattr(signal, name) for name in (
    "SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGALRM", "SIGVTALRM", "SIGPROF",
    "SIGXCPU", "SIGXFSZ", "SIGTSTP", "SIGTTIN", "SIGTTOU", "SIGPIPE", "SIGTRAP", "SIGPWR") if hasattr(signal, name))


def ignore_signals() -> None:
    """In a trusted process: no signal from inside the sandbox stops it (see TRUSTED_IGNORES), and any
    other signal a library gave a Python handler is back to its default (which pid 1 is immune to)."""
    for sig in TRUSTED_IGNORES:
        with contextlib.suppress(OSError, ValueError):
            signal.signal(sig, signal.SIG_IGN)
    for sig in signal.valid_signals():
        if sig in TRUSTED_IGNORES or sig in (signal.SIGKILL, signal.SIGSTOP, signal.SIGCHLD):
            continue
        with contextlib.suppress(OSError, ValueError, TypeError):
            if callable(signal.getsignal(sig)):
                signal.signal(sig, signal.SIG_DFL)


def default_signals() -> None:
    """In a forked process that runs student code: the signal actions a fresh Python has (Ctrl-C
    raises KeyboardInterrupt; SIGTERM ends it; SIGPIPE stays ignored, as Python sets it)."""
    for sig in TRUSTED_IGNORES:
        with contextlib.suppress(OSError, ValueError):
            if sig == signal.SIGINT:
                signal.signal(sig, signal.default_int_handler)
            elif sig != getattr(signal, "SIGPIPE", None):
                signal.signal(sig, signal.SIG_DFL)


def private_sys_path() -> None:
    """No working folder on ``sys.path``: a notebook that writes ``sqlite3.py`` (or ``json.py``) into its
    folder must not replace the standard library for the grader or for the notebooks after it."""
    root = str(Path(__file__).resolve().parents[1])
    here = os.getcwd()
    sys.path[:] = [p for p in sys.path if p not in ("", ".") and (p != here or p == root)]


def send_record(fd: int, record: dict, default=None) -> None:
    """``record`` as one JSON line to ``fd``; ``default`` as json.dumps's (for objects JSON does not know)."""
    view = memoryview((_dumps(record, allow_nan=True, default=default) + "\n").encode())
    while view:
        view = view[_write(fd, view[:1 << 16]):]


def single_thread() -> None:
    """In a forked process: one intra-op thread. An OpenMP pool the parent started (a student's
    top-level torch code with several threads) does not survive fork(); using it would hang."""
    torch = sys.modules.get("torch")   # not loaded: no thread pool to leave
    with contextlib.suppress(Exception):
        if torch is not None:
            torch.set_num_threads(1)


def read_child(pid: int, read_fd: int, timeout: float, limit: int) -> tuple[str, bytes]:
    """Collect one child's output; kill it (and its group) past ``timeout``. Returns (status, bytes).
    Reading stops when the child has exited and the pipe is drained, even if grandchildren it left
    behind still hold the pipe open."""
    deadline = time.monotonic() + timeout
    chunks, size, status, exited = [], 0, "ok", False
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            status = "timeout"
            break
        if select.select([read_fd], [], [], 0.0 if exited else min(left, 0.2))[0]:
            chunk = _read(read_fd, 1 << 16)
            if not chunk:
                break
            size += len(chunk)
            if size > limit:
                status = "bad-evidence"
                break
            chunks.append(chunk)
            continue
        if exited:
            break
        exited = os.waitpid(pid, os.WNOHANG)[0] == pid
    _close(read_fd)
    signal_group(pid, signal.SIGKILL)   # the case's process group: whatever it started dies with it
    if not exited:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)
    if status == "ok" and not chunks:
        status = "died"
    return status, b"".join(chunks)


class RecordReader:
    """Newline-delimited records from a pipe, each at most ``limit`` bytes, with a deadline per read."""

    def __init__(self, fd: int, limit: int):
        self.fd, self.limit, self.buf, self.eof = fd, limit, b"", False

    def next(self, deadline: float):
        """The next record (dict), "timeout", "eof", or "bad" (too long or not a JSON object)."""
        while b"\n" not in self.buf:
            if len(self.buf) > self.limit:
                return "bad"
            if self.eof:
                return "eof"
            left = deadline - time.monotonic()
            if left <= 0:
                return "timeout"
            if select.select([self.fd], [], [], min(left, 0.5))[0]:
                chunk = os.read(self.fd, 1 << 20)
                self.eof = not chunk
                self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        try:
            rec = json.loads(line)
        except (ValueError, RecursionError):
            return "bad"
        return rec if isinstance(rec, dict) else "bad"


def signal_group(pid: int, sig: int) -> None:
    """Send ``sig`` to ``pid``'s process group and to ``pid`` itself; either may be gone already."""
    for target in (-pid, pid):
        with contextlib.suppress(OSError):
            os.kill(target, sig)


def is_stopped(pid: int) -> bool:
    """Whether ``pid`` is stopped (SIGSTOP, SIGTSTP: state T or t in /proc/<pid>/stat); False when unknown."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2:][:1] in (b"T", b"t")


def kill_process(pid: int) -> None:
    signal_group(pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)
    if os.getpid() == 1:   # pid 1 of the sandbox: nothing the loader started outlives it
        kill_namespace()


def serve(run, name: str, argv: list[str] | None = None) -> None:
    """The entry point of a sandboxed grading process (this harness, grader/session.py): protect it,
    apply the limits, read the plan (a file, or ``-``: stdin) and call ``run(plan, emit)``, where ``emit``
    writes numbered records to the evidence channel, which every child closes."""
    argv = sys.argv[1:] if argv is None else argv
    protect_parent()
    ignore_signals()
    private_sys_path()
    out_fd = os.dup(1)   # the evidence channel; every child closes it
    os.dup2(2, 1)        # anything printed (by setup code) goes to stderr
    try:
        Limits.from_env().apply()
    except Exception as exc:  # noqa: BLE001
        print(f"{name}: could not apply limits: {exc}", file=sys.stderr)
    if argv and argv[0] != "-":
        with open(argv[0], encoding="utf-8") as f:
            plan = json.load(f)
    else:   # the plan comes on stdin: nothing of it stays on disk where the notebook's code could read it
        plan = read_plan(0)
        plan["sealed_fd"] = os.dup(0)   # the sealed parts, still unread: no child inherits them
        os.set_inheritable(plan["sealed_fd"], False)
        CLOSE_IN_CHILDREN.append(plan["sealed_fd"])
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)

    counter = iter(range(1 << 62))

    def emit(record: dict) -> None:
        # Every record carries its place in the stream: the judge accepts only 0, 1, 2, ... in order,
        # each once, ending with one "done" and a clean exit, so a record forged into the channel
        # (or a harness killed half-way) voids the run instead of scoring.
        record["seq"] = next(counter)
        send_record(out_fd, record)

    os.set_inheritable(out_fd, False)
    CLOSE_IN_CHILDREN.append(out_fd)
    run(plan, emit)


def plan_bytes(plan: dict, sealed: list[bytes] = ()) -> bytes:
    """What a grading process reads on stdin: the plan's length and a newline, the plan as JSON, then the
    ``sealed`` parts (their lengths go in ``plan["sealed"]``), which stay in the pipe until
    :func:`sealed_file` moves each to the one process that may read it."""
    body = json.dumps({**plan, "sealed": [len(part) for part in sealed]} if sealed else plan).encode()
    return b"%d\n" % len(body) + body + b"".join(sealed)


def read_plan(fd: int) -> dict:
    """The plan :func:`plan_bytes` wrote, read from ``fd`` up to its end and not a byte further."""
    header = b""
    while not header.endswith(b"\n"):
        byte = _read(fd, 1)
        if not byte or len(header) > 20:
            raise ValueError("the plan on stdin does not start with its length")
        header += byte
    size, parts = int(header), []
    while size > 0:
        chunk = _read(fd, min(size, 1 << 20))
        if not chunk:
            raise EOFError("the plan ended early")
        parts.append(chunk)
        size -= len(chunk)
    return json.loads(b"".join(parts))


def sealed_file(src: int, size: int) -> int:
    """A new in-memory file (``memfd``) holding the next ``size`` bytes of ``src`` (a sealed part of the
    plan), moved by the kernel (``os.splice``): they never pass through this process's memory, so no child
    it forks later can find them there. Returns its descriptor, at offset 0."""
    fd = os.memfd_create("sealed-part")
    try:
        while size > 0:
            moved = os.splice(src, fd, size)
            if not moved:
                raise EOFError("the plan's sealed parts ended early")
            size -= moved
        os.lseek(fd, 0, os.SEEK_SET)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_sealed(fd: int) -> dict:
    """A sealed part, read whole from the file :func:`sealed_file` made (and closed)."""
    parts = []
    try:
        while chunk := _read(fd, 1 << 20):
            parts.append(chunk)
    finally:
        _close(fd)
    return json.loads(b"".join(parts))


def fork_with_pipe() -> tuple[int, int, int]:
    """Fork a child that writes to a new pipe: (pid, read_fd, write_fd). In the child (pid 0) the
    read end and every descriptor of ``CLOSE_IN_CHILDREN`` are closed, and ``read_fd`` is -1."""
    read_fd, write_fd = os.pipe()
    pid = _fork()
    if pid == 0:
        os.close(read_fd)
        close_inherited()
        return 0, -1, write_fd
    os.close(write_fd)
    return pid, read_fd, -1


@contextlib.contextmanager
def plan_process(cmd: list[str], plan: dict, *, workdir, env: dict, timeout: float, preexec_fn=None,
                 sealed: list[bytes] = ()):
    """Start ``cmd`` (the probe harness or a student's session) in a process group of its own, ``plan`` and its
    ``sealed`` parts on its stdin (:func:`plan_bytes`), killed with its group at ``timeout``; yields ``(proc,
    outcome)``. When the block ends, whatever the run left behind is killed, and ``outcome`` holds ``returncode``
    and ``tail`` (the last 4,000 bytes of its stderr, which went to a temporary file in ``workdir``)."""
    outcome: dict = {}
    with tempfile.TemporaryFile(dir=workdir) as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, stdin=subprocess.PIPE,
                                cwd=workdir, env=env, start_new_session=True, preexec_fn=preexec_fn)
        timer = threading.Timer(timeout, kill_group, args=(proc,))
        timer.start()
        # a thread writes: the sealed parts wait in the pipe until the process takes each in turn,
        # while this one reads its records
        writer = threading.Thread(target=_feed, args=(proc.stdin, plan_bytes(plan, sealed)), daemon=True)
        writer.start()
        try:
            yield proc, outcome
        finally:
            timer.cancel()
            try:
                outcome["returncode"] = proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                kill_group(proc)
                outcome["returncode"] = proc.wait()
            kill_group(proc)  # whatever the run left behind
            writer.join(5)
            err.seek(0, 2)
            err.seek(max(0, err.tell() - 4000))
            outcome["tail"] = err.read().decode("utf-8", "replace")


def _feed(pipe, data: bytes) -> None:
    # a process that ends without reading it all is no error here: its records say what happened
    with contextlib.suppress(BrokenPipeError, OSError, ValueError):
        pipe.write(data)
        pipe.close()


def kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL the process group ``proc`` leads (started with ``start_new_session``); gone already is fine."""
    with contextlib.suppress(OSError):
        os.killpg(proc.pid, signal.SIGKILL)
