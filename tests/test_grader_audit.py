"""grader/audit.py: the static audit of submitted notebooks. Hostile snippets (written several ways:
aliasing, getattr strings, nested in functions, class bodies, decorators, default arguments, lambdas)
must be flagged on the right line; honest homework code must produce no finding at all."""

from __future__ import annotations

import dataclasses
import json
import textwrap
import time

import pytest

from conftest import SOLUTIONS
from grader.audit import MAX_FINDINGS, Finding, audit_notebook, audit_source, summarise


def _code(source: str, grade_id: str | None = None) -> dict:
    meta = {"nbgrader": {"grade_id": grade_id, "solution": True, "grade": False}} if grade_id else {}
    return {"cell_type": "code", "metadata": meta, "source": source, "outputs": [], "execution_count": None}


def _markdown(source: str) -> dict:
    return {"cell_type": "markdown", "metadata": {}, "source": source}


def _nb(*cells: dict) -> dict:
    return {"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": list(cells)}


# (snippet, expected category, expected 1-based line). Snippets are dedented.
IPYTHON_HOOK = "IPython hook"
HOSTILE = [
    # ---- IPython internals -----------------------------------------------------------------------
    ("ip = get_ipython()\nip.events.register('post_run_cell', lambda r: None)", IPYTHON_HOOK, 1),
    ("x = 1\nget_ipython().events.register('pre_run_cell', print)", IPYTHON_HOOK, 2),
    ("def quiet(shell):\n    shell.events.register('post_run_cell', print)", IPYTHON_HOOK, 2),
    ("import IPython\nsh = IPython.get_ipython()", IPYTHON_HOOK, 2),
    ("from IPython import get_ipython as g\nshell = g()", IPYTHON_HOOK, 1),
    ("f = getattr(__builtins__, 'get_' + 'ipython')", IPYTHON_HOOK, 1),
    ("shell = sh\nshell.set_custom_exc((AssertionError,), lambda *a: None)", IPYTHON_HOOK, 2),
    ("def install(sh):\n    m = getattr(sh, 'set_custom_exc')\n    m((Exception,), None)", IPYTHON_HOOK, 2),
    ("name = ''.join(['set_', 'custom', '_exc'])", IPYTHON_HOOK, 1),
    ("sh.input_transformers_cleanup.append(lambda lines: [])", IPYTHON_HOOK, 1),
    ("class T:\n    def attach(self, sh):\n        sh.input_transformers_post.insert(0, self)", IPYTHON_HOOK, 3),
    ("sh.input_transformer_manager.cleanup_transforms.clear()", IPYTHON_HOOK, 1),
    ("import ast\nsh.ast_transformers.append(ast.NodeTransformer())", IPYTHON_HOOK, 2),
    ("sh.displayhook = lambda value: None", "interpreter hook", 1),
    ("sh.display_pub.publish = lambda *a, **k: None", IPYTHON_HOOK, 1),
    ("sh.showtraceback = lambda *a, **k: None", IPYTHON_HOOK, 1),
    ("sh.showsyntaxerror = print", IPYTHON_HOOK, 1),
    ("from IPython.core.interactiveshell import InteractiveShell\nInteractiveShell.instance()", IPYTHON_HOOK, 1),
    ("from IPython.core.interactiveshell import InteractiveShell\nInteractiveShell.instance()", IPYTHON_HOOK, 2),
    ("shell.register_magic_function(lambda line: None, 'line', 'nop')", IPYTHON_HOOK, 1),
    ("from IPython.core.magic import register_cell_magic\n@register_cell_magic\ndef m(line, cell):\n    pass",
     IPYTHON_HOOK, 2),
    ("%%capture\nresult = 3", "IPython magic", 1),
    ("\n%%capture captured\nimport os\nos._exit(0)", "IPython magic", 2),
    ("\n%%capture captured\nimport os\nos._exit(0)", "process control", 4),
    ("%%writefile utils/presets.py\nPRESETS = ()", "shell escape", 1),
    ("!rm -rf ~/.cache", "shell escape", 1),
    ("x = 1\n  !ls /", "shell escape", 2),
    ("for i in range(2):\n    !echo $i\nimport sys\nsys.modules", "shell escape", 2),
    ("for i in range(2):\n    !echo $i\nimport sys\nsys.modules", "sys.modules", 4),
    ("files = !ls grading", "shell escape", 1),
    ("%load_ext autoreload\n%autoreload 2", "IPython magic", 1),
    ("%run -i other.py", "shell escape", 1),
    ("import sys\nsys.excepthook = lambda *a: None", "interpreter hook", 2),
    ("import sys as _s\n\ndef quiet(hook=_s.excepthook):\n    return hook", "interpreter hook", 3),
    ("import sys\nsys.displayhook = print", "interpreter hook", 2),
    ("import sys\nsys.settrace(lambda *a: None)", "interpreter hook", 2),
    ("from sys import settrace\nsettrace(None)", "interpreter hook", 1),
    ("import sys\nsys.setprofile(print)", "interpreter hook", 2),
    ("import sys\n(lambda: sys.addaudithook(print))()", "interpreter hook", 2),
    ("hook = getattr(__import__('sys'), 'add' + 'audithook')", "interpreter hook", 1),
    # ---- import machinery, builtins --------------------------------------------------------------
    ("import sys\nsys.modules['torch'].allclose", "sys.modules", 2),
    ("import sys as s\nmods = s.modules", "sys.modules", 2),
    ("from sys import modules as m\nm.pop('grader', None)", "sys.modules", 1),
    ("import sys\nmods = getattr(sys, 'modules')", "sys.modules", 2),
    ("import sys\nalias = sys\n\ndef f():\n    return alias.modules", "sys.modules", 5),
    ("m = __import__('sys').modules", "sys.modules", 1),
    ("import sys\nif (s := sys).modules:\n    pass", "sys.modules", 2),
    ("import sys\nm = vars(sys)['modu' + 'les']", "sys.modules", 2),
    ("import importlib\nimportlib.reload(torch)", "import machinery", 2),
    ("import importlib as il\nmod = il.import_module(name)", "import machinery", 2),
    ("from importlib import import_module\n\ndef load(n):\n    return import_module(n)", "import machinery", 4),
    ("from importlib import reload\nreload(np)", "import machinery", 1),
    ("x = __import__('os')", "import machinery", 1),
    ("loader = lambda n: __import__(n)", "import machinery", 1),
    ("import builtins\nbuiltins.print = lambda *a: None", "builtins", 1),
    ("import builtins as b\nb.isinstance = lambda *a: True", "builtins", 2),
    ("from builtins import setattr as s", "builtins", 1),
    ("__builtins__.abs = lambda x: 0", "builtins", 1),
    ("def f(b=__builtins__):\n    return b", "builtins", 1),
    ("import importlib\nimportlib.import_module('built' + 'ins').len = max", "builtins", 2),
    # ---- introspection, patching -----------------------------------------------------------------
    ("def f(): pass\ndef g(): return 1\nf.__code__ = g.__code__", "introspection", 3),
    ("code = getattr(check, '__co' + 'de__')", "introspection", 1),
    ("@decorate\ndef f(x, c=other.__code__):\n    return x", "introspection", 2),
    ("g = check_info_nce_loss.__globals__\ng['torch'] = fake", "introspection", 1),
    ("class A:\n    g = staticmethod(lambda f: f.__globals__)", "introspection", 2),
    ("cells = fn.__closure__", "introspection", 1),
    ("def rig(check):\n    check.__defaults__ = (1e9,)", "introspection", 2),
    ("v = [c.cell_contents for c in getattr(fn, '__closure__')]", "introspection", 1),
    ("subs = object.__subclasses__()", "introspection", 1),
    ("subs = type.__subclasses__(object)", "introspection", 1),
    ("base = x.__class__.__mro__[-1]", "introspection", 1),
    ("b = ().__class__.__base__.__subclasses__()", "introspection", 1),
    ("import torch\ntorch.Tensor.__dict__['allclose'] = f", "__dict__ write", 2),
    ("obj.__dict__.update(values)", "__dict__ write", 1),
    ("globals()['check_nce_loss'] = lambda f: None", "__dict__ write", 1),
    ("def patch(o):\n    o.__dict__ = {}", "__dict__ write", 2),
    ("vars(module)['torch'] = None", "__dict__ write", 1),
    ("result.__class__ = Liar", "__class__ assignment", 1),
    ("def lie(t):\n    t.__class__ = type('X', (type(t),), {})\n    return t", "__class__ assignment", 2),
    ("class A:\n    def __init__(self, v):\n        self.__class__ = B", "__class__ assignment", 3),
    ("setattr(torch, 'allclose', lambda *a, **k: True)", "setattr", 1),
    ("s = setattr\ns(np, 'isclose', f)", "setattr", 1),
    ("class X:\n    def __init__(self):\n        setattr(self, 'v', 1)", "setattr", 3),
    ("object.__setattr__(frozen, 'x', 1)", "setattr", 1),
    ("import torch\ntorch.allclose = lambda *a, **k: True", "monkeypatch", 2),
    ("import numpy as np\nnp.isclose = lambda *a, **k: True", "monkeypatch", 2),
    ("import numpy as xp\nxp.testing.assert_allclose = print", "monkeypatch", 2),
    ("import math\nmath.isclose = lambda *a, **k: True", "monkeypatch", 2),
    ("import torch.nn.functional as F\nF.cross_entropy = my_loss", "monkeypatch", 2),
    ("import torch.nn.functional as Fn\nFn.logsigmoid = my_logsigmoid", "monkeypatch", 2),
    ("from torch import nn\nnn.Module.__call__ = fake_call", "monkeypatch", 2),
    ("import torch\ntorch.Tensor.__eq__ = lambda a, b: True", "monkeypatch", 2),
    ("import torch\ndef go():\n    torch.manual_seed.count += 1", "monkeypatch", 3),
    ("import sys\nsys.stdout = open('/dev/null', 'w')", "monkeypatch", 2),
    ("import os\nos.environ, os.sep = {}, '/'", "monkeypatch", 2),
    ("import scipy\ndel scipy.stats", "monkeypatch", 2),
    # ---- the grader --------------------------------------------------------------------------------
    ("import grader", "grader reference", 1),
    ("from grader.checks.task1_infonce import check_nce_loss\ncheck_nce_loss(f)", "grader reference", 1),
    ("from grader.checks.task1_infonce import check_nce_loss\ncheck_nce_loss(f)", "grader reference", 2),
    ("import nbgrader.apps", "grader reference", 1),
    ("x = 1\nopen('../grader/checks/task1_infonce.py').read()", "grader reference", 2),
    ("import os\nos.remove(os.path.join('grading', 'gradebook.db'))", "grader reference", 2),
    ("import os\nif os.environ.get('NBGRADER_EXECUTION'):\n    pass", "grader reference", 2),
    ("path = 'gra' + 'der'", "grader reference", 1),
    ("path = 'redarg'[::-1]", "grader reference", 1),
    ("import os\nlimits = os.environ['LAS_SANDBOX_LIMITS']", "grader reference", 2),
    ("def f(mod=importlib.import_module('grader.checks')):\n    pass", "grader reference", 1),
    ("class A:\n    src = f'{root}/nbgrader_config.py'", "grader reference", 2),
    # ---- escape hatches ----------------------------------------------------------------------------
    ("import ctypes\nctypes.pythonapi.PyObject_SetAttr", "native code", 1),
    ("from ctypes import CDLL as lib\nlib(None)", "native code", 1),
    ("def f():\n    import ctypes as c\n    return c.cast(1, c.py_object)", "native code", 2),
    ("import importlib\nc = importlib.import_module('ct' + 'ypes')", "native code", 2),
    ("from cffi import FFI\nffi = FFI()", "native code", 1),
    ("import gc\nobjs = gc.get_objects()", "gc introspection", 2),
    ("import gc as g\nrefs = g.get_referrers(check)", "gc introspection", 2),
    ("from gc import get_objects\n[o for o in get_objects() if callable(o)]", "gc introspection", 1),
    ("import inspect\nframe = inspect.currentframe().f_back", "frame inspection", 2),
    ("import inspect\nfor fr in inspect.stack():\n    pass", "frame inspection", 2),
    ("import sys\nf = sys._getframe(1)", "frame inspection", 2),
    ("def up():\n    return getattr(frame, 'f_' + 'globals')", "frame inspection", 2),
    ("try:\n    1 / 0\nexcept Exception as e:\n    e.__traceback__.tb_frame.f_locals", "frame inspection", 4),
    ("import signal\nsignal.signal(signal.SIGALRM, signal.SIG_IGN)", "signal handler", 2),
    ("from signal import alarm as a\na(0)", "signal handler", 1),
    ("import signal as sg\n@sg.signal.__call__\ndef h(): pass", "signal handler", 2),
    ("import os\nos._exit(0)", "process control", 2),
    ("import os\nos.kill(os.getpid(), 9)", "process control", 2),
    ("import os as o\nif o.fork() == 0:\n    pass", "process control", 2),
    ("import posix\nposix._exit(3)", "process control", 2),
    ("import os\nos.system('ls')", "process control", 2),
    ("import subprocess\nsubprocess.run(['ls'])", "process control", 1),
    ("from subprocess import check_output as co", "process control", 1),
    ("def f():\n    import multiprocessing\n    multiprocessing.Process(target=print).start()", "process control", 2),
    ("import torch.multiprocessing as mp", "process control", 1),
    ("import threading\nthreading.Thread(target=print).start()", "threading", 1),
    ("from threading import Timer\nTimer(1, print).start()", "threading", 1),
    ("import _thread\n_thread.start_new_thread(print, ())", "threading", 1),
    ("import socket\ns = socket.socket()", "socket", 1),
    ("from socket import create_connection", "socket", 1),
    ("import importlib\nimportlib.import_module('so' + 'cket')", "socket", 2),
    ("import os\nfor fd in range(1, 40):\n    os.write(fd, b'ok')", "raw file descriptor", 3),
    ("import os as o\nw = getattr(o, 'dup' + '2')", "raw file descriptor", 2),
    ("def forge(lines):\n    with open('/proc/self/fd/1', 'ab') as f:\n        f.write(lines)", "raw file descriptor", 2),
    ("import os\nos.kill(os.getppid(), 15)", "process control", 2),
    # ---- dynamic code ------------------------------------------------------------------------------
    ("eval('1 + 1')", "dynamic code", 1),
    ("x = 2\nexec(src, globals())", "dynamic code", 2),
    ("f = lambda s: exec(s)", "dynamic code", 1),
    ("code = compile('x = 1', '<s>', 'exec')", "dynamic code", 1),
    ("class A:\n    run = staticmethod(eval)", "dynamic code", 2),
    ("@lambda f: exec(f.__doc__)\ndef g():\n    '''print(1)'''", "dynamic code", 1),
    ("import pickle\nobj = pickle.loads(blob)", "deserialisation", 2),
    ("from pickle import load as ld\nld(open('x.pkl', 'rb'))", "deserialisation", 1),
    ("import marshal\ncode = marshal.loads(data)", "deserialisation", 1),
    ("import dill\nf = dill.loads(data)", "deserialisation", 2),
    ("import base64\nsrc = base64.b64decode('cHJpbnQoMSk=')", "encoded payload", 2),
    ("import base64 as b\nexec(b.b85decode(payload))", "encoded payload", 2),
    ("import codecs\ns = codecs.decode('cevag', 'rot13')", "encoded payload", 2),
    ("from base64 import urlsafe_b64decode as d", "encoded payload", 1),
    ("import zlib\nsrc = zlib.decompress(blob)", "encoded payload", 2),
    # ---- comparison overrides ----------------------------------------------------------------------
    ("class Liar:\n    def __eq__(self, other):\n        return True", "comparison override", 2),
    ("class Liar:\n    def __bool__(self):\n        return True", "comparison override", 2),
    ("class Liar:\n    @property\n    def x(self):\n        return 1\n    def __float__(self):\n        return 0.0",
     "comparison override", 5),
    ("class Liar:\n    def __array__(self, dtype=None):\n        return expected", "comparison override", 2),
    ("class Liar:\n    @classmethod\n    def __torch_function__(cls, func, types, args=(), kwargs=None):\n"
     "        return True", "comparison override", 3),
    ("class Meta(type):\n    def __instancecheck__(cls, obj):\n        return True", "comparison override", 2),
    ("class Liar:\n    __eq__ = lambda self, other: True", "comparison override", 2),
    ("Liar = type('Liar', (), {'__eq__': lambda s, o: True})", "comparison override", 1),
    ("class T(torch.Tensor):\n    pass", "comparison override", 1),
    ("class Half(float):\n    pass", "comparison override", 1),
    ("import numpy as np\nclass A(np.ndarray):\n    pass", "comparison override", 2),
    ("def make():\n    class L:\n        def __ge__(self, o):\n            return True\n    return L()",
     "comparison override", 3),
    ("from torch.overrides import TorchFunctionMode", "comparison override", 1),
    # ---- judge detection by the stack or the environment, deliberate crashes (round 5) ----------------
    ("import traceback\nif any('probe' in f.name for f in traceback.extract_stack()):\n    pass", "frame inspection", 2),
    ("from traceback import walk_stack", "frame inspection", 1),
    ("import os\njudged = any(k.startswith('LAS') for k in os.environ.keys())", "environment scan", 2),
    ("import os\nsnapshot = os.environ.copy()", "environment scan", 2),
    ("import faulthandler\nfaulthandler._sigsegv()", "process control", 1),
    ("import importlib\nimportlib.import_module('fault' + 'handler')", "process control", 2),
    # ---- unparseable -------------------------------------------------------------------------------
    ("def f(:\n    return get_ipython()", "unparseable code", 1),
    ("def f(:\n    return get_ipython()", IPYTHON_HOOK, 2),
    ("x = 1\ny = (\nimport ctypes", "native code", 3),
    ("x = 1\nprint 'hello'", "unparseable code", 2),
]


@pytest.mark.parametrize(("snippet", "what", "line"), HOSTILE, ids=[f"{i:03d}-{w}" for i, (_, w, _) in enumerate(HOSTILE)])
def test_hostile_snippets_are_flagged_on_their_line(snippet, what, line):
    findings = audit_source(textwrap.dedent(snippet), "task_x")
    assert (line, what) in {(f.line, f.what) for f in findings}, findings
    finding = next(f for f in findings if (f.line, f.what) == (line, what))
    assert finding.cell == "task_x"
    assert finding.code == snippet.split("\n")[line - 1].strip()[:120]


HONEST = [
    # losses and maths
    """
    import math

    import torch
    import torch.nn.functional as F


    def nce_loss(scores: torch.Tensor) -> torch.Tensor:
        logits = scores - math.log(scores.shape[-1] - 1)
        pos = F.logsigmoid(logits[..., 0])
        neg = F.logsigmoid(-logits[..., 1:]).sum(-1)
        return -(pos + neg).mean()
    """,
    """
    import torch


    def info_nce_loss(scores: torch.Tensor, positive_index: torch.Tensor | None = None) -> torch.Tensor:
        assert scores.dim() == 2, "scores must be [batch, candidates]"
        if positive_index is None:
            positive_index = torch.zeros(len(scores), dtype=torch.long, device=scores.device)
        return torch.nn.functional.cross_entropy(scores, positive_index)
    """,
    """
    import torch

    def cosine_scores(anchors, candidates, temperature=0.1):
        a = torch.nn.functional.normalize(anchors, dim=-1)
        c = torch.nn.functional.normalize(candidates, dim=-1)
        return torch.einsum("bd,bkd->bk", a, c) / temperature
    """,
    """
    import numpy as np

    def gaussian_mutual_information(rho: float, dim: int) -> float:
        if not -1 < rho < 1:
            raise ValueError(f"rho must lie in (-1, 1), got {rho}")
        return -0.5 * dim * np.log1p(-rho ** 2)
    """,
    """
    import torch

    def log_marginal(x, W, mu, sigma2):
        x = x.to(torch.float64)
        total = torch.zeros(len(x), dtype=torch.float64)
        for i in range(len(x)):
            d = x[i] - mu
            total[i] = -0.5 * (d @ d) / sigma2
        return total
    """,
    """
    import numpy as np
    from sklearn.linear_model import LogisticRegression

    def linear_probe_accuracy(train_feats, train_labels, test_feats, test_labels):
        clf = LogisticRegression(max_iter=1000, C=1.0)
        clf.fit(np.asarray(train_feats), np.asarray(train_labels))
        return float((clf.predict(np.asarray(test_feats)) == np.asarray(test_labels)).mean())
    """,
    """
    import warnings

    def check_batch(batch):
        if len(batch) < 2:
            warnings.warn("a batch of one has no negatives", RuntimeWarning, stacklevel=2)
        print(f"batch of {len(batch)}")
    """,
    """
    from tqdm.auto import tqdm

    losses = []
    for step in tqdm(range(100), desc="training"):
        losses.append(step ** 0.5)
    print("final", losses[-1])
    """,
    """
    import torch
    from torch import nn

    torch.manual_seed(0)


    class ProjectionHead(nn.Module):
        def __init__(self, d_in: int, d_hidden: int, d_out: int):
            super().__init__()
            self.net = nn.Sequential(nn.Linear(d_in, d_hidden), nn.ReLU(), nn.Linear(d_hidden, d_out))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.net(x)
    """,
    """
    import torch

    @torch.no_grad()
    def knn_accuracy(train_feats, train_labels, test_feats, test_labels, k=20):
        sims = test_feats @ train_feats.T
        idx = sims.topk(k, dim=1).indices
        votes = train_labels[idx].mode(dim=1).values
        return (votes == test_labels).float().mean().item()
    """,
    """
    from __future__ import annotations

    from dataclasses import dataclass, field


    @dataclass(frozen=True)
    class Config:
        lr: float = 1e-3
        epochs: int = 3
        sizes: list[int] = field(default_factory=lambda: [64, 128])
    """,
    """
    import torch

    def masked_copies(input_ids: torch.Tensor, positions: torch.Tensor, mask_token_id: int) -> torch.Tensor:
        copies = input_ids.repeat(len(positions), 1)
        copies[torch.arange(len(positions)), positions] = mask_token_id
        return copies
    """,
    """
    import math
    import sys

    def report(values):
        sys.stderr.write(f"{len(values)} values\\n")
        print(type(values).__name__, values.__class__.__name__)
        return math.fsum(values)
    """,
    """
    from utils.device import get_device

    device = get_device()
    x = [1, 2, 3]
    assert isinstance(x, list), "x should be a list"
    """,
    """
    import torch
    import torch.nn as nn


    class Encoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 16, 3, padding=1)
            self.pool = nn.AdaptiveAvgPool2d(1)

        def forward(self, x):
            return self.pool(torch.relu(self.conv(x))).flatten(1)


    model = Encoder()
    model.fc = nn.Identity()
    optimiser = torch.optim.Adam(model.parameters(), lr=1e-3)
    """,
    """
    import torch

    def simclr_train_step(encoder, head, optimiser, x1, x2, temperature=0.5):
        encoder.train(); head.train()
        z1, z2 = head(encoder(x1)), head(encoder(x2))
        loss = nt_xent_loss(z1, z2, temperature)
        optimiser.zero_grad(set_to_none=True)
        loss.backward()
        optimiser.step()
        return loss.item()
    """,
    """
    import re

    pattern = re.compile(r"pythia-(\\d+)m")
    sizes = [int(m.group(1)) for m in map(pattern.search, ["pythia-70m", "pythia-160m"]) if m]
    model.eval()
    """,
    """
    import numpy as np
    from scipy.optimize import curve_fit

    def fit_power_law(N, L):
        logN, logL = np.log(N), np.log(L)
        slope, intercept = np.polyfit(logN, logL, 1)
        return {"alpha": -slope, "A": float(np.exp(intercept))}
    """,
    """
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot([1, 2, 3], [3, 2, 1], label="loss")
    ax.set_xscale("log")
    ax.legend()
    plt.show()
    """,
    """
    %matplotlib inline
    import torch
    torch.backends.cudnn.benchmark = True
    torch.set_default_dtype(torch.float64)
    """,
    """
    import torch
    from torch.utils.data import DataLoader, Dataset


    class Pairs(Dataset):
        def __init__(self, data):
            self.data = data

        def __len__(self):
            return len(self.data)

        def __getitem__(self, i):
            return self.data[i], self.data[(i + 1) % len(self.data)]

        def __repr__(self):
            return f"Pairs({len(self)})"


    loader = DataLoader(Pairs(torch.randn(10, 3)), batch_size=4, shuffle=True, num_workers=0)
    """,
    """
    import gc
    import os

    import torch

    def free_memory():
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        os.makedirs(os.path.join("build", "cache"), exist_ok=True)
    """,
    """
    import numpy as np

    rng = np.random.default_rng(0)
    X = rng.normal(size=(100, 5)).astype(np.float64)
    cov = np.einsum("ni,nj->ij", X, X) / len(X)
    eigvals, eigvecs = np.linalg.eigh(cov)
    np.set_printoptions(precision=3)
    print(eigvals)
    """,
    """
    import torch

    def count_parameters(model) -> tuple[int, int]:
        total = sum(p.numel() for p in model.parameters())
        embed = sum(p.numel() for n, p in model.named_parameters() if "embed" in n)
        return total, total - embed
    """,
    """
    import pandas as pd

    results = pd.DataFrame({"model": ["a", "b"], "loss": [1.0, 0.5]})
    best = results.loc[results["loss"].idxmin()]
    print(best.to_string())
    """,
    """
    import torch

    def bert_mask(input_ids, special_token_ids, mask_token_id, vocab_size, p=0.15, generator=None):
        special = torch.isin(input_ids, torch.as_tensor(list(special_token_ids)))
        chosen = (torch.rand(input_ids.shape, generator=generator) < p) & ~special
        labels = torch.where(chosen, input_ids, torch.full_like(input_ids, -100))
        masked = input_ids.clone()
        masked[chosen] = mask_token_id
        return masked, labels
    """,
    """
    from typing import Callable, Sequence

    def apply_all(fns: Sequence[Callable[[float], float]], x: float) -> list[float]:
        \"\"\"Apply each function; the grader-free docstring words are inert.\"\"\"
        return [fn(x) for fn in fns]
    """,
    """
    import torch

    class Temperature(torch.nn.Module):
        def __init__(self, init: float = 0.07):
            super().__init__()
            self.log_t = torch.nn.Parameter(torch.tensor(init).log())

        def forward(self, logits):
            return logits / self.log_t.exp()


    with torch.no_grad():
        t = Temperature()
        print(t(torch.ones(3)))
    """,
    """
    import os
    import random

    import numpy as np
    import torch

    def seed_everything(seed: int = 0) -> None:
        random.seed(seed)
        np.random.seed(seed)
        torch.manual_seed(seed)
        os.environ["PYTHONHASHSEED"] = str(seed)
    """,
    """
    import torch

    def single_index_estimate(model, input_ids, num_samples=64, generator=None):
        idx = torch.randint(0, input_ids.shape[-1], (num_samples,), generator=generator)
        try:
            out = model(input_ids[..., idx])
        except RuntimeError as err:
            raise ValueError(f"model failed on {tuple(input_ids.shape)}") from err
        return out.mean(), out.std() / num_samples ** 0.5
    """,
    """
    torch.nn.Linear?
    total = sum(range(10))
    """,
    """
    import numpy as np

    t = np.linspace(0, 1, 100)
    signal = np.sin(2 * np.pi * 5 * t)
    noise = signal - signal.mean()
    """,
    """
    from IPython.display import HTML, display

    display(HTML("<b>done</b>"))
    if __name__ == "__main__":
        print(__name__)
    """,
    """
    import json
    import pickle
    from concurrent.futures import ThreadPoolExecutor

    with open("stats.pkl", "wb") as fh:
        pickle.dump({"loss": 0.1}, fh)
    config = json.load(open("config.json"))
    with ThreadPoolExecutor(2) as pool:
        sizes = list(pool.map(len, ["a", "bb"]))
    """,
    """
    import os

    import matplotlib.pyplot as plt

    plt.rcParams["figure.figsize"] = (8, 4)
    os.environ["OMP_NUM_THREADS"] = "1"
    print("grade: 5 / 5")
    """,
]


@pytest.mark.parametrize("snippet", HONEST, ids=[f"honest-{i:02d}" for i in range(len(HONEST))])
def test_honest_homework_code_is_not_flagged(snippet):
    assert audit_source(textwrap.dedent(snippet)) == []


def test_the_solutions_student_cells_are_clean():
    for path in sorted(SOLUTIONS.glob("*.ipynb")):
        nb = json.loads(path.read_text(encoding="utf-8"))
        answers = {c["metadata"]["nbgrader"]["grade_id"] for c in nb["cells"]
                   if c.get("metadata", {}).get("nbgrader", {}).get("solution")}
        assert answers, path
        assert audit_notebook(nb, answers) == [], path


def test_answer_ids_skip_instructor_cells_but_keep_their_aliases():
    nb = _nb(
        _code("import sys as s\nimport torch", "setup"),
        _code("def f(x):\n    return s.modules", "answer"),
        _code("from grader.checks.task1_infonce import check\ncheck(f)", "test_answer"),
        _code("get_ipython()"),  # a cell the student added: no grade_id
    )
    findings = audit_notebook(nb, {"answer"})
    assert [(f.cell, f.line, f.what) for f in findings] == [
        ("answer", 2, "sys.modules"), ("cell 4", 1, "IPython hook")]
    everything = audit_notebook(nb)
    assert {f.cell for f in everything} == {"answer", "test_answer", "cell 4"}


def test_labels_markdown_and_source_lists():
    nb = _nb(
        _markdown("Run `get_ipython()` and `import ctypes` at your peril."),
        _code(["x = 1\n", "import ctypes\n"]),
        _markdown("more"),
        _code(["y = 2\r\n", "z = eval('3')\r\n"], "task_y"),
        {"cell_type": "raw", "metadata": {}, "source": "exec('x')"},
    )
    assert audit_notebook(nb) == [
        Finding("cell 2", 2, "native code", "import ctypes"),
        Finding("task_y", 2, "dynamic code", "z = eval('3')"),
    ]


TEXT_SCAN = [  # one line per category, in a cell that does not parse: the regex fallback sees them
    ("def broken(:", "unparseable code"),
    ("get_ipython().events.register('x', f)", "IPython hook"),
    ("sys.excepthook = f", "interpreter hook"),
    ("m = sys.modules", "sys.modules"),
    ("importlib.reload(m)", "import machinery"),
    ("__builtins__.len = max", "builtins"),
    ("c = f.__code__", "introspection"),
    ("o.__dict__['x'] = 1", "__dict__ write"),
    ("o.__class__ = B", "__class__ assignment"),
    ("setattr(o, 'x', 1)", "setattr"),
    ("torch.allclose = f", "monkeypatch"),
    ("    def __eq__(self, o): return True", "comparison override"),
    ("open('Grader/checks/x.py')", "grader reference"),
    ("lib = ctypes.CDLL(None)", "native code"),
    ("gc.get_objects()", "gc introspection"),
    ("sys._getframe(1).f_back", "frame inspection"),
    ("signal.signal(2, h)", "signal handler"),
    ("os._exit(0)", "process control"),
    ("threading.Thread(target=f)", "threading"),
    ("s = socket.socket()", "socket"),
    ("exec(code)", "dynamic code"),
    ("pickle.loads(b)", "deserialisation"),
    ("base64.b64decode(s)", "encoded payload"),
    ("os.write(1, b'x')", "raw file descriptor"),
    ("model.eval(); re.compile('x'); os.path.join('a', 'b'); self.x = F.relu(signal.mean())", None),
]


def test_unparseable_cells_get_the_text_scan():
    findings = audit_source("\n".join(line for line, _ in TEXT_SCAN), "bad")
    found = {(f.line, f.what) for f in findings}
    for number, (line, what) in enumerate(TEXT_SCAN, start=1):
        if what is None:
            assert not [f for f in findings if f.line == number], findings
        else:
            assert (number, what) in found, (line, what)
    assert {what for _, what in TEXT_SCAN if what} <= {f.what for f in findings}


def test_every_text_pattern_has_anchors():
    from grader import audit

    for what, pattern, anchors, exact in audit._TEXT_RULES:
        assert anchors or exact, what
        assert all(a == a.lower() for a in anchors), what


def test_malformed_notebooks_do_not_crash():
    assert audit_notebook({}) == []
    assert audit_notebook({"cells": None}) == []
    assert audit_notebook(_nb({"cell_type": "code"}, {"cell_type": "code", "source": 3}, "junk")) == []
    assert audit_source("x = 1\0")[0].what == "unparseable code"  # a NUL byte: ast refuses it


def test_one_finding_per_line_and_category_and_code_is_clipped():
    line = "get_ipython(); get_ipython().events.register('x', f); y = " + "1 + " * 60 + "1"
    findings = audit_source(line)
    assert [(f.line, f.what) for f in findings] == [(1, "IPython hook")]
    assert len(findings[0].code) == 120 and findings[0].code.endswith("...")


def test_finding_is_frozen():
    finding = Finding("a", 1, "setattr", "setattr(x, 'y', 1)")
    with pytest.raises(dataclasses.FrozenInstanceError):
        finding.line = 2  # type: ignore[misc]
    assert finding == Finding("a", 1, "setattr", "setattr(x, 'y', 1)")


def test_findings_are_capped():
    nb = _nb(*[_code("eval('1')\n" * 10) for _ in range(300)])
    findings = audit_notebook(nb)
    assert len(findings) == MAX_FINDINGS == 2000
    assert findings[-1].cell == "cell 200" and findings[-1].line == 10


def test_magic_lines_keep_the_rest_of_the_cell_audited():
    findings = audit_source("%time x = 1\nimport os\nos._exit(1)\n!ls\nfoo?")
    assert [(f.line, f.what) for f in findings] == [
        (1, "IPython magic"), (3, "process control"), (4, "shell escape")]
    # a non-Python cell magic's body is scanned as text, not parsed
    findings = audit_source("%%bash\necho hi\npython -c 'import ctypes'\ncat grader/checks/x.py")
    assert [(f.line, f.what) for f in findings] == [
        (1, "shell escape"), (3, "native code"), (4, "grader reference")]


def test_a_valid_continuation_line_starting_with_percent_is_not_a_magic():
    assert audit_source("x = (10\n     % 3)\ny = (x\n!= 2)") == []


def test_summarise():
    findings = [Finding("task_x", 3, "IPython hook", "get_ipython().events.register('post_run_cell', cb)")]
    findings += [Finding(f"cell {i}", 1, "sys.modules", "sys.modules['torch']") for i in range(7, 19)]
    text = summarise(findings)
    assert text.startswith("review: IPython hook at task_x line 3 (`get_ipython().events.register('post_run_cell', cb)`); "
                           "sys.modules at cell 7 line 1 (`sys.modules['torch']`); ")
    assert text.endswith("; sys.modules at cell 13 line 1 (`sys.modules['torch']`); ... and 5 more")
    assert text.count(" at ") == 8 and "\n" not in text
    assert summarise([]) == ""
    assert summarise(findings[:2]) == ("review: IPython hook at task_x line 3 "
                                       "(`get_ipython().events.register('post_run_cell', cb)`); "
                                       "sys.modules at cell 7 line 1 (`sys.modules['torch']`)")
    assert summarise(findings, limit=1).endswith("; ... and 12 more")
    long = summarise([Finding("c", 1, "dynamic code", "exec(`" + "x" * 200 + "`)")])
    assert "`" not in long[len("review: dynamic code at c line 1 (`"):-2] and len(long) < 120


SHORT_CELLS = [
    "print(loss.item())",
    "x = torch.randn(8, 16)\ny = F.normalize(x, dim=-1)",
    "losses.append(float(loss))",
    "model.eval()\nacc = knn_accuracy(train_feats, train_labels, test_feats, test_labels)",
    "fig, ax = plt.subplots()\nax.plot(steps, losses)\nplt.show()",
    "assert out.shape == (8, 16), out.shape",
    "results.head()",
    "for k, v in stats.items():\n    print(f\"{k:>10}: {v:.4f}\")",
    "# TODO: try a larger temperature\ntemperature = 0.2",
]


# Timings are CPU seconds of this process (time.process_time): the audit never waits, and wall time
# on a machine shared with other jobs says more about the neighbours than about the audit.
def test_twenty_thousand_cells_in_under_five_seconds():
    cells = []
    for i in range(20_000):
        if i % 100 == 0:
            source = "import sys\nx = sys.modules"
        elif i % 10 == 0:
            source = textwrap.dedent(HONEST[(i // 10) % len(HONEST)])
        else:
            source = SHORT_CELLS[i % len(SHORT_CELLS)]
        cells.append(_code(source, f"c{i}") if i % 2 else _code(source))
        if i % 7 == 0:
            cells.append(_markdown("Some **explanation** of `get_ipython()`."))
    nb = _nb(*cells)
    start = time.process_time()
    findings = audit_notebook(nb)
    elapsed = time.process_time() - start
    assert elapsed < 5, elapsed
    assert len(findings) == 200, findings[:5]
    assert all(f.what == "sys.modules" and f.line == 2 for f in findings)
    assert findings[0].cell == "cell 1" and findings[1].cell.startswith("cell ")


def _with_image(cell: dict, image: str) -> dict:
    cell["outputs"] = [{"output_type": "display_data", "data": {"image/png": image}, "metadata": {}}]
    return cell


def test_a_64_mb_notebook_of_outputs_is_quick():
    image = "iVBORw0KGgo" * (6_500_000 // 11)
    cells = [_with_image(_code(textwrap.dedent(HONEST[i])), image) for i in range(10)]
    cells.append(_code("import ctypes", "last"))
    nb = _nb(*cells)
    assert len(json.dumps(nb)) > 64_000_000
    start = time.process_time()
    findings = audit_notebook(nb)
    elapsed = time.process_time() - start
    assert elapsed < 2, elapsed
    assert [(f.cell, f.line, f.what) for f in findings] == [("last", 1, "native code")]


def test_a_64_mb_notebook_of_code_stops_at_the_budget():
    code = "\n\n".join(textwrap.dedent(h) for h in HONEST)
    cells = [_code(code) for _ in range(64_000_000 // len(code))] + [_code("import os\nos._exit(0)", "last")]
    start = time.process_time()
    findings = audit_notebook(_nb(*cells))
    elapsed = time.process_time() - start
    assert elapsed < 5, elapsed
    assert [f.what for f in findings] == ["oversized code"]  # the honest cells before it say nothing
    assert findings[0].cell.startswith("cell ") and findings[0].code == "import math"


def test_one_huge_cell():
    huge = "x = [" + "1, " * 2_500_000 + "]\nimport ctypes\n"  # 7.5 MB: past the notebook budget
    findings = audit_notebook(_nb(_code("import gc\ngc.get_objects()", "a"), _code(huge, "huge")))
    assert [(f.cell, f.line, f.what) for f in findings] == [("a", 2, "gc introspection"), ("huge", 1, "oversized code")]
    assert len(findings[1].code) == 120
    big = "x = [" + "1, " * 250_000 + "]\nimport ctypes\nsetattr(a, 'b', 1)\n"  # 750 kB: text scan only
    start = time.process_time()
    findings = audit_source(big, "big")
    assert time.process_time() - start < 2
    assert [(f.line, f.what) for f in findings] == [(1, "oversized code"), (2, "native code"), (3, "setattr")]


def test_locked_cells_as_released_are_not_audited_but_edited_ones_are(tmp_path):
    """The release's own setup cell (with its Colab bootstrap: pip, sys.modules) is the instructor's
    code and flags nothing; the same cell edited by a student is audited like any other."""
    import copy
    import json

    from grader import ROOT
    from grader.results import NotebookResult
    from grader.audit_step import audit_submission

    release_path = ROOT / "notebooks" / "ex01" / "task1_infonce.ipynb"
    release = json.loads(release_path.read_text())
    fresh = NotebookResult("student", "task1_infonce")
    audit_submission(copy.deepcopy(release), "task1_infonce", fresh, release_path)
    assert fresh.status == "graded" and not fresh.audit, fresh.reasons

    edited = copy.deepcopy(release)
    setup = next(c for c in edited["cells"] if c["metadata"].get("nbgrader", {}).get("grade_id") == "setup")
    setup["source"] = "".join(setup["source"]) + "\nimport ctypes\n"
    flagged = NotebookResult("student", "task1_infonce")
    audit_submission(edited, "task1_infonce", flagged, release_path)
    assert flagged.status == "review" and any("ctypes" in a for a in flagged.audit), flagged.audit


# ----------------------------------------------------------------------------- bounded cost
def _join_bomb(items: int, depth: int = 8) -> str:
    """Nested ``"A".join([...]).join([...])`` inside ``__import__``: each join's result is the next one's
    separator, so folding it naively builds a string of about ``items ** depth`` characters."""
    expr = '"A"'
    for _ in range(depth):
        expr += ".join([" + ", ".join(['"A"'] * items) + "])"
    return f"import os\n_m = __import__({expr})\n"


def _audit_in_child(source: str, mem_bytes: int = 1024 ** 3) -> list:
    """audit_source in a child process under an address-space cap: a regression fails this test
    with a MemoryError instead of taking the machine's memory."""
    import resource
    import subprocess
    import sys

    from grader import ROOT

    def cap():
        resource.setrlimit(resource.RLIMIT_AS, (mem_bytes, mem_bytes))

    code = ("import json, sys\nfrom grader.audit import audit_source\n"
            "print(json.dumps([(f.line, f.what) for f in audit_source(sys.stdin.read())]))")
    proc = subprocess.run([sys.executable, "-c", code], input=source, capture_output=True, text=True, timeout=60,
                          cwd=ROOT, preexec_fn=cap)
    assert proc.returncode == 0, proc.stderr[-1000:]
    return [tuple(f) for f in json.loads(proc.stdout)]


@pytest.mark.parametrize("items, size", [(275, 11_000), (1500, 60_000)])
def test_nested_joins_fold_in_bounded_memory_and_time(items, size):
    """An 11 kB cell of this took the grader to 5 GiB and 43 s: the fold now gives up past FOLD_CHARS
    (before building the string), and the __import__ of a name it cannot fold is still flagged."""
    source = _join_bomb(items)
    assert abs(len(source) - size) < 1_000
    start = time.monotonic()
    assert _audit_in_child(source, 512 * 1024 ** 2) == [(2, "import machinery")]
    assert time.monotonic() - start < 10


def test_folding_still_sees_through_short_joins():
    source = 'import os\nf = getattr(os, "_e" + "".join(["x", "i", "t"]))\nname = "gra" + "".join(["d", "er"])\n'
    assert [(f.line, f.what) for f in audit_source(source)] == [(2, "process control"), (3, "grader reference")]
    long = '"x" * 3\nname = "".join(["a"] * 2)\nbig = "-".join(["%s"] + ["ab"] * 4000)\nprint(big)\n'
    assert audit_source(long) == []


def test_the_grader_runs_the_audit_in_a_child_process_with_the_same_findings():
    """run_audit (what autograde calls) reports exactly what audit_notebook reports in-process."""
    from grader.audit_step import run_audit

    cells = [_code(textwrap.dedent(snippet), f"c{i}") if i % 2 else _code(textwrap.dedent(snippet))
             for i, (snippet, _, _) in enumerate(HOSTILE[:60])]
    nb = _nb(_markdown("text"), *cells, {"cell_type": "code"}, "not a cell")
    expected = audit_notebook(nb)
    assert len(expected) > 50
    assert run_audit(nb, None) == expected
    answer_ids = {f"c{i}" for i in range(1, 30, 2)}
    assert run_audit(nb, answer_ids) == audit_notebook(nb, answer_ids)


def test_an_audit_past_its_caps_marks_the_notebook_for_review():
    """Past the time or memory cap the child is stopped, the notebook is `review` with a reason that
    says the audit could not finish, and the grader goes on."""
    from grader.results import NotebookResult
    from grader.audit_step import audit_submission

    slow = _nb(*[_code("x = [" + "1, " * 150_000 + "]\n") for _ in range(6)])      # a few seconds of parsing
    result = NotebookResult("student", "task1_infonce")
    start = time.monotonic()
    audit_submission(slow, "task1_infonce", result, timeout=0.5)
    assert time.monotonic() - start < 5
    assert result.status == "review" and "could not finish" in result.reasons[0], result.reasons
    assert "0.5 s" in result.reasons[0] and "by hand" in result.reasons[0]

    huge = _nb(_code("# " + "x" * 40_000_000))          # 40 MB of code: reading it needs more than 64 MiB
    result = NotebookResult("student", "task1_infonce")
    audit_submission(huge, "task1_infonce", result, mem_bytes=64 * 1024 ** 2)
    assert result.status == "review" and "could not finish" in result.reasons[0], result.reasons
    assert "64 MiB" in result.reasons[0]

    tampered = NotebookResult("student", "task1_infonce", status="tampered")
    audit_submission(slow, "task1_infonce", tampered, timeout=0.5)
    assert tampered.status == "tampered" and "could not finish" in tampered.reasons[0]


# Corners of the rule table and of alias resolution, each pinned to what the audit found before its
# redesign as a table (issue #52): a relative import's leading dot, a module member's name holding a
# newline, importlib's everyday parts, names folded from pieces, magics that were continuation lines.
EDGES = [
    ("from .os import _exit as q\nq(0)", [(1, "process control"), (2, "process control")]),
    ("import importlib\nimportlib.import_module('os.exec\\nv')", [(2, "process control")]),
    ("import importlib\nm = importlib.import_module('importlib.metadata\\n')", [(2, "import machinery")]),
    ("import importlib\nimportlib.resources.files('x')\nimportlib.metadata.version('x')\n"
     "importlib.util.find_spec('x')", [(4, "import machinery")]),
    ("import codecs, base64, os\ncodecs.utf_8_decode(b)\nbase64.b85decode(b)\nos.spawnv(0, 'a', [])",
     [(2, "encoded payload"), (3, "encoded payload"), (4, "process control")]),
    ("a = __import__('o' + 's')\nb = a\nb._exit(0)", [(1, "import machinery"), (3, "process control")]),
    ("import torch\nt = torch\nt.backends.cudnn.benchmark = True\nt.allclose = f", [(4, "monkeypatch")]),
    ("class A(np.ndarray):\n    pass\nclass B(float): pass", [(1, "comparison override"), (3, "comparison override")]),
    ("%time x = 1\nx = !ls\ny != 3\nprint?\n%matplotlib inline\n%%matplotlib",
     [(1, "IPython magic"), (2, "shell escape"), (6, "IPython magic")]),
    ("x = (1 +\n%2)", [(1, "unparseable code"), (2, "IPython magic")]),
    ("%%bash\necho grader", [(1, "shell escape"), (2, "grader reference")]),
    ("'''the grader'''\nx = b'LAS_SECRET'\ny = 'LAS_PRESET'", [(2, "grader reference")]),
    ("vars(sys)['mod' 'ules']['x'] = 1\nglobals().update(x=1)\nx.__dict__ = {}",
     [(2, "__dict__ write"), (3, "__dict__ write")]),
]


@pytest.mark.parametrize("source, expected", EDGES)
def test_the_rule_table_keeps_the_corners(source, expected):
    assert [(f.line, f.what) for f in audit_source(source)] == expected
