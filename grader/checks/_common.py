"""Shared assertions for the hidden tests: type, shape, dtype and value checks that a student's
object cannot fake (an ``__eq__`` that always returns True, a patched ``torch.allclose``).

Values are compared through plain Python floats computed from ``.tolist()`` of a detached float64
copy, so no comparison function the student could monkeypatch decides the outcome.
"""

from __future__ import annotations

import math

import torch

# Captured at import time, before any student cell can replace them.
_TENSOR_TYPE = torch.Tensor
_isinstance = isinstance
_float = float


def as_float_list(x) -> list:
    """Flatten a tensor into a list of Python floats (via a float64 CPU copy)."""
    if not _isinstance(x, _TENSOR_TYPE):  # Python numbers and arrays: straight to float64, never via float32
        x = torch.as_tensor(x, dtype=torch.float64)
    return [_float(v) for v in x.detach().to("cpu", torch.float64).reshape(-1).tolist()]


def assert_tensor(x, *, shape=None, dtype=None, name: str = "result") -> None:
    """Assert that ``x`` is a real ``torch.Tensor`` (not a look-alike) with the given shape and dtype."""
    if type(x) is not _TENSOR_TYPE and not _isinstance(x, _TENSOR_TYPE):
        raise AssertionError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if type(x).__eq__ is not _TENSOR_TYPE.__eq__:
        raise AssertionError(f"{name} is a Tensor subclass with its own __eq__; return a plain tensor")
    if shape is not None and tuple(x.shape) != tuple(shape):
        raise AssertionError(f"{name} has shape {tuple(x.shape)}, expected {tuple(shape)}")
    if dtype is not None and x.dtype != dtype:
        raise AssertionError(f"{name} has dtype {x.dtype}, expected {dtype}")


def assert_close(actual, expected, *, rtol: float = 1e-5, atol: float = 1e-6, name: str = "result") -> None:
    """Elementwise |actual - expected| <= atol + rtol |expected|, in plain Python floats."""
    a, e = as_float_list(actual), as_float_list(expected)
    if len(a) != len(e):
        raise AssertionError(f"{name}: {len(a)} values, expected {len(e)}")
    for i, (x, y) in enumerate(zip(a, e)):
        if not (math.isfinite(x) or x == y) or not abs(x - y) <= atol + rtol * abs(y):
            raise AssertionError(f"{name}: value {i} is {x!r}, expected {y!r} (rtol={rtol}, atol={atol})")


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
