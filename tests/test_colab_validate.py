"""A student on Google Colab checks a notebook from one of its cells (``utils.validate.check_this_notebook``):
Colab has no terminal for ``./pack.sh validate`` and no nbgrader *Validate* button. The notebook comes from
Colab's browser tab through ``google.colab._message.blocking_request("get_ipynb", ...)``; here a stand-in
``google.colab`` package answers with a notebook from disk, in a process of its own, and the check must
print exactly what ``./pack.sh validate`` (``python -m utils.validate``) prints for the same notebook,
verdict included, for a notebook ready to submit and for one that is not."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
NAME = "task1_infonce.ipynb"

#: google/colab/_message.py of the stand-in: answers get_ipynb with the notebook in $FAKE_COLAB_NOTEBOOK
#: (None when it is unset: Colab's answer when the browser does not reply in time)
FAKE_MESSAGE = '''
import json, os
CALLS = []
def blocking_request(request_type, request="", timeout_sec=5, parent=None):
    CALLS.append(request_type)
    assert request_type == "get_ipynb", request_type
    path = os.environ.get("FAKE_COLAB_NOTEBOOK")
    return {"ipynb": json.load(open(path, encoding="utf-8"))} if path else None
'''

DRIVER = '''
import sys
sys.path.insert(0, sys.argv[1])   # the stand-in google.colab, as Colab's kernel has the real one
from utils.validate import check_this_notebook
ready = check_this_notebook()
from google.colab import _message
print("COLAB CALLS", _message.CALLS)
print("READY", ready)
'''


def _env(tmp_path: Path) -> dict:
    # a student's kernel: not under a check or nbgrader (another test of this worker may have left those set)
    env = {k: v for k, v in os.environ.items()
           if k not in ("JPY_SESSION_NAME", "PYTHONPATH", "LAS_VALIDATING", "NBGRADER_EXECUTION")}
    env.update(MPLBACKEND="Agg", HOME=str(tmp_path / "home"))
    (tmp_path / "home").mkdir(exist_ok=True)
    return env


@pytest.fixture
def fake_colab(tmp_path) -> Path:
    package = tmp_path / "colab_stand_in" / "google" / "colab"
    package.mkdir(parents=True)
    (package.parent / "__init__.py").write_text("")
    (package / "__init__.py").write_text("# a stand-in: Colab's kernel imports the real one\n")
    (package / "_message.py").write_text(FAKE_MESSAGE)
    return package.parent.parent


def _notebooks(tmp_path: Path) -> dict[str, Path]:
    """Task 1 as a student hands it in: solved (the course's answers pasted into the release) and as
    released (nothing filled in), each in a folder of its own under its own name."""
    from grader.mutants import student_copy

    release = json.loads((REPO / "notebooks" / "ex01" / NAME).read_text(encoding="utf-8"))
    solution = json.loads((REPO / "solutions" / "ex01" / NAME).read_text(encoding="utf-8"))
    found = {}
    for kind, notebook in (("ready", student_copy(release, solution)), ("unfilled", release)):
        notebook = json.loads(json.dumps(notebook))
        notebook.setdefault("metadata", {})["colab"] = {"name": NAME, "provenance": []}  # as Colab keeps it
        path = tmp_path / kind / NAME
        path.parent.mkdir()
        path.write_text(json.dumps(notebook), encoding="utf-8")
        found[kind] = path
    return found


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["ready", "unfilled"])
def test_a_colab_check_prints_what_pack_sh_validate_prints(kind, tmp_path, fake_colab):
    notebook = _notebooks(tmp_path)[kind]
    env = _env(tmp_path)
    pack_sh = subprocess.run([sys.executable, "-m", "utils.validate", str(notebook)], cwd=REPO, env=env,
                             capture_output=True, text=True, timeout=900)
    (tmp_path / "driver.py").write_text(DRIVER)
    colab = subprocess.run([sys.executable, str(tmp_path / "driver.py"), str(fake_colab)], cwd=tmp_path / "home",
                           env=dict(env, FAKE_COLAB_NOTEBOOK=str(notebook), PYTHONPATH=str(REPO)),
                           capture_output=True, text=True, timeout=900)
    assert colab.returncode == 0, (colab.stdout + colab.stderr)[-3000:]
    lines = colab.stdout.splitlines()
    assert lines[-2:] == ["COLAB CALLS ['get_ipynb']", f"READY {kind == 'ready'}"], lines[-5:]
    assert lines[:-2] == pack_sh.stdout.splitlines(), (
        f"the Colab check printed\n{colab.stdout}\n./pack.sh validate printed\n{pack_sh.stdout}")
    verdict = pack_sh.stdout.strip().splitlines()[-1]
    if kind == "ready":
        assert pack_sh.returncode == 0 and verdict.startswith(f"ok  {NAME}"), pack_sh.stdout[-2000:]
    else:
        assert pack_sh.returncode == 1 and verdict.startswith(f"FAILED  {NAME}"), pack_sh.stdout[-2000:]
        assert "stops at NotImplementedError" in pack_sh.stdout, pack_sh.stdout[-2000:]


def test_colab_not_answering_is_one_line_that_says_what_to_do(tmp_path, fake_colab):
    (tmp_path / "driver.py").write_text(DRIVER)
    env = dict(_env(tmp_path), PYTHONPATH=str(REPO))
    env.pop("FAKE_COLAB_NOTEBOOK", None)
    proc = subprocess.run([sys.executable, str(tmp_path / "driver.py"), str(fake_colab)], cwd=tmp_path / "home",
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("RuntimeError: Colab did not send the notebook") and "run the cell again" in last, proc.stderr


def test_outside_colab_and_without_a_path_the_check_asks_for_one(tmp_path, monkeypatch):
    from utils import validate

    monkeypatch.delenv("JPY_SESSION_NAME", raising=False)
    for variable in (validate.CHECKING, "NBGRADER_EXECUTION"):   # a student's kernel, not a check or a grading run
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setattr(validate, "colab_notebook", lambda: None)
    with pytest.raises(RuntimeError, match=r"pass its path, e\.g\. check_this_notebook\('notebooks/ex01/"):
        validate.check_this_notebook()
    saved = tmp_path / NAME
    saved.write_text("{}")
    monkeypatch.setenv("JPY_SESSION_NAME", str(saved))   # what JupyterLab tells its kernels
    assert validate.jupyter_notebook_path() == str(saved)


def test_a_runtime_without_nbgrader_gets_the_pinned_jupyter_stack_beside_its_own(tmp_path, monkeypatch):
    """Colab's runtime has no nbgrader, and the pack's hosted install leaves its Jupyter alone: the check
    makes, once, a virtual environment that sees the runtime's packages and adds the pack's pinned
    Jupyter stack, and runs there."""
    import importlib.util

    from utils import validate
    from utils.hosted_install import JUPYTER_STACK

    (tmp_path / "requirements.txt").write_text("numpy==2.4.6\nnbgrader==0.9.6\nipykernel==7.4.0  # why\n"
                                               "jupyterlab==4.6.6\n")
    commands = []
    monkeypatch.setattr(validate, "CHECK_ENV", str(tmp_path / "check-env"))
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "nbgrader" else real_find_spec(name, *a))
    monkeypatch.setattr(subprocess, "run", lambda command, **kw: commands.append(command) or
                        subprocess.CompletedProcess(command, 0, "", ""))
    python = validate.checking_python(str(tmp_path))
    assert python == str(tmp_path / "check-env" / "bin" / "python")
    venv, pip = commands
    assert venv[1:3] == ["-m", "venv"] and "--system-site-packages" in venv and venv[-1] == str(tmp_path / "check-env")
    assert pip[0] == python and pip[1:4] == ["-m", "pip", "install"]
    assert pip[-3:] == ["jupyterlab==4.6.6", "ipykernel==7.4.0", "nbgrader==0.9.6"], pip
    assert "numpy==2.4.6" not in pip and set(JUPYTER_STACK) >= {"nbgrader", "ipykernel"}
    commands.clear()
    assert validate.checking_python(str(tmp_path)) == python and commands == [], "made again in the same runtime"
