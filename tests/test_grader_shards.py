"""A class graded past one machine and past a crash, through the command line, on a
Task-1-only course of five students (correct, the release's stubs, two wrong answers, a corrupt file):

* graded on one machine (the module's reference run), and as two shards through ``--shard auto`` with a
  Slurm job array's variables, in two processes that stand in for two nodes, then ``merge-shards``:
  ``grades.csv`` is byte-identical;
* a batch killed with SIGKILL (its whole process group) as soon as its first student is finished, then
  run again with the same command: finished students are skipped, not regraded, and the CSV is the
  reference's;
* ``merge-shards`` refuses shards of another judge seed and names the students a shard has not graded;
* the split is stable (a student's shard depends only on their id and N) and covers everyone once.
"""

from __future__ import annotations

import csv
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
from fixtures.hostile import WRONG, grader_cli, grader_command
from grader import ROOT

STEM = "task1_infonce"
#: shard_of(., 2): correct, release, wrong_info_nce -> 0; corrupt, wrong_mi -> 1 (checked below)
CLASS = ("correct", "corrupt", "release", "wrong_info_nce", "wrong_mi")
DEADLINE = 1500  # seconds: a regression that hangs fails instead


def _write_inbox(inbox: Path, release: dict, solution: dict) -> None:
    from grader.mutants import student_copy

    subs = {"correct": student_copy(release, solution), "release": release, "corrupt": b"{ not a notebook",
            "wrong_info_nce": student_copy(release, solution, WRONG["wrong_info_nce"]),
            "wrong_mi": student_copy(release, solution, WRONG["wrong_mi"])}
    assert sorted(subs) == sorted(CLASS)
    for student, nb in subs.items():
        path = inbox / student / "ex01" / f"{STEM}.ipynb"
        path.parent.mkdir(parents=True)
        path.write_bytes(nb if isinstance(nb, bytes) else json.dumps(nb).encode())


def _check(proc: subprocess.CompletedProcess, what: str) -> str:
    assert proc.returncode == 0, f"{what}: rc={proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


def _collected(klass: dict, name: str, seed: str | None = None) -> Path:
    """A grading folder with the class collected (and the reference's judge seed, when given)."""
    grading = klass["tmp"] / name
    _check(grader_cli(grading, klass["source"], "collect", str(klass["inbox"])), f"collect into {name}")
    if seed is not None:
        (grading / "judge-seed.txt").write_text(seed)
    return grading


def _shard_env(index: int, count: int) -> dict:
    from grader.course import nbgrader_env

    env = {k: v for k, v in nbgrader_env().items()
           if not k.startswith(("SLURM_", "JOB_COMPLETION_INDEX", "LAS_SHARD_COUNT"))}
    env.update(SLURM_ARRAY_TASK_ID=str(index), SLURM_ARRAY_TASK_COUNT=str(count))
    return env


def _rows(path: Path) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def _assert_same_csv(got: Path, want: Path) -> None:
    if got.read_bytes() != want.read_bytes():
        diff = [(a, b) for a, b in zip(_rows(got), _rows(want)) if a != b]
        pytest.fail(f"{got} differs from {want}:\n" + "\n".join(f"got  {a}\nwant {b}" for a, b in diff[:5]))


@pytest.fixture(scope="module")
def klass(tmp_path_factory):
    """The class's source folder (Task 1 only) and inbox."""
    from fixtures import scratch_course

    tmp = tmp_path_factory.mktemp("class")
    (tmp / "scratch").mkdir()
    course, release, solution = scratch_course(tmp / "scratch", SOLUTIONS / f"{STEM}.ipynb")
    _write_inbox(tmp / "inbox", release, solution)
    return {"tmp": tmp, "source": course.source, "inbox": tmp / "inbox"}


@pytest.fixture(scope="module")
def reference(klass):
    """The class graded on one machine, uninterrupted: its grading folder and grades.csv."""
    grading = _collected(klass, "reference")
    out = _check(grader_cli(grading, klass["source"], "autograde", "--workers=2", timeout=DEADLINE), "autograde")
    _check(grader_cli(grading, klass["source"], "export"), "export")
    return {"grading": grading, "csv": grading / "grades.csv", "seed": (grading / "judge-seed.txt").read_text(),
            "log": out}


@pytest.fixture(scope="module")
def sharded(klass, reference):
    """The class as two shards (``--shard auto`` under a Slurm array's variables, two processes at
    once), then merged and exported. ``unmerged``: a copy of the grading folder before the merge."""
    grading = _collected(klass, "sharded", reference["seed"])
    cmd = grader_command(grading, klass["source"], "autograde", "--shard", "auto", "--workers=1")
    procs = [subprocess.Popen(cmd, cwd=ROOT, env=_shard_env(i, 2), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for i in range(2)]
    logs = []
    for i, proc in enumerate(procs):
        try:
            out, err = proc.communicate(timeout=DEADLINE)
        except subprocess.TimeoutExpired:
            for p in procs:
                p.kill()
            pytest.fail(f"shard {i} hung for {DEADLINE} s")
        assert proc.returncode == 0, f"shard {i}: rc={proc.returncode}\n{out[-3000:]}\n{err[-3000:]}"
        logs.append(out)
    unmerged = klass["tmp"] / "sharded-unmerged"
    shutil.copytree(grading, unmerged)
    merge = _check(grader_cli(grading, klass["source"], "merge-shards"), "merge-shards")
    _check(grader_cli(grading, klass["source"], "export"), "export")
    return {"grading": grading, "csv": grading / "grades.csv", "logs": logs, "merge": merge, "unmerged": unmerged,
            "source": klass["source"]}


# ----------------------------------------------------------------------------- (a) shards
def test_two_shards_merge_into_the_single_machine_csv(reference, sharded):
    from grader.extras.shards import shard_of

    grading = sharded["grading"]
    expected = {0: [s for s in CLASS if shard_of(s, 2) == 0], 1: [s for s in CLASS if shard_of(s, 2) == 1]}
    assert expected[0] and expected[1], "the class must put students in both shards"
    for i, log in enumerate(sharded["logs"]):
        assert f"shard {i}/2 (from SLURM_ARRAY_TASK_ID={i}, SLURM_ARRAY_TASK_COUNT=2)" in log, log[:1000]
        manifest = json.loads((grading / "shards" / f"{i}-of-2" / "shard.json").read_text())
        assert manifest["students"] == expected[i]
        # each shard graded only its own students, in its own folder
        assert sorted(p.stem for p in (grading / "shards" / f"{i}-of-2" / "status").glob("*.json")) == expected[i]
        assert (grading / "shards" / f"{i}-of-2" / "judge-seed.txt").read_text() == reference["seed"]
    assert not (sharded["unmerged"] / "status").exists(), "a shard wrote into the class's own status folder"
    _assert_same_csv(sharded["csv"], reference["csv"])
    assert [r["status"] for r in _rows(sharded["csv"])] != ["not graded"] * len(CLASS)
    for student in CLASS:
        mine = json.loads((grading / "status" / f"{student}.json").read_text())
        theirs = json.loads((reference["grading"] / "status" / f"{student}.json").read_text())
        assert (mine["status"], mine["score"], mine["reason"]) == (theirs["status"], theirs["score"], theirs["reason"])
        # what was graded is the same (the grader's own digest differs only if its code was edited meanwhile)
        same = ("seed", "assignment", "settings", "submitted", "collect")
        assert {k: mine["fingerprint"][k] for k in same} == {k: theirs["fingerprint"][k] for k in same}, student
        executed = f"autograded/{student}/ex01/{STEM}.ipynb"
        assert (grading / executed).exists() == (reference["grading"] / executed).exists(), student
    # merged students count as graded here: a local run over the merged folder grades nobody again
    again = _check(grader_cli(grading, sharded["source"], "autograde"), "autograde")
    assert f"skipped {len(CLASS)} of {len(CLASS)} students" in again, again[-2000:]


# ----------------------------------------------------------------------------- (b) kill and resume
def _finished(grading: Path) -> dict[str, tuple[int, str]]:
    """student -> (status file's mtime in ns, graded_at) of every student with a status file."""
    out = {}
    for path in (grading / "status").glob("*.json"):
        out[path.stem] = (path.stat().st_mtime_ns, json.loads(path.read_text())["graded_at"])
    return out


def test_a_killed_batch_resumes_without_regrading_and_gives_the_same_csv(klass, reference):
    grading = _collected(klass, "killed", reference["seed"])
    cmd = grader_command(grading, klass["source"], "autograde", "--workers=1")
    from grader.course import nbgrader_env

    with open(klass["tmp"] / "killed.log", "w") as log:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=nbgrader_env(), stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)   # its own process group, as a batch job's
        started = time.monotonic()
        while not list((grading / "status").glob("*.json")):
            if proc.poll() is not None or time.monotonic() - started > DEADLINE:
                proc.kill()
                pytest.fail("the batch ended or hung before its first student was finished:\n"
                            + (klass["tmp"] / "killed.log").read_text()[-3000:])
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGKILL)   # the machine went down: nobody gets to clean up
        proc.wait()
    finished = _finished(grading)
    assert finished and len(finished) < len(CLASS), f"killed too late to test a resume: {sorted(finished)}"

    rerun = _check(grader_cli(grading, klass["source"], "autograde", "--workers=1", timeout=DEADLINE), "the rerun")
    skipped = next((ln for ln in rerun.splitlines() if ln.startswith("skipped ")), "")
    assert skipped.startswith(f"skipped {len(finished)} of {len(CLASS)} students"), rerun[-3000:]
    for student in finished:
        assert student in skipped, skipped
        assert not any(ln.startswith("[") and f"] {student} " in ln for ln in rerun.splitlines()), \
            f"{student} was graded again:\n{rerun[-3000:]}"
    after = _finished(grading)
    assert {s: after[s] for s in finished} == finished, "a finished student's status file was rewritten"
    assert sorted(after) == sorted(CLASS)
    _check(grader_cli(grading, klass["source"], "export"), "export")
    _assert_same_csv(grading / "grades.csv", reference["csv"])


# ----------------------------------------------------------------------------- (c) merge refusals
def _unmerged_copy(sharded: dict, tmp_path: Path):
    from grader.course import Course

    grading = tmp_path / "grading"
    shutil.copytree(sharded["unmerged"], grading)
    return Course(grading=grading, source=sharded["source"])


def test_merge_refuses_other_seeds_and_names_the_missing_students(sharded, tmp_path):
    from grader.extras.shards import ShardError
    from grader.extras.shards import merge_shards

    course = _unmerged_copy(sharded, tmp_path)
    shard1 = course.grading / "shards" / "1-of-2"

    # a student whose shard has not graded them (killed before) is named, with the shard
    (shard1 / "status" / "wrong_mi.json").unlink()
    with pytest.raises(ShardError, match=r"shard 1/2 .*1-of-2: 1 missing: wrong_mi$"):
        merge_shards(course, progress=lambda msg: None)
    # so is one whose submission was collected again after the shard graded it
    submitted = course.folder("submitted", "corrupt") / f"{STEM}.ipynb"
    submitted.write_bytes(b"{ another corrupt file")
    with pytest.raises(ShardError, match=r"corrupt \(graded with another submitted\), wrong_mi"):
        merge_shards(course, progress=lambda msg: None)
    # and a shard that never ran names all of its students
    shutil.rmtree(shard1)
    with pytest.raises(ShardError, match=r"shard 1/2 \(no shard folder: never started\): 2 missing: corrupt, wrong_mi"):
        merge_shards(course, progress=lambda msg: None)
    assert not (course.grading / "status").exists(), "a refused merge must not merge anyone"

    # shards graded with different judge seeds
    course = _unmerged_copy(sharded, tmp_path / "seeds")
    manifest = course.grading / "shards" / "1-of-2" / "shard.json"
    data = json.loads(manifest.read_text())
    from grader.seed import seed_digest

    data["seed"] += 1   # the shard's manifest keeps the seed; its fingerprint only a digest of it
    data["batch"]["seed"] = seed_digest(data["seed"])
    manifest.write_text(json.dumps(data))
    with pytest.raises(ShardError, match=r"different judge seeds: shard 0: [0-9a-f]{12}; shard 1: [0-9a-f]{12}"):
        merge_shards(course, progress=lambda msg: None)
    # shards of another grading folder's seed
    course = _unmerged_copy(sharded, tmp_path / "other")
    (course.grading / "judge-seed.txt").write_text("7\n")
    with pytest.raises(ShardError, match="judge seeds"):
        merge_shards(course, progress=lambda msg: None)
    assert not (course.grading / "status").exists()


def test_merge_shards_cli_exits_non_zero_and_names_the_shard(sharded, tmp_path):
    course = _unmerged_copy(sharded, tmp_path)
    (course.grading / "shards" / "0-of-2" / "status" / "release.json").unlink()
    proc = grader_cli(course.grading, course.source, "merge-shards", str(course.grading / "shards"))
    assert proc.returncode != 0
    assert "shard 0/2" in proc.stderr and "release" in proc.stderr, proc.stderr[-2000:]


# ----------------------------------------------------------------------------- (c') a shard is re-verified
#: The attack: shard 1's copy of wrong_mi's notebook is a hard link to correct's (shard 0), the shard grades
#: it, and the status file's fingerprint is forged to be the one of the course's own wrong_mi inputs.
VICTIM, DONOR = "wrong_mi", "correct"


def _status(grading: Path, student: str) -> dict:
    path = grading / "status" / f"{student}.json"
    return json.loads(path.read_text()) if path.exists() else {}


def _forge_fingerprint(course, shard: Path, student: str) -> None:
    """The shard's status file for ``student`` claims it graded the course's own inputs."""
    from grader.batch import batch_fingerprint, student_fingerprint
    from grader.seed import read_seed

    notebooks = course.notebook_names()
    manifest = json.loads((shard / "shard.json").read_text())
    batch = batch_fingerprint(course, notebooks, read_seed(course.grading) or manifest["seed"],
                              manifest["batch"]["settings"], grader=manifest["batch"]["grader"])
    status = json.loads((shard / "status" / f"{student}.json").read_text())
    status["fingerprint"] = student_fingerprint(course, student, notebooks, batch)
    (shard / "status" / f"{student}.json").write_text(json.dumps(status))


@pytest.fixture(scope="module")
def forged(klass, sharded, tmp_path_factory):
    """An unmerged copy of the sharded class whose shard 1 graded the DONOR's notebook as the VICTIM's (a hard
    link) and whose status file was forged to agree with the course."""
    from grader.course import Course

    grading = tmp_path_factory.mktemp("forged") / "grading"
    shutil.copytree(sharded["unmerged"], grading)
    course = Course(grading=grading, source=sharded["source"])
    shard = grading / "shards" / "1-of-2"
    copy = Course(grading=shard, source=sharded["source"]).folder("submitted", VICTIM) / f"{STEM}.ipynb"
    copy.unlink()
    os.link(course.folder("submitted", DONOR) / f"{STEM}.ipynb", copy)
    _check(grader_cli(shard, klass["source"], "autograde", "--student", VICTIM, "--regrade", timeout=DEADLINE),
           "the shard grading the donor's notebook")
    _forge_fingerprint(course, shard, VICTIM)
    return {"course": course, "shard": shard, "copy": copy}


def _forged_copy(forged: dict, tmp_path: Path):
    from grader.course import Course

    grading = tmp_path / "grading"
    shutil.copytree(forged["course"].grading, grading)   # copies: no hard link left
    return Course(grading=grading, source=forged["course"].source), grading / "shards" / "1-of-2"


def _merge(course) -> tuple[dict, list[str]]:
    from grader.extras.shards import merge_shards

    said: list[str] = []
    return merge_shards(course, progress=said.append), said


def test_a_forged_shard_leaves_its_student_unmerged_and_merges_the_others(forged, sharded, reference):
    """The issue's attack (11 points -> 30): the hard link and the forged status agree with each other, and
    the shard's gradebook with both; merge-shards re-verifies and keeps the victim out, loudly."""
    donor = _status(reference["grading"], DONOR)["score"]
    assert _status(forged["shard"], VICTIM)["score"] == donor > _status(reference["grading"], VICTIM)["score"]
    assert forged["copy"].stat().st_nlink == 2
    merged, said = _merge(forged["course"])
    refusals = [line for line in said if line.startswith("NOT MERGED")]
    assert len(refusals) == 1 and f"NOT MERGED: {VICTIM} (shard 1/2" in refusals[0], said
    assert "hard links" in refusals[0] and f"--shard 1/2 --student {VICTIM} --regrade" in refusals[0]
    assert sorted(s for names in merged.values() for s in names) == sorted(set(CLASS) - {VICTIM})
    assert _status(forged["course"].grading, VICTIM) == {}          # no 30 points, not even a status
    assert _status(forged["course"].grading, DONOR)["score"] == donor


def test_a_forged_shard_without_the_hard_link_is_caught_by_its_copys_digest(forged, tmp_path):
    course, shard = _forged_copy(forged, tmp_path)
    assert (shard / forged["copy"].relative_to(forged["shard"])).stat().st_nlink == 1
    merged, said = _merge(course)
    refusals = [line for line in said if line.startswith("NOT MERGED")]
    assert len(refusals) == 1 and f"{VICTIM} (shard 1/2" in refusals[0], said
    assert f"submitted/{VICTIM}/ex01/{STEM}.ipynb differs from the course's" in refusals[0]
    assert VICTIM not in merged[1] and _status(course.grading, VICTIM) == {}


def test_a_shard_copy_changed_after_it_was_prepared_or_a_hard_linked_one_is_not_merged(sharded, tmp_path):
    from grader.course import Course

    grading = tmp_path / "grading"
    shutil.copytree(sharded["unmerged"], grading)
    course = Course(grading=grading, source=sharded["source"])
    shard0 = Course(grading=grading / "shards" / "0-of-2", source=sharded["source"])
    # edited in the shard after it was prepared (the status file still says: the course's notebook)
    edited = shard0.folder("submitted", "release") / f"{STEM}.ipynb"
    edited.write_bytes(edited.read_bytes() + b" ")
    # the same bytes as the course's, but a hard link (to the course's own file)
    linked = shard0.folder("submitted", "wrong_info_nce") / f"{STEM}.ipynb"
    linked.unlink()
    os.link(course.folder("submitted", "wrong_info_nce") / f"{STEM}.ipynb", linked)
    # a shard with another judge seed file than its manifest's
    (grading / "shards" / "1-of-2" / "judge-seed.txt").write_text("7\n")
    merged, said = _merge(course)
    refusals = sorted(line for line in said if line.startswith("NOT MERGED"))
    assert [line.split()[2] for line in refusals] == ["corrupt", "release", "wrong_info_nce", "wrong_mi"], said
    assert "differs from the course's" in refusals[1] and "hard links" in refusals[2]
    assert "is not the class's judge seed" in refusals[0] and "is not the class's judge seed" in refusals[3]
    assert merged == {0: ["correct"]}


def test_an_honest_shard_merges_without_a_refusal(sharded):
    assert "NOT MERGED" not in sharded["merge"] and "merged 3 students" in sharded["merge"], sharded["merge"]


# ----------------------------------------------------------------------------- (d) the split
def test_shard_split_is_stable_and_covers_everyone_once():
    from grader.extras.shards import shard_of, split

    students = [f"s{i:04d}" for i in range(300)] + ["alice@uni.example", "Bob.Smith", "x+y-z_1"]
    for count in range(1, 9):
        shards = split(students, count)
        assert len(shards) == count
        flat = [s for shard in shards for s in shard]
        assert sorted(flat) == sorted(students) and len(set(flat)) == len(students)
        for index, shard in enumerate(shards):
            assert all(shard_of(s, count) == index for s in shard)
        # a late submission (or a withdrawn student) moves nobody else
        grown = split(students + ["late_student"], count)
        assert all(set(a) <= set(b) for a, b in zip(shards, grown))
        shrunk = split(students[1:], count)
        assert all(set(b) <= set(a) for a, b in zip(shards, shrunk))
    assert min(len(s) for s in split(students, 4)) > 50   # 303 students in 4 shards: none nearly empty
    # the same in every process (not Python's salted hash()): the nodes must agree
    code = "from grader.extras.shards import shard_of; print([shard_of(f's{i:04d}', 7) for i in range(300)])"
    runs = {subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True,
                           env={**os.environ, "PYTHONHASHSEED": seed}).stdout for seed in ("1", "2")}
    assert runs == {str([shard_of(f"s{i:04d}", 7) for i in range(300)]) + "\n"}


def test_shard_auto_reads_slurm_and_kubernetes_and_refuses_what_it_cannot_use():
    from grader.extras.shards import ShardError, parse_shard

    assert parse_shard("auto", {"SLURM_ARRAY_TASK_ID": "0", "SLURM_ARRAY_TASK_COUNT": "2"}) == \
        (0, 2, "SLURM_ARRAY_TASK_ID=0, SLURM_ARRAY_TASK_COUNT=2")
    assert parse_shard("auto", {"SLURM_ARRAY_TASK_ID": "5", "SLURM_ARRAY_TASK_MIN": "0",
                                "SLURM_ARRAY_TASK_MAX": "7"})[:2] == (5, 8)
    # one task of an 8-task array resubmitted alone (--array=3): its own count is 1
    assert parse_shard("auto", {"SLURM_ARRAY_TASK_ID": "3", "SLURM_ARRAY_TASK_COUNT": "1", "SLURM_ARRAY_TASK_MIN": "3",
                                "LAS_SHARD_COUNT": "8"})[:2] == (3, 8)
    assert parse_shard("auto", {"JOB_COMPLETION_INDEX": "0", "LAS_SHARD_COUNT": "4"}) == \
        (0, 4, "JOB_COMPLETION_INDEX=0, LAS_SHARD_COUNT=4")
    assert parse_shard("2/3", {})[:2] == (2, 3)
    for text, env, why in [
            ("auto", {}, "no SLURM_ARRAY_TASK_ID"),
            ("auto", {"JOB_COMPLETION_INDEX": "1"}, "LAS_SHARD_COUNT"),
            ("auto", {"SLURM_ARRAY_TASK_ID": "3", "SLURM_ARRAY_TASK_COUNT": "1", "SLURM_ARRAY_TASK_MIN": "3"}, "starts at 3"),
            ("auto", {"SLURM_ARRAY_TASK_ID": "4", "SLURM_ARRAY_TASK_COUNT": "4"}, "0..3"),   # --array=0-7:2
            ("3/3", {}, "0..2"), ("one/two", {}, "expected I/N")]:
        with pytest.raises(ShardError, match=why):
            parse_shard(text, env)


def test_shards_starting_at_once_agree_on_one_judge_seed(tmp_path, monkeypatch):
    """The first shard to start creates grading/judge-seed.txt; N nodes starting together get its seed."""
    import secrets

    from grader.seed import ensure_seed

    # another node writes its seed between this one's check and its write: this one must take that seed
    grading = tmp_path / "raced"
    grading.mkdir()
    draw = secrets.randbelow

    def other_node_first(n):
        (grading / "judge-seed.txt").write_text("123\n")
        return 456

    monkeypatch.setattr(secrets, "randbelow", other_node_first)
    assert ensure_seed(grading) == 123 and (grading / "judge-seed.txt").read_text() == "123\n"
    monkeypatch.setattr(secrets, "randbelow", draw)
    assert [p.name for p in grading.iterdir()] == ["judge-seed.txt"]   # no temporary file left behind

    code = ("import sys; from pathlib import Path; from grader.seed import ensure_seed; "
            "print(ensure_seed(Path(sys.argv[1])))")
    procs = [subprocess.Popen([sys.executable, "-c", code, str(tmp_path / "grading")], cwd=ROOT, text=True,
                              stdout=subprocess.PIPE) for _ in range(8)]
    seeds = {p.communicate(timeout=120)[0].strip() for p in procs}
    assert len(seeds) == 1 and seeds == {(tmp_path / "grading" / "judge-seed.txt").read_text().strip()}


def test_a_changed_submission_assignment_or_seed_is_not_finished(tmp_path):
    from grader.results import Settings
    from grader.batch import batch_fingerprint, grade_settings, is_finished, student_fingerprint
    from grader.course import Course

    (tmp_path / "source").mkdir()
    shutil.copy(SOLUTIONS / f"{STEM}.ipynb", tmp_path / "source")
    course = Course(grading=tmp_path / "grading", source=tmp_path / "source")
    submitted = course.folder("submitted", "alice") / f"{STEM}.ipynb"
    submitted.parent.mkdir(parents=True)
    submitted.write_text("{}")
    settings = grade_settings(Settings(sandbox="none"))

    def fingerprint(seed=1, grader="v1", **changes):
        batch = batch_fingerprint(course, [STEM], seed, settings | changes, grader=grader)
        return student_fingerprint(course, "alice", [STEM], batch)

    status = {"fingerprint": fingerprint()}
    assert is_finished(status, fingerprint())
    assert not is_finished({}, fingerprint()) and not is_finished({"status": "graded"}, fingerprint())
    assert not is_finished(status, fingerprint(seed=2))
    assert not is_finished(status, fingerprint(cell_timeout=5))
    assert not is_finished(status, fingerprint(grader="v2"))
    assert is_finished(status, fingerprint())
    submitted.write_text("{ }")                                       # collected again
    assert not is_finished(status, fingerprint())
    status = {"fingerprint": fingerprint()}
    (tmp_path / "source" / f"{STEM}.ipynb").write_text("{}")          # the assignment changed
    assert not is_finished(status, fingerprint())
