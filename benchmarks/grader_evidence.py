"""The grader's evidence, from one run:

1. ``fixtures``: every hostile and honest submission of tests/fixtures/hostile.py through ``python -m grader``
   collect -> autograde (2 workers) -> export, each outcome against its expected one (no unearned point, no
   honest point lost), and the gradebook's integrity afterwards;
2. ``mutants``: every notebook's mutants (grader/mutants/) through the judge over 20 seeds; the kill rate per
   notebook (a mutant is killed when it loses points on every seed);
3. ``honest``: every honest variant (tests/fixtures/honest/) through the judge: all must keep full marks;
4. ``throughput``: wall time to autograde N copies of the Task 1 solution with 1 and with 2 workers, and
   the time per copy of the grader before the judge (``--against``, a git worktree of that commit, the
   same copies, in the same invocation; target: the judge costs at most 1.5x the old time per copy).

    python benchmarks/grader_evidence.py                       # everything: about 30 minutes on 2 idle cores
    python benchmarks/grader_evidence.py --only throughput --copies 10 --workers 1 2

Writes build/bench/grader_evidence.json after every part (a cut-short run still leaves numbers). The machine
may be shared with other jobs: load averages are recorded next to every timing.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # the hostile fixture set lives with the tests

from fixtures.hostile import CELL_TIMEOUT, EXPECTED, MEM_GB, build, grader_cli, write_inbox  # noqa: E402
from grader.course import table  # noqa: E402
from grader.course import scratch_course  # noqa: E402
from grader.mutants import notebooks_with_mutants, student_copy  # noqa: E402
from grader.mutants import run as run_mutants  # noqa: E402
from grader.sandbox import protections  # noqa: E402
from utils.paths import build_dir  # noqa: E402

STEM = "task1_infonce"
SOLUTION = ROOT / "solutions" / "ex01" / f"{STEM}.ipynb"


def fixtures() -> dict:
    """Grade the hostile fixture set through the command line; compare every outcome with EXPECTED."""
    with tempfile.TemporaryDirectory(prefix="las-evidence-fixtures-") as tmp:
        tmp = Path(tmp)
        course, release, solution = scratch_course(tmp, SOLUTION)
        subs = build(release, solution)
        skipped = []
        if not protections()["filesystem"]:
            del subs["snoop"]  # without bubblewrap it would vandalise this gradebook (the summary says so)
            skipped.append("snoop (needs bubblewrap)")
        write_inbox(tmp / "inbox", subs, STEM)

        def cli(*args: str) -> subprocess.CompletedProcess:
            return grader_cli(course.grading, course.source, *args, timeout=None)

        started = time.perf_counter()
        rcs = {"collect": cli("collect", str(tmp / "inbox")).returncode}
        rcs["autograde"] = cli("autograde", "--workers=2", f"--timeout={CELL_TIMEOUT}", f"--mem-gb={MEM_GB}",
                               "--notebook-timeout=180").returncode
        rcs["export"] = cli("export").returncode
        wall = time.perf_counter() - started
        with open(course.grading / "grades.csv", newline="") as f:
            grades = {row["student_id"]: row for row in csv.DictReader(f)}
        with sqlite3.connect(course.db_path) as db:
            integrity = db.execute("PRAGMA integrity_check").fetchone()[0]
    outcomes = []
    for student in sorted(set(subs) | set(grades)):
        row = grades.get(student, {})
        status, points = EXPECTED.get(student, ("unreadable", 0.0))  # broken_zip: the inbox's junk file
        got = float(row["autograded_score"]) if row.get("autograded_score") else None
        outcomes.append({"student": student, "expected_status": status, "expected_points": points,
                         "status": row.get("status"), "points": got, "reason": row.get("reason", "not graded"),
                         "as_expected": row.get("status") in (status if isinstance(status, tuple) else (status,))
                                        and got == points})
    return {"wall_s": round(wall, 1), "verb_exit_codes": rcs, "gradebook_integrity": integrity,
            "skipped": skipped, "outcomes": outcomes,
            "all_as_expected": all(o["as_expected"] for o in outcomes)}


def mutants(seeds: int) -> dict:
    """Every notebook's mutants through the judge, over ``seeds`` input seeds."""
    reports = {}
    for stem in notebooks_with_mutants():
        started = time.perf_counter()
        r = run_mutants([stem], seeds=list(range(seeds)), progress=lambda msg: None)[stem]
        reports[stem] = {"mutants": r["total"], "killed": r["killed"], "seeds": r["seeds"],
                         "kill_rate": round(r["killed"] / max(1, r["total"]), 3),
                         "solution_score": f"{r['baseline']:g}/{r['baseline_max']:g}", "survivors": r["survivors"],
                         "problems": r["problems"], "wall_s": round(time.perf_counter() - started, 1),
                         "results": r["results"]}
        print(f"  {stem}: {r['killed']}/{r['total']} mutants killed, solution {r['baseline']:g}/{r['baseline_max']:g} "
              f"({reports[stem]['wall_s']:.0f} s)", flush=True)
    return reports


def honest() -> dict:
    """Every honest variant of tests/fixtures/honest/ through the judge (3 seeds): all keep full marks."""
    from fixtures import honest as hv
    from grader.judge import sweep

    out = {}
    for stem in hv.stems():
        release = json.loads((ROOT / "notebooks" / "ex01" / f"{stem}.ipynb").read_text())
        solution = json.loads((ROOT / "solutions" / "ex01" / f"{stem}.ipynb").read_text())
        base = student_copy(release, solution)
        variants = {f"{h.cell}: {h.name}": hv.with_answer(base, h.cell, h.source) for h in hv.load(stem)}
        started = time.perf_counter()
        with tempfile.TemporaryDirectory() as tmp:
            verdicts = sweep(stem, release, solution, variants, [0, 7, 123], workroot=Path(tmp))
        lost = sorted({name for (name, _), v in verdicts.items() if v.score < v.max_score - 1e-9})
        out[stem] = {"variants": len(variants), "full_marks": len(variants) - len(lost), "lost": lost,
                     "wall_s": round(time.perf_counter() - started, 1)}
        print(f"  {stem}: {out[stem]['full_marks']}/{len(variants)} honest variants keep full marks", flush=True)
    return out


# Runs in the grader's own checkout (this one, or a worktree of an older commit): autograde copies of the
# Task 1 solution and print one JSON line. Only APIs both versions have are used.
THROUGHPUT = r"""
import json, os, sys, tempfile, time
from pathlib import Path
sys.path.insert(0, os.getcwd())
from grader.results import Settings
from grader.autograde import autograde
from grader.course import scratch_course
from grader.mutants import student_copy
copies, workers, threads = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
with tempfile.TemporaryDirectory(prefix="las-evidence-throughput-") as tmp:
    course, release, solution = scratch_course(Path(tmp), Path("solutions/ex01/task1_infonce.ipynb"))
    text = json.dumps(student_copy(release, solution))
    for i in range(copies):
        folder = course.folder("submitted", f"student{i:03d}")
        folder.mkdir(parents=True)
        (folder / "task1_infonce.ipynb").write_text(text, encoding="utf-8")
    settings = Settings(workers=workers, session_threads=threads)
    started = time.perf_counter()
    statuses = autograde(course, settings=settings, progress=lambda msg: None, sync=False)
    wall = time.perf_counter() - started
full = sum(st["score"] == st["max_score"] for st in statuses.values())
print("THROUGHPUT " + json.dumps({"wall_s": round(wall, 1), "full_marks": full, "kernel_threads": settings.threads()}))
"""


def throughput_run(copies: int, workers: int, kernel_threads: int = 0, checkout: Path = ROOT) -> dict:
    """Autograde ``copies`` copies of the Task 1 solution with ``workers`` workers with the grader of
    ``checkout``; full pipeline (full run and, where the checkout has one, the judge)."""
    from grader.course import nbgrader_env

    load_before = os.getloadavg()[0]
    env = nbgrader_env()
    env["PYTHONPATH"] = str(checkout)
    proc = subprocess.run([sys.executable, "-c", THROUGHPUT, str(copies), str(workers), str(kernel_threads)],
                          cwd=checkout, capture_output=True, text=True, env=env)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("THROUGHPUT ")), None)
    if line is None:
        raise RuntimeError(f"throughput run in {checkout} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    r = json.loads(line.split(" ", 1)[1])
    return {"copies": copies, "workers": workers, "kernel_threads": r["kernel_threads"], "wall_s": r["wall_s"],
            "per_copy_s": round(r["wall_s"] / copies, 2), "full_marks": r["full_marks"],
            "load_before": round(load_before, 2), "load_after": round(os.getloadavg()[0], 2)}


def old_checkout(rev: str, folder: Path) -> Path:
    """A git worktree of ``rev`` (the grader before the judge) in ``folder``."""
    subprocess.run(["git", "worktree", "add", "--detach", str(folder), rev], cwd=ROOT, check=True,
                   capture_output=True)
    return folder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=["fixtures", "mutants", "honest", "throughput"], action="append",
                        help="run only this part (repeatable; default: all four)")
    parser.add_argument("--against", default="a287639",
                        help="the commit whose grader the throughput is compared with (default: the last before the judge)")
    parser.add_argument("--seeds", type=int, default=20, help="input seeds of the mutant sweep")
    parser.add_argument("--copies", type=int, default=50, help="copies of the solution to time (default 50)")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2], help="worker counts to time")
    parser.add_argument("--kernel-threads", type=int, default=0,
                        help="torch threads per grading kernel (default 0: CPU cores / workers, as autograde)")
    args = parser.parse_args()
    parts = args.only or ["fixtures", "mutants", "honest", "throughput"]

    out = build_dir() / "bench" / "grader_evidence.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    result = {"machine": {"cpu_count": os.cpu_count(), "platform": platform.platform(),
                          "load_average_start": os.getloadavg()},
              "protections": protections(), "parts": parts}

    def save() -> None:
        out.write_text(json.dumps(result, indent=1))

    print("protections: " + ", ".join(f"{k} {'on' if v else 'OFF'}" for k, v in protections().items()), flush=True)
    if "fixtures" in parts:
        print("1. hostile fixture set ...", flush=True)
        result["fixtures"] = fx = fixtures()
        save()
        print(table([[o["student"], f"{'/'.join(o['expected_status']) if isinstance(o['expected_status'], tuple) else o['expected_status']} {o['expected_points']:g}",
                      f"{o['status']} {o['points'] if o['points'] is not None else '-'}",
                      "yes" if o["as_expected"] else "NO", o["reason"][:60]] for o in fx["outcomes"]],
                    ["student", "expected", "got", "ok", "reason"]))
        print(f"   {sum(o['as_expected'] for o in fx['outcomes'])}/{len(fx['outcomes'])} as expected, verbs exit "
              f"{fx['verb_exit_codes']}, gradebook integrity {fx['gradebook_integrity']!r}, {fx['wall_s']:.0f} s",
              flush=True)
    if "mutants" in parts:
        print(f"2. mutants through the judge, {args.seeds} seeds ...", flush=True)
        result["mutants"] = mutants(args.seeds)
        save()
        rows = [[stem, r["mutants"], r["killed"], f"{100 * r['kill_rate']:.0f} %", r["solution_score"],
                 "; ".join(r["survivors"] + r["problems"]) or "-"] for stem, r in result["mutants"].items()]
        print(table(rows, ["notebook", "mutants", "killed", "kill rate", "solution", "survivors / problems"]))
    if "honest" in parts:
        print("3. honest variants through the judge ...", flush=True)
        result["honest"] = honest()
        save()
    if "throughput" in parts:
        print(f"4. {args.copies} copies of the {STEM} solution, this grader and the one of {args.against} ...",
              flush=True)
        runs = result["throughput"] = []
        with tempfile.TemporaryDirectory(prefix="las-evidence-old-") as tmp:
            old = old_checkout(args.against, Path(tmp) / "old")
            try:
                for workers in args.workers:
                    for label, checkout in (("judge", ROOT), (f"before the judge ({args.against})", old)):
                        runs.append({"grader": label, **throughput_run(args.copies, workers, args.kernel_threads,
                                                                       checkout)})
                        r = runs[-1]
                        print(f"   {label}, {workers} worker(s), {r['kernel_threads']} thread(s) each: {r['wall_s']} s "
                              f"({r['per_copy_s']} s per copy), {r['full_marks']}/{r['copies']} full marks, load "
                              f"average {r['load_before']} -> {r['load_after']}", flush=True)
                        save()
            finally:
                subprocess.run(["git", "worktree", "remove", "--force", str(old)], cwd=ROOT, capture_output=True)
        for workers in args.workers:
            new = next(r for r in runs if r["workers"] == workers and r["grader"] == "judge")
            before = next(r for r in runs if r["workers"] == workers and r["grader"] != "judge")
            new["time_vs_before_the_judge"] = round(new["wall_s"] / before["wall_s"], 2)
            print(f"   {workers} worker(s): the judge takes {new['time_vs_before_the_judge']}x the time per copy of the "
                  f"grader before it (target <= 1.5x)")
        base = next((r for r in runs if r["workers"] == 1 and r["grader"] == "judge"), None)
        for r in runs if base else []:
            if r["grader"] == "judge":
                r["speedup_vs_1_worker"] = round(base["wall_s"] / r["wall_s"], 2)
    result["machine"]["load_average_end"] = os.getloadavg()
    save()
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
