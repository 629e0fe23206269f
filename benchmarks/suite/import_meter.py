"""How much CPU the processes of a run (the test suite, a batch) spend importing heavy libraries at their start.

Installs a hook into this checkout's environment (a ``.pth`` file in .venv's site-packages, so that every
process started from that interpreter runs it, whatever environment variables it was given) that logs,
per process, the CPU of each first import of a heavy library (torch, nbgrader, transformers, ...). Run
what you want to measure in between, then report and remove the hook:

    python benchmarks/suite/import_meter.py on
    ./pack.sh test                                   # or anything else that starts processes
    python benchmarks/suite/import_meter.py report         # writes build/bench/import_meter.json
    python benchmarks/suite/import_meter.py off            # always: the hook slows every process a little

Processes in the grader's sandbox cannot write the log (their build/ is a tmpfs of their own): a student
session's imports are measured by benchmarks/session_start.py instead. Nested imports (numpy inside torch)
count once, in the library that pulled them in.
"""

from __future__ import annotations

import argparse
import collections
import json
import site
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from utils.paths import build_dir  # noqa: E402

LIBRARIES = ("torch", "torchvision", "transformers", "nbgrader", "nbconvert", "nbclient", "jupyter_server", "ipykernel",
             "papermill", "pandas", "matplotlib", "IPython", "numpy", "scipy", "sqlalchemy", "kornia", "datasets")
HOOK = '''import os, sys
if os.path.exists({log!r}):
    import resource, time
    from importlib.machinery import PathFinder
    _seen, _depth = set(), [0]
    def _cpu():
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return usage.ru_utime + usage.ru_stime
    class _Meter:
        def find_spec(self, name, path=None, target=None):
            if name not in {libraries!r} or name in _seen or path is not None:
                return None
            _seen.add(name)
            spec = PathFinder.find_spec(name, sys.path)
            if spec is None or spec.loader is None:
                return None
            real = spec.loader
            class Loader:
                def create_module(self, spec):
                    return real.create_module(spec)
                def exec_module(self, module):
                    cpu, _depth[0] = _cpu(), _depth[0] + 1
                    try:
                        real.exec_module(module)
                    finally:
                        _depth[0] -= 1
                        try:
                            with open({log!r}, "a") as f:
                                f.write(f"{{os.getpid()}}\\t{{name}}\\t{{_depth[0]}}\\t{{_cpu() - cpu:.3f}}\\t"
                                        f"{{' '.join(sys.argv[:2])[:120]}}\\n")
                        except OSError:
                            pass
                def __getattr__(self, attr):
                    return getattr(real, attr)
            spec.loader = Loader()
            return spec
    sys.meta_path.insert(0, _Meter())
'''


def _paths() -> tuple[Path, Path, Path]:
    packages = Path(site.getsitepackages()[0])
    return packages / "_las_import_meter.py", packages / "zz_las_import_meter.pth", build_dir() / "bench" / "import_meter.log"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("action", choices=("on", "off", "report"))
    args = parser.parse_args(argv)
    module, pth, log = _paths()
    if args.action == "on":
        if sys.prefix == sys.base_prefix:
            print("run this with the pack's environment (.venv/bin/python): the hook goes into its site-packages")
            return 1
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text("")
        module.write_text(HOOK.format(log=str(log), libraries=set(LIBRARIES)))
        pth.write_text("import _las_import_meter\n")
        print(f"metering heavy imports of every process of {sys.prefix} into {log}; `off` when done")
        return 0
    if args.action == "off":
        for path in (pth, module):
            path.unlink(missing_ok=True)
        print("hook removed")
        return 0
    if not log.exists():
        print(f"no log at {log}: run `on`, then what you want to measure")
        return 1
    cpu, count, processes = collections.Counter(), collections.Counter(), set()
    for line in log.read_text().splitlines():
        pid, name, depth, seconds, _command = (line.split("\t") + [""] * 5)[:5]
        if depth == "0":
            cpu[name] += float(seconds)
            count[name] += 1
            processes.add(pid)
    total = sum(cpu.values())
    print(f"{len(processes)} processes spent {total:.0f} CPU-seconds in their first imports of heavy libraries")
    for name, seconds in cpu.most_common():
        print(f"  {name:15s} {seconds:7.0f} CPU-s in {count[name]:4d} processes ({seconds / count[name]:.2f} each)")
    out = log.with_suffix(".json")
    out.write_text(json.dumps({"processes": len(processes), "cpu_s": round(total, 1),
                               "by_library": {n: {"cpu_s": round(s, 1), "processes": count[n]} for n, s in cpu.items()}},
                              indent=1))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
