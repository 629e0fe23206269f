"""The judge's comparators, shared by every ``grader/checks/<stem>.py``.

The judge (grader/judge.py) calls ``check(got, ref)`` with the student's decoded evidence and the
solution's, both rebuilt by grader/evidence.py in the grader's own process (plain tensors, floats,
lists, Raised records): no object the student made reaches a comparison. A check raises
AssertionError with a message for the student that names what is wrong without showing the hidden
inputs or the expected values.
"""

from __future__ import annotations

import torch

from grader.evidence import Opaque, Raised, TooLarge


def _describe(x) -> str:
    if isinstance(x, Raised):
        return f"raised {x}"
    if isinstance(x, TooLarge):
        return f"returned a value too large to check ({x.what})"
    if isinstance(x, Opaque):
        return f"returned a {x.type}"
    if isinstance(x, torch.Tensor):
        return f"returned a tensor of shape {tuple(x.shape)} and dtype {x.dtype}"
    return f"returned a {type(x).__name__}"


def _numeric(x):
    """A real number from a Python number, a one-element tensor or array, or None."""
    import numpy as np

    if isinstance(x, bool):
        return None
    if isinstance(x, (int, float)):
        return float(x)
    if isinstance(x, torch.Tensor) and x.numel() == 1 and not x.is_complex():
        return float(x.detach().double().reshape(-1)[0])
    if isinstance(x, np.ndarray) and x.size == 1 and x.dtype.kind in "fiu":
        return float(x.reshape(-1)[0])
    return None


def _values_close(a: torch.Tensor, e: torch.Tensor, rtol: float, atol: float, where: str) -> None:
    a64, e64 = a.detach().double().reshape(-1), e.detach().double().reshape(-1)
    same_nan = torch.isnan(a64) & torch.isnan(e64)
    same_inf = torch.isinf(a64) & torch.isinf(e64) & (torch.sign(a64) == torch.sign(e64))
    with torch.no_grad():
        err = (a64 - e64).abs()
        bad = ~(same_nan | same_inf | (err <= atol + rtol * e64.abs()))
    if bool(bad.any()):
        i = int(bad.nonzero()[0])
        if not bool(torch.isfinite(a64[i])):
            raise AssertionError(f"{where}: value {i} is {float(a64[i])} (not finite)")
        raise AssertionError(f"{where}: {int(bad.sum())} of {a64.numel()} values are off (value {i} by "
                             f"{float(err[i]):.3g}; tolerance {atol:g} + {rtol:g}*|expected|)")


def same(rtol: float = 1e-5, atol: float = 1e-6, dtype: bool = True, numbers: str = "strict"):
    """The student's value matches the solution's: tensors in shape, dtype (when ``dtype``) and values;
    lists, tuples and dicts item by item; a raised exception must be of the same kind.
    ``numbers="any"`` accepts any real number (float, int, numpy scalar, one-element tensor) where the
    solution returns a number or a 0-dim tensor, for functions whose text does not fix the type."""

    def check(got, ref, where: str = "result") -> None:
        if isinstance(ref, Raised):
            if not isinstance(got, Raised) or not got.is_a(ref.type):
                raise AssertionError(f"{where}: expected a {ref.type}, but it {_describe(got)}")
            return
        if isinstance(got, (Raised, TooLarge, Opaque)):
            raise AssertionError(f"{where}: it {_describe(got)}")
        if isinstance(ref, torch.Tensor):
            if numbers == "any" and ref.numel() == 1 and ref.dim() == 0:
                g = _numeric(got)
                if g is None:
                    raise AssertionError(f"{where}: expected a number, but it {_describe(got)}")
                _values_close(torch.tensor(g, dtype=torch.float64), ref, rtol, atol, where)
                return
            if not isinstance(got, torch.Tensor):
                raise AssertionError(f"{where}: expected a torch.Tensor, but it {_describe(got)}")
            if tuple(got.shape) != tuple(ref.shape):
                raise AssertionError(f"{where}: shape {tuple(got.shape)}, expected {tuple(ref.shape)}")
            if dtype and got.dtype != ref.dtype:
                raise AssertionError(f"{where}: dtype {got.dtype}, expected {ref.dtype}")
            _values_close(got, ref, rtol, atol, where)
            return
        if isinstance(ref, (int, float)) and not isinstance(ref, bool):
            g = _numeric(got)
            if g is None or (numbers == "strict" and isinstance(got, torch.Tensor) and got.dim() > 0):
                raise AssertionError(f"{where}: expected a number, but it {_describe(got)}")
            _values_close(torch.tensor(g, dtype=torch.float64), torch.tensor(float(ref), dtype=torch.float64),
                          rtol, atol, where)
            return
        if isinstance(ref, (list, tuple)):
            if not isinstance(got, (list, tuple)) or len(got) != len(ref):
                raise AssertionError(f"{where}: expected {len(ref)} results, but it {_describe(got)}"
                                     + (f" of length {len(got)}" if isinstance(got, (list, tuple)) else ""))
            for i, (g, r) in enumerate(zip(got, ref)):
                check(g, r, f"{where} [{i + 1}]" if where != "result" else f"call {i + 1}")
            return
        if isinstance(ref, dict):
            if not isinstance(got, dict) or set(got) != set(ref):
                raise AssertionError(f"{where}: expected the keys {sorted(map(str, ref))}")
            for k in ref:
                check(got[k], ref[k], f"{where} [{k}]")
            return
        if got != ref:
            raise AssertionError(f"{where}: wrong value")

    return check


def raises(*names: str):
    """The call raised one of ``names`` (a subclass counts: ``class MyError(ValueError)`` is a ValueError).
    With a list of calls, every call must raise."""

    def one(got, where: str) -> None:
        if not isinstance(got, Raised):
            raise AssertionError(f"{where}: expected a {' or '.join(names)}, but it {_describe(got)}")
        if not got.is_a(*names):
            raise AssertionError(f"{where}: expected a {' or '.join(names)}, but it raised {got.type}")

    def check(got, ref) -> None:
        if isinstance(got, list) and isinstance(ref, list):
            for i, g in enumerate(got):
                one(g, f"call {i + 1}")
            if len(got) != len(ref):
                raise AssertionError("wrong number of results")
            return
        one(got, "the call")

    check.expects_error = True
    return check


def all_of(*checks):
    """Every check must pass (the first failure is reported)."""

    def check(got, ref) -> None:
        for c in checks:
            c(got, ref)

    return check


GLOBAL_STATES = {"torch": "torch's global random state (a draw without generator=, or a torchvision Random* "
                          "transform, which draws from it even with p=1)",
                 "numpy": "NumPy's global random state (np.random)",
                 "random": "Python's global random state (the random module)"}


def global_states_moved(got, ref, check_result, names: dict | None = None) -> list[str]:
    """For a probe that returned ``{"result", "before", "after"}`` (grader.probes.with_global_state):
    check the call's result with ``check_result(result, reference_result)`` and return the global
    random states (torch, NumPy, Python; described by ``names``) the call changed."""
    if not isinstance(got, dict) or not {"result", "before", "after"} <= set(got):
        raise AssertionError(f"it {_describe(got)}")
    check_result(got["result"], ref["result"])
    before, after = got["before"], got["after"]
    if not isinstance(before, dict) or not isinstance(after, dict):
        raise AssertionError("the global random states could not be read back")
    return [what for key, what in (names or GLOBAL_STATES).items()
            if before.get(key) is None or before.get(key) != after.get(key)]
