"""The judge's comparison vocabulary: the one module every ``grader/checks/<stem>.py`` builds its
comparators from.

The judge (grader/judge.py) calls ``case.check(got, ref)`` with the student's decoded evidence and
the solution's, both rebuilt by grader/evidence.py in the grader's own process (plain tensors,
floats, NumPy arrays, lists, dicts, Raised/TooLarge/Opaque records): no object the student made
reaches a comparison. A comparator returns None when the value is right and raises AssertionError
with a message for the student that names what is wrong without showing the hidden inputs or the
expected values.

Naming, here and in every checks module (tests/test_judge_units.py holds every Case to it):

- ``as_<kind>(value, where, ...)``: a coercer. Returns the value as ``<kind>`` or raises
  AssertionError naming ``where``.
- ``check_<what>(got, ref)``: a comparator, used directly as a ``Case.check``.
- ``expect_<what>(...)``: a factory. Returns a comparator (a function named ``check``) for the
  given tolerances or names, e.g. ``expect_same(rtol=1e-5, atol=1e-6)``, ``expect_raises("ValueError")``.
- UPPER_CASE: a threshold every checks module shares.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from grader.evidence import Opaque, Raised, TooLarge

# =============================================================================== thresholds
#: How many standard errors a Monte-Carlo check allows (rates, frequencies, means of random draws):
#: an honest answer fails one such check with probability about 6e-7, while the mutants it must kill
#: are tens of standard errors off.
SIGMAS = 5.0

#: The range a reported standard error may take, as a multiple of the true one (sd / sqrt(n)): wide
#: enough for the scatter of a sample standard deviation over the probes' mask counts, narrow enough
#: to catch a missing sqrt(n) or a sum over the wrong axis (factors of 2 and more).
SE_RATIO_RANGE = (0.7, 1.4)


# =============================================================================== messages
def describe(x) -> str:
    """What a returned value was, for a message ("returned a tensor of shape (2,) and dtype ...")."""
    if isinstance(x, Raised):
        return f"raised {x}"
    if isinstance(x, TooLarge):
        return f"returned a value too large to check ({x.what})"
    if isinstance(x, Opaque):
        return f"returned a {x.type}"
    if isinstance(x, torch.Tensor):
        return f"returned a tensor of shape {tuple(x.shape)} and dtype {x.dtype}"
    return f"returned a {type(x).__name__}"


# =============================================================================== coercers
def as_returned(out, where: str):
    """``out`` itself when it is a returned tensor, tuple, list or number (not an exception, not
    an unreadable object)."""
    if isinstance(out, Raised) or not isinstance(out, (torch.Tensor, tuple, list, int, float)):
        raise AssertionError(f"{where}: it {describe(out)}")
    return out


def as_tensor(x, where: str = "result", shape=None, dtype=None, finite: bool = False) -> torch.Tensor:
    """``x`` when it is a torch.Tensor of ``shape`` and ``dtype`` (when given) and, with ``finite``,
    holds only finite values (floating-point tensors)."""
    if not isinstance(x, torch.Tensor):
        raise AssertionError(f"{where}: expected a torch.Tensor, but it {describe(x)}")
    if shape is not None and tuple(x.shape) != tuple(shape):
        raise AssertionError(f"{where}: shape {tuple(x.shape)}, expected {tuple(shape)}")
    if dtype is not None and x.dtype != dtype:
        raise AssertionError(f"{where}: dtype {x.dtype}, expected {dtype}")
    if finite and x.is_floating_point() and not bool(torch.isfinite(x).all()):
        raise AssertionError(f"{where}: holds values that are not finite")
    return x


def as_tensor_like(got, ref: torch.Tensor, where: str = "result") -> torch.Tensor:
    """``got`` when it is a finite tensor of the reference's shape and dtype."""
    return as_tensor(got, where, tuple(ref.shape), ref.dtype, finite=True)


def as_scalar_float(v, where: str, dtype=torch.float64) -> float:
    """The value of a 0-d tensor of ``dtype`` holding a finite number, as a Python float."""
    if not isinstance(v, torch.Tensor):
        raise AssertionError(f"{where}: expected a 0-d torch.Tensor, but it {describe(v)}")
    if tuple(v.shape) != ():
        raise AssertionError(f"{where}: shape {tuple(v.shape)}, expected a 0-d tensor")
    if v.dtype != dtype:
        raise AssertionError(f"{where}: dtype {v.dtype}, expected {dtype}")
    f = float(v)
    if not math.isfinite(f):
        raise AssertionError(f"{where}: value {f} (not finite)")
    return f


def as_detached_scalar(x, where: str, dtype=torch.float32) -> torch.Tensor:
    """``x`` when it is a finite 0-d tensor of ``dtype`` without an autograd graph (a returned loss)."""
    t = as_tensor(x, where, (), dtype, finite=True)
    if t.requires_grad:
        raise AssertionError(f"{where}: the loss still carries its graph; return it detached")
    return t


def as_real(x, where: str) -> float:
    """A real number from a Python int or float or a NumPy scalar (never a tensor or a bool)."""
    if isinstance(x, (int, float)) and not isinstance(x, bool):
        return float(x)
    if isinstance(x, np.ndarray) and x.shape == () and x.dtype.kind in "fiu":
        return float(x)
    if isinstance(x, torch.Tensor):
        raise AssertionError(f"{where}: expected a Python number, not a tensor (use .item())")
    raise AssertionError(f"{where}: expected a Python number, but it {describe(x)}")


def as_dict(got, keys=(), where: str = "the call") -> dict:
    """``got`` when the call returned a dict holding at least ``keys``."""
    if isinstance(got, Raised):
        raise AssertionError(f"{where} raised {got}")
    if not isinstance(got, dict):
        raise AssertionError(f"{where}: expected a dict, but it {describe(got)}")
    missing = sorted(set(keys) - set(got))
    if missing:
        raise AssertionError(f"the dict lacks the keys {missing}")
    return got


def as_items(got, ref) -> list:
    """The results of a probe that made several calls (a list, tuple or dict like ``ref``), in
    ``ref``'s order."""
    if not isinstance(got, (list, tuple, dict)):   # a Raised record too: "it raised ..."
        raise AssertionError(f"it {describe(got)}")
    if isinstance(ref, dict):
        if not isinstance(got, dict) or set(got) != set(ref):
            raise AssertionError("wrong result")
        return [got[k] for k in ref]
    if len(got) != len(ref):
        raise AssertionError("wrong number of results")
    return list(got)


def as_numpy64(t: torch.Tensor) -> np.ndarray:
    """A float64 NumPy copy of a reference tensor (the grader's own values; never raises)."""
    return t.detach().double().numpy()


def _number_or_none(x):
    """A real number from a Python number, a one-element tensor or array, or None (for expect_same)."""
    if isinstance(x, (int, float)) and not isinstance(x, bool):
        return float(x)
    if isinstance(x, torch.Tensor) and x.numel() == 1 and not x.is_complex():
        return float(x.detach().double().reshape(-1)[0])
    if isinstance(x, np.ndarray) and x.size == 1 and x.dtype.kind in "fiu":
        return float(x.reshape(-1)[0])
    return None


# =============================================================================== statistics
def within_binomial(count: int, n: int, p: float, sigmas: float = SIGMAS) -> bool:
    """Whether ``count`` successes of ``n`` draws fit a success probability ``p`` (within ``sigmas``
    standard deviations, plus one for the discreteness of small counts)."""
    return abs(count - n * p) <= sigmas * math.sqrt(n * p * (1 - p)) + 1


GLOBAL_STATES = {"torch": "torch's global random state (a draw without generator=, or a torchvision Random* "
                          "transform, which draws from it even with p=1)",
                 "numpy": "NumPy's global random state (np.random)",
                 "random": "Python's global random state (the random module)"}


def global_states_moved(got, ref, check_result, names: dict | None = None) -> list[str]:
    """For a probe that returned ``{"result", "before", "after"}`` (grader.probes.with_global_state):
    check the call's result with ``check_result(result, reference_result)`` and return the global
    random states (torch, NumPy, Python; described by ``names``) the call changed."""
    if not isinstance(got, dict) or not {"result", "before", "after"} <= set(got):
        raise AssertionError(f"it {describe(got)}")
    check_result(got["result"], ref["result"])
    before, after = got["before"], got["after"]
    if not isinstance(before, dict) or not isinstance(after, dict):
        raise AssertionError("the global random states could not be read back")
    return [what for key, what in (names or GLOBAL_STATES).items()
            if before.get(key) is None or before.get(key) != after.get(key)]


# =============================================================================== factories
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
        raise AssertionError(f"{where}: {int(bad.sum())} of {a64.numel()} values are off (value {i} by at least "
                             f"{10 ** math.floor(math.log10(err[i] / max(a64[i].abs(), e64[i].abs()))):g}, relative)")


def expect_same(rtol: float = 1e-5, atol: float = 1e-6, dtype: bool = True, numbers: str = "strict"):
    """A comparator: the student's value matches the solution's: tensors in shape, dtype (when ``dtype``) and
    values; lists, tuples and dicts item by item; a raised exception must be of the same kind. ``numbers="any"``
    accepts any real number (float, int, numpy scalar, one-element tensor) where the solution returns a number or
    a 0-dim tensor, for functions whose text does not fix the type. An optional third argument: ``where``."""

    def check(got, ref, where: str = "result") -> None:
        if isinstance(ref, Raised):
            if not isinstance(got, Raised) or not got.is_a(ref.type):
                raise AssertionError(f"{where}: expected a {ref.type}, but it {describe(got)}")
            return
        if isinstance(got, (Raised, TooLarge, Opaque)):
            raise AssertionError(f"{where}: it {describe(got)}")
        if isinstance(ref, torch.Tensor) and not (numbers == "any" and ref.numel() == 1 and ref.dim() == 0):
            if not isinstance(got, torch.Tensor):
                raise AssertionError(f"{where}: expected a torch.Tensor, but it {describe(got)}")
            if tuple(got.shape) != tuple(ref.shape):
                raise AssertionError(f"{where}: shape {tuple(got.shape)}, expected {tuple(ref.shape)}")
            if dtype and got.dtype != ref.dtype:
                raise AssertionError(f"{where}: dtype {got.dtype}, expected {ref.dtype}")
            _values_close(got, ref, rtol, atol, where)
            return
        if isinstance(ref, (int, float, torch.Tensor)) and not isinstance(ref, bool):   # a number, or "any": 0-d
            g = _number_or_none(got)
            if g is None or (numbers == "strict" and isinstance(got, torch.Tensor) and got.dim() > 0):
                raise AssertionError(f"{where}: expected a number, but it {describe(got)}")
            e = ref if isinstance(ref, torch.Tensor) else torch.tensor(float(ref), dtype=torch.float64)
            _values_close(torch.tensor(g, dtype=torch.float64), e, rtol, atol, where)
            return
        if isinstance(ref, (list, tuple)):
            if not isinstance(got, (list, tuple)) or len(got) != len(ref):
                raise AssertionError(f"{where}: expected {len(ref)} results, but it {describe(got)}"
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


def expect_dtype_kept(rtol64: float = 1e-9):
    """A comparator for a dtype rule (``checks="dtype"``): every result (one call, or a list of calls) is a
    tensor of the solution's shape and dtype, and a float64 one holds its precision (within ``rtol64``). The
    values are the value cases' business, so a dtype slip costs this rule's share and nothing more."""
    values = expect_same(rtol=rtol64, atol=rtol64)

    def check(got, ref) -> None:
        pairs = list(zip(got, ref)) if isinstance(ref, list) and isinstance(got, list) else [(got, ref)]
        if isinstance(ref, list) and (not isinstance(got, list) or len(got) != len(ref)):
            raise AssertionError(f"expected {len(ref)} results, but it {describe(got)}")
        for i, (g, r) in enumerate(pairs):
            where = f"call {i + 1}" if len(pairs) > 1 else "the result"
            if isinstance(g, Raised):
                raise AssertionError(f"{where}: it {describe(g)}")
            as_tensor(g, where, tuple(r.shape), r.dtype)
            if r.dtype == torch.float64:
                values(g, r, f"{where} (float64 precision)")

    check.interface = "dtype"
    return check


def expect_raises(*names: str):
    """A comparator: the call raised one of ``names`` (a subclass counts: ``class MyError(ValueError)``
    is a ValueError). With a list of calls, every call must raise. The judge scores such a case only
    next to passing value cases (``check.expects_error``)."""

    def one(got, where: str) -> None:
        if not isinstance(got, Raised):
            raise AssertionError(f"{where}: expected a {' or '.join(names)}, but it {describe(got)}")
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


def expect_false(message: str):
    """A comparator: the probe returned exactly False (e.g. ``requires_grad``); otherwise ``message``."""

    def check(got, ref) -> None:
        if isinstance(got, Raised):
            raise AssertionError(f"it raised {got}")
        if got is not False:
            raise AssertionError(message)

    return check
