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
