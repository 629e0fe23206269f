"""Evidence: what a student's function returned or raised, in a safe, size-capped JSON form.

The probe harness (grader/probe.py) encodes values inside the sandbox; the judge (grader/judge.py)
decodes them in the grader's own process. Nothing is ever unpickled or evaluated: tensors and
arrays travel as dtype + shape + base64 of their raw little-endian bytes and are rebuilt by the
judge as fresh tensors, so no object the student created reaches the judge.

Encoded forms (one JSON object each, tagged by its single key):

    {"none": 0} {"bool": true} {"int": "123"} {"float": "0.1"} {"str": "..."}
    {"tensor": {"dtype": "float32", "shape": [2, 3], "data": "<b64>", "requires_grad": false,
                "cls": "Tensor"}}
    {"ndarray": {...same fields...}}   {"list": [...]}   {"tuple": [...]}   {"dict": [[k, v], ...]}
    {"raised": {"type": "ValueError", "mro": ["ValueError", "Exception", ...], "message": "..."}}
    {"object": {"type": "module.Class", "repr": "..."}}   {"toolarge": {"what": "..."}}

This module imports only the standard library at import time: it encodes the tensors and arrays of a
torch and numpy already loaded, and imports them only to decode, so the judge can decode without a
student's environment.
"""

from __future__ import annotations

import base64
import builtins
import math
import sys
from dataclasses import dataclass

MAX_CASE_BYTES = 24 * 1024 ** 2     # one case's encoded evidence
MAX_DEPTH = 12                       # nesting of lists/dicts
MAX_ITEMS = 10_000                   # entries of one list/dict
MAX_STR = 2_000                      # characters kept of a string, message or repr

_DTYPES = ("float64", "float32", "float16", "bfloat16", "int64", "int32", "int16", "int8", "uint8", "bool",
           "complex64", "complex128")


class EvidenceError(ValueError):
    """Malformed evidence: the judge scores the case as failed."""


@dataclass(frozen=True)
class Raised:
    """The call raised ``type`` (with its class hierarchy ``mro``, names only)."""

    type: str
    classes: tuple   # the names of its class hierarchy (not "mro": every class has a .mro method)
    message: str

    def is_a(self, *names: str) -> bool:
        return any(n in self.classes for n in names)

    def __str__(self) -> str:
        return f"{self.type}: {self.message}" if self.message else self.type


@dataclass(frozen=True)
class Opaque:
    """A value the codec does not carry (a module, a function, a custom object)."""

    type: str
    repr: str


@dataclass(frozen=True)
class TooLarge:
    what: str


# --------------------------------------------------------------------------- encoding (sandbox side)
class _Budget:
    def __init__(self, limit: int):
        self.left = limit

    def spend(self, n: int) -> bool:
        self.left -= n
        return self.left >= 0


def _clip(text: str) -> str:
    return text if len(text) <= MAX_STR else text[:MAX_STR] + f"... [{len(text) - MAX_STR} more characters]"


def _array_record(tag: str, arr, dtype_name: str, shape, requires_grad: bool, cls: str, budget: _Budget) -> dict:
    """``{tag: record}`` of an array's little-endian bytes, or a toolarge record once ``budget`` is spent."""
    arr = sys.modules["numpy"].ascontiguousarray(arr)
    if arr.dtype.byteorder == ">":
        arr = arr.byteswap().view(arr.dtype.newbyteorder("<"))
    raw = arr.tobytes()
    if not budget.spend(len(raw) * 4 // 3 + 200):
        return {"toolarge": {"what": f"{cls} of shape {list(shape)} ({len(raw)} bytes)"}}
    return {tag: {"dtype": dtype_name, "shape": [int(s) for s in shape], "data": base64.b64encode(raw).decode("ascii"),
                  "requires_grad": bool(requires_grad), "cls": cls}}


def _encode_tensor(x, budget: _Budget) -> dict:
    torch = sys.modules["torch"]
    dtype_name = str(x.dtype).replace("torch.", "")
    if dtype_name not in _DTYPES:
        return {"object": {"type": f"torch.Tensor[{dtype_name}]", "repr": ""}}
    if x.numel() * x.element_size() > MAX_CASE_BYTES:
        return {"toolarge": {"what": f"tensor of shape {list(x.shape)}"}}
    y = torch.Tensor.detach(x)
    if y.device.type != "cpu":
        y = y.cpu()
    y = torch.Tensor.contiguous(torch.Tensor.as_subclass(y, torch.Tensor))
    arr = y.view(torch.int16).numpy() if dtype_name == "bfloat16" else y.numpy()   # numpy has no bfloat16: its bits
    return _array_record("tensor", arr, dtype_name, tuple(y.shape), x.requires_grad, type(x).__name__, budget)


def encode(value, budget: int = MAX_CASE_BYTES, _depth: int = 0, _b: _Budget | None = None):
    """Encode ``value`` (the result of a probe) as JSON-able data; never raises for odd values."""
    b = _b or _Budget(budget)
    if _depth > MAX_DEPTH:
        return {"toolarge": {"what": "nesting deeper than the grader reads"}}
    try:
        if value is None:
            return {"none": 0}
        if isinstance(value, Raised):
            return {"raised": {"type": value.type, "mro": list(value.classes), "message": _clip(value.message)}}
        if type(value) is bool:
            return {"bool": value}
        if type(value) is int:
            return {"int": str(value)} if abs(value) < 10 ** 300 else {"toolarge": {"what": "an int"}}
        if type(value) is float:
            return {"float": repr(value)}
        if type(value) is str:
            b.spend(len(value))
            return {"str": _clip(value)}
        # a tensor or an array can only come from a library already loaded: nothing is imported here
        torch, np = sys.modules.get("torch"), sys.modules.get("numpy")
        if torch is not None and isinstance(value, torch.Tensor):
            return _encode_tensor(value, b)
        if np is not None and isinstance(value, np.ndarray):
            name = str(value.dtype)
            if name not in _DTYPES or value.dtype.hasobject:
                return {"object": {"type": f"numpy.ndarray[{name}]", "repr": ""}}
            if value.nbytes > MAX_CASE_BYTES:
                return {"toolarge": {"what": f"array of shape {list(value.shape)}"}}
            return _array_record("ndarray", value, name, value.shape, False, "ndarray", b)
        if np is not None and isinstance(value, np.generic) and str(value.dtype) in _DTYPES:
            return _array_record("ndarray", np.asarray(value), str(value.dtype), (), False, "numpy-scalar", b)
        if isinstance(value, (list, tuple)):
            items = list(value)[:MAX_ITEMS + 1]
            if len(items) > MAX_ITEMS:
                return {"toolarge": {"what": f"a {type(value).__name__} of more than {MAX_ITEMS} items"}}
            key = "tuple" if isinstance(value, tuple) else "list"
            return {key: [encode(v, _depth=_depth + 1, _b=b) for v in items]}
        if isinstance(value, dict):
            pairs = list(value.items())[:MAX_ITEMS + 1]
            if len(pairs) > MAX_ITEMS:
                return {"toolarge": {"what": f"a dict of more than {MAX_ITEMS} items"}}
            return {"dict": [[encode(k, _depth=_depth + 1, _b=b), encode(v, _depth=_depth + 1, _b=b)]
                             for k, v in pairs]}
        if isinstance(value, (int, float)):  # subclasses (numpy bools, IntEnum, ...): their numeric value
            return encode(float(value) if isinstance(value, float) else int(value), _depth=_depth + 1, _b=b)
        cls = type(value)
        try:
            text = repr(value)
        except Exception:  # noqa: BLE001 - a repr that raises is just not shown
            text = ""
        return {"object": {"type": f"{getattr(cls, '__module__', '?')}.{getattr(cls, '__qualname__', '?')}",
                           "repr": _clip(str(text))}}
    except Exception as exc:  # noqa: BLE001 - a value that breaks the codec is evidence of nothing
        return {"object": {"type": "unencodable", "repr": _clip(f"{exc.__class__.__name__}: {exc}")}}


# The built-in exception classes, taken when this module is imported (before any student code
# runs): whether a raised exception "is a ValueError" is decided by identity with these objects,
# never by a class's name, so a student's class named ValueError (or one whose metaclass rewrites
# its mro) is not one.
_BUILTIN_EXCEPTIONS = {name: cls for name, cls in vars(builtins).items()
                       if isinstance(cls, type) and issubclass(cls, BaseException)}


def raised(exc: BaseException) -> Raised:
    """The Raised record of an exception: its class's name, the built-in exception classes it really
    is an instance of (``isinstance`` against the real class objects), and its message."""
    try:
        own = str(type(exc).__name__)
    except Exception:  # noqa: BLE001
        own = "?"
    try:
        real = [name for name, cls in _BUILTIN_EXCEPTIONS.items() if isinstance(exc, cls) and
                cls in type.__getattribute__(type(exc), "__mro__")]
    except Exception:  # noqa: BLE001
        real = []
    mro = tuple(dict.fromkeys((own, *real)))
    try:
        message = str(exc)
    except Exception:  # noqa: BLE001
        message = ""
    if _BUILTIN_EXCEPTIONS.get(own) is not type(exc):   # not Python's own class of that name
        shown = f"{own} (a class of your own, not Python's {own})" if own in _BUILTIN_EXCEPTIONS else own
        mro = (shown, *mro[1:])
    return Raised(type=mro[0], classes=mro, message=_clip(message))


# --------------------------------------------------------------------------- decoding (judge side)
def _decode_array(rec: dict, as_tensor: bool):
    import numpy as np

    if not isinstance(rec, dict):
        raise EvidenceError("array record is not an object")
    dtype, shape, data = rec.get("dtype"), rec.get("shape"), rec.get("data")
    if dtype not in _DTYPES or not isinstance(shape, list) or not isinstance(data, str):
        raise EvidenceError("array record has a bad dtype, shape or data")
    if len(shape) > 16 or not all(type(s) is int and 0 <= s for s in shape):
        raise EvidenceError("array record has a bad shape")
    raw = base64.b64decode(data.encode("ascii"), validate=True)
    np_dtype = np.dtype("<i2") if dtype == "bfloat16" else np.dtype(dtype).newbyteorder("<")
    count = math.prod(shape)
    if count * np_dtype.itemsize != len(raw):
        raise EvidenceError(f"array record holds {len(raw)} bytes for shape {shape} and dtype {dtype}")
    arr = np.frombuffer(raw, dtype=np_dtype).reshape(shape).astype(np_dtype.newbyteorder("="))
    if not as_tensor:
        return arr
    import torch

    t = torch.from_numpy(arr.copy())
    if dtype == "bfloat16":
        t = t.view(torch.bfloat16)
    if rec.get("requires_grad") is True and t.is_floating_point():
        t = t.requires_grad_(True)
    return t


# tag -> (whether its body is well formed, the value it stands for)
_SCALARS = {"none": (lambda body: True, lambda body: None),
            "bool": (lambda body: type(body) is bool, bool),
            "int": (lambda body: isinstance(body, str) and len(body) <= 310, int),
            "float": (lambda body: isinstance(body, str) and len(body) <= 40, float),
            "str": (lambda body: isinstance(body, str), str)}


def decode(obj, _depth: int = 0):
    """Rebuild a value from its encoded form; raise :class:`EvidenceError` on anything malformed."""
    if _depth > MAX_DEPTH + 2:
        raise EvidenceError("evidence nested too deeply")
    if not isinstance(obj, dict) or len(obj) != 1:
        raise EvidenceError("an evidence value must be an object with one key")
    (tag, body), = obj.items()
    if tag in _SCALARS:
        well_formed, rebuild = _SCALARS[tag]
        if not well_formed(body):
            raise EvidenceError(f"bad {tag}")
        return rebuild(body)
    if tag == "tensor":
        return _decode_array(body, as_tensor=True)
    if tag == "ndarray":
        return _decode_array(body, as_tensor=False)
    if tag in ("list", "tuple", "dict"):
        if not isinstance(body, list) or len(body) > MAX_ITEMS:
            raise EvidenceError(f"bad {tag}")
        if tag != "dict":
            items = [decode(v, _depth + 1) for v in body]
            return items if tag == "list" else tuple(items)
        out = {}
        for pair in body:
            if not isinstance(pair, list) or len(pair) != 2:
                raise EvidenceError("bad dict entry")
            key = decode(pair[0], _depth + 1)
            try:
                out[key] = decode(pair[1], _depth + 1)
            except TypeError:
                raise EvidenceError("unhashable dict key") from None
        return out
    if tag == "raised":
        if not isinstance(body, dict) or not isinstance(body.get("type"), str) or not isinstance(body.get("mro"), list):
            raise EvidenceError("bad raised record")
        return Raised(type=body["type"][:200], classes=tuple(str(m)[:200] for m in body["mro"][:64]),
                      message=str(body.get("message", ""))[:MAX_STR + 100])
    if tag == "object":
        if not isinstance(body, dict):
            raise EvidenceError("bad object record")
        return Opaque(type=str(body.get("type", "?"))[:300], repr=str(body.get("repr", ""))[:MAX_STR + 100])
    if tag == "toolarge":
        return TooLarge(what=str((body or {}).get("what", "?"))[:300] if isinstance(body, dict) else "?")
    raise EvidenceError(f"unknown evidence tag {tag[:40]!r}")
