"""Wall time to autograde N copies of the Task 1 solution with 1 and with 2 workers.

    python benchmarks/grader_throughput.py --copies 50 --workers 1 2

Each run uses a fresh Task-1-only grading folder and the full pipeline (sandboxed kernel, memory cap,
merge into the gradebook). The 1-worker run is the baseline measured in the same invocation.
Writes build/bench/grader_throughput.json. The machine may be shared: the load average is recorded.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from grader.autograde import Settings, autograde  # noqa: E402
from grader.course import Course, sync_assignment  # noqa: E402
from grader.mutants import student_copy  # noqa: E402
from grader.sandbox import protections  # noqa: E402
from utils.paths import build_dir  # noqa: E402

STEM = "task1_infonce"


def one_run(copies: int, workers: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="las-bench-") as tmp:
        tmp = Path(tmp)
        (tmp / "source").mkdir()
        shutil.copy(ROOT / "solutions" / "ex01" / f"{STEM}.ipynb", tmp / "source")
        course = Course(grading=tmp / "grading", source=tmp / "source")
        sync_assignment(course)
        release = json.loads((course.release / f"{STEM}.ipynb").read_text())
        solution = json.loads((ROOT / "solutions" / "ex01" / f"{STEM}.ipynb").read_text())
        text = json.dumps(student_copy(release, solution))
        for i in range(copies):
            folder = course.folder("submitted", f"student{i:03d}")
            folder.mkdir(parents=True)
            (folder / f"{STEM}.ipynb").write_text(text)
        load_before = os.getloadavg()[0]
        started = time.perf_counter()
        statuses = autograde(course, settings=Settings(workers=workers), progress=lambda msg: None, sync=False)
        wall = time.perf_counter() - started
        full = sum(st["score"] == st["max_score"] and st["status"] == "graded" for st in statuses.values())
    return {"copies": copies, "workers": workers, "wall_s": round(wall, 1), "per_copy_s": round(wall / copies, 2),
            "full_marks": full, "load_before": load_before, "load_after": os.getloadavg()[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--copies", type=int, default=50)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    args = parser.parse_args()
    results = []
    out = build_dir() / "bench" / "grader_throughput.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    for workers in args.workers:
        res = one_run(args.copies, workers)
        results.append(res)
        print(f"{res['copies']} copies, {workers} worker(s): {res['wall_s']} s ({res['per_copy_s']} s per copy), "
              f"{res['full_marks']} with full marks, load average {res['load_before']:.1f} -> {res['load_after']:.1f}",
              flush=True)
        out.write_text(json.dumps({"cpu_count": os.cpu_count(), "protections": protections(), "runs": results},
                                  indent=1))  # after every run, so a cut-short benchmark still leaves numbers
    base = next((r for r in results if r["workers"] == 1), None)
    if base:
        for r in results:
            r["speedup_vs_1_worker"] = round(base["wall_s"] / r["wall_s"], 2)
            print(f"  {r['workers']} worker(s): speed-up {r['speedup_vs_1_worker']}x over 1 worker")
    out.write_text(json.dumps({"cpu_count": os.cpu_count(), "protections": protections(), "runs": results},
                              indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
