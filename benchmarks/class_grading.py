"""Grading a class: worker-seconds per student, this grader against the one before, same run.

Builds a class of N students, each submitting the five solution notebooks (or those ``--notebooks`` names)
as a student would (the release with the solution's answers, grader.mutants.student_copy), and autogrades it with
``--workers W`` twice: with this checkout's grader and with the grader of ``--against`` (a git
worktree of that commit, sharing this checkout's model cache). Both run on the same machine, one
after the other, so their ratio holds even where the machine is shared; load averages are recorded.

    python benchmarks/class_grading.py                          # 4 students, 2 workers: about 6 minutes on 2 cores
    python benchmarks/class_grading.py --students 8 --full-run full --against none
    python benchmarks/class_grading.py --notebooks task1_infonce --students 10 --against 21d6566   # a Task 1 class

Prints, per grader: wall time, the per-batch part (syncing the gradebook, the solution's reference
values), worker-seconds per student of the rest (wall x workers / students), students per minute,
and whether every student's points equal the other grader's. Writes build/bench/class_grading.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from utils.paths import build_dir  # noqa: E402

#: Runs in the checkout under test (its own grader on sys.path): grade the class, print one JSON line.
GRADE_CLASS = r"""
import json, os, shutil, sys, time
from pathlib import Path
sys.path.insert(0, os.getcwd())
from grader import judge as judging
from grader.results import Settings
from grader.autograde import autograde
from grader.course import Course
grading, workers, mode = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
spans = []   # (start, end) of each notebook's reference values: a newer grader computes several at once
original = judging.reference_records
def timed(*args, **kwargs):
    started = time.perf_counter()
    try:
        return original(*args, **kwargs)
    finally:
        spans.append((started, time.perf_counter()))
judging.reference_records = timed
settings = Settings(workers=workers, seed=1234)
if mode != "default" and hasattr(settings, "full_run"):
    settings.full_run = mode
started = time.perf_counter()
statuses = autograde(Course(grading=grading), settings=settings, progress=lambda msg: None)
wall = time.perf_counter() - started
points = {s: {nb: v.get("score") for nb, v in st["notebooks"].items()} for s, st in statuses.items()}
reference = max(end for _, end in spans) - min(start for start, _ in spans) if spans else 0.0
print("CLASS " + json.dumps({"wall_s": wall, "reference_s": reference, "points": points,
                             "statuses": {s: st["status"] for s, st in statuses.items()}}))
"""


def build_class(grading: Path, students: int, stems: list[str] | None = None) -> None:
    """``students`` submission folders under ``grading/submitted``, each with the notebooks ``stems``
    (default: all five)."""
    from grader.mutants import student_copy

    for path in sorted((ROOT / "solutions" / "ex01").glob("*.ipynb")):
        if stems and path.stem not in stems:
            continue
        release = json.loads((ROOT / "notebooks" / "ex01" / path.name).read_text(encoding="utf-8"))
        text = json.dumps(student_copy(release, json.loads(path.read_text(encoding="utf-8"))))
        for i in range(students):
            folder = grading / "submitted" / f"student{i:03d}" / "ex01"
            folder.mkdir(parents=True, exist_ok=True)
            (folder / path.name).write_text(text, encoding="utf-8")


def grade_class(checkout: Path, grading: Path, workers: int, mode: str) -> dict:
    """Autograde the class in ``grading`` with the grader of ``checkout``; the CLASS record."""
    from grader.course import nbgrader_env

    load_before = os.getloadavg()[0]
    env = nbgrader_env()
    env["PYTHONPATH"] = str(checkout)
    proc = subprocess.run([sys.executable, "-c", GRADE_CLASS, str(grading), str(workers), mode],
                          cwd=checkout, capture_output=True, text=True, env=env)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("CLASS ")), None)
    if line is None:
        raise RuntimeError(f"grading in {checkout} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    record = json.loads(line.split(" ", 1)[1])
    record.update(load_before=round(load_before, 2), load_after=round(os.getloadavg()[0], 2))
    return record


def old_checkout(rev: str, folder: Path) -> Path:
    """A git worktree of ``rev`` in ``folder``, reading this checkout's model cache (build/cache)."""
    subprocess.run(["git", "worktree", "add", "--detach", str(folder), rev], cwd=ROOT, check=True,
                   capture_output=True)
    (folder / "build").mkdir(exist_ok=True)
    if (ROOT / "build" / "cache").is_dir():
        os.symlink(ROOT / "build" / "cache", folder / "build" / "cache")
    return folder


def summarise(label: str, record: dict, students: int, workers: int) -> dict:
    per_batch = record["reference_s"]
    graded = max(record["wall_s"] - per_batch, 1e-9)
    return {"grader": label, "students": students, "workers": workers, "wall_s": round(record["wall_s"], 1),
            "per_batch_s": round(per_batch, 1),
            "worker_s_per_student": round(graded * workers / students, 1),
            "worker_s_per_student_all_in": round(record["wall_s"] * workers / students, 1),
            "students_per_minute": round(60 * students / record["wall_s"], 2),
            "points": record["points"], "statuses": record["statuses"],
            "load_before": record["load_before"], "load_after": record["load_after"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--students", type=int, default=4)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--full-run", default="default", choices=["default", "light", "full"],
                        help="this grader's full-run mode (default: its default, light)")
    parser.add_argument("--notebooks", default="",
                        help="comma-separated stems each student submits (default: all five)")
    parser.add_argument("--against", default="b780e18",
                        help="the commit whose grader is timed too ('none' to skip; default: the last commit with one kernel per notebook)")
    args = parser.parse_args()

    out = build_dir() / "bench" / "class_grading.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    result = {"machine": {"cpu_count": os.cpu_count(), "platform": platform.platform()},
              "students": args.students, "notebooks": args.notebooks or "all", "workers": args.workers, "runs": []}
    graders = [(f"this checkout ({args.full_run} full run)", None)]
    if args.against != "none":
        graders.append((f"the grader of {args.against}", args.against))
    stems = [stem for stem in args.notebooks.split(",") if stem]   # none: all five
    print(f"grading {args.students} students x {', '.join(stems) or '5 notebooks'} with {args.workers} workers, "
          f"{len(graders)} grader(s); the old one takes about 110 worker-seconds per student", flush=True)
    with tempfile.TemporaryDirectory(prefix="las-class-bench-") as tmp:
        tmp = Path(tmp)
        try:
            for i, (label, rev) in enumerate(graders):
                checkout = ROOT if rev is None else old_checkout(rev, tmp / "old")
                grading = tmp / f"grading-{i}"
                build_class(grading, args.students, stems)
                record = grade_class(checkout, grading, args.workers, args.full_run if rev is None else "default")
                row = summarise(label, record, args.students, args.workers)
                result["runs"].append(row)
                out.write_text(json.dumps(result, indent=1))
                print(f"{label}: {row['wall_s']:.0f} s wall ({row['per_batch_s']:.0f} s per batch), "
                      f"{row['worker_s_per_student']:.1f} worker-s per student "
                      f"({row['worker_s_per_student_all_in']:.1f} all in), {row['students_per_minute']:.2f} students/min",
                      flush=True)
        finally:
            if len(graders) > 1:
                subprocess.run(["git", "worktree", "remove", "--force", str(tmp / "old")], cwd=ROOT,
                               capture_output=True)
    if len(result["runs"]) == 2:
        new, old = result["runs"]
        result["same_points"] = new["points"] == old["points"]
        result["speedup"] = round(old["worker_s_per_student"] / new["worker_s_per_student"], 2)
        print(f"same points for every student and notebook: {result['same_points']}; "
              f"{result['speedup']}x fewer worker-seconds per student")
    out.write_text(json.dumps(result, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
