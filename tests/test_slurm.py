"""The Slurm launcher (grader/extras/cluster/slurm_array.sh, slurm_merge.sh) does what its header says.

Without Slurm: the header's claims are checked against the script (resource flags repeated in the resubmit
line, logs named by job and task under grading/, an ``afterany`` merge, the interpreter chosen from
$LAS_PYTHON / .venv / PATH, a node without bubblewrap refusing with exit 1, SIGTERM reaching the grader),
and a local ``autograde`` stopped with SIGTERM removes its scratch folder.

With Slurm (``bash .ci/slurm-up`` starts a one-node cluster; CI sets LAS_REQUIRE_SLURM=1, where Slurm's
absence fails instead of skipping): a Task-1-only class of four honest students is graded as a 2-task array
with ``sbatch --wait`` and merged by slurm_merge.sh under ``afterany``; every row of grades.csv equals a
local run's. Then one task is cancelled mid-run: merge-shards names its missing students, the task's
scratch folder is gone, and resubmitting it as the header says gives the same CSV.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import SOLUTIONS
from fixtures import honest
from fixtures.hostile import grader_cli, grader_command
from grader import ROOT

LAUNCHER = ROOT / "grader" / "extras" / "cluster" / "slurm_array.sh"
MERGER = ROOT / "grader" / "extras" / "cluster" / "slurm_merge.sh"
STEM = "task1_infonce"
REQUIRED = os.environ.get("LAS_REQUIRE_SLURM") == "1"
DEADLINE = 900   # seconds for any one Slurm wait: a stuck cluster fails the test, never hangs CI


def _header() -> str:
    return "\n".join(ln for ln in LAUNCHER.read_text().splitlines() if ln.startswith("#"))


# ----------------------------------------------------------------------------- the header's claims
def test_header_states_resources_and_repeats_them_when_resubmitting():
    header = _header()
    submit = [ln for ln in header.splitlines() if "sbatch" in ln and "slurm_array.sh" in ln]
    assert submit, header
    for line in submit:
        assert "--cpus-per-task=" in line and "--mem=" in line, f"a submit line without resource flags: {line}"
    resubmit = [ln for ln in submit if "LAS_SHARD_COUNT" in ln]
    assert resubmit, "the header must show how to resubmit one task"
    assert "--dependency=afterok" not in header, "an afterok merge stays pending forever once a task failed"
    assert "--dependency=afterany:" in header and "slurm_merge.sh" in header


def test_logs_are_named_by_job_and_task_under_grading_and_ignored_by_git():
    outputs = [ln.split("=", 1)[1] for ln in (LAUNCHER.read_text() + MERGER.read_text()).splitlines()
               if ln.startswith("#SBATCH --output=")]
    assert len(outputs) == 2, outputs
    array_log, merge_log = outputs
    assert "%A" in array_log and "%a" in array_log, "a resubmitted task must not overwrite the dead task's log"
    assert "%j" in merge_log
    for log in outputs:
        assert log.startswith("grading/slurm/"), log
        name = log.replace("%x", "las").replace("%A", "12").replace("%a", "3").replace("%j", "13")
        ignored = subprocess.run(["git", "check-ignore", "-q", name], cwd=ROOT)
        assert ignored.returncode == 0, f"{name} is not covered by .gitignore"
    assert "mkdir -p grading/slurm" in _header(), "Slurm does not create the folder of --output"
    # a job submitted without --output (sbatch --wrap ...) writes slurm-<jobid>.out where it was submitted
    assert subprocess.run(["git", "check-ignore", "-q", "slurm-1234.out"], cwd=ROOT).returncode == 0


def _fake_python(tmp_path: Path, body: str = "") -> Path:
    """An executable standing in for the pack's Python: records its arguments, then runs ``body``."""
    fake = tmp_path / "fake-python"
    fake.write_text(f"#!/bin/bash\nif [ \"$1\" = -c ]; then exit 0; fi\necho \"$@\" >>{tmp_path}/calls\n{body}\n")
    fake.chmod(0o755)
    return fake


def _launch(env: dict, cwd: Path = ROOT, timeout: float = 60, **kw) -> subprocess.Popen | subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "LAS_SHARD_COUNT"))}
    base.update(SLURM_ARRAY_TASK_ID="0", SLURM_ARRAY_TASK_COUNT="1", SLURM_CPUS_PER_TASK="2",
                SLURM_SUBMIT_DIR=str(cwd))
    base.update(env)
    if kw.pop("background", False):
        return subprocess.Popen(["bash", str(LAUNCHER)], cwd=cwd, env=base, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, start_new_session=True)
    return subprocess.run(["bash", str(LAUNCHER)], cwd=cwd, env=base, capture_output=True, text=True, timeout=timeout)


def test_launcher_uses_las_python_then_venv_then_path(tmp_path):
    fake = _fake_python(tmp_path)
    proc = _launch({"LAS_PYTHON": str(fake)})
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "calls").read_text().split() == \
        "-m grader autograde --shard auto --sandbox bwrap --workers 1 --session-threads 1".split()
    # no LAS_PYTHON, no .venv: python3 on PATH (a conda environment)
    repo = tmp_path / "repo"
    shutil.copytree(ROOT / "grader" / "extras" / "cluster", repo / "grader" / "extras" / "cluster")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "python3").symlink_to(fake)
    (tmp_path / "calls").unlink()
    proc = _launch({"LAS_PYTHON": "", "PATH": f"{bindir}:{os.environ['PATH']}"}, cwd=repo)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "calls").read_text().startswith("-m grader autograde")
    # a Python without the pack: a clear refusal naming what was tried
    proc = _launch({"LAS_PYTHON": "/nonexistent/python"})
    assert proc.returncode == 1 and "no Python with the pack installed" in proc.stderr, proc.stderr


def test_a_node_without_bubblewrap_refuses_with_exit_1_as_the_header_says(tmp_path):
    assert "exits 1" in _header() and "--sandbox auto" in _header()
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "bwrap").write_text("#!/bin/sh\nexit 1\n")   # bubblewrap present but unusable
    (bindir / "bwrap").chmod(0o755)
    grading = tmp_path / "grading"
    (grading / "submitted" / "alice" / "ex01").mkdir(parents=True)
    proc = _launch({"PATH": f"{bindir}:{os.environ['PATH']}", "LAS_GRADER_OPTIONS": f"--grading-dir={grading}"},
                   timeout=120)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "bubblewrap is not usable here" in proc.stderr, proc.stderr


def test_sigterm_to_the_launcher_reaches_the_grader(tmp_path):
    fake = _fake_python(tmp_path, f"trap 'echo got-term >>{tmp_path}/calls; exit 130' TERM\n"
                                  "for i in $(seq 300); do sleep 0.1; done")
    proc = _launch({"LAS_PYTHON": str(fake)}, background=True)
    deadline = time.monotonic() + 30
    while not (tmp_path / "calls").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.3)
    proc.send_signal(signal.SIGTERM)   # the batch shell alone, as `scancel --batch` does
    out, _ = proc.communicate(timeout=30)
    assert "got-term" in (tmp_path / "calls").read_text(), out
    assert proc.returncode == 130 and "resubmit it with the same flags" in out, out


# ----------------------------------------------------------------------------- a class for the runs
@pytest.fixture(scope="module")
def klass(tmp_path_factory):
    """A Task-1-only source folder and an inbox of four honest students (the solution's answers and
    three everyday styles), split 2/2 (or at least 1/3) over two shards."""
    from grader.extras.shards import shard_of
    from fixtures import scratch_course
    from grader.mutants import student_copy

    tmp = tmp_path_factory.mktemp("slurm-class")
    (tmp / "scratch").mkdir()
    course, release, solution = scratch_course(tmp / "scratch", SOLUTIONS / f"{STEM}.ipynb")
    entries = honest.load(STEM)[:3]
    books = {"alice": student_copy(release, solution)}   # alice, dave: shard 1 of 2; bob, carol: shard 0
    for name, entry in zip(("bob", "carol", "dave"), entries):
        books[name] = honest.apply(student_copy(release, solution), entry)
    assert {shard_of(s, 2) for s in books} == {0, 1}, "the class must put students in both shards"
    for student, nb in books.items():
        path = tmp / "inbox" / student / "ex01" / f"{STEM}.ipynb"
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps(nb))
    return {"tmp": tmp, "source": course.source, "inbox": tmp / "inbox", "students": sorted(books)}


def _collected(klass: dict, name: str, seed: str | None = None) -> Path:
    grading = klass["tmp"] / name
    proc = grader_cli(grading, klass["source"], "collect", str(klass["inbox"]))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    if seed is not None:
        (grading / "judge-seed.txt").write_text(seed)
    return grading


def _sandbox_args() -> list[str]:
    from grader.sandbox import protections

    return [] if protections()["bwrap"] else ["--sandbox", "auto"]


def test_sigterm_stops_a_local_batch_and_removes_its_scratch_folder(klass, tmp_path):
    from grader.course import nbgrader_env

    grading = _collected(klass, "sigterm")
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = nbgrader_env() | {"TMPDIR": str(scratch)}
    cmd = grader_command(grading, klass["source"], "autograde", "--workers=1", "--sandbox", "auto")
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 300
    while not list(scratch.glob("las-autograde-*")):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail("the batch ended before making its scratch folder:\n" + proc.communicate()[0][-3000:])
        time.sleep(0.05)
    time.sleep(1.0)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=180)
    assert proc.returncode != 0, out[-2000:]
    assert "KeyboardInterrupt" in out, out[-2000:]
    assert not list(scratch.glob("las-autograde-*")), f"scratch folder left behind: {list(scratch.iterdir())}"


# ----------------------------------------------------------------------------- on a real Slurm
def _slurm_or_skip() -> None:
    why = None
    if not shutil.which("sbatch") or not shutil.which("sinfo"):
        why = "Slurm is not installed (bash .ci/slurm-up installs and starts a one-node cluster as root)"
    else:
        try:
            state = subprocess.run(["sinfo", "-h", "-N", "-o", "%T"], capture_output=True, text=True, timeout=20)
            states = state.stdout.split()
            if not any(s.rstrip("*") in ("idle", "mixed", "allocated") for s in states):
                why = f"no Slurm node is up (sinfo: {state.stdout.strip() or state.stderr.strip()}); run bash .ci/slurm-up"
        except subprocess.TimeoutExpired:
            why = "sinfo did not answer in 20 s (slurmctld not running?); run bash .ci/slurm-up"
    if why:
        if REQUIRED:
            pytest.fail(f"LAS_REQUIRE_SLURM=1 but {why}")
        pytest.skip(why)


def _sbatch(*args: str, env: dict | None = None, timeout: float = DEADLINE, logs: Path | None = None) -> str:
    """The job id; with --wait, fails showing the end of every log in ``logs`` unless the job succeeded."""
    proc = subprocess.run(["sbatch", "--parsable", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, env=env)
    if proc.returncode != 0:
        tails = "".join(f"\n--- {p.name}:\n{p.read_text()[-2500:]}" for p in sorted(logs.iterdir())) if logs else ""
        pytest.fail(f"sbatch {' '.join(args)}: rc={proc.returncode}\n{proc.stdout}\n{proc.stderr}{tails}")
    return proc.stdout.strip().split(";")[0]


def _job_env(klass: dict, grading: Path, tmpdir: Path) -> dict:
    from grader.course import nbgrader_env

    tmpdir.mkdir(exist_ok=True)
    env = {k: v for k, v in nbgrader_env().items() if not k.startswith(("SLURM_", "LAS_SHARD_COUNT"))}
    env.update(LAS_PYTHON=sys.executable, TMPDIR=str(tmpdir),
               LAS_GRADER_OPTIONS=f"--grading-dir={grading} --source={klass['source']}")
    return env


def _resources(logs: Path) -> list[str]:
    return ["--cpus-per-task=1", "--mem=1G", f"--output={logs}/%x-%A_%a.log"]


def _squeue(job: str) -> str:
    proc = subprocess.run(["squeue", "-h", "-j", job, "-o", "%i %T"], capture_output=True, text=True, timeout=20)
    return proc.stdout


class LocalRun:
    """The class graded on this machine, as reference, with the judge seed the Slurm runs reuse. Started when
    created and awaited by :meth:`csv`, so the first test's array grades beside it (one worker here, one
    per task there) instead of after it."""

    def __init__(self, klass: dict):
        from grader.course import nbgrader_env
        from grader.seed import ensure_seed

        self.klass, self.grading = klass, _collected(klass, "local")
        self.seed = str(ensure_seed(self.grading))   # drawn and kept in the folder now, as autograde would
        cmd = grader_command(self.grading, klass["source"], "autograde", "--workers=1", *_sandbox_args())
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env=nbgrader_env(), stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        self._csv: bytes | None = None

    def csv(self) -> bytes:
        if self._csv is None:
            out, err = self.proc.communicate(timeout=DEADLINE)
            assert self.proc.returncode == 0, out[-3000:] + err[-3000:]
            assert grader_cli(self.grading, self.klass["source"], "export").returncode == 0
            self._csv = (self.grading / "grades.csv").read_bytes()
        return self._csv


@pytest.fixture(scope="module")
def local_run(klass):
    run = LocalRun(klass)
    yield run
    if run.proc.poll() is None:   # a test failed before it waited
        run.proc.kill()
        run.proc.communicate()


@pytest.mark.slow
def test_slurm_array_then_afterany_merge_gives_the_local_csv(klass, local_run):
    _slurm_or_skip()
    grading = _collected(klass, "slurm", local_run.seed)
    logs = klass["tmp"] / "slurm-logs"
    logs.mkdir()
    env = _job_env(klass, grading, klass["tmp"] / "slurm-tmp")
    started = time.monotonic()
    job = _sbatch("--array=0-1", *_resources(logs), str(LAUNCHER), *_sandbox_args(), env=env)
    merge = _sbatch(f"--dependency=afterany:{job}", f"--output={logs}/%x-%j.log", "--mem=1G", "--wait",
                    str(MERGER), env=env, logs=logs)
    seconds = time.monotonic() - started
    names = sorted(p.name for p in logs.iterdir())
    assert f"las-autograde-{job}_0.log" in names and f"las-autograde-{job}_1.log" in names, names
    merged = (logs / f"las-merge-{merge}.log").read_text()
    assert (grading / "grades.csv").read_bytes() == local_run.csv(), merged[-3000:]
    for index in (0, 1):
        log = (logs / f"las-autograde-{job}_{index}.log").read_text()
        assert f"shard {index} done" in log, log[-3000:]
    assert not list((klass["tmp"] / "slurm-tmp").glob("las-autograde-*"))
    print(f"2-task array + merge of {len(klass['students'])} students: {seconds:.0f} s")


@pytest.mark.slow
def test_a_cancelled_task_is_named_by_the_merge_and_its_resubmission_gives_the_same_csv(klass, local_run):
    from grader.extras.shards import shard_of

    _slurm_or_skip()
    grading = _collected(klass, "cancelled", local_run.seed)
    logs = klass["tmp"] / "cancel-logs"
    logs.mkdir()
    tmpdir = klass["tmp"] / "cancel-tmp"
    env = _job_env(klass, grading, tmpdir)
    job = _sbatch("--array=0-1", *_resources(logs), str(LAUNCHER), *_sandbox_args(), env=env)
    victim = f"{job}_1"
    manifest = grading / "shards" / "1-of-2" / "shard.json"
    deadline = time.monotonic() + DEADLINE
    while not manifest.exists():   # task 1 has started and prepared its shard: cancel it mid-run
        assert time.monotonic() < deadline, f"task 1 did not start in {DEADLINE} s: {_squeue(job)}"
        time.sleep(0.2)
    time.sleep(2)
    subprocess.run(["scancel", victim], check=True, timeout=30)
    while _squeue(job).strip():
        assert time.monotonic() < deadline, f"the array did not end: {_squeue(job)}"
        time.sleep(1)
    assert not list(tmpdir.glob("las-autograde-*")), f"a cancelled task left its scratch folder: {list(tmpdir.iterdir())}"
    log1 = (logs / f"las-autograde-{job}_1.log").read_text()

    merge = grader_cli(grading, klass["source"], "merge-shards")
    shard1 = [s for s in klass["students"] if shard_of(s, 2) == 1]
    graded1 = [p.stem for p in (grading / "shards" / "1-of-2" / "status").glob("*.json")
               if json.loads(p.read_text()).get("fingerprint")]
    if len(graded1) == len(shard1):   # the task finished its students before the signal came
        pytest.fail("task 1 was cancelled too late to test a resume:\n" + log1[-2000:])
    assert merge.returncode != 0, merge.stdout
    for s in shard1:
        if s not in graded1:
            assert s in merge.stderr, merge.stderr
    assert "shard 1/2" in merge.stderr and "missing" in merge.stderr, merge.stderr

    # resubmit as the header says: that task alone, the array's size, the same resource flags
    again = _sbatch("--array=1", *_resources(logs), "--export=ALL,LAS_SHARD_COUNT=2", "--wait", str(LAUNCHER),
                    *_sandbox_args(), env=env, logs=logs)
    assert (logs / f"las-autograde-{job}_1.log").read_text() == log1, "the resubmitted task overwrote the dead one's log"
    assert "shard 1 done" in (logs / f"las-autograde-{again}_1.log").read_text()
    for verb in ("merge-shards", "export"):
        proc = grader_cli(grading, klass["source"], verb)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert (grading / "grades.csv").read_bytes() == local_run.csv()
