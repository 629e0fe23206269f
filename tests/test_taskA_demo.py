"""benchmarks/taskA_demo.py in the smoke preset on the CPU: the Task A solution notebook executed as a
lecturer runs it (synthetic stand-in data, no CIFAR-10, no ../shared), and the JSON fields its
docstring promises (a minute or two)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("executor", ["papermill", "inprocess"])
def test_smoke_demo_writes_every_field(tmp_path, executor):
    out = tmp_path / "demo.json"
    env = {**os.environ, "LAS_BUILD_DIR": str(tmp_path / "build"), "LAS_DEVICE": "cpu"}
    env.pop("CIFAR10_DIR", None)
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "taskA_demo.py"), "--preset", "smoke",
                           "--executor", executor, "--out", str(out)], cwd=REPO, env=env, capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads(out.read_text())
    for key in ("benchmark", "preset", "date", "torch", "python", "device", "gpu", "cpu_count", "threads",
                "load_average_at_start", "load_average_at_end", "notebook", "wall_seconds", "cells",
                "cells_seconds_total", "slowest_cells", "config", "data", "simclr", "linear_probe", "knn",
                "knn_during_training", "time_to_85", "recipe"):
        assert key in report, key
    assert report["preset"] == "smoke" and report["device"] == "cpu" and report["gpu"] is None
    assert report["recipe"].startswith("skipped"), report["recipe"]
    cells = report["cells"]
    assert len(cells) > 20 and all(c["seconds"] is not None and c["seconds"] >= 0 for c in cells)
    assert {"setup", "simclr_train_step", "augment_batch"} & {c["label"] for c in cells}, [c["label"] for c in cells]
    assert 0 < report["cells_seconds_total"] <= report["wall_seconds"]
    simclr = report["simclr"]
    assert simclr["train_seconds"] > 0 and simclr["images_per_second"] > 0
    assert simclr["epochs"] == report["config"]["epochs"]
    for table in ("linear_probe", "knn"):
        assert set(report[table]) >= {"SimCLR", "random init"}, report[table]
        assert all(0 <= v <= 1 for v in report[table].values())
    assert report["time_to_85"] is None or report["time_to_85"] == simclr["train_seconds"]
    assert Path(report["notebook"]).is_file()


def _demo_module():
    sys.path.insert(0, str(REPO / "benchmarks"))
    import taskA_demo

    return taskA_demo


def _notebook(*sources, tags=None):
    cells = [{"cell_type": "markdown", "metadata": {}, "source": "# Title"}]
    for index, source in enumerate(sources):
        meta = {"tags": tags} if tags and index == 0 else {}
        cells.append({"cell_type": "code", "metadata": meta, "source": source, "outputs": [], "execution_count": None})
    return {"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}


def test_in_process_executor_times_cells_keeps_output_and_injects_the_preset(tmp_path):
    demo = _demo_module()
    src, dst = tmp_path / "nb.ipynb", tmp_path / "out" / "nb.ipynb"
    src.write_text(json.dumps(_notebook('PRESET = "auto"', "%matplotlib inline\nprint('preset', PRESET)",
                                        "import time\ntime.sleep(0.2)", tags=["parameters"])))
    demo.execute_in_process(src, dst, "smoke")
    cells = [c for c in json.loads(dst.read_text())["cells"] if c["cell_type"] == "code"]
    assert "preset smoke" in cells[1]["outputs"][0]["text"]
    assert cells[2]["metadata"]["papermill"]["duration"] >= 0.2
    assert all(c["metadata"]["papermill"]["duration"] >= 0 for c in cells)


def test_in_process_executor_writes_the_cells_so_far_when_one_fails(tmp_path):
    demo = _demo_module()
    src, dst = tmp_path / "nb.ipynb", tmp_path / "nb-run.ipynb"
    src.write_text(json.dumps(_notebook("x = 1", "raise RuntimeError('cell two broke')", "y = 2")))
    with pytest.raises(RuntimeError, match="cell two broke"):
        demo.execute_in_process(src, dst, "smoke")
    cells = [c for c in json.loads(dst.read_text())["cells"] if c["cell_type"] == "code"]
    assert cells[1]["outputs"][-1]["ename"] == "RuntimeError" and "papermill" in cells[1]["metadata"]
    assert "papermill" not in cells[2]["metadata"]
