"""Task A as a lecturer runs it: the solution notebook executed end to end, every cell timed.

    python benchmarks/taskA_demo.py --cifar DIR                  # the gpu preset on a GPU (cpu preset without one)
    python benchmarks/taskA_demo.py --cifar DIR --preset cpu     # the cpu preset (2 cores: about 10 minutes)
    python benchmarks/taskA_demo.py --preset smoke               # seconds, synthetic stand-in data, no CIFAR-10

Executes ``solutions/ex01/taskA_simclr.ipynb`` with papermill exactly as ``python -m utils.run_notebooks``
does (the given augmentation, ``PRESET`` injected), in a fresh build folder (nothing is resumed from a
checkpoint), then, on CUDA and outside the smoke preset, times the recipe of ``benchmarks/simclr.py
--gpu-preset`` (ResNet-18, the extension's ``augment_batch``, a linear probe every 5 epochs) in the same
process, on the same GPU. ``--no-recipe`` skips that part.

``--executor inprocess`` runs the same code cells in this Python process instead of a Jupyter kernel
(one namespace, ``PRESET`` set after the parameters cell, each cell timed, its printed output kept),
for a machine without Jupyter's kernel packages, such as a bare GPU image; ``auto`` (the default) uses
papermill when it is installed. If a cell fails, the JSON is still written, with the cells run so far
and ``error``; the exit code is then 1.

The JSON file (``--out``, default ``build/bench/taskA_demo-<preset>.json``) holds:

* ``benchmark``, ``preset``, ``date`` (UTC, ISO 8601), ``torch``, ``python``, ``device`` (the GPU's
  name, or ``"cpu"``), ``gpu`` (the GPU's name or None), ``cpu_count``, ``threads`` (torch's CPU threads),
  ``load_average_at_start`` and ``load_average_at_end`` (the machine's load: CPU timings depend on it);
* ``notebook``: the executed copy's path; ``wall_seconds``: the whole run, kernel start included;
  ``cells``: one entry per code cell, in order: ``index`` (position in the notebook), ``label`` (the
  nbgrader grade_id, else the heading of the markdown above it, else its first line), ``seconds``
  (papermill's measured duration); ``cells_seconds_total``; ``slowest_cells``: the five slowest labels;
* ``config``: the preset's settings the notebook ran with; ``data``: the training data's source;
* ``simclr``: ``train_seconds`` (SimCLR training alone), ``images_per_second`` (training images per
  second, two views each), ``epochs``, ``images``;
* ``linear_probe`` and ``knn``: accuracies (fractions) of the SimCLR, random-init and supervised
  encoders; ``knn_during_training``: ``[epoch, kNN accuracy]`` pairs;
* ``time_to_85``: the notebook's SimCLR training seconds when its final linear probe reached 85 %
  (it probes only once, at the end), else None;
* ``recipe``: on CUDA, ``benchmarks/simclr.py``'s ``time_to_accuracy`` result (``curve`` of ``{epoch,
  train_seconds, linear_probe}``, ``train_seconds_total``, ``time_to_target_seconds``,
  ``epochs_to_target``) plus ``wall_seconds``; else a string saying why it was skipped.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import io
import json
import os
import platform
import re
import shutil
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from utils.notebook_cells import cell_metadata, cell_source, grade_id, read_notebook  # noqa: E402
from utils.paths import build_dir  # noqa: E402

NOTEBOOK = REPO / "solutions" / "ex01" / "taskA_simclr.ipynb"
ACCURACY_TARGET = 0.85


def _labelled_cells(executed: dict) -> list[dict]:
    """Every code cell's label and papermill duration, in notebook order."""
    rows, heading = [], None
    for index, cell in enumerate(executed["cells"]):
        source = cell_source(cell).strip()
        if cell.get("cell_type") == "markdown":
            titles = [line.lstrip("#").strip() for line in source.splitlines() if line.startswith("#")]
            heading = titles[0] if titles else heading
            continue
        if cell.get("cell_type") != "code":
            continue
        first_line = source.splitlines()[0][:80] if source else ""
        seconds = (cell_metadata(cell).get("papermill") or {}).get("duration")
        rows.append({"index": index, "label": grade_id(cell) or (f"{heading}: {first_line}" if heading else first_line),
                     "seconds": float(seconds) if seconds is not None else None})
    return rows


class _Tee(io.TextIOBase):
    """Writes to ``stream`` and keeps a copy (a cell's printed output)."""

    def __init__(self, stream):
        self.stream, self.parts = stream, []

    def write(self, text):
        self.parts.append(text)
        return self.stream.write(text)

    def flush(self):
        self.stream.flush()


def _runnable(source: str) -> str:
    """A code cell's source as plain Python: IPython's ``%`` and ``!`` lines become ``pass``."""
    return "\n".join(re.sub(r"^(\s*)[%!].*$", r"\1pass", line) for line in source.split("\n"))


def execute_in_process(src: Path, dst: Path, preset: str, log=None) -> None:
    """Run the code cells of ``src`` in this process, in one namespace, as papermill runs them in a kernel
    (``PRESET = preset`` after the cell tagged ``parameters``), and write ``dst`` after every cell: each
    code cell with ``metadata.papermill.duration`` (seconds) and its printed output. A failing cell's
    exception propagates after ``dst`` is written. ``log`` (a text stream) gets one line per cell."""
    import matplotlib

    matplotlib.use("Agg")
    from utils.run_notebooks import PLAIN_PROGRESS_STARTUP

    exec(PLAIN_PROGRESS_STARTUP, {})   # plain text bars, as in utils.run_notebooks's headless kernels
    os.environ.setdefault("TQDM_MININTERVAL", "5")
    nb = read_notebook(src)
    namespace = {"__name__": "__main__"}
    dst.parent.mkdir(parents=True, exist_ok=True)
    cwd = os.getcwd()
    os.chdir(src.parent)
    try:
        for index, cell in enumerate(nb["cells"]):
            if cell.get("cell_type") != "code":
                continue
            tee, start, failure = _Tee(sys.stdout), time.perf_counter(), None
            try:
                with contextlib.redirect_stdout(tee):
                    exec(compile(_runnable(cell_source(cell)), f"<cell {index}>", "exec"), namespace)
                    if "parameters" in (cell_metadata(cell).get("tags") or []):
                        namespace["PRESET"] = preset
            except BaseException as error:  # noqa: BLE001 - recorded in the notebook, then raised
                failure = error
            seconds = time.perf_counter() - start
            cell.setdefault("metadata", {})["papermill"] = {"duration": seconds}
            cell["outputs"] = [{"output_type": "stream", "name": "stdout", "text": "".join(tee.parts)}]
            if failure is not None:
                cell["outputs"].append({"output_type": "error", "ename": type(failure).__name__,
                                        "evalue": str(failure), "traceback": []})
            dst.write_text(json.dumps(nb, indent=1) + "\n", encoding="utf-8")
            if log is not None:
                print(f"[cell {index}] {grade_id(cell) or cell_source(cell).strip()[:50]!r}: {seconds:.1f} s"
                      + (f" FAILED: {failure!r}" if failure is not None else ""), file=log, flush=True)
            if failure is not None:
                raise failure
    finally:
        os.chdir(cwd)


def _executor(name: str) -> str:
    if name != "auto":
        return name
    try:
        import papermill  # noqa: F401
    except ImportError:
        return "inprocess"
    return "papermill"


def run_notebook(preset: str, cifar: str | None, run_dir: Path, timeout: int | None = None,
                 executor: str = "auto") -> dict:
    """Execute the solution notebook in ``preset`` with its build folder in ``run_dir`` (emptied first)."""
    from utils.run_notebooks import execute_notebook

    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    env = {"LAS_BUILD_DIR": str(run_dir), "LAS_PRESET": preset}
    if cifar:
        env["CIFAR10_DIR"] = str(Path(cifar).resolve())
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    executed = run_dir / "taskA_simclr.ipynb"
    start = time.perf_counter()
    try:
        if _executor(executor) == "inprocess":
            execute_in_process(NOTEBOOK, executed, preset, log=sys.__stdout__)
        else:
            execute_notebook(NOTEBOOK, executed, preset, timeout=timeout)
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    wall = time.perf_counter() - start
    cells = _labelled_cells(read_notebook(executed))
    results = json.loads((run_dir / "cache" / "simclr" / f"results-{preset}.json").read_text())
    config = results.get("config") or {}
    epochs, batch = config.get("epochs"), config.get("batch_size")
    n_train = config.get("n_train")
    train_seconds = results["simclr_train_seconds"]
    images = epochs * (n_train // batch) * batch if epochs and batch and n_train else None
    probe = results["linear_probe"]
    timed = [c for c in cells if c["seconds"] is not None]
    return {
        "notebook": str(executed), "wall_seconds": wall, "cells": cells,
        "cells_seconds_total": sum(c["seconds"] for c in timed),
        "slowest_cells": [c["label"] for c in sorted(timed, key=lambda c: -c["seconds"])[:5]],
        "config": config, "data": results.get("data"),
        "simclr": {"train_seconds": train_seconds, "epochs": epochs, "images": images,
                   "images_per_second": images / train_seconds if images and train_seconds else None},
        "linear_probe": probe, "knn": results.get("knn"),
        "knn_during_training": results.get("knn_during_training"),
        "time_to_85": train_seconds if probe.get("SimCLR", 0.0) >= ACCURACY_TARGET else None,
    }


def run_recipe(cifar: str) -> dict:
    """``benchmarks/simclr.py --gpu-preset``'s recipe, timed on this GPU."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    import simclr as bench

    from grader.checks.taskA_simclr import solution_namespace
    from utils.data import load_cifar10

    torch.backends.cudnn.benchmark = True
    train = load_cifar10("train", root=cifar, download=False)
    test = load_cifar10("test", root=cifar, download=False)
    start = time.perf_counter()
    result = bench.time_to_accuracy(solution_namespace(), train.images, train.labels, test.images, test.labels,
                                    torch.device("cuda"), target=ACCURACY_TARGET)
    return {**result, "wall_seconds": time.perf_counter() - start}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cifar", default=os.environ.get("CIFAR10_DIR"), help="folder holding cifar-10-batches-py")
    parser.add_argument("--preset", choices=("gpu", "cpu", "smoke"),
                        default="gpu" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--out", default=None, help="JSON file (default build/bench/taskA_demo-<preset>.json)")
    parser.add_argument("--no-recipe", action="store_true", help="skip the benchmark's gpu recipe")
    parser.add_argument("--timeout", type=int, default=None, help="seconds per cell (default: none; papermill only)")
    parser.add_argument("--executor", choices=("auto", "papermill", "inprocess"), default="auto",
                        help="a Jupyter kernel through papermill, or this process (default: papermill if installed)")
    args = parser.parse_args(argv)
    if args.preset != "smoke" and not args.cifar:
        parser.error(f"the {args.preset} preset runs on CIFAR-10: pass --cifar DIR (or set $CIFAR10_DIR)")
    out = Path(args.out) if args.out else build_dir() / "bench" / f"taskA_demo-{args.preset}.json"
    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else None
    report = {
        "benchmark": "taskA_demo", "preset": args.preset,
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "torch": torch.__version__, "python": platform.python_version(), "device": gpu or "cpu", "gpu": gpu,
        "cpu_count": os.cpu_count(), "threads": torch.get_num_threads(), "load_average_at_start": os.getloadavg(),
    }
    print(f"executing {NOTEBOOK.name} in the {args.preset} preset on {report['device']} ...", flush=True)
    run_dir = build_dir() / "bench" / f"taskA-demo-{args.preset}-run"
    try:
        report.update(run_notebook(args.preset, args.cifar, run_dir, timeout=args.timeout, executor=args.executor))
    except Exception as error:  # noqa: BLE001 - the cells that ran are still worth keeping
        partial = run_dir / "taskA_simclr.ipynb"
        report.update({"error": repr(error), "notebook": str(partial),
                       "cells": _labelled_cells(read_notebook(partial)) if partial.is_file() else []})
        _write(out, report)
        print(f"the notebook failed: {error!r}; wrote the cells so far to {out}", file=sys.stderr)
        return 1
    probe = report["linear_probe"]
    print(f"notebook: {report['wall_seconds']:.0f} s in all; SimCLR training {report['simclr']['train_seconds']:.0f} s "
          f"({report['simclr']['images_per_second'] or float('nan'):,.0f} images/s); linear probe SimCLR "
          f"{100 * probe['SimCLR']:.1f} %, random init {100 * probe['random init']:.1f} %; slowest cells: "
          f"{', '.join(report['slowest_cells'][:3])}")
    if args.no_recipe:
        report["recipe"] = "skipped (--no-recipe)"
    elif args.preset == "smoke" or gpu is None:
        report["recipe"] = f"skipped: the gpu recipe needs CUDA and CIFAR-10 ({args.preset} preset, {report['device']})"
    else:
        print("timing the gpu recipe of benchmarks/simclr.py (--gpu-preset) ...", flush=True)
        report["recipe"] = run_recipe(args.cifar)
        print(f"recipe: time to {100 * ACCURACY_TARGET:.0f} % = {report['recipe']['time_to_target_seconds']} s "
              "of training")
    _write(out, report)
    print(f"wrote {out}")
    return 0


def _write(out: Path, report: dict) -> None:
    report["load_average_at_end"] = os.getloadavg()
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2, default=str) + "\n", encoding="utf-8")


if __name__ == "__main__":
    sys.exit(main())
