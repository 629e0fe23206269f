"""Static audit of a submitted notebook: lines a TA should look at before trusting its grade.

Nothing here runs the notebook. Each code cell is parsed with ``ast`` (IPython ``%``/``%%`` magics and
``!`` shell escapes are cut out first and reported themselves) and every node is checked once, so the
walk is linear in the size of the code. What is reported, with its cell and line:

* IPython and interpreter hooks: ``get_ipython``, ``events.register``, ``set_custom_exc``, the input and
  AST transformers, ``displayhook``, ``showtraceback``, ``InteractiveShell``, magics and shell escapes,
  ``sys.excepthook``, ``sys.settrace``, ``sys.setprofile``, ``sys.addaudithook``;
* import machinery: ``sys.modules``, ``importlib`` (``import_module`` only with a computed name),
  ``__import__``, the ``builtins`` module and ``__builtins__``;
* introspection and patching: ``__code__``, ``__globals__``, ``__closure__``, ``__subclasses__``,
  ``__mro__``, writes to ``__dict__``/``globals()``, assignment to ``__class__``, every ``setattr``,
  assignment to attributes of ``torch``/``numpy``/``math``/``F``/``nn``/``sys``/``os``/... (monkeypatching;
  ``torch.backends.*`` settings excepted), and comparison overrides (a class defining ``__eq__``,
  ``__bool__``, ``__float__``, ``__array__``, ``__torch_function__``, ``__instancecheck__``... or
  subclassing ``torch.Tensor``/``float``): the ways a result can lie about its value;
* anything naming the grader: the identifiers ``grader``/``nbgrader`` and strings holding "grader",
  "gradebook" or one of the grader's ``LAS_`` variables;
* escape hatches: ``ctypes``, ``cffi``, ``gc.get_objects``/``get_referrers``, frame inspection
  (``inspect.currentframe``, ``sys._getframe``, ``f_back``, ``f_globals``, ``tb_frame``, ``traceback``'s stack
  walks...), a scan of the environment (``os.environ.items()``...), ``faulthandler``, ``signal``,
  ``os._exit``/``kill``/``fork``/``system``, ``subprocess``, ``multiprocessing``, ``threading``,
  ``socket``, and writes that could forge the grader's records (``os.write``/``os.dup2`` on raw file
  descriptors, paths under ``/proc/`` or ``/dev/fd``);
* dynamic code: every ``eval``/``exec``/``compile``, ``pickle``/``marshal``/``dill`` loads, and
  ``base64``/``codecs``/``zlib`` decoding.

Cheap obfuscation is seen through: import aliases (``import sys as s; s.modules``, ``from os import
_exit as q``, ``m = sys``), ``getattr(x, "name")``/``setattr``/``x.__dict__["name"]`` with a constant
(or constant-folded: ``"get_" + "ipython"``, ``"".join([...])``, ``"..."[::-1]``) name, and any string
literal equal to a flagged identifier. A cell that does not parse is reported as "unparseable code" and
scanned line by line with regular expressions instead. Markdown is never audited.

The cost is about half a second per MB of code on a laptop core; outputs cost nothing. Past
``AUDIT_BUDGET_CHARS`` of code in one notebook the audit stops with an "oversized code" finding,
and a cell above ``AST_CELL_CHARS`` is only scanned as text (also reported as "oversized code").
Constant folding gives up on a string longer than ``FOLD_CHARS`` (before building it): nested
``"A".join([...]).join([...])`` would otherwise grow as the product of the list lengths, gigabytes
from a few kB of code. The grader runs the audit in a child process under a memory and a time cap
(``python -m grader.audit``, see :func:`main`; grader/audit_step.py ``audit_submission``).

A finding is a reason to look, not proof: ``setattr`` or ``threading`` have honest uses.
"""

from __future__ import annotations

import argparse
import ast
import bisect
import functools
import gc
import json
import re
import resource
import sys
from dataclasses import dataclass
from typing import Iterable, Iterator

from utils.notebook_cells import cell_source
from utils.notebook_cells import grade_id as cell_grade_id

__all__ = ["Finding", "audit_notebook", "audit_source", "summarise", "MAX_FINDINGS"]

MAX_FINDINGS = 2000  # findings collected per notebook, at most
CODE_CHARS = 120  # a finding's ``code`` is cut to this many characters
# Auditing costs about half a second per MB of code (parsing or scanning alike). Past this much code
# in a notebook the audit stops with one "oversized code" finding: a TA should look at such a notebook
# anyway (homework notebooks hold tens of kB of code; outputs do not count).
AUDIT_BUDGET_CHARS = 3_000_000
AST_CELL_CHARS = 500_000  # a larger cell is scanned as text only (and reported as oversized)
FOLD_CHARS = 10_000  # a constant-folded string longer than this is not built (no flagged name is that long)
_QUALNAME_DEPTH = 64


@dataclass(frozen=True)
class Finding:
    """One line worth a TA's look. ``cell`` is the cell's nbgrader grade_id, or ``"cell N"`` (N counts
    every cell from 1, markdown included); ``line`` is 1-based within the cell; ``code`` is that source
    line, stripped and cut to 120 characters."""

    cell: str
    line: int
    what: str
    code: str


# --------------------------------------------------------------------------------------- categories
IPYTHON = "IPython hook"
MAGIC = "IPython magic"
SHELL = "shell escape"
HOOK = "interpreter hook"
SYS_MODULES = "sys.modules"
IMPORTS = "import machinery"
BUILTINS = "builtins"
INTROSPECTION = "introspection"
DICT_WRITE = "__dict__ write"
CLASS_ASSIGN = "__class__ assignment"
SETATTR = "setattr"
MONKEYPATCH = "monkeypatch"
OVERRIDE = "comparison override"
GRADER = "grader reference"
NATIVE = "native code"
GC = "gc introspection"
FRAMES = "frame inspection"
SIGNAL = "signal handler"
PROCESS = "process control"
THREADING = "threading"
SOCKET = "socket"
DYNAMIC = "dynamic code"
DESERIALISE = "deserialisation"
ENCODED = "encoded payload"
RAW_FD = "raw file descriptor"
ENVIRON = "environment scan"
UNPARSEABLE = "unparseable code"
OVERSIZED = "oversized code"

# Identifiers flagged wherever they appear: a name, an attribute, an imported name, or a string literal
# equal to them (``getattr(ip, "set_custom_exc")``). None of them has an everyday meaning in homework.
IDENTIFIERS: dict[str, str] = {
    **dict.fromkeys((
        "get_ipython", "set_custom_exc", "input_transformers_cleanup", "input_transformers_post",
        "input_transformer_manager", "ast_transformers", "display_pub", "showtraceback",
        "showsyntaxerror", "InteractiveShell", "register_magic_function", "register_line_magic",
        "register_cell_magic", "register_line_cell_magic", "run_line_magic", "run_cell_magic",
    ), IPYTHON),
    **dict.fromkeys(("displayhook", "excepthook", "settrace", "setprofile", "addaudithook",
                     "breakpointhook", "unraisablehook"), HOOK),
    **dict.fromkeys(("__code__", "__globals__", "__closure__", "__subclasses__", "__mro__",
                     "__defaults__", "__kwdefaults__", "func_globals", "func_code"), INTROSPECTION),
    "__builtins__": BUILTINS,
    "__import__": IMPORTS,
    **dict.fromkeys(("_getframe", "_current_frames", "currentframe", "f_back", "f_globals", "f_locals",
                     "tb_frame", "gi_frame", "cr_frame", "ag_frame"), FRAMES),
    **dict.fromkeys(("get_objects", "get_referrers", "get_referents"), GC),
    **dict.fromkeys(("grader", "nbgrader"), GRADER),
}

# Methods through which an object decides what comparisons and conversions say about it.
OVERRIDE_DUNDERS = frozenset((
    "__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__", "__bool__", "__float__", "__int__",
    "__index__", "__complex__", "__round__", "__abs__", "__array__", "__array_ufunc__",
    "__array_function__", "__array_interface__", "__torch_function__", "__torch_dispatch__",
    "__instancecheck__", "__subclasscheck__",
))
# Builtin and library types whose subclasses can pass for a genuine result.
OVERRIDE_BASES = frozenset(("float", "int", "bool", "complex", "torch.Tensor", "torch.nn.Parameter",
                            "numpy.ndarray", "numpy.generic", "numpy.float64", "numpy.float32"))

# Names flagged as bare names only (``re.compile`` and ``model.eval()`` are attributes, not flagged).
NAMES: dict[str, str] = {"eval": DYNAMIC, "exec": DYNAMIC, "compile": DYNAMIC, "execfile": DYNAMIC,
                         "setattr": SETATTR, "delattr": SETATTR}

# Strings flagged when a literal equals them, besides IDENTIFIERS and OVERRIDE_DUNDERS: module names
# (``import_module("sub" + "process")``) and the few attribute names no honest string holds.
STRINGS: dict[str, str] = {
    **{k: v for k, v in IDENTIFIERS.items() if k not in ("grader", "nbgrader")},
    **dict.fromkeys(OVERRIDE_DUNDERS, OVERRIDE),
    "ctypes": NATIVE, "_ctypes": NATIVE, "cffi": NATIVE, "subprocess": PROCESS, "_posixsubprocess": PROCESS,
    "multiprocessing": PROCESS, "threading": THREADING, "_thread": THREADING, "socket": SOCKET,
    "builtins": BUILTINS, "importlib": IMPORTS, "marshal": DESERIALISE, "_exit": PROCESS,
    "__setattr__": SETATTR, "__delattr__": SETATTR, "setattr": SETATTR, "faulthandler": PROCESS,
}
# The grader's own environment variables; the ones a student may legitimately set are left out.
LAS_HONEST = frozenset(("LAS_PRESET", "LAS_DEVICE", "LAS_BUILD_DIR"))

# Dotted names (after resolving import aliases): the name or anything under it is flagged.
QUALIFIED: dict[str, str] = {
    "sys.modules": SYS_MODULES,
    "sys.meta_path": IMPORTS, "sys.path_hooks": IMPORTS, "sys.path_importer_cache": IMPORTS,
    "sys.monitoring": HOOK, "atexit.register": HOOK, "threading.settrace": HOOK,
    "builtins": BUILTINS, "__builtin__": BUILTINS, "__main__": IMPORTS,
    "importlib.reload": IMPORTS, "importlib.util": IMPORTS, "importlib.machinery": IMPORTS,
    "importlib.abc": IMPORTS, "importlib._bootstrap": IMPORTS, "importlib.invalidate_caches": IMPORTS,
    "imp": IMPORTS, "pkgutil": IMPORTS, "runpy": DYNAMIC, "code": DYNAMIC, "codeop": DYNAMIC,
    "IPython.core": IPYTHON, "IPython.terminal": IPYTHON, "IPython.get_ipython": IPYTHON,
    "ipykernel": IPYTHON,
    "grader": GRADER, "nbgrader": GRADER,
    "ctypes": NATIVE, "_ctypes": NATIVE, "cffi": NATIVE,
    "inspect.stack": FRAMES, "inspect.trace": FRAMES, "inspect.getouterframes": FRAMES,
    "inspect.getinnerframes": FRAMES, "inspect.getframeinfo": FRAMES, "inspect.getclosurevars": FRAMES,
    **dict.fromkeys((f"traceback.{name}" for name in (
        "extract_stack", "walk_stack", "format_stack", "print_stack", "StackSummary", "walk_tb")), FRAMES),
    "faulthandler": PROCESS,   # it can crash the process on purpose (a "kernel died" that hides a review)
    **dict.fromkeys(("os.environ.keys", "os.environ.items", "os.environ.values", "os.environ.copy",
                     "os.environb"), ENVIRON),   # a scan of the environment: looking for the grader
    "signal": SIGNAL,
    **dict.fromkeys((f"os.{name}" for name in (
        "_exit", "kill", "killpg", "fork", "forkpty", "system", "popen", "abort", "posix_spawn",
        "posix_spawnp", "setsid", "pidfd_open", "getppid", "getpgrp")), PROCESS),
    **dict.fromkeys(("os.write", "os.dup", "os.dup2", "os.fdopen", "os.openpty"), RAW_FD),
    "subprocess": PROCESS, "_posixsubprocess": PROCESS, "multiprocessing": PROCESS, "pty": PROCESS,
    "torch.multiprocessing": PROCESS, "concurrent.futures.ProcessPoolExecutor": PROCESS,
    "threading": THREADING, "_thread": THREADING, "socket": SOCKET, "socketserver": SOCKET,
    "pickle.load": DESERIALISE, "pickle.loads": DESERIALISE, "pickle.Unpickler": DESERIALISE,
    "marshal": DESERIALISE, "dill.load": DESERIALISE, "dill.loads": DESERIALISE,
    "cloudpickle.load": DESERIALISE, "cloudpickle.loads": DESERIALISE, "shelve": DESERIALISE,
    "codecs.decode": ENCODED, "codecs.getdecoder": ENCODED, "codecs.iterdecode": ENCODED,
    "codecs.lookup": ENCODED, "binascii.a2b_base64": ENCODED, "binascii.unhexlify": ENCODED,
    "binascii.a2b_hex": ENCODED, "zlib.decompress": ENCODED, "bz2.decompress": ENCODED,
    "lzma.decompress": ENCODED, "gzip.decompress": ENCODED, "bytes.fromhex": ENCODED,
    "types.CodeType": INTROSPECTION, "types.FunctionType": INTROSPECTION,
    "torch.overrides": OVERRIDE, "torch.library": OVERRIDE, "torch.utils._python_dispatch": OVERRIDE,
}
_MODULE_SYNONYMS = {"posix": "os", "nt": "os", "_pickle": "pickle", "cPickle": "pickle",
                    "_signal": "signal"}

# Assigning to an attribute rooted here is monkeypatching (``torch.allclose = lambda *a: True``).
MONKEY_ROOTS = frozenset(("torch", "np", "numpy", "math", "F", "nn", "builtins", "sys", "os", "scipy",
                          "sklearn"))
MONKEY_TOPS = frozenset(("torch", "numpy", "math", "builtins", "sys", "os", "scipy", "sklearn"))
MONKEY_ALLOWED = ("torch.backends.",)  # cudnn.benchmark, matmul.allow_tf32: settings, not patches

_DICT_MUTATORS = frozenset(("update", "setdefault", "pop", "popitem", "clear", "__setitem__",
                            "__delitem__", "__ior__"))
_NAMESPACE_CALLS = frozenset(("globals", "vars", "locals"))
_EVENT_METHODS = frozenset(("register", "unregister", "callbacks", "trigger"))
_STORE = (ast.Store, ast.Del)

# Cell magics whose body is Python (audited as such); any other cell magic's body is scanned as text.
_PYTHON_CELL_MAGICS = frozenset(("capture", "time", "timeit", "prun", "debug", "memit", "mprun"))
_SHELL_MAGICS = frozenset(("bash", "sh", "script", "system", "sx", "pip", "conda", "mamba", "run",
                           "load", "writefile", "file", "perl", "ruby", "python", "python3", "pypy"))
_HARMLESS_MAGICS = frozenset(("matplotlib",))
_MAGIC_LINE = re.compile(
    r"^[ \t]*(?:[A-Za-z_][\w.]*(?:[ \t]*,[ \t]*[A-Za-z_][\w.]*)*[ \t]*=[ \t]*)?([%!])(%?)[ \t]*(\w*)")
_MAYBE_MAGIC = re.compile(r"^[ \t]*[%!?]|\?[ \t]*$|=[ \t]*[%!]", re.MULTILINE)
_HELP_LINE = re.compile(r"^[ \t]*[%!]?[\w.]*\?{1,2}[ \t]*$|^[ \t]*\?{1,2}[\w.]+[ \t]*$")

# Text scan for cells that do not parse, magic lines and non-Python cell-magic bodies.
_TEXT_PATTERNS = [
    (IPYTHON, r"\b(?:get_ipython|set_custom_exc|input_transformers_cleanup|input_transformers_post"
              r"|input_transformer_manager|ast_transformers|display_pub|showtraceback|showsyntaxerror"
              r"|InteractiveShell|register_(?:line_|cell_|line_cell_)?magic(?:_function)?"
              r"|run_(?:line|cell)_magic)\b|\bevents\s*\.\s*register\b"),
    (HOOK, r"\b(?:displayhook|excepthook|settrace|setprofile|addaudithook)\b"),
    (SYS_MODULES, r"\bsys\s*\.\s*modules\b"),
    (IMPORTS, r"\bimportlib\b|\b__import__\b"),
    (BUILTINS, r"\b__builtins__\b|\bbuiltins\b"),
    (INTROSPECTION, r"\b__(?:code|globals|closure|subclasses|mro|defaults|kwdefaults)__\b"),
    (DICT_WRITE, r"\.__dict__\s*(?:\[[^\]\n]*\]\s*)?=(?!=)|\.__dict__\s*\.\s*(?:update|setdefault|pop|clear)\b"
                 r"|\b(?:globals|vars|locals)\(\s*\w*\s*\)\s*(?:\[[^\]\n]*\]\s*=(?!=)|\.\s*update\b)"),
    (CLASS_ASSIGN, r"\.__class__\s*=(?!=)"),
    (SETATTR, r"\b(?:setattr|delattr)\s*\(|__setattr__|__delattr__"),
    (MONKEYPATCH, r"^[ \t]*(?!torch\s*\.\s*backends\b)(?:torch|np|numpy|math|F|nn|builtins|sys|os|scipy|sklearn)"
                  r"(?:\s*\.\s*\w+)+\s*(?:[-+*/@%&|^]|//|\*\*|<<|>>)?=(?!=)"),
    (OVERRIDE, r"\bdef\s+__(?:eq|ne|lt|le|gt|ge|bool|float|int|index|complex|round|abs|array"
               r"|array_ufunc|array_function|torch_function|torch_dispatch|instancecheck"
               r"|subclasscheck)__\b"),
    (GRADER, r"(?i:grader|gradebook)|\bLAS_(?!PRESET\b|DEVICE\b|BUILD_DIR\b)\w+"),
    (NATIVE, r"\b(?:ctypes|cffi)\b"),
    (GC, r"\b(?:get_objects|get_referrers|get_referents)\b"),
    (FRAMES, r"\b(?:_getframe|_current_frames|currentframe|f_back|f_globals|f_locals|tb_frame"
             r"|gi_frame)\b|\binspect\s*\.\s*(?:stack|trace|getouterframes)\b"),
    (SIGNAL, r"\bsignal\s*\.\s*(?:signal|setitimer|alarm|pthread_kill|raise_signal|set_wakeup_fd|siginterrupt)\b"),
    (PROCESS, r"\bos\s*\.\s*(?:_exit|kill|killpg|fork|system|popen|exec\w*|spawn\w*)\b"
              r"|\b(?:subprocess|multiprocessing)\b"),
    (RAW_FD, r"\bos\s*\.\s*(?:write|dup2?|fdopen|openpty)\b|['\"]/(?:proc/|dev/fd|dev/std)"),
    (THREADING, r"\bthreading\b|\b_thread\b"),
    (SOCKET, r"\bsocket\b"),
    (DYNAMIC, r"(?<![\w.])(?:eval|exec|compile)\s*\("),
    (DESERIALISE, r"\b(?:pickle|marshal|dill|cloudpickle)\s*\.\s*loads?\b|\bmarshal\b"),
    (ENCODED, r"\b(?:base64\s*\.\s*\w*decode\w*|codecs\s*\.\s*decode|[ab]\d{2}decode)\b"),
]
# Literal pieces, one of which every match of the pattern holds: ``str.find`` (C speed) picks the
# candidate lines, and only those are matched. Anchors are searched in the lowercased text, except
# the monkeypatch roots (case matters there: "F" would match every "self").
_TEXT_ANCHORS: dict[str, tuple[str, ...]] = {
    IPYTHON: ("get_ipython", "set_custom_exc", "input_transformer", "ast_transformers", "display_pub",
              "showtraceback", "showsyntaxerror", "interactiveshell", "register_", "_magic", "events"),
    HOOK: ("hook", "settrace", "setprofile"),
    SYS_MODULES: ("modules",),
    IMPORTS: ("importlib", "__import__"),
    BUILTINS: ("builtins",),
    INTROSPECTION: ("__code__", "__globals__", "__closure__", "__subclasses__", "__mro__", "defaults__"),
    DICT_WRITE: ("__dict__", "globals", "vars", "locals"),
    CLASS_ASSIGN: ("__class__",),
    SETATTR: ("setattr", "delattr"),
    OVERRIDE: ("def",),
    GRADER: ("grader", "gradebook", "las_"),
    NATIVE: ("ctypes", "cffi"),
    GC: ("get_objects", "get_refer"),
    FRAMES: ("frame", "f_back", "f_globals", "f_locals", "inspect"),
    SIGNAL: ("signal",),
    PROCESS: ("os", "subprocess", "multiprocessing"),
    THREADING: ("thread",),
    RAW_FD: ("os", "/proc/", "/dev/"),
    SOCKET: ("socket",),
    DYNAMIC: ("eval", "exec", "compile"),
    DESERIALISE: ("pickle", "marshal", "dill"),
    ENCODED: ("decode",),
}
_EXACT_ANCHORS: dict[str, tuple[str, ...]] = {
    MONKEYPATCH: ("torch", "np", "numpy", "math", "F", "nn", "builtins", "sys", "os", "scipy", "sklearn"),
}
_TEXT_RULES = [(what, re.compile(pattern, re.MULTILINE), _TEXT_ANCHORS.get(what, ()), _EXACT_ANCHORS.get(what, ()))
               for what, pattern in _TEXT_PATTERNS]


# ----------------------------------------------------------------------------------------- helpers
def _source(cell: dict) -> str:
    return cell_source(cell).replace("\r\n", "\n").replace("\r", "\n")


def _label(cell: dict, index: int) -> str:
    return cell_grade_id(cell) or f"cell {index + 1}"


def _clip(text: str, limit: int = CODE_CHARS) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _check_string(value: str) -> str | None:
    """The category of a string literal, or None."""
    if len(value) <= 40:
        what = STRINGS.get(value)
        if what:
            return what
    lowered = value.lower()
    if "grader" in lowered or "gradebook" in lowered:
        return GRADER
    if value.startswith(("/proc/", "/dev/fd", "/dev/std")):
        return RAW_FD
    if "LAS_" in value:
        for match in re.finditer(r"LAS_\w+", value):
            if match.group() not in LAS_HONEST:
                return GRADER
    return None


def _fold(node: ast.AST, consumed: set[int] | None = None, depth: int = 0) -> str | None:
    """The value of a string expression built from literals (``"a" + "b"``, ``"".join(["a", "b"])``,
    ``"ba"[::-1]``, an f-string without fields), or None. Iterative: long ``+`` chains are fine."""
    if depth > 8:
        return None
    parts: list[str] = []
    size = 0  # the length of ``parts`` joined: past FOLD_CHARS the fold gives up before building more
    stack = [node]
    while stack:
        item = stack.pop()
        if size > FOLD_CHARS:
            return None
        if isinstance(item, ast.Constant):
            if isinstance(item.value, str):
                parts.append(item.value)
                size += len(item.value)
                continue
            if isinstance(item.value, bytes):
                parts.append(item.value.decode("latin-1"))
                size += len(item.value)
                continue
            return None
        if isinstance(item, ast.BinOp) and isinstance(item.op, ast.Add):
            if consumed is not None:
                consumed.add(id(item))
            stack.append(item.right)
            stack.append(item.left)
            continue
        if isinstance(item, ast.JoinedStr):
            if not all(isinstance(v, ast.Constant) and isinstance(v.value, str) for v in item.values):
                return None
            parts.append("".join(v.value for v in item.values))
            size += len(parts[-1])
            continue
        if (isinstance(item, ast.Subscript) and isinstance(item.slice, ast.Slice)
                and item.slice.lower is None and item.slice.upper is None
                and isinstance(item.slice.step, ast.UnaryOp) and isinstance(item.slice.step.op, ast.USub)
                and isinstance(item.slice.step.operand, ast.Constant) and item.slice.step.operand.value == 1):
            inner = _fold(item.value, None, depth + 1)
            if inner is None:
                return None
            parts.append(inner[::-1])
            size += len(inner)
            continue
        if (isinstance(item, ast.Call) and isinstance(item.func, ast.Attribute) and item.func.attr == "join"
                and len(item.args) == 1 and not item.keywords
                and isinstance(item.args[0], (ast.List, ast.Tuple))):
            sep = _fold(item.func.value, None, depth + 1)
            if sep is None:
                return None
            elements = []
            joined = size
            for element in item.args[0].elts:
                value = _fold(element, None, depth + 1)
                if value is None:
                    return None
                elements.append(value)
                joined += len(value) + len(sep)
                if joined > FOLD_CHARS:  # measured before joining: a long separator multiplies
                    return None
            parts.append(sep.join(elements))
            size += len(parts[-1])
            continue
        return None
    return "".join(parts) if size <= FOLD_CHARS else None


def _root_name(node: ast.AST) -> str | None:
    for _ in range(_QUALNAME_DEPTH):
        if isinstance(node, ast.Name):
            return node.id
        if isinstance(node, (ast.Attribute, ast.Subscript)):
            node = node.value
        elif isinstance(node, ast.Call):
            node = node.func
        else:
            return None
    return None


def _dotted(node: ast.AST) -> str | None:
    """``a.b.c`` as written (``np`` read as numpy), for names whose import the notebook does not show."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute) and len(parts) < _QUALNAME_DEPTH:
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append({"np": "numpy"}.get(node.id, node.id))
    return ".".join(reversed(parts))


def _normalise(qualname: str) -> str:
    head, _, rest = qualname.partition(".")
    if head in _MODULE_SYNONYMS:
        qualname = _MODULE_SYNONYMS[head] + ("." + rest if rest else "")
    return qualname


@functools.lru_cache(maxsize=8192)
def _check_qualified(qualname: str) -> str | None:
    """The category of a resolved dotted name such as ``sys.modules.get`` or ``os._exit``, or None."""
    qualname = _normalise(qualname)
    parts = qualname.split(".")
    if "grader" in parts or "nbgrader" in parts:
        return GRADER
    prefix = ""
    for part in parts:
        prefix = f"{prefix}.{part}" if prefix else part
        what = QUALIFIED.get(prefix)
        if what:
            return what
    if len(parts) >= 2:
        module, attr = parts[0], parts[1]
        if module == "os" and attr.startswith(("exec", "spawn")):
            return PROCESS
        if module in ("base64", "codecs") and "decode" in attr:
            return ENCODED
        if module == "importlib" and attr != "import_module" and not attr.startswith("resources") \
                and attr != "metadata":
            return IMPORTS
    return None


# ------------------------------------------------------------------------------------------ aliases
_BODIES = ("body", "orelse", "finalbody", "handlers", "cases")


def _statements(tree: ast.AST) -> Iterator[ast.AST]:
    """Every statement in a tree, nested blocks included (expressions are not entered)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        for field in _BODIES:
            block = getattr(node, field, None)
            if block:
                stack.extend(block)


def _may_alias(value: ast.AST | None) -> bool:
    """Whether ``name = value`` can bind a name to something imported (cheap pre-check)."""
    if isinstance(value, (ast.Name, ast.Attribute, ast.Subscript)):
        return True
    if isinstance(value, ast.Call):
        func = value.func
        return isinstance(func, ast.Name) or (isinstance(func, ast.Attribute) and func.attr == "import_module")
    return False


def _collect_aliases(trees: Iterable[ast.AST]) -> dict[str, str]:
    """Map each name bound by an import (or by ``y = <alias>.attr``, ``y = getattr(<alias>, "x")``,
    ``y = importlib.import_module("x")``) anywhere in the notebook to the dotted name it stands for.

    The map ignores order and scopes. An assignment whose value is itself flagged (``m = sys.modules``)
    is reported on its own line and binds nothing here, so that a later ``m = torch.ones(3)`` does not
    make every use of ``m`` a finding."""
    aliases: dict[str, str] = {}
    assigns: list[tuple[str, ast.AST]] = []
    for tree in trees:
        for node in _statements(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname:
                        aliases[alias.asname] = alias.name
                    else:
                        top = alias.name.split(".")[0]
                        aliases[top] = top
            elif isinstance(node, ast.ImportFrom):
                module = "." * (node.level or 0) + (node.module or "")
                for alias in node.names:
                    if alias.name != "*":
                        aliases[alias.asname or alias.name] = f"{module}.{alias.name}" if module else alias.name
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                if _may_alias(node.value):
                    for target in targets:
                        if isinstance(target, ast.Name):
                            assigns.append((target.id, node.value))
    # Assignments may chain (a = sys; b = a.modules): a few passes settle them.
    for _ in range(3):
        changed = False
        for name, value in assigns:
            qualname = _qualname(value, aliases)
            if qualname and qualname != name and aliases.get(name) != qualname \
                    and _check_qualified(qualname) is None:
                aliases[name] = qualname
                changed = True
        if not changed:
            break
    return aliases


def _namespace_of(node: ast.AST) -> ast.AST | None:
    """``x`` for ``x.__dict__`` and ``vars(x)``, else None."""
    if isinstance(node, ast.Attribute) and node.attr == "__dict__":
        return node.value
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "vars" \
            and len(node.args) == 1:
        return node.args[0]
    return None


def _qualname(node: ast.AST, aliases: dict[str, str], depth: int = 0) -> str | None:
    """The dotted name an expression stands for, through import aliases, or None. ``getattr(x, "a")``,
    ``x.__dict__["a"]``, ``importlib.import_module("m")`` and ``__import__("m")`` count as names."""
    if depth > 4:
        return None
    attrs: list[str] = []
    for _ in range(_QUALNAME_DEPTH):
        if isinstance(node, ast.Attribute):
            if node.attr == "__dict__":
                return None
            attrs.append(node.attr)
            node = node.value
        elif isinstance(node, ast.NamedExpr):
            node = node.value
        elif isinstance(node, ast.Subscript) and _namespace_of(node.value) is not None:
            key = _fold(node.slice)
            if key is None:
                return None
            attrs.append(key)
            node = _namespace_of(node.value)
        elif isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name) and func.id == "getattr" and len(node.args) >= 2:
                key = _fold(node.args[1])
                if key is None:
                    return None
                attrs.append(key)
                node = node.args[0]
                continue
            target = _qualname(func, aliases, depth + 1) if not isinstance(func, ast.Call) else None
            if target in ("importlib.import_module", "__import__") and node.args:
                module = _fold(node.args[0])
                if module is None:
                    return None
                if target == "__import__" and not attrs:
                    module = module.split(".")[0]
                return ".".join([module, *reversed(attrs)])
            return None
        elif isinstance(node, ast.Name):
            base = aliases.get(node.id)
            if base is None:
                if node.id in ("__import__",):
                    base = node.id
                else:
                    return None
            return ".".join([base, *reversed(attrs)])
        else:
            return None
    return None


# ------------------------------------------------------------------------------------------ walking
def _name_table(aliases: dict[str, str]) -> dict[str, str]:
    """What a bare name is flagged as when it is read: what it was imported as (``from os import
    _exit as q`` makes every ``q`` a finding). Its own meaning (IDENTIFIERS, NAMES) is checked apart."""
    table: dict[str, str] = {}
    for name, resolved in aliases.items():
        what = _check_qualified(resolved)
        if what:
            table[name] = what
    return table


_FIELDS: dict[type, tuple[str, ...]] = {}
# Fields that never hold a node to audit: names, operators, contexts, import aliases (the Import
# handlers read those), and a Constant's value.
_SCALAR_FIELDS = frozenset(("ctx", "op", "ops", "id", "attr", "name", "names", "kind", "arg", "asname",
                            "module", "level", "type_comment", "type_ignores", "conversion", "is_async",
                            "rest", "kwd_attrs", "simple", "tag"))


def _child_fields(kind: type) -> tuple[str, ...]:
    if kind in (ast.Constant, ast.MatchSingleton):
        return ()
    return tuple(f for f in kind._fields if f not in _SCALAR_FIELDS)


class _CellAudit:
    """Walks one cell's tree once; ``hits`` collects (line, what) pairs."""

    def __init__(self, aliases: dict[str, str], names: dict[str, str] | None = None):
        self.aliases = aliases
        self.names = names if names is not None else _name_table(aliases)
        self.hits: list[tuple[int, str]] = []
        self.skip: set[int] = set()

    def hit(self, node: ast.AST, what: str) -> None:
        self.hits.append((getattr(node, "lineno", 1) or 1, what))

    def run(self, tree: ast.AST) -> None:
        handlers = self.HANDLERS
        skip = self.skip
        stack = [tree]
        pop, push, extend = stack.pop, stack.append, stack.extend
        fields_of = _FIELDS
        AST = ast.AST
        while stack:
            node = pop()
            if node is None:  # ``Dict.keys`` holds None for ``**mapping``
                continue
            kind = node.__class__
            handler = handlers.get(kind)
            if handler is not None and id(node) not in skip:
                handler(self, node)
            fields = fields_of.get(kind)
            if fields is None:
                fields = fields_of[kind] = _child_fields(kind)
            for field in fields:
                value = getattr(node, field, None)
                if value is None:
                    continue
                if value.__class__ is list:
                    extend(value)
                elif isinstance(value, AST):
                    push(value)

    # -- handlers ---------------------------------------------------------------------------------
    def _attribute_name(self, node: ast.AST, base: ast.AST, attr: str, *, store: bool) -> None:
        """Checks shared by ``x.attr``, ``getattr(x, "attr")`` and ``x.__dict__["attr"]``."""
        what = IDENTIFIERS.get(attr)
        if what:
            self.hit(node, what)
        if attr in _EVENT_METHODS and (
                (isinstance(base, ast.Attribute) and base.attr == "events")
                or (isinstance(base, ast.Name) and base.id == "events")):
            self.hit(node, IPYTHON)
        if attr in ("__setattr__", "__delattr__"):
            self.hit(node, SETATTR)
        if store:
            if attr in OVERRIDE_DUNDERS:
                self.hit(node, OVERRIDE)
            elif attr == "__dict__":
                self.hit(node, DICT_WRITE)
            elif attr == "__class__":
                self.hit(node, CLASS_ASSIGN)
            root = _root_name(base)
            if root is not None:
                resolved = self.aliases.get(root)
                qualname = _qualname(base, self.aliases) or _dotted(base)
                patched = root in MONKEY_ROOTS or (resolved is not None and
                                                   _normalise(resolved).split(".")[0] in MONKEY_TOPS)
                if patched and not (qualname and (qualname + ".").startswith(MONKEY_ALLOWED)):
                    self.hit(node, MONKEYPATCH)
        qualname = _qualname(base, self.aliases)
        if qualname:
            what = _check_qualified(f"{qualname}.{attr}")
            if what:
                self.hit(node, what)

    def Attribute(self, node: ast.Attribute) -> None:
        self._attribute_name(node, node.value, node.attr, store=isinstance(node.ctx, _STORE))

    def Name(self, node: ast.Name) -> None:
        name = node.id
        what = IDENTIFIERS.get(name) or NAMES.get(name)
        if what:
            self.hit(node, what)
        what = self.names.get(name)
        if what and node.ctx.__class__ is ast.Load:
            self.hit(node, what)

    def Constant(self, node: ast.Constant) -> None:
        value = node.value
        if isinstance(value, bytes):
            value = value.decode("latin-1")
        if isinstance(value, str):
            what = _check_string(value)
            if what:
                self.hit(node, what)

    def _folded(self, node: ast.AST) -> None:
        value = _fold(node, self.skip)
        if value is not None:
            what = _check_string(value)
            if what:
                self.hit(node, what)

    def BinOp(self, node: ast.BinOp) -> None:
        if isinstance(node.op, ast.Add):
            self._folded(node)

    def JoinedStr(self, node: ast.JoinedStr) -> None:
        self._folded(node)

    def Expr(self, node: ast.Expr) -> None:
        # A bare string statement (a docstring) is inert: its words are not audited.
        if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            self.skip.add(id(node.value))

    def Subscript(self, node: ast.Subscript) -> None:
        value = node.value
        store = isinstance(node.ctx, _STORE)
        namespace = _namespace_of(value)
        if namespace is not None:
            if store:
                self.hit(node, DICT_WRITE)
            key = _fold(node.slice)
            if key is not None:
                self._attribute_name(node, namespace, key, store=store)
        elif store and isinstance(value, ast.Call) and isinstance(value.func, ast.Name) \
                and value.func.id in _NAMESPACE_CALLS:
            self.hit(node, DICT_WRITE)
        elif isinstance(value, ast.Constant) and isinstance(value.value, str):
            self._folded(node)

    def Call(self, node: ast.Call) -> None:
        func = node.func
        args = node.args
        if isinstance(func, ast.Name):
            name = func.id
            if name in ("getattr", "setattr", "delattr", "hasattr") and len(args) >= 2:
                key = _fold(args[1])
                if key is not None:
                    self._attribute_name(node, args[0], key, store=name in ("setattr", "delattr"))
            elif name == "__import__":
                self._import_call(node)
        elif isinstance(func, ast.Attribute):
            if func.attr in _DICT_MUTATORS:
                target = func.value
                if (isinstance(target, ast.Attribute) and target.attr == "__dict__") or (
                        isinstance(target, ast.Call) and isinstance(target.func, ast.Name)
                        and target.func.id in _NAMESPACE_CALLS):
                    self.hit(node, DICT_WRITE)
            elif func.attr == "join":
                self._folded(node)
        if (isinstance(func, ast.Attribute) and func.attr == "import_module") or isinstance(func, ast.Call) \
                or (isinstance(func, ast.Name) and func.id in self.aliases):
            if _qualname(func, self.aliases) == "importlib.import_module":
                self._import_call(node)

    def _import_call(self, node: ast.Call) -> None:
        module = _fold(node.args[0]) if node.args else None
        if module is None:
            self.hit(node, IMPORTS)
            return
        what = _check_qualified(module) or _check_string(module)
        if what:
            self.hit(node, what)

    def Import(self, node: ast.Import) -> None:
        for alias in node.names:
            what = _check_qualified(alias.name)
            if what:
                self.hit(node, what)
            if alias.asname:
                what = IDENTIFIERS.get(alias.asname)
                if what:
                    self.hit(node, what)

    def ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        if module:
            what = _check_qualified(module)
            if what:
                self.hit(node, what)
        for alias in node.names:
            if alias.name == "*":
                continue
            what = IDENTIFIERS.get(alias.name) or (IDENTIFIERS.get(alias.asname) if alias.asname else None)
            if what:
                self.hit(node, what)
            if module:
                what = _check_qualified(f"{module}.{alias.name}")
                if what:
                    self.hit(node, what)

    def ClassDef(self, node: ast.ClassDef) -> None:
        for base in node.bases:
            if isinstance(base, ast.Name) and base.id in OVERRIDE_BASES and base.id not in self.aliases:
                self.hit(node, OVERRIDE)
            else:
                qualname = _qualname(base, self.aliases) or _dotted(base)
                if qualname and _normalise(qualname) in OVERRIDE_BASES:
                    self.hit(node, OVERRIDE)
        for statement in node.body:
            if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if statement.name in OVERRIDE_DUNDERS:
                    self.hit(statement, OVERRIDE)
            elif isinstance(statement, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
                for target in targets:
                    for name in ast.walk(target):
                        if isinstance(name, ast.Name) and name.id in OVERRIDE_DUNDERS:
                            self.hit(statement, OVERRIDE)

    HANDLERS = {
        ast.Attribute: Attribute, ast.Name: Name, ast.Constant: Constant, ast.BinOp: BinOp,
        ast.JoinedStr: JoinedStr, ast.Expr: Expr, ast.Subscript: Subscript, ast.Call: Call,
        ast.Import: Import, ast.ImportFrom: ImportFrom, ast.ClassDef: ClassDef,
    }


# ------------------------------------------------------------------------------------ magic and text
def _text_hits(text: str, first_line: int = 1) -> Iterator[tuple[int, str]]:
    """(line, what) for every pattern hit in ``text``, in line order; lines count from ``first_line``."""
    lowered = text.lower()
    starts: list[int] | None = None
    hits: list[tuple[int, str]] = []
    for what, pattern, anchors, exact in _TEXT_RULES:
        candidates: set[int] = set()  # offsets where candidate lines start
        for haystack, needles in ((lowered, anchors), (text, exact)):
            find, rfind = haystack.find, haystack.rfind
            for needle in needles:
                pos = find(needle)
                while pos >= 0:
                    candidates.add(rfind("\n", 0, pos) + 1)
                    end = find("\n", pos)
                    if end < 0:
                        break
                    pos = find(needle, end)
        for start in candidates:
            end = text.find("\n", start)
            if pattern.search(text[start:] if end < 0 else text[start:end]):
                if starts is None:
                    starts = [0] + [m.end() for m in re.finditer("\n", text)]
                hits.append((first_line + bisect.bisect_right(starts, start) - 1, what))
    hits.sort(key=lambda hit: hit[0])
    return iter(hits)


def _strip_magics(lines: list[str]) -> tuple[list[str], list[tuple[int, str]], str | None]:
    """Replace IPython-only lines by ``pass`` (same indentation, so line numbers hold) and report
    them. Returns (lines, hits, body): ``body`` is the text of a non-Python cell magic's body, which
    is not parsed at all, else None."""
    hits: list[tuple[int, str]] = []
    out = list(lines)
    first = next((i for i, line in enumerate(lines) if line.strip()), None)
    if first is not None and lines[first].lstrip().startswith("%%"):
        magic = re.match(r"\s*%%\s*(\w*)", lines[first]).group(1)  # type: ignore[union-attr]
        hits.append((first + 1, SHELL if magic in _SHELL_MAGICS else MAGIC))
        hits.extend((first + 1, what) for _, what in _text_hits(lines[first]))
        if magic not in _PYTHON_CELL_MAGICS:
            return out, hits, "\n".join(lines[first + 1:])
        out[first] = ""
    for i, line in enumerate(out):
        if not line.strip() or (line.lstrip()[0] not in "%!?" and "=" not in line and "?" not in line):
            continue
        if _HELP_LINE.match(line):
            out[i] = line[: len(line) - len(line.lstrip())] + "pass"
            continue
        match = _MAGIC_LINE.match(line)
        if match is None or (match.group(1) == "!" and line[match.end(1):].startswith("=")):
            continue
        sigil, double, name = match.groups()
        if sigil == "!" or name in _SHELL_MAGICS:
            hits.append((i + 1, SHELL))
        elif name not in _HARMLESS_MAGICS or double:
            hits.append((i + 1, MAGIC))
        hits.extend((i + 1, what) for _, what in _text_hits(line))
        out[i] = line[: len(line) - len(line.lstrip())] + "pass"
    return out, hits, None


def _parse(source: str) -> tuple[ast.AST | None, SyntaxError | None]:
    try:
        return ast.parse(source), None
    except SyntaxError as error:
        return None, error
    except (ValueError, RecursionError, MemoryError, OverflowError) as error:
        return None, SyntaxError(str(error))


# ------------------------------------------------------------------------------------------ the API
def audit_source(source: str, cell: str = "cell 1") -> list[Finding]:
    """Audit one piece of code as a notebook of a single code cell labelled ``cell``."""
    nb = {"cells": [{"cell_type": "code", "metadata": {}, "source": source}]}
    return [Finding(cell, f.line, f.what, f.code) for f in audit_notebook(nb)]


def _prepare(source: str) -> tuple[ast.AST | None, list[str], list[tuple[int, str]], str | None,
                                    SyntaxError | None]:
    """Parse a cell: (tree, lines, magic hits, non-Python magic body, syntax error)."""
    lines = source.split("\n")
    if _MAYBE_MAGIC.search(source):
        stripped, hits, body = _strip_magics(lines)
        if body is not None:
            return None, lines, hits, body, None
        if hits or stripped != lines:
            tree, error = _parse("\n".join(stripped))
            if tree is not None:
                return tree, lines, hits, None, None
            raw, _ = _parse(source)  # a "magic" that was a continuation line: ``(a\n % b)``
            if raw is not None:
                return raw, lines, [], None, None
            return None, lines, hits, None, error
    tree, error = _parse(source)
    return tree, lines, [], None, error


def _analyse(source: str, prepared: tuple, aliases: dict[str, str],
             names: dict[str, str]) -> tuple[list[tuple[int, str]], list[str]]:
    """(hits, lines) for one prepared cell."""
    tree, lines, hits, body, error = prepared
    hits = list(hits)
    if body is not None:
        first = next(i for i, line in enumerate(lines) if line.strip()) + 2
        hits.extend(_text_hits(body, first))
    elif tree is None:
        line = (error.lineno if error is not None and error.lineno else 1)
        hits.append((min(max(line, 1), len(lines)), UNPARSEABLE))
        hits.extend(_text_hits(source))
    else:
        walker = _CellAudit(aliases, names)
        walker.run(tree)
        hits.extend(walker.hits)
    return hits, lines


def _findings(cell: str, lines: list[str], hits: list[tuple[int, str]], limit: int = MAX_FINDINGS) -> list[Finding]:
    seen: set[tuple[int, str]] = set()
    findings = []
    for line, what in sorted(hits, key=lambda hit: hit[0]):  # stable: discovery order within a line
        if (line, what) in seen:
            continue
        seen.add((line, what))
        code = lines[line - 1] if 0 < line <= len(lines) else ""
        findings.append(Finding(cell, line, what, _clip(code)))
        if len(findings) >= limit:
            break
    return findings


def audit_notebook(nb: dict, answer_ids: set[str] | None = None) -> list[Finding]:
    """Findings for a parsed notebook (``json.load`` of the .ipynb), in cell and line order.

    With ``answer_ids`` (the grade_ids of the cells students answer in), only those cells and the
    cells without a grade_id (the ones students add or may edit freely) are audited; the other
    graded cells belong to the instructor and tamper detection looks after them. Imports in every
    code cell still count for resolving aliases. At most ``MAX_FINDINGS`` findings are returned.
    """
    cells = nb.get("cells") if isinstance(nb, dict) else None
    if not isinstance(cells, list):
        return []
    # Parsing builds millions of small objects that all stay alive until the end; the cyclic
    # collector would walk them again and again (half the time on a 20,000-cell notebook).
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _audit_cells(cells, answer_ids)
    finally:
        if collecting:
            gc.enable()


def _audit_cells(cells: list, answer_ids: set[str] | None) -> list[Finding]:
    prepared: list[tuple[int, dict, str, object]] = []  # (index, cell, source, how)
    budget = AUDIT_BUDGET_CHARS
    for index, cell in enumerate(cells):
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        source = _source(cell)
        if not source.strip():
            continue
        if len(source) > budget:
            prepared.append((index, cell, source, _OVER_BUDGET))
            break
        budget -= len(source)
        prepared.append((index, cell, source, _TEXT_ONLY if len(source) > AST_CELL_CHARS else _prepare(source)))
    aliases = _collect_aliases(how[0] for _, _, _, how in prepared if isinstance(how, tuple) and how[0] is not None)
    names = _name_table(aliases)

    findings: list[Finding] = []
    for index, cell, source, how in prepared:
        label = _label(cell, index)
        if how is _OVER_BUDGET:  # the audit stops here, whoever owns the cell
            first = source.lstrip("\n").split("\n", 1)[0]
            line = len(source) - len(source.lstrip("\n")) + 1
            findings.append(Finding(label, line, OVERSIZED, _clip(first)))
            break
        if answer_ids is not None:
            grade_id = cell_grade_id(cell)
            if grade_id is not None and grade_id not in answer_ids:
                continue
        if how is _TEXT_ONLY:
            lines = source.split("\n")
            hits = [(1, OVERSIZED), *_text_hits(source)]
        else:
            hits, lines = _analyse(source, how, aliases, names)  # type: ignore[arg-type]
        findings.extend(_findings(label, lines, hits, MAX_FINDINGS - len(findings)))
        if len(findings) >= MAX_FINDINGS:
            break
    return findings[:MAX_FINDINGS]


_OVER_BUDGET = object()
_TEXT_ONLY = object()


def summarise(findings: list[Finding], limit: int = 8) -> str:
    """One line for a CSV reason column: ``review: <what> at <cell> line <n> (`<code>`); ...``, the
    first ``limit`` findings and then ``... and N more``; "" when there is nothing to review."""
    if not findings:
        return ""
    shown = []
    for finding in findings[:max(limit, 0)]:
        code = _clip(finding.code.replace("`", "'"), 60)
        shown.append(f"{finding.what} at {finding.cell} line {finding.line} (`{code}`)")
    more = len(findings) - len(shown)
    if more > 0:
        shown.append(f"... and {more} more")
    return "review: " + "; ".join(shown)


# ------------------------------------------------------------------------------ the child process
#: Exit status of :func:`main` when the audit ran out of memory under its cap.
OUT_OF_MEMORY = 3


def main(argv: list[str] | None = None) -> int:
    """``python -m grader.audit [--mem-bytes N] [--cpu-seconds S]``: audit the notebook read as JSON
    from stdin (``{"cells": [...], "answer_ids": [...] or null}``) and print ``{"findings": [[cell,
    line, what, code], ...]}`` on stdout. The caps are set on this process before anything is read,
    so one notebook's code cannot take the grader's memory or time (grader/audit_step.py ``audit_submission``
    runs it with a wall-time limit as well). Exits 3 when the memory cap was hit."""
    parser = argparse.ArgumentParser(prog="python -m grader.audit", description=main.__doc__)
    parser.add_argument("--mem-bytes", type=int, default=0, help="address-space cap (RLIMIT_AS); 0: none")
    parser.add_argument("--cpu-seconds", type=int, default=0, help="CPU-time cap (RLIMIT_CPU); 0: none")
    args = parser.parse_args(argv)
    if args.mem_bytes > 0:
        resource.setrlimit(resource.RLIMIT_AS, (args.mem_bytes, args.mem_bytes))
    if args.cpu_seconds > 0:
        resource.setrlimit(resource.RLIMIT_CPU, (args.cpu_seconds, args.cpu_seconds + 1))
    try:
        request = json.loads(sys.stdin.buffer.read())
        answer_ids = request.get("answer_ids")
        findings = audit_notebook({"cells": request.get("cells")},
                                  set(answer_ids) if isinstance(answer_ids, list) else None)
        out = json.dumps({"findings": [[f.cell, f.line, f.what, f.code] for f in findings]})
    except MemoryError:
        return OUT_OF_MEMORY
    sys.stdout.write(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
