"""Run each student's grading session in a sandbox: no network, a memory cap, and a filesystem that
holds only what a notebook needs (the Python environment, utils/, data/, the model cache and the
student's own folder) -- not the gradebook, other students' work, solutions/ or grader/checks/.

Mechanisms, best first (``protections()`` says which ones this machine has): bubblewrap (new user, mount,
pid, network and IPC namespaces, read-only binds); ``unshare --user --net`` (no network, but the session sees
the grader's filesystem); nothing (a plain process). Always: ``setrlimit`` caps (memory, file size) applied
inside the sandbox (grader/process.py ``Limits``), and per-student cgroups where the machine has them.
:func:`session_prefix` wraps one student's session (grader/session.py); :func:`probe_prefix` wraps the
judge's harness alone (grader/probe.py: the solution's reference values, the mutant sweeps)."""

from __future__ import annotations

import contextlib
import functools
import glob
import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path

from . import GRADER_DIR, ROOT


def _run_ok(cmd: list[str]) -> bool:
    try:
        return subprocess.run(cmd, capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


@functools.lru_cache(maxsize=None)
def protections() -> dict[str, bool]:
    """Probe this machine once: which isolation mechanisms actually work here."""
    bwrap = shutil.which("bwrap")
    unshare = shutil.which("unshare")
    have_bwrap = bool(bwrap) and _run_ok([bwrap, "--unshare-all", "--die-with-parent", "--ro-bind", "/", "/",
                                          "--dev", "/dev", "--proc", "/proc", "true"])
    overlay = have_bwrap and _run_ok([bwrap, "--unshare-all", "--ro-bind", "/", "/", "--dev", "/dev",
                                      "--overlay-src", str(GRADER_DIR), "--tmp-overlay", "/mnt", "true"])
    have_unshare = bool(unshare) and _run_ok([unshare, "--user", "--net", "--map-root-user", "true"])
    rlimits = importlib.util.find_spec("resource") is not None   # whether this platform has rlimits at all
    return {"network": have_bwrap or have_unshare, "filesystem": have_bwrap, "memory": rlimits,
            "bwrap": have_bwrap, "overlay": overlay}


def describe(prot: dict[str, bool]) -> str:
    """One line for the summary: which protections are on and which are off (and why)."""
    parts = ["network: " + ("off (namespace)" if prot["network"] else "REACHABLE (no bwrap/unshare)"),
             "filesystem: " + ("isolated (bwrap)" if prot["filesystem"]
                               else "NOT isolated (install bubblewrap): student code can read AND overwrite "
                                    "whatever this user can -- the gradebook, solutions/, other students' files"),
             "memory: " + ("capped (setrlimit)" if prot["memory"] else "NOT capped")]
    if "cpu_cgroup" in prot:
        parts.append("per-student CPU and memory: " + (
            "capped (cgroups)" if prot["cpu_cgroup"] and prot.get("memory_cgroup") else
            "NOT capped (no writable cgroup v1 cpu/memory controller; run as root on a cgroup-v1 host): one "
            "student's busy processes can slow the cases of the students graded beside them (a resume grades "
            "students whose checks timed out on an overloaded machine again)"))
    return "; ".join(parts)


# What each sandboxed process may read of the repository: never grader/checks/ (the judge's cases),
# solutions/, grading/ or a notebook's probes (they come in the plan's sealed part: grader/launch.py).
PROBE_PATHS = ("utils", "data", "pyproject.toml", "grader/__init__.py", "grader/probe.py", "grader/process.py",
               "grader/evidence.py", "grader/probes/__init__.py")


def _ro(path: str) -> list[str]:
    return ["--ro-bind", path, path] if os.path.exists(path) else []


TMP_BYTES = 512 * 1024 ** 2   # the sandbox's /tmp and build/ are RAM-backed: cap them
#: The sandbox's home: a fresh, empty folder in its own /tmp for every process the grader starts.
SANDBOX_HOME_ENV = {"HOME": "/tmp/home", "MPLCONFIGDIR": "/tmp/home/.matplotlib", "XDG_CACHE_HOME": "/tmp/home/.cache"}


@functools.lru_cache(maxsize=None)
def _font_list_folder() -> Path | None:
    try:
        return ROOT / "build" / "cache" / f"matplotlib-{metadata.version('matplotlib')}"
    except metadata.PackageNotFoundError:
        return None


def matplotlib_font_list() -> Path | None:
    """This machine's matplotlib font list (``fontlist-v*.json``), built once per matplotlib version under
    build/cache/ in a child process (again if someone deleted it); None where it cannot be built. Every
    sandboxed process would otherwise scan the system's fonts again in its empty home (0.1 to 0.3 CPU-seconds
    per session: benchmarks/session_start.py)."""
    folder = _font_list_folder()
    if folder is None:
        return None
    if not any(folder.glob("fontlist-v*.json")):
        env = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "LC_ALL")}
        try:
            folder.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryDirectory(prefix=".fonts-", dir=folder, ignore_cleanup_errors=True) as scratch:
                subprocess.run([sys.executable, "-c", "import matplotlib.font_manager"], capture_output=True,
                               env={**env, "MPLCONFIGDIR": scratch}, timeout=120, check=True)
                for built in Path(scratch).glob("fontlist-v*.json"):
                    os.replace(built, folder / built.name)   # whole files only: a worker beside us may be binding it
        except (OSError, subprocess.SubprocessError):
            return None
    found = sorted(folder.glob("fontlist-v*.json"))
    return found[-1] if found else None


def _bwrap(repo_paths: tuple[str, ...], workdir: Path, env: dict, overlay: bool, bind: str) -> list[str]:
    """The bubblewrap prefix: namespaces, the system, the interpreter and ``repo_paths`` of the repository,
    read-only; a size-capped /tmp; build/ as a size-capped tmpfs over the read-only model cache; ``workdir``
    bound with ``bind`` (``--ro-bind`` or ``--bind``) as the working folder; ``env`` and the sandbox's home."""
    repo = str(ROOT)
    cmd = ["bwrap", "--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL",
           "--proc", "/proc", "--dev", "/dev", "--size", str(TMP_BYTES), "--tmpfs", "/tmp",
           "--perms", "0700", "--dir", "/tmp/home"]
    fonts = matplotlib_font_list()
    if fonts is not None:   # read-only, in a writable folder: matplotlib reads it and may write beside it
        cmd += ["--ro-bind", str(fonts), f"{SANDBOX_HOME_ENV['MPLCONFIGDIR']}/{fonts.name}"]
    for top in ("/usr", "/etc", "/opt"):
        cmd += _ro(top)
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(top):
            cmd += ["--symlink", os.readlink(top), top]
        else:
            cmd += _ro(top)
    # the interpreter and the environment (a venv links to a base installation elsewhere)
    for prefix in {sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(os.path.realpath(sys.executable))}:
        if not prefix.startswith(("/usr", "/etc", "/opt")):
            cmd += _ro(prefix)
    for rel in repo_paths:
        cmd += _ro(os.path.join(repo, rel))
    build = os.path.join(repo, "build")
    cmd += ["--size", str(TMP_BYTES), "--tmpfs", build]
    cache = os.path.join(build, "cache")
    if os.path.isdir(cache):   # read-only, or with an overlay: writable, its changes discarded
        cmd += ["--overlay-src", cache, "--tmp-overlay", cache] if overlay else ["--ro-bind", cache, cache]
    for dev in sorted(glob.glob("/dev/nvidia*")):  # GPUs, where the grading machine has them
        cmd += ["--dev-bind", dev, dev]
    # --as-pid-1: the harness or session itself is pid 1 of the sandbox (and not dumpable), so no process
    # in there holds the evidence channel open where /proc/<pid>/fd could reach it
    cmd += ["--as-pid-1", bind, str(workdir), str(workdir), "--chdir", str(workdir), "--clearenv"]
    for key, value in {**env, **SANDBOX_HOME_ENV}.items():
        cmd += ["--setenv", key, value]
    return cmd + ["--"]


def probe_prefix(mode: str, workdir: Path, env: dict, overlay: bool = False) -> list[str]:
    """The command prefix that runs the judge's probe harness (grader/probe.py) in the sandbox:
    it sees the environment, utils/, data/, the model cache and grader's probe modules, never
    grader/checks/ (the cases and references), solutions/, the gradebook or other students."""
    if mode == "bwrap":
        return _bwrap(PROBE_PATHS, workdir, env, overlay, "--ro-bind")
    if mode == "unshare":
        return ["unshare", "--user", "--net", "--map-root-user", "--"]
    return []


SESSION_PATHS = PROBE_PATHS + ("grader/session.py",)


def session_prefix(mode: str, workdir: Path, env: dict, overlay: bool = False) -> list[str]:
    """The command prefix that runs one student's grading session (grader/session.py) in the sandbox:
    what the probe harness sees (:func:`probe_prefix`), grader/session.py, and ``workdir`` writable
    (the notebooks' working folder, holding only that student's submission)."""
    if mode == "bwrap":
        return _bwrap(SESSION_PATHS, workdir, env, overlay, "--bind")
    return probe_prefix(mode, workdir, env, overlay)


# ----------------------------------------------------------------------------- process limits
PIDS_MAX = 512   # processes and threads of one grading job (torch's pools need a few dozen)
CGROUP_V1 = Path("/sys/fs/cgroup")
CPU_PERIOD_US = 100_000


def _v1_cgroup(controller: str, name: str, settings: dict[str, str]) -> Path | None:
    """A cgroup of the v1 ``controller`` with ``settings`` (file -> value); None where this machine allows none."""
    root = CGROUP_V1 / controller
    try:
        if not (root / "cgroup.procs").exists():
            return None
        path = root / f"las-{os.getpid()}-{name}"
        path.mkdir(exist_ok=True)
        for key, value in settings.items():
            (path / key).write_text(value)
        return path
    except OSError:
        return None


def pids_cgroup(name: str, limit: int = PIDS_MAX) -> Path | None:
    """A cgroup (v1 pids controller) capping the tasks of one grading job, where this machine lets
    us make one (root on a cgroup-v1 host); None elsewhere, and RLIMIT_NPROC is the fallback."""
    return _v1_cgroup("pids", name, {"pids.max": str(limit)})


def student_cgroups(name: str, *, cpus: float | None = None, mem_bytes: int | None = None,
                    pids: int = PIDS_MAX) -> list[Path]:
    """The cgroups of one student's session, where this machine allows them: a pids cap, ``cpus``
    CPUs' worth of time (CFS quota: a student's busy processes cannot take the CPU a worker beside
    them needs, so an honest student's cases keep their time) and ``mem_bytes`` of memory for all
    their processes together (RLIMIT_DATA caps each process alone). :func:`cgroup_protections` says
    which ones work here; the summary line reports the rest as off."""
    made = [pids_cgroup(name, pids)]
    if cpus:
        made.append(_v1_cgroup("cpu", name, {"cpu.cfs_period_us": str(CPU_PERIOD_US),
                                             "cpu.cfs_quota_us": str(max(1000, int(cpus * CPU_PERIOD_US)))}))
    if mem_bytes:
        made.append(_v1_cgroup("memory", name, {"memory.limit_in_bytes": str(int(mem_bytes))}))
    return [p for p in made if p is not None]


@functools.lru_cache(maxsize=None)
def cgroup_protections() -> dict[str, bool]:
    """Which per-student cgroups this machine lets the grader make (tried once)."""
    found = {}
    for controller, settings in (("pids", {"pids.max": "64"}), ("cpu", {"cpu.cfs_quota_us": "100000"}),
                                 ("memory", {"memory.limit_in_bytes": str(1 << 30)})):
        path = _v1_cgroup(controller, "probe", settings)
        found[controller] = path is not None
        remove_cgroup(path)
    return found


def join_cgroup(path):
    """A ``preexec_fn`` that moves the new process into ``path`` (one cgroup, a list of them, or None;
    its children follow)."""
    paths = [p for p in (path if isinstance(path, (list, tuple)) else [path]) if p is not None]

    def join():
        for p in paths:
            with contextlib.suppress(OSError):
                (p / "cgroup.procs").write_text(str(os.getpid()))
    return join


def remove_cgroup(path) -> None:
    """Kill what is left in ``path`` (one cgroup, a list of them, or None) and remove it."""
    if path is None or isinstance(path, (list, tuple)):
        for p in path or ():
            remove_cgroup(p)
        return
    for _ in range(20):
        try:
            for pid in (path / "cgroup.procs").read_text().split():
                with contextlib.suppress(OSError):
                    os.kill(int(pid), signal.SIGKILL)
            path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.1)


def nproc_limit(margin: int = PIDS_MAX) -> int:
    """RLIMIT_NPROC for a non-root grader: the tasks this user runs now plus ``margin`` (root is
    exempt from RLIMIT_NPROC; the pids cgroup covers it)."""
    uid, count = os.getuid(), 0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                if os.stat(f"/proc/{entry}").st_uid == uid:
                    count += len(os.listdir(f"/proc/{entry}/task"))
    return count + margin
