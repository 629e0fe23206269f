"""Where the test suite's time goes: each test's wall and CPU seconds, per file (the CI-time budget).

    PYTHONPATH=benchmarks/suite PYTEST_ADDOPTS="-p suite_cpu" SUITE_CPU=build/bench/suite_cpu.jsonl ./pack.sh test
    python benchmarks/suite/suite_cpu.py build/bench/suite_cpu.jsonl [--top 30]

As a pytest plugin (``-p suite_cpu``, also inside pytest-xdist workers) it appends one JSON line per test
phase (setup, call, teardown) to ``$SUITE_CPU``: the test's id, its wall seconds, and the CPU seconds of the
pytest process itself and of the child processes it waited for (the grader's command lines, nbgrader,
kernels and their own children; work a daemon does for a test, such as a Slurm job's, is not counted).
Run as a script, it prints per file the wall seconds, the CPU seconds and their ratio (how many cores the file
kept busy), then the most expensive test phases, and writes the same figures to the JSON file beside the log
(``suite_cpu.json``): ``files`` (file -> wall, cpu, children), ``phases`` (the top ones), ``wall`` and ``cpu``
(totals). Two cores finish the suite no sooner than its CPU seconds over two.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import time
from collections import defaultdict
from pathlib import Path

import pytest


def _cpu() -> tuple[float, float]:
    me, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime, children.ru_utime + children.ru_stime


def _record(item, when: str, started: float, before: tuple[float, float]) -> None:
    me, children = _cpu()
    line = {"id": item.nodeid, "when": when, "wall": time.monotonic() - started, "self": me - before[0],
            "children": children - before[1], "pid": os.getpid()}
    with open(os.environ.get("SUITE_CPU", "suite_cpu.jsonl"), "a", encoding="utf-8") as f:
        f.write(json.dumps(line) + "\n")


def _timed(when: str):
    @pytest.hookimpl(hookwrapper=True)
    def hook(item):
        started, before = time.monotonic(), _cpu()
        yield
        _record(item, when, started, before)
    return hook


pytest_runtest_setup = _timed("setup")
pytest_runtest_call = _timed("call")
pytest_runtest_teardown = _timed("teardown")


def summarise(lines: list[dict], top: int = 30) -> dict:
    """The log's lines -> {"files": {file: {wall, cpu, children}}, "phases": [...], "wall", "cpu"}."""
    files: dict[str, dict[str, float]] = defaultdict(lambda: {"wall": 0.0, "cpu": 0.0, "children": 0.0})
    for line in lines:
        entry = files[line["id"].split("::")[0]]
        entry["wall"] += line["wall"]
        entry["cpu"] += line["self"] + line["children"]
        entry["children"] += line["children"]
    phases = sorted(({"id": line["id"], "when": line["when"], "wall": round(line["wall"], 1),
                      "cpu": round(line["self"] + line["children"], 1)} for line in lines), key=lambda p: -p["cpu"])
    ranked = sorted(files.items(), key=lambda kv: -kv[1]["cpu"])
    return {"files": {f: {k: round(v, 1) for k, v in e.items()} for f, e in ranked},
            "phases": phases[:top], "wall": round(sum(e["wall"] for e in files.values()), 1),
            "cpu": round(sum(e["cpu"] for e in files.values()), 1)}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("log", type=Path, help="the JSON lines the plugin wrote ($SUITE_CPU)")
    parser.add_argument("--top", type=int, default=30, help="test phases to list (default 30)")
    args = parser.parse_args(argv)
    if not args.log.is_file():
        parser.error(f"{args.log} does not exist: run the tests with the plugin first (see the docstring)")
    report = summarise([json.loads(x) for x in args.log.read_text(encoding="utf-8").splitlines() if x.strip()],
                       args.top)
    print(f"{report['wall']:.0f} s of test time (summed over workers), {report['cpu']:.0f} CPU-seconds")
    print(f"{'file':46s} {'wall s':>8s} {'CPU s':>8s} {'cores':>6s}")
    for name, e in report["files"].items():
        print(f"{name:46s} {e['wall']:8.0f} {e['cpu']:8.0f} {e['cpu'] / max(e['wall'], 1e-9):6.2f}")
    print(f"\nthe {args.top} test phases with the most CPU:")
    for p in report["phases"]:
        print(f"{p['cpu']:8.1f} CPU-s {p['wall']:8.1f} s  {p['when']:8s} {p['id']}")
    out = args.log.with_suffix(".json")
    out.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
