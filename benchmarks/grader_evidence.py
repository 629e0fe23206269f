"""The grader's evidence (issue #7), from one run:

1. ``fixtures``: every hostile submission of tests/fixtures/hostile.py through ``python -m grader``
   collect -> autograde (2 workers) -> export, each outcome against its expected one, and the gradebook's
   integrity afterwards;
2. ``mutants``: every notebook's mutants (grader/mutants/) through the real autograde; the kill rate per notebook;
3. ``throughput``: wall time to autograde N copies of the Task 1 solution with 1 and with 2 workers
   (the 1-worker run is the baseline, measured in the same invocation).

    python benchmarks/grader_evidence.py                       # all three: about an hour on 2 idle cores
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
from grader.__main__ import table  # noqa: E402
from grader.autograde import Settings, autograde  # noqa: E402
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
                               "--notebook-timeout=600").returncode
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
                         "as_expected": row.get("status") == status and got == points})
    return {"wall_s": round(wall, 1), "verb_exit_codes": rcs, "gradebook_integrity": integrity,
            "skipped": skipped, "outcomes": outcomes,
            "all_as_expected": all(o["as_expected"] for o in outcomes)}


def mutants(workers: int) -> dict:
    """Every notebook's mutants through the real autograde."""
    reports = {}
    for stem in notebooks_with_mutants():
        started = time.perf_counter()
        r = run_mutants([stem], workers=workers, progress=lambda msg: None)[stem]
        reports[stem] = {"mutants": r["total"], "killed": r["killed"],
                         "kill_rate": round(r["killed"] / max(1, r["total"]), 3),
                         "solution_score": f"{r['baseline']:g}/{r['baseline_max']:g}",
                         "solution_status": r["baseline_status"], "survivors": r["survivors"],
                         "problems": r["problems"], "wall_s": round(time.perf_counter() - started, 1),
                         "results": r["results"]}
        print(f"  {stem}: {r['killed']}/{r['total']} mutants killed, solution {r['baseline']:g}/{r['baseline_max']:g} "
              f"({reports[stem]['wall_s']:.0f} s)", flush=True)
    return reports


def throughput_run(copies: int, workers: int, kernel_threads: int = 0) -> dict:
    """Autograde ``copies`` copies of the Task 1 solution with ``workers`` workers; full pipeline."""
    with tempfile.TemporaryDirectory(prefix="las-evidence-throughput-") as tmp:
        course, release, solution = scratch_course(Path(tmp), SOLUTION)
        text = json.dumps(student_copy(release, solution))
        for i in range(copies):
            folder = course.folder("submitted", f"student{i:03d}")
            folder.mkdir(parents=True)
            (folder / f"{STEM}.ipynb").write_text(text, encoding="utf-8")
        load_before = os.getloadavg()[0]
        started = time.perf_counter()
        settings = Settings(workers=workers, kernel_threads=kernel_threads)
        statuses = autograde(course, settings=settings, progress=lambda msg: None, sync=False)
        wall = time.perf_counter() - started
    full = sum(st["score"] == st["max_score"] and st["status"] == "graded" for st in statuses.values())
    return {"copies": copies, "workers": workers, "kernel_threads": settings.threads(), "wall_s": round(wall, 1), "per_copy_s": round(wall / copies, 2),
            "full_marks": full, "load_before": round(load_before, 2), "load_after": round(os.getloadavg()[0], 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=["fixtures", "mutants", "throughput"], action="append",
                        help="run only this part (repeatable; default: all three)")
    parser.add_argument("--copies", type=int, default=50, help="copies of the solution to time (default 50)")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2], help="worker counts to time")
    parser.add_argument("--kernel-threads", type=int, default=0,
                        help="torch threads per grading kernel (default 0: CPU cores / workers, as autograde)")
    parser.add_argument("--mutant-workers", type=int, default=2)
    args = parser.parse_args()
    parts = args.only or ["fixtures", "mutants", "throughput"]

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
        print(table([[o["student"], f"{o['expected_status']} {o['expected_points']:g}",
                      f"{o['status']} {o['points'] if o['points'] is not None else '-'}",
                      "yes" if o["as_expected"] else "NO", o["reason"][:60]] for o in fx["outcomes"]],
                    ["student", "expected", "got", "ok", "reason"]))
        print(f"   {sum(o['as_expected'] for o in fx['outcomes'])}/{len(fx['outcomes'])} as expected, verbs exit "
              f"{fx['verb_exit_codes']}, gradebook integrity {fx['gradebook_integrity']!r}, {fx['wall_s']:.0f} s",
              flush=True)
    if "mutants" in parts:
        print(f"2. mutants through the real autograde ({args.mutant_workers} workers) ...", flush=True)
        result["mutants"] = mutants(args.mutant_workers)
        save()
        rows = [[stem, r["mutants"], r["killed"], f"{100 * r['kill_rate']:.0f} %", r["solution_score"],
                 "; ".join(r["survivors"] + r["problems"]) or "-"] for stem, r in result["mutants"].items()]
        print(table(rows, ["notebook", "mutants", "killed", "kill rate", "solution", "survivors / problems"]))
    if "throughput" in parts:
        print(f"3. {args.copies} copies of the {STEM} solution ...", flush=True)
        runs = result["throughput"] = []
        for workers in args.workers:
            runs.append(throughput_run(args.copies, workers, args.kernel_threads))
            r = runs[-1]
            print(f"   {workers} worker(s), {r['kernel_threads']} thread(s) each: {r['wall_s']} s ({r['per_copy_s']} s per copy), {r['full_marks']}/"
                  f"{r['copies']} full marks, load average {r['load_before']} -> {r['load_after']}", flush=True)
            save()
        base = next((r for r in runs if r["workers"] == 1), None)
        for r in runs if base else []:
            r["speedup_vs_1_worker"] = round(base["wall_s"] / r["wall_s"], 2)
            print(f"   {r['workers']} worker(s): {r['speedup_vs_1_worker']}x the 1-worker speed")
    result["machine"]["load_average_end"] = os.getloadavg()
    save()
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
