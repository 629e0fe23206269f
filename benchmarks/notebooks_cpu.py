"""Every notebook end to end in the preset a laptop runs (cpu), with the seconds each cell took.

    python benchmarks/notebooks_cpu.py [--preset cpu] [--only STEM ...] [--json PATH]

Executes each solution notebook exactly as ``./pack.sh run cpu`` does (papermill, PRESET injected,
plain progress bars) and records, per notebook: status ("ok" or the failing cell's error), wall
seconds, and every code cell's seconds (papermill's own per-cell timing) with its first line.
Results are merged into the JSON file (default ``build/bench/notebooks_<preset>.json``) by
notebook, so runs of single notebooks add up to the whole table. Exit code 1 when any notebook
failed: a visible test that fails on the solution in the preset a student runs is a defect.

Task A needs CIFAR-10 on disk (``$CIFAR10_DIR`` or ``build/cache/cifar10/cifar-10-batches-py``:
``python ../shared/data/cifar10_to_batches.py build/cache/cifar10`` writes it).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from utils.paths import build_dir  # noqa: E402
from utils.presets import PRESETS  # noqa: E402
from utils.run_notebooks import _failure, execute_notebook, solution_notebooks  # noqa: E402


def cell_seconds(executed: dict) -> list[dict]:
    """Per code cell of an executed notebook: index, seconds (papermill's duration), first line."""
    rows = []
    for index, cell in enumerate(executed.get("cells", [])):
        if cell.get("cell_type") != "code":
            continue
        source = "".join(cell.get("source", ""))
        first = next((line for line in source.splitlines() if line.strip()), "")
        seconds = (cell.get("metadata", {}).get("papermill") or {}).get("duration")
        rows.append({"cell": index, "seconds": None if seconds is None else round(float(seconds), 2),
                     "first_line": first[:80]})
    return rows


def run_one(notebook: Path, preset: str) -> dict:
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="las-bench-") as tmp:
        out = Path(tmp) / notebook.name
        try:
            execute_notebook(notebook, out, preset)
            status = "ok"
        except Exception as exc:  # papermill's error names the failing cell
            status = _failure(exc)
        cells = cell_seconds(json.loads(out.read_text())) if out.exists() else []
    seconds = time.perf_counter() - start
    slowest = sorted((c for c in cells if c["seconds"] is not None), key=lambda c: -c["seconds"])[:3]
    return {"status": status, "seconds": round(seconds, 1), "slowest_cells": slowest, "cells": cells}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="cpu", choices=PRESETS)
    parser.add_argument("--only", nargs="*", default=None, help="notebooks whose name contains one of these")
    parser.add_argument("--json", type=Path, default=None, help="default: build/bench/notebooks_<preset>.json")
    args = parser.parse_args(argv)

    notebooks = solution_notebooks()
    if args.only:
        notebooks = [nb for nb in notebooks if any(key in nb.stem for key in args.only)]
    if not notebooks:
        print("no notebook matched", file=sys.stderr)
        return 2
    path = args.json or build_dir() / "bench" / f"notebooks_{args.preset}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    table = json.loads(path.read_text()) if path.exists() else {}
    table.setdefault("notebooks", {})
    os.environ.setdefault("LAS_BUILD_DIR", str(build_dir()))
    print(f"{len(notebooks)} notebook(s) in the {args.preset} preset (cpu: up to 15 minutes each) -> {path}")
    failed = 0
    for nb in notebooks:
        print(f"  {nb.stem} ...", flush=True)
        row = run_one(nb, args.preset)
        row.update(preset=args.preset, finished=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                   cpus=os.cpu_count(), load_average_1min=round(os.getloadavg()[0], 2), machine=platform.machine())
        table["notebooks"][nb.stem] = row
        table["total_seconds"] = round(sum(r["seconds"] for r in table["notebooks"].values()), 1)
        path.write_text(json.dumps(table, indent=1) + "\n")
        failed += row["status"] != "ok"
        slow = ", ".join(f"[{c['cell']}] {c['seconds']:.0f} s" for c in row["slowest_cells"])
        print(f"  {nb.stem}: {row['status']}, {row['seconds']:.0f} s (slowest cells: {slow})", flush=True)
    print(f"total of the table: {table['total_seconds']:.0f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
