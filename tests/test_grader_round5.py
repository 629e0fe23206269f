"""No hollow answer earns a point, no student stops the class, no secret leaves the session: the grader's side.

A Task-1-only class of two honest students and one submission of each kind that used to stop or mask the
batch (tests/fixtures/hostile.py ``ROUND5``: nested markdown that made the page cleaner recurse, signals to
pid 1 and to the notebook's grading process, a stack-and-heap hunt for the judge seed, lone surrogates, a
file named like a standard module in the working folder, 420 MB of outputs, a demonstration cell's submitted
outputs that fake a timeout and lay an overlay over the page, a cell that writes the records of the cells
after it, busy processes left running, a cell that kills its own grading process), graded through the real
command line (collect, autograde --workers 2, a resume, export, feedback) in bubblewrap. Then the seed
against everything the sandbox can read, and merge-shards against symbolic links and edited gradebooks.

Each of these failed on the grader before this round (see the report of the round: the same file run in a
checkout of the previous commit). About ten minutes on two cores.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import SOLUTIONS
from fixtures.hostile import ROUND5, SEED_SHOWN, build_round5, grader_cli

STEM = "task1_infonce"
HONEST = ("honest_a", "honest_b")
DEADLINE = 2400


def _bwrap() -> bool:
    from grader.sandbox import protections

    return protections()["bwrap"]


needs_bwrap = pytest.mark.skipif(not _bwrap(), reason="signals to pid 1 are only safe in bubblewrap's pid namespace")


def _check(proc: subprocess.CompletedProcess, what: str) -> str:
    assert proc.returncode == 0, f"{what}: rc={proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


def _statuses(grading: Path) -> dict[str, dict]:
    return {p.stem: json.loads(p.read_text()) for p in sorted((grading / "status").glob("*.json"))}


def _executed(grading: Path, student: str) -> dict | None:
    path = grading / "autograded" / student / "ex01" / f"{STEM}.ipynb"
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else None


def _texts(cell: dict) -> str:
    parts = []
    for out in cell.get("outputs", []):
        parts.append(str(out.get("text", "")))
        parts += [str(v) for v in (out.get("data") or {}).values()]
        parts.append(str(out.get("evalue", "")))
    return "".join(parts)


# ----------------------------------------------------------------------------- the class, through the CLI
@pytest.fixture(scope="module")
def klass(tmp_path_factory):
    if not _bwrap():
        pytest.skip("round 5 signals pid 1: only in bubblewrap")
    from fixtures import scratch_course
    from grader.mutants import student_copy

    tmp = tmp_path_factory.mktemp("round5")
    (tmp / "scratch").mkdir()
    course, release, solution = scratch_course(tmp / "scratch", SOLUTIONS / f"{STEM}.ipynb")
    subs = build_round5(release, solution)
    only = [s for s in os.environ.get("LAS_ROUND5_ONLY", "").split(",") if s]   # e.g. a rerun on the old grader
    subs = {s: nb for s, nb in subs.items() if not only or s in only}
    for name in HONEST:
        subs[name] = student_copy(release, solution)
    for student, nb in subs.items():
        path = tmp / "inbox" / student / "ex01" / f"{STEM}.ipynb"
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps(nb), encoding="utf-8")
    grading = tmp / "grading"
    _check(grader_cli(grading, course.source, "collect", str(tmp / "inbox")), "collect")
    (grading / "judge-seed.txt").write_text(f"{SEED_SHOWN}\n")
    first = grader_cli(grading, course.source, "autograde", "--workers=2", timeout=DEADLINE)
    after_first = _statuses(grading)
    again = grader_cli(grading, course.source, "autograde", "--workers=2", timeout=DEADLINE)
    export = grader_cli(grading, course.source, "export")
    feedback = grader_cli(grading, course.source, "feedback", timeout=DEADLINE)
    return {"grading": grading, "source": course.source, "first": first, "again": again, "export": export,
            "feedback": feedback, "after_first": after_first, "after_again": _statuses(grading),
            "students": sorted(subs)}


@needs_bwrap
def test_the_batch_survives_any_single_submission(klass):
    """Both honest students get full marks and "graded" on the first run and on the resume; every
    crasher ends with its own status and points, and the resume grades nobody again."""
    _check(klass["first"], "autograde")
    _check(klass["again"], "autograde (resume)")
    first, again = klass["after_first"], klass["after_again"]
    assert sorted(first) == klass["students"], "every student must end with a status file"
    for name in HONEST:
        for run in (first, again):
            assert run[name]["status"] == "graded" and run[name]["score"] == 11.0, (name, run[name]["reason"])
    wrong = {s: (first[s]["status"], first[s]["score"], first[s]["reason"][:300]) for s, (statuses, points)
             in ROUND5.items() if s in first and first[s]["status"] not in statuses or (points is not None and first[s]["score"] != points)}
    assert not wrong, wrong
    assert all(first[s].get("fingerprint") for s in first), \
        [s for s in first if not first[s].get("fingerprint")]   # nobody is the grader's fault: nobody graded again
    assert f"skipped {len(first)} of {len(first)} students" in klass["again"].stdout, klass["again"].stdout[-2000:]
    assert {s: again[s]["graded_at"] for s in again} == {s: first[s]["graded_at"] for s in first}
    assert "--sandbox none" not in klass["first"].stdout + klass["first"].stderr


@needs_bwrap
def test_no_signal_from_a_notebook_stops_its_session(klass):
    for student in ("signal_pid1", "signal_everyone"):
        status = klass["after_first"][student]
        assert status["score"] == 11.0, status["reason"]
        assert "discarded every check" not in status["reason"] and "ended early" not in status["reason"], status["reason"]
    mine = klass["after_first"]["kill_own_notebook"]
    assert "--sandbox none" not in mine["reason"] and "nbgrader said" not in mine["reason"]


@needs_bwrap
def test_export_and_feedback_run_for_everyone(klass):
    from test_feedback_safety import active_content

    _check(klass["export"], "export")
    _check(klass["feedback"], "feedback")
    pages = {p.parent.parent.name: p for p in (klass["grading"] / "feedback").glob(f"*/ex01/{STEM}.html")}
    for student in ("md_nest_answer", "md_nest_demo_output", "demo_mask", "lone_surrogate", *HONEST):
        assert student in pages, (student, klass["feedback"].stdout[-2000:])
        page = pages[student].read_text(encoding="utf-8")
        assert not active_content(page), (student, active_content(page)[:5])
        body = page.split("<body", 1)[-1]   # the template's own CSS (in the head) may use position: fixed
        assert "tracker.example" not in page and "position:fixed" not in body.replace(" ", ""), student


@needs_bwrap
def test_the_seed_reaches_nothing_in_the_sandbox_and_no_page_shows_a_case_seed(klass):
    """A notebook that hunts (its stack, every object, stdin, every process's open files, the repository's
    probes) during the full run finds the session's plan but no case seed and no probe source: they reach
    the notebook's grading process only after its full run ended (grader/launch.py sealed_part)."""
    from grader.seed import secret_strings

    executed = _executed(klass["grading"], "seed_hunter")
    text = "".join(_texts(c) for c in executed["cells"])
    assert "HUNT:" in text, "the hunter's output must be in the executed notebook"
    hunted = text.split("HUNT:", 1)[1].split("\n", 1)[0][::-1]
    assert "notebook_timeout" in hunted, "the hunt must have found the session's plan (else it proves nothing)"
    raw = text.split("RAW:", 1)[1].split("\n", 1)[0] if "RAW:" in text else ""
    assert not raw.strip(), f"the full run found a plan with the case seeds: {raw[:300]}"
    for marker in ("SOURCE:", "PROBE:", "MODULE:", "FILE:"):   # the hunter spells its tags in two pieces
        assert marker not in hunted, hunted.split(marker, 1)[1][:300]
    assert str(SEED_SHOWN) not in hunted, "the judge seed was readable inside the sandbox"
    secrets = secret_strings(SEED_SHOWN, [STEM])
    assert len(secrets) > 5
    page = next((klass["grading"] / "feedback").glob(f"seed_hunter/ex01/{STEM}.html")).read_text()
    shown = [s for s in secrets if s in page or s in raw or s in hunted]
    assert not shown, shown


@needs_bwrap
def test_demo_outputs_are_untrusted_and_forged_cells_never_show(klass):
    status = klass["after_first"]["demo_mask"]
    assert status["status"] == "graded", status["reason"]   # a submitted KeyboardInterrupt is not a timeout
    executed = _executed(klass["grading"], "demo_mask")
    dump = json.dumps(executed)
    assert "tracker.example" not in dump and "position:fixed" not in dump.replace(" ", "")
    assert len(dump) < 1_000_000, len(dump)   # 12 MB submitted: capped
    assert not any(o.get("output_type") == "error" and o.get("ename") in ("KeyboardInterrupt", "CellTimeoutError")
                   for c in executed["cells"] for o in c.get("outputs", []))

    forged = klass["after_first"]["forge_later_cells"]
    assert "full run's own channel" in forged["reason"], forged["reason"]
    executed = _executed(klass["grading"], "forge_later_cells")
    forger = next(i for i, c in enumerate(executed["cells"]) if "FORGED: all checks" in "".join(c["source"]))
    later = [i for i, c in enumerate(executed["cells"]) if i > forger and "FORGED" in _texts(c)]
    assert not later, f"cells {later} show outputs another cell wrote"


@needs_bwrap
def test_surrogates_shadow_files_and_floods_cost_no_grade(klass):
    assert "UnicodeEncodeError" not in klass["after_first"]["lone_surrogate"]["reason"]   # nor in the judge's loader
    executed = _executed(klass["grading"], "lone_surrogate")
    assert executed is not None and any("lone surrogates" in _texts(c) for c in executed["cells"])
    text = "".join(_texts(c) for c in _executed(klass["grading"], "stdlib_shadow")["cells"])
    origin = text.split("SHADOW:", 1)[1].split("\n", 1)[0]
    assert origin.endswith("tabnanny.py") and "/lib/python" in origin, origin   # the standard library's
    assert "SHADOW-LATER:" in text and "shadowed by a student file" not in text
    flood = klass["after_first"]["output_flood"]
    assert flood["score"] == 11.0 and flood["status"] == "graded", flood["reason"]
    path = klass["grading"] / "autograded" / "output_flood" / "ex01" / f"{STEM}.ipynb"
    assert path.stat().st_size < 100 * 1024 ** 2
    assert "were dropped" in path.read_text()


# ----------------------------------------------------------------------------- merge-shards
@pytest.fixture(scope="module")
def shard(tmp_path_factory):
    """Two students graded as shard 0 of 1 (not merged yet): a pristine copy to tamper with per test."""
    from fixtures import scratch_course
    from grader.mutants import student_copy

    tmp = tmp_path_factory.mktemp("round5-shards")
    (tmp / "scratch").mkdir()
    course, release, solution = scratch_course(tmp / "scratch", SOLUTIONS / f"{STEM}.ipynb")
    for student, nb in (("correct", student_copy(release, solution)), ("release", release)):
        path = tmp / "inbox" / student / "ex01" / f"{STEM}.ipynb"
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps(nb), encoding="utf-8")
    grading = tmp / "grading"
    _check(grader_cli(grading, course.source, "collect", str(tmp / "inbox")), "collect")
    _check(grader_cli(grading, course.source, "autograde", "--shard", "0/1", "--workers=2", timeout=DEADLINE),
           "autograde --shard 0/1")
    return {"grading": grading, "source": course.source, "tmp": tmp}


def _copy(shard, tmp_path) -> Path:
    grading = tmp_path / "grading"
    shutil.copytree(shard["grading"], grading, symlinks=True)
    return grading


def test_merge_shards_merges_an_untouched_shard(shard, tmp_path):
    grading = _copy(shard, tmp_path)
    _check(grader_cli(grading, shard["source"], "merge-shards"), "merge-shards")


def test_merge_shards_refuses_symbolic_links(shard, tmp_path):
    grading = _copy(shard, tmp_path)
    target = grading / "shards" / "0-of-1" / "autograded" / "release" / "ex01" / f"{STEM}.ipynb"
    target.unlink()
    os.symlink(shard["source"] / f"{STEM}.ipynb", target)   # the solution as a student's autograded copy
    proc = grader_cli(grading, shard["source"], "merge-shards")
    assert proc.returncode != 0 and "symbolic link" in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    assert not (grading / "autograded" / "release").exists()


def test_merge_shards_refuses_a_gradebook_that_disagrees_with_the_judge(shard, tmp_path):
    from nbgrader.api import Gradebook

    from grader import ASSIGNMENT
    from grader.course import COURSE_ID, Course

    grading = _copy(shard, tmp_path)
    folder = Course(grading=grading / "shards" / "0-of-1", source=shard["source"])
    with Gradebook(folder.db_url, COURSE_ID) as gb:
        sub = gb.find_submission_notebook(STEM, ASSIGNMENT, "release")
        grade = next(g for g in sub.grades if g.cell.name == "test_info_nce_loss")
        grade.auto_score = 3.0   # the release earns nothing: a gradebook edited after grading
        gb.db.commit()
    proc = grader_cli(grading, shard["source"], "merge-shards")
    assert proc.returncode != 0 and "disagree" in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    assert "release" in proc.stdout + proc.stderr


# ----------------------------------------------------------------------------- units (no sandbox)
NESTED = ["<a" * 700 + ">", "</b<b" * 400 + ">", "<x<" * 500 + " y>", "<scr" * 300 + "ipt>alert(1)</script>",
          "<img<img" * 350 + " src=x onerror=alert(1)>", "<a" * 100_000 + ">", ("<x" * 3000 + ">") * 3,
          "$a<b$ " * 5000, "<" * 50_000, "<<a " * 20_000 + ">"]


@pytest.mark.parametrize("text", NESTED, ids=range(len(NESTED)))
def test_the_page_cleaners_never_recurse_and_stay_safe(text):
    import time

    from grader.safehtml import clean_fragment, clean_markdown, safe_markdown
    from test_feedback_safety import active_content

    started = time.monotonic()
    for clean in (clean_markdown, safe_markdown, clean_fragment):
        out = clean(text)
        assert not active_content(f"<body>{out}</body>"), (clean.__name__, active_content(f"<body>{out}</body>")[:3])
    assert time.monotonic() - started < 30


def test_the_seed_is_in_nothing_the_sandbox_can_read(tmp_path):
    """The session's plan (its stdin), its command line and its environment hold the case seeds it needs
    and never the batch's seed; its working folder holds only the student's notebook."""
    from grader.results import NotebookResult, Settings, Job
    from grader.launch import session_command, session_plan
    from grader.submissions import release_view
    from fixtures import scratch_course
    from grader.mutants import student_copy

    course, release, solution = scratch_course(tmp_path, SOLUTIONS / f"{STEM}.ipynb")
    nb = student_copy(release, solution)
    settings = Settings(seed=SEED_SHOWN, workers=2)
    job = Job(STEM, release_view(nb, release), release, NotebookResult("alice", STEM))
    plan, sealed = session_plan([job], settings, threads=1)
    work = tmp_path / "work"
    work.mkdir()
    cmd, env = session_command(settings, work, threads=1)
    seed = str(SEED_SHOWN)
    assert seed not in json.dumps(plan) and not [part for part in sealed if seed.encode() in part]
    assert not [a for a in cmd if seed in a]
    assert not [k for k, v in env.items() if seed in v]
    # the case seeds and the probes' source travel only in the sealed parts, one per notebook
    assert "case_seeds" not in json.dumps(plan) and "@probe(" not in json.dumps(plan)
    parts = [json.loads(part) for part in sealed]
    assert len(parts) == 1 and any(run["case_seeds"] for run in parts[0]["runs"])
    assert [run["label"] for run in parts[0]["runs"]] == [0] and "@probe(" in parts[0]["probe_source"]


def test_a_notebook_the_cleaner_cannot_handle_is_not_copied_and_stops_nothing(tmp_path, monkeypatch):
    from grader import scoring
    from grader.results import NotebookResult, worse_status
    from grader.scoring import merge
    from grader.fullrun import write_notebook
    from fixtures import scratch_course
    from grader.course import add_students

    course, release, solution = scratch_course(tmp_path, SOLUTIONS / f"{STEM}.ipynb")
    add_students(course, ["alice"])
    executed = tmp_path / "executed.ipynb"
    nb = json.loads(json.dumps(release))
    nb["cells"][0]["source"] = "lone \ud800 surrogate"
    write_notebook(executed, nb)          # a lone surrogate: still written
    assert json.loads(executed.read_text(encoding="utf-8"))["cells"][0]["source"].startswith("lone")

    def trips(nb):
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(scoring, "strip_active_outputs", trips)
    result = NotebookResult("alice", STEM, grades={}, autograded=executed)
    merge(course, result)                 # no exception
    assert result.status == "review" and "could not be made safe" in result.reasons[-1]
    assert not (course.folder("autograded", "alice") / f"{STEM}.ipynb").exists()
    assert worse_status("graded", "review") == "review"


def test_submitted_demo_outputs_are_capped_and_inert():
    from grader.fullrun import SUBMITTED_OUTPUTS, submitted_outputs
    from fixtures.hostile import DEMO_MASK_OUTPUTS

    kept = submitted_outputs(DEMO_MASK_OUTPUTS, ("918273645",))
    dump = json.dumps(kept)
    assert len(kept) <= SUBMITTED_OUTPUTS + 1 and len(dump) < 100_000
    assert "tracker.example" not in dump and "position" not in dump and "<div" not in dump
    assert not any(o["output_type"] == "error" for o in kept)
    assert all(set(o.get("data", {})) <= {"text/plain", "image/png", "image/jpeg"} for o in kept)


FAKE_SESSION = r'''
import json, sys
from grader.process import read_plan
plan = read_plan(0)
seq = 0
def emit(rec):
    global seq
    rec["seq"] = seq
    seq += 1
    sys.stdout.write(json.dumps(rec) + "\n")
    sys.stdout.flush()
emit({"kind": "ready"})
for i in range(4):
    emit({"kind": "cell", "stem": "first", "index": i, "outputs": [{"output_type": "stream", "name": "stdout",
                                                                     "text": "x" * 4000}]})
emit({"kind": "case", "stem": "first", "variant": "student", "case": "c", "status": "ok", "value": 1})
emit({"kind": "notebook_done", "stem": "first"})
emit({"kind": "cell", "stem": "second", "index": 0, "outputs": []})
sys.stdout.write('{"kind": "case", "seq": 99}\n')   # out of sequence: the stream breaks in the second notebook
sys.stdout.flush()
'''


def test_a_broken_session_stream_voids_only_the_unfinished_notebooks_and_caps_drop_outputs(tmp_path, monkeypatch):
    import sys

    from grader import launch

    monkeypatch.setattr(launch, "OUTPUT_BYTES", 10_000)
    script = tmp_path / "fake_session.py"
    script.write_text(FAKE_SESSION)
    records, _ = launch.run_sandboxed([sys.executable, str(script)], {"notebooks": []}, workdir=tmp_path,
                                      env=dict(os.environ), timeout=60, stems=["first", "second"])
    kinds = [(r.get("kind"), r.get("stem")) for r in records]
    assert ("notebook_done", "first") in kinds and ("case", "first") in kinds
    assert ("notebook_void", "second") in kinds and ("notebook_void", "first") not in kinds
    cells = [r for r in records if r.get("kind") == "cell" and r.get("stem") == "first"]
    assert len(cells) == 4 and "were dropped" in cells[-1]["outputs"][0]["text"]   # past the cap: output only
    assert "x" * 4000 in cells[0]["outputs"][0]["text"]


def test_checks_that_timed_out_on_an_overloaded_machine_are_graded_again(monkeypatch):
    """Without a CPU cgroup per student, a student whose checks timed out while the machine had more
    runnable processes than cores is not marked finished (the next run grades them again); with one, or
    on a quiet machine, or without a timeout, they are."""
    from types import SimpleNamespace

    from grader import autograde
    from grader.judge import CaseResult

    timed = SimpleNamespace(verdict=SimpleNamespace(cases=[CaseResult("t", "c", "s", 1.0, False,
                                                                      "did not finish within 20 s")]))
    fine = SimpleNamespace(verdict=SimpleNamespace(cases=[CaseResult("t", "c", "s", 1.0, True, "")]))
    cores = os.cpu_count() or 1
    monkeypatch.setattr(autograde.os, "getloadavg", lambda: (4.0 * cores, 0.0, 0.0))
    assert autograde.overloaded([timed], {"cpu_cgroup": False}).startswith("load 4.0")
    assert autograde.overloaded([timed], {"cpu_cgroup": True}) == ""
    assert autograde.overloaded([fine], {"cpu_cgroup": False}) == ""
    monkeypatch.setattr(autograde.os, "getloadavg", lambda: (0.5 * cores, 0.0, 0.0))
    assert autograde.overloaded([timed], {"cpu_cgroup": False}) == ""


def test_per_student_cgroups_cap_cpu_and_memory_where_the_machine_allows():
    from grader.sandbox import cgroup_protections, remove_cgroup, student_cgroups

    found = cgroup_protections()
    if not (found["cpu"] and found["memory"]):
        pytest.skip(f"no writable cgroup v1 cpu/memory controllers here ({found}): the summary reports it")
    groups = student_cgroups("round5-unit", cpus=1.5, mem_bytes=3 * 1024 ** 3)
    try:
        by = {p.parent.name: p for p in groups}
        assert (by["cpu"] / "cpu.cfs_quota_us").read_text().strip() == "150000"
        assert int((by["memory"] / "memory.limit_in_bytes").read_text()) == 3 * 1024 ** 3
    finally:
        remove_cgroup(groups)
    assert not any(p.exists() for p in groups)
