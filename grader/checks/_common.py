"""Shared assertions for the hidden tests: type, shape, dtype and value checks that a student's
object cannot fake (an ``__eq__`` that always returns True, a patched ``torch.allclose``).

Values are compared through plain Python floats computed from ``.tolist()`` of a detached float64
copy, so no comparison function the student could monkeypatch decides the outcome.
"""

from __future__ import annotations

import math

import torch

# Captured at import time. The grading kernel (grader/kernel.py) imports this module before the
# first student cell runs, so these are the originals even if a student later replaces
# torch.Tensor.tolist, builtins.abs or math.isfinite.
_TENSOR_TYPE = torch.Tensor
_TENSOR_EQ = torch.Tensor.__eq__
_isinstance = isinstance
_type = type
_float = float
_abs = abs
_len = len
_zip = zip
_enumerate = enumerate
_tuple = tuple
_isfinite = math.isfinite
_as_tensor = torch.as_tensor
_float64 = torch.float64
_detach = torch.Tensor.detach
_to = torch.Tensor.to
_reshape = torch.Tensor.reshape
_tolist = torch.Tensor.tolist
_shape = torch.Tensor.shape      # the C-level descriptors: a subclass's property cannot fake them
_dtype = torch.Tensor.dtype
_AssertionError = AssertionError


def as_float_list(x) -> list:
    """Flatten a tensor into a list of Python floats (via a float64 CPU copy)."""
    if not _isinstance(x, _TENSOR_TYPE):  # Python numbers and arrays: straight to float64, never via float32
        x = _as_tensor(x, dtype=_float64)
    return [_float(v) for v in _tolist(_reshape(_to(_detach(x), "cpu", _float64), -1))]


def assert_tensor(x, *, shape=None, dtype=None, name: str = "result") -> None:
    """Assert that ``x`` is a real ``torch.Tensor`` (not a look-alike) with the given shape and dtype."""
    if _type(x) is not _TENSOR_TYPE and not _isinstance(x, _TENSOR_TYPE):
        raise _AssertionError(f"{name} must be a torch.Tensor, got {_type(x).__name__}")
    if _type(x).__eq__ is not _TENSOR_EQ:
        raise _AssertionError(f"{name} is a Tensor subclass with its own __eq__; return a plain tensor")
    got_shape = _tuple(_shape.__get__(x))
    if shape is not None and got_shape != _tuple(shape):
        raise _AssertionError(f"{name} has shape {got_shape}, expected {_tuple(shape)}")
    got_dtype = _dtype.__get__(x)
    if dtype is not None and got_dtype is not dtype:
        raise _AssertionError(f"{name} has dtype {got_dtype}, expected {dtype}")


def assert_close(actual, expected, *, rtol: float = 1e-5, atol: float = 1e-6, name: str = "result") -> None:
    """Elementwise |actual - expected| <= atol + rtol |expected|, in plain Python floats."""
    a, e = as_float_list(actual), as_float_list(expected)
    if _len(a) != _len(e):
        raise _AssertionError(f"{name}: {_len(a)} values, expected {_len(e)}")
    for i, (x, y) in _enumerate(_zip(a, e)):
        if not (_isfinite(x) or x == y) or not _abs(x - y) <= atol + rtol * _abs(y):
            raise _AssertionError(f"{name}: value {i} is {x!r}, expected {y!r} (rtol={rtol}, atol={atol})")


def assert_raises(exc_types, fn, *args, what: str = "invalid input", **kwargs) -> None:
    """Assert that ``fn(*args, **kwargs)`` raises one of ``exc_types`` (a clear error, not a crash)."""
    try:
        fn(*args, **kwargs)
    except exc_types:
        return
    except NotImplementedError:
        raise
    except Exception as exc:  # noqa: BLE001 - reported to the student
        raise AssertionError(f"{what}: expected {exc_types}, got {exc.__class__.__name__}: {exc}") from None
    raise AssertionError(f"{what}: expected an error ({exc_types}), but the call returned normally")


# =============================================================================== judge comparators
# The judge (grader/judge.py) calls ``check(got, ref)`` with the student's decoded evidence and the
# solution's, both rebuilt by grader/evidence.py in the grader's own process (plain tensors, floats,
# lists, Raised records). A check raises AssertionError with a message for the student that names
# what is wrong without showing the hidden inputs or the expected values.
from grader.evidence import Opaque, Raised, TooLarge  # noqa: E402


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
