"""Time from an empty cache to the first finished cell that needs a model (issue: first use).

    python benchmarks/first_use.py [--preset cpu] [task2_pseudo_likelihood taskB_pythia_scaling]

Executes each solution notebook offline (``HF_HUB_OFFLINE=1``, ``MODEL_SUITE="mini"``) with a fresh,
empty build folder, so the miniature suite is built on first use as on a student's laptop, and reports
when the cell that built the suite (the one that printed the first-use message) finished, counted from
the start of the first cell, and the whole notebook's time. Writes build/bench/first_use.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from utils.paths import build_dir  # noqa: E402

MARKER = "First use of the miniature model suite"


def _stamp(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def measure(stem: str, preset: str) -> dict:
    import papermill as pm

    scratch = Path(tempfile.mkdtemp(prefix=f"first-use-{stem}-"))
    env_before = {k: os.environ.get(k) for k in ("LAS_BUILD_DIR", "HF_HUB_OFFLINE", "MPLBACKEND")}
    os.environ.update(LAS_BUILD_DIR=str(scratch), HF_HUB_OFFLINE="1", MPLBACKEND="Agg")
    src = REPO / "solutions" / "ex01" / f"{stem}.ipynb"
    out = scratch / f"{stem}.ipynb"
    started, error = time.perf_counter(), None
    try:
        pm.execute_notebook(str(src), str(out), parameters={"PRESET": preset, "MODEL_SUITE": "mini"},
                            cwd=str(src.parent), kernel_name="python3", progress_bar=False)
    except Exception as exc:  # noqa: BLE001 - report it, keep the timing of what ran
        error = f"{type(exc).__name__}"
    finally:
        for key, value in env_before.items():
            os.environ.pop(key, None) if value is None else os.environ.__setitem__(key, value)
    whole = time.perf_counter() - started
    cells = json.loads(out.read_text())["cells"] if out.exists() else []
    first = None
    row = {"notebook": stem, "preset": preset, "whole_notebook_s": round(whole, 1), "error": error}
    for index, cell in enumerate(cells):
        meta = cell.get("metadata", {}).get("papermill", {})
        if not meta.get("start_time") or not meta.get("end_time"):
            continue
        first = first or _stamp(meta["start_time"])
        text = "".join("".join(o.get("text", "")) for o in cell.get("outputs", []) if o.get("output_type") == "stream")
        if MARKER in text:
            row.update(first_model_cell=index, first_model_cell_done_s=round(_stamp(meta["end_time"]) - first, 1))
            break
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("notebooks", nargs="*", default=["task2_pseudo_likelihood", "taskB_pythia_scaling"])
    parser.add_argument("--preset", default="cpu")
    args = parser.parse_args()
    rows = [measure(stem, args.preset) for stem in args.notebooks]
    for r in rows:
        print(f"{r['notebook']}: first model cell done after {r.get('first_model_cell_done_s', 'n/a')} s "
              f"(from an empty cache, {r['preset']} preset, offline); whole notebook {r['whole_notebook_s']} s"
              + (f"; FAILED: {r['error']}" if r["error"] else ""))
    out = build_dir() / "bench" / "first_use.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"cpu_count": os.cpu_count(), "rows": rows}, indent=2))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
