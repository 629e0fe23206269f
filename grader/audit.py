"""Static audit of a submitted notebook: lines a TA should look at before trusting its grade.

Nothing here runs the notebook. Each code cell is parsed with ``ast`` (IPython ``%``/``%%`` magics and
``!`` shell escapes are cut out first and reported themselves) and every node is checked once, so the
walk is linear in the size of the code. ``RULES`` says what is reported, with its cell and line (hooks
into IPython and the interpreter, import machinery, introspection, anything naming the grader, escape
hatches, dynamic code...); the walker adds writes to ``__dict__``/``globals()``, assignment to
``__class__``, every ``setattr``, monkeypatching (assignment to attributes of ``torch``, ``numpy``, ``sys``,
``os``...) and comparison overrides (a class defining ``__eq__``, ``__float__``, ``__torch_function__``...
or subclassing ``torch.Tensor``/``float``): the ways a result can lie about its value. Cheap obfuscation
is seen through: import aliases (``import sys as s``, ``from os import _exit as q``, ``m = sys``),
``getattr``/``setattr``/``x.__dict__[...]`` with a constant or constant-folded name (``"get_" +
"ipython"``, ``"".join([...])``, ``"..."[::-1]``), string literals equal to a flagged identifier. A cell
that does not parse is reported as "unparseable code" and scanned line by line with the rules' regular
expressions instead. Markdown is never audited.

The cost is about half a second per MB of code on a laptop core; outputs cost nothing. Past
``AUDIT_BUDGET_CHARS`` of code in a notebook the audit stops with an "oversized code" finding; a cell
above ``AST_CELL_CHARS`` is only scanned as text (also "oversized code"). Constant folding gives up on a
string longer than ``FOLD_CHARS`` before building it: nested ``"A".join([...]).join([...])`` would grow as
the product of the list lengths. The grader runs the audit in a capped child process (:func:`main`).
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
AUDIT_BUDGET_CHARS = 3_000_000  # homework notebooks hold tens of kB of code; a TA should look at such a one anyway
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


# The categories the code below reports itself; the others are only named in RULES.
IPYTHON, SETATTR, DICT_WRITE, CLASS_ASSIGN, MONKEYPATCH, OVERRIDE, IMPORTS, GRADER, RAW_FD, PROCESS, ENCODED = (
    "IPython hook", "setattr", "__dict__ write", "__class__ assignment", "monkeypatch", "comparison override",
    "import machinery", "grader reference", "raw file descriptor", "process control", "encoded payload")
MAGIC, SHELL, UNPARSEABLE, OVERSIZED = "IPython magic", "shell escape", "unparseable code", "oversized code"

# What is flagged, a row a category. ``ident``: identifiers flagged as a name, an attribute, an imported
# name, or a string literal (``getattr(ip, "set_custom_exc")``); none has an everyday homework meaning.
# ``name``: bare names only (``model.eval()`` is not flagged). ``string``: string literals
# (``import_module("sub" + "process")``). ``qual``: dotted names after resolving aliases, and anything
# under them; ``member``: a regular expression for a module and its member (``os.exec*``). ``text``: a
# regular expression for code that is not parsed, tried in this order (a line's findings keep it) on the
# lines holding an ``anchor`` (lowercased, found by ``str.find`` at C speed) or an ``exact`` anchor (as
# written: "F" would match every "self").
RULES: dict[str, dict[str, str]] = {
    IPYTHON: dict(
        ident="get_ipython set_custom_exc input_transformers_cleanup input_transformers_post input_transformer_manager "
              "ast_transformers display_pub showtraceback showsyntaxerror InteractiveShell register_magic_function "
              "register_line_magic register_cell_magic register_line_cell_magic run_line_magic run_cell_magic",
        qual="IPython.core IPython.terminal IPython.get_ipython ipykernel",
        text=r"\b(?:get_ipython|set_custom_exc|input_transformers_cleanup|input_transformers_post"
             r"|input_transformer_manager|ast_transformers|display_pub|showtraceback|showsyntaxerror"
             r"|InteractiveShell|register_(?:line_|cell_|line_cell_)?magic(?:_function)?"
             r"|run_(?:line|cell)_magic)\b|\bevents\s*\.\s*register\b",
        anchor="get_ipython set_custom_exc input_transformer ast_transformers display_pub showtraceback "
               "showsyntaxerror interactiveshell register_ _magic events"),
    "interpreter hook": dict(
        ident="displayhook excepthook settrace setprofile addaudithook breakpointhook unraisablehook",
        qual="sys.monitoring atexit.register threading.settrace",
        text=r"\b(?:displayhook|excepthook|settrace|setprofile|addaudithook)\b", anchor="hook settrace setprofile"),
    "sys.modules": dict(qual="sys.modules", text=r"\bsys\s*\.\s*modules\b", anchor="modules"),
    IMPORTS: dict(
        ident="__import__", string="importlib", text=r"\bimportlib\b|\b__import__\b", anchor="importlib __import__",
        member=r"importlib\.(?!(?:import_module|metadata)\Z|resources).*",  # importlib's everyday parts aside
        qual="sys.meta_path sys.path_hooks sys.path_importer_cache __main__ importlib.reload importlib.util "
             "importlib.machinery importlib.abc importlib._bootstrap importlib.invalidate_caches imp pkgutil"),
    "builtins": dict(ident="__builtins__", string="builtins", qual="builtins __builtin__",
                     text=r"\b__builtins__\b|\bbuiltins\b", anchor="builtins"),
    "introspection": dict(
        ident="__code__ __globals__ __closure__ __subclasses__ __mro__ __defaults__ __kwdefaults__ func_globals "
              "func_code", qual="types.CodeType types.FunctionType",
        text=r"\b__(?:code|globals|closure|subclasses|mro|defaults|kwdefaults)__\b",
        anchor="__code__ __globals__ __closure__ __subclasses__ __mro__ defaults__"),
    DICT_WRITE: dict(
        text=r"\.__dict__\s*(?:\[[^\]\n]*\]\s*)?=(?!=)|\.__dict__\s*\.\s*(?:update|setdefault|pop|clear)\b"
             r"|\b(?:globals|vars|locals)\(\s*\w*\s*\)\s*(?:\[[^\]\n]*\]\s*=(?!=)|\.\s*update\b)",
        anchor="__dict__ globals vars locals"),
    CLASS_ASSIGN: dict(text=r"\.__class__\s*=(?!=)", anchor="__class__"),
    SETATTR: dict(name="setattr delattr", string="__setattr__ __delattr__ setattr",
                  text=r"\b(?:setattr|delattr)\s*\(|__setattr__|__delattr__", anchor="setattr delattr"),
    MONKEYPATCH: dict(
        text=r"^[ \t]*(?!torch\s*\.\s*backends\b)(?:torch|np|numpy|math|F|nn|builtins|sys|os|scipy|sklearn)"
             r"(?:\s*\.\s*\w+)+\s*(?:[-+*/@%&|^]|//|\*\*|<<|>>)?=(?!=)",
        exact="torch np numpy math F nn builtins sys os scipy sklearn"),
    OVERRIDE: dict(  # the methods through which an object decides what comparisons and conversions say of it
        string="__eq__ __ne__ __lt__ __le__ __gt__ __ge__ __bool__ __float__ __int__ __index__ __complex__ "
               "__round__ __abs__ __array__ __array_ufunc__ __array_function__ __array_interface__ "
               "__torch_function__ __torch_dispatch__ __instancecheck__ __subclasscheck__",
        qual="torch.overrides torch.library torch.utils._python_dispatch", anchor="def",
        text=r"\bdef\s+__(?:eq|ne|lt|le|gt|ge|bool|float|int|index|complex|round|abs|array|array_ufunc"
             r"|array_function|torch_function|torch_dispatch|instancecheck|subclasscheck)__\b"),
    GRADER: dict(ident="grader nbgrader", qual="grader nbgrader", anchor="grader gradebook las_",
                 text=r"(?i:grader|gradebook)|\bLAS_(?!PRESET\b|DEVICE\b|BUILD_DIR\b)\w+"),
    "native code": dict(string="ctypes _ctypes cffi", qual="ctypes _ctypes cffi", text=r"\b(?:ctypes|cffi)\b",
                        anchor="ctypes cffi"),
    "gc introspection": dict(ident="get_objects get_referrers get_referents", anchor="get_objects get_refer",
                             text=r"\b(?:get_objects|get_referrers|get_referents)\b"),
    "frame inspection": dict(
        ident="_getframe _current_frames currentframe f_back f_globals f_locals tb_frame gi_frame cr_frame ag_frame",
        qual="inspect.stack inspect.trace inspect.getouterframes inspect.getinnerframes inspect.getframeinfo "
             "inspect.getclosurevars traceback.extract_stack traceback.walk_stack traceback.format_stack "
             "traceback.print_stack traceback.StackSummary traceback.walk_tb",
        text=r"\b(?:_getframe|_current_frames|currentframe|f_back|f_globals|f_locals|tb_frame|gi_frame)\b"
             r"|\binspect\s*\.\s*(?:stack|trace|getouterframes)\b", anchor="frame f_back f_globals f_locals inspect"),
    "signal handler": dict(
        qual="signal", anchor="signal",
        text=r"\bsignal\s*\.\s*(?:signal|setitimer|alarm|pthread_kill|raise_signal|set_wakeup_fd|siginterrupt)\b"),
    PROCESS: dict(  # faulthandler can crash the process on purpose (a "kernel died" that hides a review)
        string="subprocess _posixsubprocess multiprocessing _exit faulthandler",
        qual="os._exit os.kill os.killpg os.fork os.forkpty os.system os.popen os.abort os.posix_spawn "
             "os.posix_spawnp os.setsid os.pidfd_open os.getppid os.getpgrp subprocess _posixsubprocess "
             "multiprocessing pty torch.multiprocessing concurrent.futures.ProcessPoolExecutor faulthandler",
        text=r"\bos\s*\.\s*(?:_exit|kill|killpg|fork|system|popen|exec\w*|spawn\w*)\b"
             r"|\b(?:subprocess|multiprocessing)\b", anchor="os subprocess multiprocessing",
        member=r"os\.(?:exec|spawn).*"),
    RAW_FD: dict(  # writes that could forge the grader's records
        qual="os.write os.dup os.dup2 os.fdopen os.openpty", anchor="os /proc/ /dev/",
        text=r"\bos\s*\.\s*(?:write|dup2?|fdopen|openpty)\b|['\"]/(?:proc/|dev/fd|dev/std)"),
    "threading": dict(string="threading _thread", qual="threading _thread", text=r"\bthreading\b|\b_thread\b",
                      anchor="thread"),
    "socket": dict(string="socket", qual="socket socketserver", text=r"\bsocket\b", anchor="socket"),
    "dynamic code": dict(name="eval exec compile execfile", qual="runpy code codeop",
                         text=r"(?<![\w.])(?:eval|exec|compile)\s*\(", anchor="eval exec compile"),
    "deserialisation": dict(
        string="marshal", anchor="pickle marshal dill",
        qual="pickle.load pickle.loads pickle.Unpickler marshal dill.load dill.loads cloudpickle.load "
             "cloudpickle.loads shelve", text=r"\b(?:pickle|marshal|dill|cloudpickle)\s*\.\s*loads?\b|\bmarshal\b"),
    ENCODED: dict(
        qual="codecs.decode codecs.getdecoder codecs.iterdecode codecs.lookup binascii.a2b_base64 "
             "binascii.unhexlify binascii.a2b_hex zlib.decompress bz2.decompress lzma.decompress gzip.decompress "
             "bytes.fromhex", text=r"\b(?:base64\s*\.\s*\w*decode\w*|codecs\s*\.\s*decode|[ab]\d{2}decode)\b",
        anchor="decode", member=r"(?:base64|codecs)\..*decode.*"),
    "environment scan": dict(qual="os.environ.keys os.environ.items os.environ.values os.environ.copy os.environb"),
}


IDENTIFIERS, NAMES, QUALIFIED, STRINGS = ({word: what for what, fields in RULES.items() for kind in kinds
                                          for word in fields.get(kind, "").split()}
                                         for kinds in (["ident"], ["name"], ["qual"], ["ident", "string"]))
OVERRIDE_DUNDERS = frozenset(RULES[OVERRIDE]["string"].split())
_TEXT_RULES = [(what, re.compile(fields["text"], re.MULTILINE), tuple(fields.get("anchor", "").split()),
                tuple(fields.get("exact", "").split())) for what, fields in RULES.items() if "text" in fields]
_QUALIFIED_PATTERNS = [(re.compile(fields["member"], re.DOTALL), what) for what, fields in RULES.items()
                       if "member" in fields]
LAS_HONEST = frozenset(("LAS_PRESET", "LAS_DEVICE", "LAS_BUILD_DIR"))  # the grader's variables a student may set
# Builtin and library types whose subclasses can pass for a genuine result.
OVERRIDE_BASES = frozenset("float int bool complex torch.Tensor torch.nn.Parameter numpy.ndarray numpy.generic "
                           "numpy.float64 numpy.float32".split())
_MODULE_SYNONYMS = {"posix": "os", "nt": "os", "_pickle": "pickle", "cPickle": "pickle", "_signal": "signal"}
# Assigning to an attribute rooted here is monkeypatching (``torch.allclose = lambda *a: True``).
MONKEY_ROOTS = frozenset("torch np numpy math F nn builtins sys os scipy sklearn".split())
MONKEY_TOPS = MONKEY_ROOTS - {"np", "F", "nn"}
MONKEY_ALLOWED = ("torch.backends.",)  # cudnn.benchmark, matmul.allow_tf32: settings, not patches
_DICT_MUTATORS = frozenset("update setdefault pop popitem clear __setitem__ __delitem__ __ior__".split())
_NAMESPACE_CALLS = frozenset(("globals", "vars", "locals"))
_EVENT_METHODS = frozenset(("register", "unregister", "callbacks", "trigger"))
_STORE = (ast.Store, ast.Del)
# Cell magics whose body is Python (audited as such); any other cell magic's body is scanned as text.
_PYTHON_CELL_MAGICS = frozenset("capture time timeit prun debug memit mprun".split())
_SHELL_MAGICS = frozenset("bash sh script system sx pip conda mamba run load writefile file perl ruby python "
                          "python3 pypy".split())
_MAGIC_LINE = re.compile(
    r"^[ \t]*(?:[A-Za-z_][\w.]*(?:[ \t]*,[ \t]*[A-Za-z_][\w.]*)*[ \t]*=[ \t]*)?([%!])(%?)[ \t]*(\w*)")
_MAYBE_MAGIC = re.compile(r"^[ \t]*[%!?]|\?[ \t]*$|=[ \t]*[%!]", re.MULTILINE)
_HELP_LINE = re.compile(r"^[ \t]*[%!]?[\w.]*\?{1,2}[ \t]*$|^[ \t]*\?{1,2}[\w.]+[ \t]*$")


def _clip(text: str, limit: int = CODE_CHARS) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _check_string(value: object) -> str | None:
    """The category of a string (or bytes) literal, or None."""
    value = value.decode("latin-1") if isinstance(value, bytes) else value
    if not isinstance(value, str):
        return None
    what = STRINGS.get(value) if len(value) <= 40 else None
    if what or "grader" in value.lower() or "gradebook" in value.lower():
        return what or GRADER
    if value.startswith(("/proc/", "/dev/fd", "/dev/std")):
        return RAW_FD
    return GRADER if "LAS_" in value and set(re.findall(r"LAS_\w+", value)) - LAS_HONEST else None


def _fold(node: ast.AST, consumed: set[int] | None = None, depth: int = 0) -> str | None:
    """The value of a string expression built from literals (``"a" + "b"``, ``"".join(["a", "b"])``,
    ``"ba"[::-1]``, an f-string without fields), or None. Iterative: long ``+`` chains are fine."""
    parts, size, stack = [], 0, [node]  # size: the length of ``parts`` joined, checked before building more
    while stack and depth <= 8 and size <= FOLD_CHARS:
        item, value = stack.pop(), None
        step = getattr(getattr(item, "slice", None), "step", None)
        if isinstance(item, ast.BinOp) and isinstance(item.op, ast.Add):
            if consumed is not None:
                consumed.add(id(item))
            stack += (item.right, item.left)
            continue
        if isinstance(item, ast.Constant) and isinstance(item.value, (str, bytes)):
            value = item.value if isinstance(item.value, str) else item.value.decode("latin-1")
        elif isinstance(item, ast.JoinedStr) and all(isinstance(v, ast.Constant) for v in item.values):
            value = "".join(v.value for v in item.values)
        elif isinstance(item, ast.Subscript) and isinstance(item.slice, ast.Slice) and item.slice.lower is None \
                and item.slice.upper is None and isinstance(step, ast.UnaryOp) and isinstance(step.op, ast.USub) \
                and isinstance(step.operand, ast.Constant) and step.operand.value == 1:  # ``"..."[::-1]``
            value = _fold(item.value, None, depth + 1)
            value = value[::-1] if value is not None else None
        elif isinstance(item, ast.Call) and isinstance(item.func, ast.Attribute) and item.func.attr == "join" \
                and len(item.args) == 1 and not item.keywords and isinstance(item.args[0], (ast.List, ast.Tuple)):
            sep, elements, joined = _fold(item.func.value, None, depth + 1), [], size
            for element in item.args[0].elts if sep is not None else ():
                elements.append(_fold(element, None, depth + 1))
                joined += len(sep) + len(elements[-1] or "")  # measured before joining: a long separator multiplies
                if elements[-1] is None or joined > FOLD_CHARS:
                    break
            else:
                value = sep.join(elements) if sep is not None else None
        if value is None:
            return None
        parts.append(value)
        size += len(value)
    return "".join(parts) if not stack and size <= FOLD_CHARS else None


def _dotted(node: ast.AST) -> str | None:
    """``a.b.c`` as written (``np`` read as numpy), for names whose import the notebook does not show."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute) and len(parts) < _QUALNAME_DEPTH:
        parts.append(node.attr)
        node = node.value
    return ".".join([{"np": "numpy"}.get(node.id, node.id), *reversed(parts)]) if isinstance(node, ast.Name) else None


def _normalise(qualname: str) -> str:
    head, dot, rest = qualname.partition(".")
    return _MODULE_SYNONYMS[head] + dot + rest if head in _MODULE_SYNONYMS else qualname


@functools.lru_cache(maxsize=8192)
def _check_qualified(qualname: str) -> str | None:
    """The category of a resolved dotted name such as ``sys.modules.get`` or ``os._exit``, or None."""
    parts = _normalise(qualname).split(".")
    if "grader" in parts or "nbgrader" in parts:
        return GRADER
    prefix = ""
    for part in parts:  # an empty part (a relative import's dot) adds nothing to the prefix
        prefix = f"{prefix}.{part}" if prefix else part
        if prefix in QUALIFIED:
            return QUALIFIED[prefix]
    head = ".".join(parts[:2])
    return next((what for pattern, what in _QUALIFIED_PATTERNS if pattern.fullmatch(head)), None)


def _statements(tree: ast.AST) -> Iterator[ast.AST]:
    """Every statement in a tree, nested blocks included (expressions are not entered)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        for field in ("body", "orelse", "finalbody", "handlers", "cases"):
            stack.extend(getattr(node, field, None) or ())


def _collect_aliases(trees: Iterable[ast.AST]) -> dict[str, str]:
    """Map each name bound by an import (or by ``y = <alias>.attr``, ``y = getattr(<alias>, "x")``,
    ``y = importlib.import_module("x")``) anywhere in the notebook to the dotted name it stands for,
    order and scopes ignored. An assignment whose value is itself flagged (``m = sys.modules``) is reported
    on its own line and binds nothing, so that a later ``m = torch.ones(3)`` does not make ``m`` a finding."""
    aliases: dict[str, str] = {}
    assigns: list[tuple[str, ast.AST]] = []
    for node in (node for tree in trees for node in _statements(tree)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                top = alias.name.split(".")[0]
                aliases[alias.asname or top] = alias.name if alias.asname else top
        elif isinstance(node, ast.ImportFrom):
            module = "." * (node.level or 0) + (node.module or "")
            for alias in node.names:
                if alias.name != "*":
                    aliases[alias.asname or alias.name] = f"{module}.{alias.name}" if module else alias.name
        elif isinstance(node, (ast.Assign, ast.AnnAssign)) and (  # could the value be something imported?
                isinstance(node.value, (ast.Name, ast.Attribute, ast.Subscript)) or isinstance(node.value, ast.Call)
                and (isinstance(node.value.func, ast.Name) or getattr(node.value.func, "attr", "") == "import_module")):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            assigns += [(target.id, node.value) for target in targets if isinstance(target, ast.Name)]
    for _ in range(3):  # assignments may chain (a = sys; b = a.modules): a few passes settle them
        for name, value in assigns:
            qualname = _qualname(value, aliases)
            if qualname and qualname != name and _check_qualified(qualname) is None:
                aliases[name] = qualname
    return aliases


def _namespace_of(node: ast.AST) -> ast.AST | None:
    """``x`` for ``x.__dict__`` and ``vars(x)``, else None."""
    if isinstance(node, ast.Attribute) and node.attr == "__dict__":
        return node.value
    call = isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "vars"
    return node.args[0] if call and len(node.args) == 1 else None  # type: ignore[attr-defined]


def _namespace_call(node: ast.AST) -> bool:
    """``globals()``, ``vars(...)``, ``locals()``."""
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _NAMESPACE_CALLS


def _qualname(node: ast.AST, aliases: dict[str, str], depth: int = 0) -> str | None:
    """The dotted name an expression stands for, through import aliases, or None. ``getattr(x, "a")``,
    ``x.__dict__["a"]``, ``importlib.import_module("m")`` and ``__import__("m")`` count as names."""
    attrs: list[str | None] = []
    for _ in range(_QUALNAME_DEPTH if depth <= 4 else 0):
        if isinstance(node, ast.Attribute) and node.attr != "__dict__":
            attrs.append(node.attr)
            node = node.value
        elif isinstance(node, ast.NamedExpr):
            node = node.value
        elif isinstance(node, ast.Subscript) and _namespace_of(node.value) is not None:
            attrs.append(_fold(node.slice))
            node = _namespace_of(node.value)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr" \
                and len(node.args) >= 2:
            attrs.append(_fold(node.args[1]))
            node = node.args[0]
        elif isinstance(node, ast.Call):
            target = _qualname(node.func, aliases, depth + 1) if not isinstance(node.func, ast.Call) else None
            module = _fold(node.args[0]) if target in ("importlib.import_module", "__import__") and node.args else None
            if module is None:
                return None
            return ".".join([module.split(".")[0] if target == "__import__" and not attrs else module,
                             *reversed(attrs)])  # type: ignore[list-item]
        elif isinstance(node, ast.Name):
            base = aliases.get(node.id)
            base = "__import__" if base is None and node.id == "__import__" else base
            return ".".join([base, *reversed(attrs)]) if base is not None else None  # type: ignore[list-item]
        else:
            return None
        if attrs and attrs[-1] is None:  # a key that does not fold
            return None
    return None


class _CellAudit:
    """Walks one cell's tree once; ``hits`` collects (line, what) pairs."""

    def __init__(self, aliases: dict[str, str], names: dict[str, str]):
        self.aliases, self.names = aliases, names
        self.hits: list[tuple[int, str]] = []
        self.skip: set[int] = set()  # nodes already folded into a larger string, and docstrings

    def hit(self, node: ast.AST, *whats: str | None) -> None:
        if any(whats):
            self.hits += [(getattr(node, "lineno", 1) or 1, what) for what in whats if what]

    def run(self, tree: ast.AST) -> None:
        handlers, skip, stack = self.HANDLERS, self.skip, [tree]
        while stack:
            node = stack.pop()
            handler = handlers.get(node.__class__)
            if handler is not None and id(node) not in skip:
                handler(self, node)
            stack.extend(ast.iter_child_nodes(node))

    def _attribute(self, node: ast.AST, base: ast.AST, attr: str, store: bool) -> None:
        """Checks shared by ``x.attr``, ``getattr(x, "attr")`` and ``x.__dict__["attr"]``."""
        events = attr in _EVENT_METHODS and getattr(base, "attr", getattr(base, "id", "")) == "events"
        self.hit(node, IDENTIFIERS.get(attr), IPYTHON if events else None,
                 SETATTR if attr in ("__setattr__", "__delattr__") else None)
        if store:
            self.hit(node, OVERRIDE if attr in OVERRIDE_DUNDERS else {"__dict__": DICT_WRITE,
                                                                       "__class__": CLASS_ASSIGN}.get(attr))
            root = base  # the name under ``a.b[0].c().d``
            for _ in range(_QUALNAME_DEPTH):
                if not isinstance(root, (ast.Attribute, ast.Subscript, ast.Call)):
                    break
                root = root.func if isinstance(root, ast.Call) else root.value
            resolved = self.aliases.get(root.id) if isinstance(root, ast.Name) else None
            patched = isinstance(root, ast.Name) and (root.id in MONKEY_ROOTS or resolved is not None
                                                      and _normalise(resolved).split(".")[0] in MONKEY_TOPS)
            qualname = (_qualname(base, self.aliases) or _dotted(base)) if patched else None
            self.hit(node, MONKEYPATCH if patched and not (qualname and (qualname + ".").startswith(MONKEY_ALLOWED))
                     else None)
        qualname = _qualname(base, self.aliases)
        self.hit(node, _check_qualified(f"{qualname}.{attr}") if qualname else None)

    def _folded(self, node: ast.AST) -> None:
        value = _fold(node, self.skip)
        self.hit(node, _check_string(value) if value is not None else None)

    def Subscript(self, node: ast.Subscript) -> None:
        store, namespace = isinstance(node.ctx, _STORE), _namespace_of(node.value)
        if namespace is not None:
            self.hit(node, DICT_WRITE if store else None)
            key = _fold(node.slice)
            if key is not None:
                self._attribute(node, namespace, key, store)
        elif store and _namespace_call(node.value):
            self.hit(node, DICT_WRITE)
        elif isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            self._folded(node)

    def Call(self, node: ast.Call) -> None:
        func, args = node.func, node.args
        name, attr = getattr(func, "id", None), getattr(func, "attr", None)
        if name in ("getattr", "setattr", "delattr", "hasattr") and len(args) >= 2:
            key = _fold(args[1])
            if key is not None:
                self._attribute(node, args[0], key, name in ("setattr", "delattr"))
        elif name == "__import__":
            self._import_call(node)
        elif attr in _DICT_MUTATORS and (getattr(func.value, "attr", None) == "__dict__"  # type: ignore[attr-defined]
                                         or _namespace_call(func.value)):  # type: ignore[attr-defined]
            self.hit(node, DICT_WRITE)
        elif attr == "join":
            self._folded(node)
        if (isinstance(func, ast.Call) or name in self.aliases or attr == "import_module") \
                and _qualname(func, self.aliases) == "importlib.import_module":
            self._import_call(node)

    def _import_call(self, node: ast.Call) -> None:
        module = _fold(node.args[0]) if node.args else None
        self.hit(node, IMPORTS if module is None else _check_qualified(module) or _check_string(module))

    def Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self.hit(node, _check_qualified(alias.name), IDENTIFIERS.get(alias.asname or ""))

    def ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        self.hit(node, _check_qualified(module) if module else None)
        for alias in node.names:
            if alias.name != "*":
                self.hit(node, IDENTIFIERS.get(alias.name) or IDENTIFIERS.get(alias.asname or ""),
                         _check_qualified(f"{module}.{alias.name}") if module else None)

    def ClassDef(self, node: ast.ClassDef) -> None:
        for base in node.bases:
            qualname = _qualname(base, self.aliases) or _dotted(base)
            self.hit(node, OVERRIDE if qualname and _normalise(qualname) in OVERRIDE_BASES else None)
        for statement in node.body:
            if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.hit(statement, OVERRIDE if statement.name in OVERRIDE_DUNDERS else None)
            elif isinstance(statement, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
                self.hit(statement, OVERRIDE if any(isinstance(name, ast.Name) and name.id in OVERRIDE_DUNDERS
                                                    for t in targets for name in ast.walk(t)) else None)

    HANDLERS = {  # the node types that can hold a finding, besides the fields of others
        ast.Attribute: lambda self, node: self._attribute(node, node.value, node.attr, isinstance(node.ctx, _STORE)),
        ast.Name: lambda self, node: self.hit(node, IDENTIFIERS.get(node.id) or NAMES.get(node.id),
                                              self.names.get(node.id) if node.ctx.__class__ is ast.Load else None),
        ast.Constant: lambda self, node: self.hit(node, _check_string(node.value)),
        ast.Expr: lambda self, node: self.skip.add(id(node.value))  # a bare string (a docstring) is inert
        if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str) else None,
        ast.BinOp: lambda self, node: self._folded(node) if isinstance(node.op, ast.Add) else None,
        ast.JoinedStr: _folded, ast.Subscript: Subscript, ast.Call: Call, ast.Import: Import,
        ast.ImportFrom: ImportFrom, ast.ClassDef: ClassDef}


def _text_hits(text: str, first_line: int = 1) -> list[tuple[int, str]]:
    """(line, what) for every text rule's hit in ``text``, in line order; lines count from ``first_line``."""
    lowered, starts, hits = text.lower(), None, []
    for what, pattern, anchors, exact in _TEXT_RULES:
        candidates: set[int] = set()  # offsets where candidate lines start
        for haystack, needles in ((lowered, anchors), (text, exact)):
            for needle in needles:
                pos = haystack.find(needle)
                while pos >= 0:
                    candidates.add(haystack.rfind("\n", 0, pos) + 1)
                    end = haystack.find("\n", pos)
                    pos = haystack.find(needle, end) if end >= 0 else -1
        for start in candidates:
            end = text.find("\n", start)
            if pattern.search(text[start:] if end < 0 else text[start:end]):
                starts = starts or [0] + [m.end() for m in re.finditer("\n", text)]
                hits.append((first_line + bisect.bisect_right(starts, start) - 1, what))
    return sorted(hits, key=lambda hit: hit[0])


def _prepare(source: str, lines: list[str]) -> tuple[ast.AST | None, list[tuple[int, str]]]:
    """A cell's tree (None when it is not parsed) and what is found without it. IPython-only lines are
    reported and become ``pass`` (same indentation, so line numbers hold); code that does not parse and
    the body of a non-Python cell magic get the text scan."""
    hits: list[tuple[int, str]] = []
    stripped, error, magics = list(lines), None, _MAYBE_MAGIC.search(source)
    first = next((i for i, line in enumerate(lines) if line.strip()), 0)
    if magics and lines[first].lstrip().startswith("%%"):
        magic = re.match(r"\s*%%\s*(\w*)", lines[first]).group(1)  # type: ignore[union-attr]
        hits += [(first + 1, SHELL if magic in _SHELL_MAGICS else MAGIC), *_text_hits(lines[first], first + 1)]
        if magic not in _PYTHON_CELL_MAGICS:
            return None, hits + _text_hits("\n".join(lines[first + 1:]), first + 2)
        stripped[first] = ""
    for i, line in enumerate(stripped if magics else ()):
        if not line.strip() or (line.lstrip()[0] not in "%!?" and "=" not in line and "?" not in line):
            continue
        help_line = _HELP_LINE.match(line)
        match = None if help_line else _MAGIC_LINE.match(line)
        if match and match.group(1) == "!" and line[match.end(1):].startswith("="):  # ``x !=`` is no escape
            match = None
        if match:
            sigil, double, name = match.groups()
            if sigil == "!" or name in _SHELL_MAGICS:
                hits.append((i + 1, SHELL))
            elif name != "matplotlib" or double:  # ``%matplotlib inline`` is harmless
                hits.append((i + 1, MAGIC))
            hits += _text_hits(line, i + 1)
        if help_line or match:
            stripped[i] = line[: len(line) - len(line.lstrip())] + "pass"
    # When the cut fails, the cell may still parse as it is: a "magic" was a continuation line, ``(a\n % b)``.
    for text, found in [("\n".join(stripped), hits)] + [(source, [])] * (hits != [] or stripped != lines):
        try:
            return ast.parse(text), found
        except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError) as exc:
            error = error or exc
    line = error.lineno if isinstance(error, SyntaxError) and error.lineno else 1
    return None, [*hits, (min(max(line, 1), len(lines)), UNPARSEABLE), *_text_hits(source)]


def audit_source(source: str, cell: str = "cell 1") -> list[Finding]:
    """Audit one piece of code as a notebook of a single code cell labelled ``cell``."""
    nb = {"cells": [{"cell_type": "code", "metadata": {}, "source": source}]}
    return [Finding(cell, f.line, f.what, f.code) for f in audit_notebook(nb)]


def audit_notebook(nb: dict, answer_ids: set[str] | None = None) -> list[Finding]:
    """Findings for a parsed notebook (``json.load`` of the .ipynb), in cell and line order, at most
    ``MAX_FINDINGS``. With ``answer_ids`` (the grade_ids of the cells students answer in), only those cells
    and the cells without a grade_id (which students add or may edit freely) are audited: tamper detection
    looks after the instructor's. Imports in every code cell still count for resolving aliases."""
    cells = nb.get("cells") if isinstance(nb, dict) else None
    # Parsing builds millions of small objects that all stay alive until the end; the cyclic
    # collector would walk them again and again (half the time on a 20,000-cell notebook).
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _audit_cells(cells, answer_ids) if isinstance(cells, list) else []
    finally:
        if collecting:
            gc.enable()


def _audit_cells(cells: list, answer_ids: set[str] | None) -> list[Finding]:
    prepared = []  # (label, grade_id, lines, tree, hits)
    budget = AUDIT_BUDGET_CHARS
    for index, cell in enumerate(cells):
        source = cell_source(cell).replace("\r\n", "\n").replace("\r", "\n") \
            if isinstance(cell, dict) and cell.get("cell_type") == "code" else ""
        if not source.strip():
            continue
        lines, grade_id = source.split("\n"), cell_grade_id(cell)
        if len(source) > budget:  # the audit stops here, whoever owns the cell
            prepared.append((grade_id or f"cell {index + 1}", None, lines, None,
                             [(len(source) - len(source.lstrip("\n")) + 1, OVERSIZED)]))
            break
        budget -= len(source)
        hits = [(1, OVERSIZED), *_text_hits(source)] if len(source) > AST_CELL_CHARS else None
        prepared.append((grade_id or f"cell {index + 1}", grade_id, lines,
                         *((None, hits) if hits else _prepare(source, lines))))
    aliases = _collect_aliases(tree for *_, tree, _ in prepared if tree is not None)
    names = {name: what for name, resolved in aliases.items() if (what := _check_qualified(resolved))}
    findings: list[Finding] = []
    for label, grade_id, lines, tree, hits in prepared:
        if len(findings) >= MAX_FINDINGS:
            break
        if answer_ids is not None and grade_id is not None and grade_id not in answer_ids:
            continue
        if tree is not None:
            walker = _CellAudit(aliases, names)
            walker.run(tree)
            hits = hits + walker.hits
        for line, what in dict.fromkeys(sorted(hits, key=lambda hit: hit[0])):  # stable: discovery order in a line
            findings.append(Finding(label, line, what, _clip(lines[line - 1] if 0 < line <= len(lines) else "")))
    return findings[:MAX_FINDINGS]


def summarise(findings: list[Finding], limit: int = 8) -> str:
    """One line for a CSV reason column: ``review: <what> at <cell> line <n> (`<code>`); ...``, the
    first ``limit`` findings and then ``... and N more``; "" when there is nothing to review."""
    shown = []
    for finding in findings[:max(limit, 0)]:
        code = _clip(finding.code.replace("`", "'"), 60)
        shown.append(f"{finding.what} at {finding.cell} line {finding.line} (`{code}`)")
    if len(findings) > len(shown):
        shown.append(f"... and {len(findings) - len(shown)} more")
    return "review: " + "; ".join(shown) if findings else ""


#: Exit status of :func:`main` when the audit ran out of memory under its cap.
OUT_OF_MEMORY = 3


def main(argv: list[str] | None = None) -> int:
    """``python -m grader.audit [--mem-bytes N] [--cpu-seconds S]``: audit the notebook read as JSON from
    stdin (``{"cells": [...], "answer_ids": [...] or null}``), print ``{"findings": [[cell, line, what,
    code], ...]}``. The caps are set before anything is read, so no notebook can take the grader's memory
    or time (grader/audit_step.py adds a wall-time limit). Exits 3 when the memory cap was hit."""
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
