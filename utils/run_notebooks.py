"""The pack's main job: execute every solution notebook end to end and keep the results.

    python -m utils.run_notebooks [PRESET] [--only NAME ...]      (or: ./pack.sh run [PRESET])

PRESET defaults to ``smoke``. Executed notebooks go to ``build/notebooks/<preset>/`` and the
figures they save to ``build/figures/``. A summary table lists each notebook's status and time;
the exit code is non-zero when any notebook failed.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from .paths import REPO_ROOT, build_dir
from .presets import PRESETS

SOLUTIONS = REPO_ROOT / "solutions" / "ex01"


def solution_notebooks() -> list[Path]:
    """All nbgrader source notebooks, in the order of the exercise sheet (task1, task2, taskA, ...)."""
    return sorted(p for p in SOLUTIONS.glob("*.ipynb") if ".ipynb_checkpoints" not in p.parts)


def execute_notebook(src: Path, dst: Path, preset: str, timeout: int | None = None) -> None:
    """Execute ``src`` with papermill (``PRESET`` injected into the parameters cell) into ``dst``."""
    import papermill as pm

    dst.parent.mkdir(parents=True, exist_ok=True)
    pm.execute_notebook(
        str(src),
        str(dst),
        parameters={"PRESET": preset},
        cwd=str(src.parent),
        kernel_name="python3",
        progress_bar=False,
        execution_timeout=timeout,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("preset", nargs="?", default="smoke", choices=PRESETS)
    parser.add_argument("--only", nargs="*", default=None, help="run only notebooks whose name contains one of these")
    args = parser.parse_args(argv)

    from tqdm.auto import tqdm

    notebooks = solution_notebooks()
    if args.only:
        notebooks = [nb for nb in notebooks if any(key in nb.stem for key in args.only)]
    if not notebooks:
        print("no notebooks matched", file=sys.stderr)
        return 2
    out_dir = build_dir() / "notebooks" / args.preset
    os.environ.setdefault("LAS_BUILD_DIR", str(build_dir()))
    rows = []
    for nb in tqdm(notebooks, desc=f"notebooks ({args.preset})", unit="nb"):
        start = time.perf_counter()
        try:
            execute_notebook(nb, out_dir / nb.name, args.preset)
            status = "ok"
        except Exception as exc:  # papermill raises PapermillExecutionError with the cell's traceback
            status = f"FAILED: {exc.__class__.__name__}"
            print(f"\n{nb.name} failed:\n{exc}", file=sys.stderr)
        rows.append((nb.name, status, time.perf_counter() - start))

    width = max(len(r[0]) for r in rows)
    print(f"\n{'notebook':<{width}}  {'status':<28} seconds")
    for name, status, seconds in rows:
        print(f"{name:<{width}}  {status:<28} {seconds:7.1f}")
    print(f"\nexecuted notebooks: {out_dir}\nfigures:            {build_dir() / 'figures'}")
    return 0 if all(r[1] == "ok" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
