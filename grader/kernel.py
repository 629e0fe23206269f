"""The grading kernel's entry point: ``python -m grader.kernel -f CONNECTION_FILE``.

It runs inside the sandbox (see grader/sandbox.py) before any student code and

* caps the kernel's memory, file size and core dumps with ``setrlimit`` (works everywhere),
* makes the kernel die with its parent (a killed grading job never leaves a kernel behind),
* starts its own session, so an interrupt reaches only the kernel and its children,
* imports ``grader.checks`` and snapshots the comparison and conversion functions a student
  could monkeypatch, so the hidden checks compare with pristine references and
  :func:`integrity_report` (run in a cell the grader appends) can say what was replaced,
* then hands over to ipykernel.

Limits come from ``$LAS_KERNEL_LIMITS`` (JSON: ``{"mem_bytes": ..., "fsize_bytes": ...}``).
"""

from __future__ import annotations

import json
import os
import sys

INTEGRITY_MARKER = "LAS-INTEGRITY:"

# name -> object, captured before the first student cell runs
_PRISTINE: dict[str, object] = {}


def _apply_limits() -> None:
    import resource

    limits = json.loads(os.environ.get("LAS_KERNEL_LIMITS", "{}"))
    mem = limits.get("mem_bytes")
    if mem:
        # RLIMIT_DATA counts heap and private anonymous mappings (every tensor and array) but not
        # the shared libraries torch maps, so it caps real memory without breaking imports.
        resource.setrlimit(resource.RLIMIT_DATA, (mem, mem))
        # Address space as a backstop, with room for the libraries' mappings.
        address = mem + 8 * 1024 ** 3
        resource.setrlimit(resource.RLIMIT_AS, (address, address))
    fsize = limits.get("fsize_bytes")
    if fsize:
        resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _die_with_parent() -> None:
    """PR_SET_PDEATHSIG: SIGKILL this kernel when the process that launched it dies."""
    try:
        import ctypes
        import signal

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(signal.SIGKILL), 0, 0, 0)  # 1 = PR_SET_PDEATHSIG
    except Exception:  # noqa: BLE001 - best effort (non-Linux)
        pass


def _watched() -> dict[str, tuple[object, str]]:
    """The objects whose replacement would let a student fake a comparison: (owner, attribute)."""
    import builtins
    import math

    import numpy as np
    import torch

    watched: dict[str, tuple[object, str]] = {}
    for name in ("abs", "isinstance", "type", "float", "int", "len", "zip", "range", "sum", "max",
                 "min", "all", "any", "repr", "round", "AssertionError", "Exception", "__import__"):
        watched[f"builtins.{name}"] = (builtins, name)
    for name in ("isclose", "isfinite", "log", "exp", "log1p", "sqrt", "fabs"):
        watched[f"math.{name}"] = (math, name)
    for name in ("allclose", "isclose", "equal", "eq", "as_tensor", "tensor", "is_tensor", "isfinite",
                 "randn", "randint", "Generator", "Tensor", "float64", "float32"):
        watched[f"torch.{name}"] = (torch, name)
    for name in ("__eq__", "__ne__", "__bool__", "__float__", "__len__", "tolist", "item", "detach",
                 "to", "double", "float", "reshape", "numpy", "all", "shape", "dtype", "dim", "size"):
        watched[f"torch.Tensor.{name}"] = (torch.Tensor, name)
    for name in ("allclose", "isclose", "array_equal", "asarray", "array", "float64", "ndarray"):
        watched[f"numpy.{name}"] = (np, name)
    for name in ("assert_allclose", "assert_array_equal", "assert_equal"):
        watched[f"numpy.testing.{name}"] = (np.testing, name)
    watched["torch.testing.assert_close"] = (torch.testing, "assert_close")
    for mod_name, module in list(sys.modules.items()):
        if mod_name.startswith("grader.checks") and module is not None:
            for attr in list(vars(module)):
                if not attr.startswith("__"):
                    watched[f"{mod_name}.{attr}"] = (module, attr)
    return watched


def _snapshot() -> None:
    """Import the reference checks (``$LAS_CHECK_MODULE``, the notebook's own; all of them when
    unset) and record the watched objects as they are before any student code runs."""
    import importlib
    import pkgutil

    import grader.checks
    import grader.checks._common  # noqa: F401  (captures its references at import)

    wanted = os.environ.get("LAS_CHECK_MODULE")
    names = [wanted] if wanted else [f"grader.checks.{i.name}" for i in pkgutil.iter_modules(grader.checks.__path__)]
    for name in names:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - a missing or broken check module fails its own hidden test later
            pass
    for key, (owner, attr) in _watched().items():
        try:
            _PRISTINE[key] = vars(owner)[attr] if hasattr(owner, "__dict__") and attr in vars(owner) \
                else getattr(owner, attr)
        except Exception:  # noqa: BLE001
            pass
    _PRISTINE["sys.modules"] = {k: v for k, v in sys.modules.items() if k.startswith("grader")}


def integrity_report() -> list[str]:
    """Names of watched functions and grader modules that were replaced since the kernel started.

    Prints one line ``LAS-INTEGRITY: [...]`` that the grader reads back from the executed notebook.
    """
    changed = []
    try:
        current = _watched()
        for key, (owner, attr) in current.items():
            if key not in _PRISTINE:
                continue
            try:
                now = vars(owner)[attr] if hasattr(owner, "__dict__") and attr in vars(owner) \
                    else getattr(owner, attr)
            except Exception:  # noqa: BLE001
                now = None
            if now is not _PRISTINE[key]:
                changed.append(key)
        for key in _PRISTINE:
            if key != "sys.modules" and key not in current:
                changed.append(key)
        for name, module in _PRISTINE.get("sys.modules", {}).items():
            if sys.modules.get(name) is not module:
                changed.append(f"sys.modules[{name!r}]")
    except Exception as exc:  # noqa: BLE001 - a broken environment is itself a finding
        changed.append(f"integrity check failed: {exc.__class__.__name__}")
    print(INTEGRITY_MARKER, json.dumps(sorted(set(changed))))
    return changed


def main() -> None:
    _die_with_parent()
    try:
        os.setsid()
    except OSError:
        pass
    _apply_limits()
    try:
        # Snapshot into the importable module, not __main__: the integrity cell imports grader.kernel.
        import grader.kernel

        grader.kernel._snapshot()
    except Exception as exc:  # noqa: BLE001 - grading goes on; the report says the snapshot failed
        print(f"grader.kernel: could not snapshot the environment: {exc}", file=sys.stderr)
    from ipykernel import kernelapp

    kernelapp.launch_new_instance(argv=sys.argv[1:])


if __name__ == "__main__":
    main()
