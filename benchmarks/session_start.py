"""What one student's grading session pays before it grades anything: the CPU of its library imports.

Every student gets a fresh sandboxed process (grader/sandbox.py session_prefix), which imports the
libraries of its notebooks once (grader/session.py session_imports). This measures that CPU, inside the
real sandbox, for a Task-1 session and for a session of all five notebooks, twice each way: with this
machine's matplotlib font list bound in (what the grader does) and without it (the baseline, same run,
alternating, so the machine's speed changes hit both alike). It is the most a session that started from
an already-imported process (a fork server) could save per student.

    python benchmarks/session_start.py              # 5 repeats: about a minute on 2 cores
    python benchmarks/session_start.py --repeats 10

Prints the median CPU-seconds per case and writes build/bench/session_start.json. Needs bubblewrap.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from grader import sandbox  # noqa: E402
from grader.judge import harness_env  # noqa: E402
from grader.session import session_imports  # noqa: E402
from utils.paths import build_dir  # noqa: E402

SESSIONS = {"task1": ["task1_infonce"],
            "all five": ["task1_infonce", "task2_pseudo_likelihood", "taskA_simclr", "taskB_pythia_scaling",
                         "bonus_masked_pretraining_bayes"]}
#: Runs in the sandbox: the session's imports; prints this process's CPU (user + system) so far, and the
#: part of it that the matplotlib imports took (where the font list is read, or the fonts scanned).
IMPORTS = ("import resource, time\nplot = 0.0\nfor name in {names!r}:\n    start = time.process_time()\n"
           "    __import__(name)\n    plot += time.process_time() - start if name.startswith('matplotlib') else 0.0\n"
           "usage = resource.getrusage(resource.RUSAGE_SELF)\nprint(usage.ru_utime + usage.ru_stime, plot)")


def session_cpu(names: list[str], workdir: Path, fonts: bool) -> tuple[float, float]:
    """(CPU-seconds of one sandboxed process that imports ``names``, the matplotlib imports' part of them),
    with or without the font list bound."""
    found = sandbox.matplotlib_font_list
    sandbox.matplotlib_font_list = found if fonts else (lambda: None)   # the baseline: the sandbox as it was
    try:
        prefix = sandbox.session_prefix("bwrap", workdir, harness_env(1))
    finally:
        sandbox.matplotlib_font_list = found
    out = subprocess.run([*prefix, sys.executable, "-c", IMPORTS.format(names=names)], capture_output=True,
                         text=True, timeout=300)
    if out.returncode != 0:
        raise SystemExit(f"the sandboxed process failed:\n{out.stderr[-2000:]}")
    total, plot = out.stdout.split()[-2:]
    return float(total), float(plot)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    if not sandbox.protections()["bwrap"]:
        print("needs bubblewrap (apt-get install bubblewrap): the session's start is measured in its sandbox")
        return 1
    print(f"one sandboxed session's imports, {args.repeats} times per case "
          f"({len(SESSIONS) * 2 * args.repeats} processes, about 4-9 s each)")
    results = {}
    with tempfile.TemporaryDirectory(prefix="session-start-") as tmp:
        for label, stems in SESSIONS.items():
            names = session_imports(stems)
            runs = {"font list bound": [], "no font list": []}
            for _ in range(args.repeats):
                for way in runs:
                    runs[way].append(session_cpu(names, Path(tmp), fonts=way == "font list bound"))
            results[label] = {way: {"median_cpu_s": round(statistics.median(t for t, _ in v), 3),
                                    "median_matplotlib_cpu_s": round(statistics.median(m for _, m in v), 3),
                                    "runs": [[round(t, 3), round(m, 3)] for t, m in v]} for way, v in runs.items()}
            line = "; ".join(f"{way}: {r['median_cpu_s']:.2f} (matplotlib {r['median_matplotlib_cpu_s']:.2f})"
                             for way, r in results[label].items())
            print(f"{label:9s} ({len(names)} modules), median CPU-s {line}")
    out = build_dir() / "bench" / "session_start.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"machine": platform.platform(), "repeats": args.repeats, "sessions": results}, indent=1))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
