"""The layout of grader/ and utils/ : one reading of a notebook's cells, no import cycles,
benchmarks that do not lean on the tests, and a ``pip install .`` that ships every package.

The scans parse the source with ``ast`` (nothing is imported); each is shown to fail on planted code.
"""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("grader", "utils")
CELL_MODEL = "utils/notebook_cells.py"


def python_files(root: Path = ROOT, packages=PACKAGES) -> list[Path]:
    return sorted(p for pkg in packages for p in (root / pkg).rglob("*.py") if "__pycache__" not in p.parts)


# --------------------------------------------------------------------------- one reading of the cells
def _key(node: ast.AST) -> str | None:
    """The constant key ``node`` reads: ``x["k"]`` or ``x.get("k", ...)`` -> "k" (loads only)."""
    if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) \
            and isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str):
        return node.slice.value
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get" \
            and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
        return node.args[0].value
    return None


def _receiver(node: ast.AST) -> ast.AST:
    return node.value if isinstance(node, ast.Subscript) else node.func.value


def _is_metadata(node: ast.AST) -> bool:
    """``node`` is a cell's metadata: ``x["metadata"]``, ``x.get("metadata")``, ``x.metadata``,
    ``(x.get("metadata") or {})``, or a variable named like ``meta``."""
    if isinstance(node, ast.BoolOp):
        return any(_is_metadata(v) for v in node.values)
    if isinstance(node, ast.IfExp):
        return _is_metadata(node.body) or _is_metadata(node.orelse)
    if isinstance(node, ast.Attribute):
        return node.attr == "metadata"
    if isinstance(node, ast.Name):
        return "meta" in node.id.lower()
    return _key(node) == "metadata"


def _reads_source(node: ast.AST) -> bool:
    return any(_key(sub) == "source" or (isinstance(sub, ast.Attribute) and sub.attr == "source")
               for sub in ast.walk(node))


def cell_reads(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, what) of every place in ``tree`` that reads a cell the cell model should read for it:
    its nbgrader metadata or tags (a key ``nbgrader``/``tags`` read from a cell's metadata), its source
    joined (``"".join(...)`` of a ``source``, or the ``"".join(src) if isinstance(src, list)`` idiom on a
    variable named for a source), or its
    raw source with ``.get("source")``."""
    found = []
    for node in ast.walk(tree):
        key = _key(node)
        if key in ("nbgrader", "tags") and _is_metadata(_receiver(node)):
            found.append((node.lineno, f"reads the cell's {key} metadata"))
        elif key == "source" and isinstance(node, ast.Call):
            found.append((node.lineno, "reads a cell's source with .get"))
        is_join = isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "join" \
            and isinstance(node.func.value, ast.Constant) and isinstance(node.func.value.value, str)
        if is_join and any(_reads_source(arg) for arg in node.args):
            found.append((node.lineno, "joins a cell's source"))
        if isinstance(node, ast.IfExp) and isinstance(node.test, ast.Call) \
                and getattr(node.test.func, "id", None) == "isinstance" and len(node.test.args) == 2 \
                and getattr(node.test.args[1], "id", None) == "list" and isinstance(node.body, ast.Call) \
                and getattr(node.body.func, "attr", None) == "join" \
                and any(w in getattr(node.test.args[0], "id", "") for w in ("src", "source")):
            found.append((node.lineno, "joins a cell's source (the list-or-str idiom)"))
    return sorted(set(found))


def test_only_the_cell_model_reads_cells():
    """Outside the tests, only utils/notebook_cells.py reads a cell's metadata or joins its source."""
    problems = []
    for path in python_files():
        rel = path.relative_to(ROOT).as_posix()
        if rel == CELL_MODEL:
            continue
        for line, what in cell_reads(ast.parse(path.read_text(encoding="utf-8"), filename=rel)):
            problems.append(f"{rel}:{line}: {what} (use {CELL_MODEL})")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("code", [
    'def f(cell):\n    return (cell.get("metadata") or {}).get("nbgrader") or {}',
    'def f(cell):\n    return cell["metadata"]["tags"]',
    'def f(c):\n    return c.metadata["nbgrader"]["grade_id"]',
    'def f(cell):\n    meta = cell.get("metadata")\n    return meta.get("nbgrader") if isinstance(meta, dict) else None',
    'def f(cell):\n    src = cell.get("source", "")\n    return src',
    'def f(cell):\n    return "".join(cell["source"])',
    'def f(src):\n    return "".join(src) if isinstance(src, list) else src',
])
def test_the_cell_scan_catches_a_planted_reader(code):
    assert cell_reads(ast.parse(code))


def test_the_cell_scan_passes_other_dicts():
    code = textwrap.dedent('''
        def f(resources, nb, cell, out):
            info = resources.get("nbgrader") or {}          # nbgrader's resources, not a cell
            given = (nb.get("metadata") or {}).get("las_given_cells")   # the notebook's metadata
            cell["source"] = "x"                          # writing a cell
            text = "".join(out) if isinstance(out, list) else out   # an output's text
            return info, given, text, cell["source"], ", ".join(out)   # the loader's joined source
    ''')
    assert cell_reads(ast.parse(code)) == []


# --------------------------------------------------------------------------- no import cycles
def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(root: Path = ROOT, packages=PACKAGES) -> dict[str, set[str]]:
    """{module: the modules of ``packages`` it imports}, from every import statement of every module,
    at module level or inside a function. ``from pkg import name`` counts as importing ``pkg.name`` when
    that is a module, else ``pkg``; a package's ``__init__`` is not counted as imported by its own
    submodules (Python runs it first anyway; an edge back to it would be no cycle of ours)."""
    files = python_files(root, packages)
    modules = {_module_name(p, root): p for p in files}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        edges = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            targets = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = name.split(".") if is_package else name.split(".")[:-1]
                    base = base[: len(base) - (node.level - 1)]
                    module = ".".join(base + ([node.module] if node.module else []))
                else:
                    module = node.module or ""
                targets = [f"{module}.{a.name}" if f"{module}.{a.name}" in modules else module for a in node.names]
            for target in targets:
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != name and not name.startswith(target + "."):
                    edges.add(target)
        graph[name] = edges
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str]:
    """One import cycle of ``graph`` as [a, b, ..., a], or [] when there is none (depth-first search)."""
    state: dict[str, int] = {}   # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return []

    for start in sorted(graph):
        if start not in state and (cycle := visit(start)):
            return cycle
    return []


def test_grader_and_utils_import_no_cycle():
    graph = import_graph()
    assert "utils.notebook_cells" in graph["grader.judge"]   # the graph sees imports (sanity)
    assert "grader.release" in graph["grader.bundle"]        # ... including function-level ones
    cycle = find_cycle(graph)
    assert not cycle, "import cycle: " + " -> ".join(cycle)


def test_the_cycle_scan_catches_a_planted_cycle(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from . import b\n")
    (pkg / "b.py").write_text("import os\n\ndef f():\n    from .c import g\n    return g\n")
    (pkg / "c.py").write_text("def g():\n    from pkg.a import b\n    return b\n")
    (pkg / "d.py").write_text("from pkg import a\n")
    graph = import_graph(tmp_path, ("pkg",))
    assert graph["pkg.d"] == {"pkg.a"}
    assert find_cycle(graph) == ["pkg.a", "pkg.b", "pkg.c", "pkg.a"]
    (pkg / "c.py").write_text("def g():\n    return 1\n")
    assert find_cycle(import_graph(tmp_path, ("pkg",))) == []


# --------------------------------------------------------------------------- what `pip install .` ships
@pytest.mark.slow
def test_pip_install_ships_probes_and_mutants(tmp_path):
    """``pip install .`` into a fresh venv, offline (no dependencies, no build isolation: the pack's own
    setuptools and torch come from this environment's site-packages through a .pth file, which does not
    carry its editable install), then ``grader.probes`` and ``grader.mutants`` import from the install,
    outside the repository."""
    import shutil
    import subprocess
    import sys
    import sysconfig
    import venv

    project = tmp_path / "project"   # a copy: building in place would write build/ and egg-info here
    project.mkdir()
    shutil.copy(ROOT / "pyproject.toml", project)
    for pkg in PACKAGES:
        shutil.copytree(ROOT / pkg, project / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    site = Path(subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    (site / "borrowed.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    install = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps",
                              "--no-build-isolation", "--no-index", "--quiet", str(project)],
                             capture_output=True, text=True, cwd=tmp_path)
    assert install.returncode == 0, install.stdout + install.stderr
    shutil.rmtree(project)   # nothing may be found through the copy either
    probe = ("import grader.probes, grader.mutants, grader.checks, utils.notebook_cells\n"
             "for m in (grader.probes, grader.mutants, utils.notebook_cells):\n"
             "    print(m.__file__)\n")
    run = subprocess.run([python, "-c", probe], capture_output=True, text=True, cwd=tmp_path,
                         env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert run.returncode == 0, run.stderr
    assert all(line.startswith(str(site)) for line in run.stdout.split()), run.stdout


# --------------------------------------------------------------------------- benchmarks stand on their own
# grader_evidence.py grades the hostile fixture set of tests/fixtures/hostile.py through the command line
# and reports each outcome against the set's EXPECTED table: that set IS its subject, so it
# may import tests/fixtures, and nothing else of the tests or the command line.
FIXTURE_BENCHMARKS = {"grader_evidence.py"}


def test_benchmarks_import_neither_the_tests_nor_the_command_line():
    """A benchmark imports the pack (grader/, utils/), never tests/fixtures (a test's data, which may change
    with the tests; except the fixture benchmark, whose subject it is) or grader.__main__ (the command line)."""
    problems = []
    for path in sorted((ROOT / "benchmarks").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            fixtures = ("tests", "conftest") if path.name in FIXTURE_BENCHMARKS else ("fixtures", "tests", "conftest")
            problems += [f"{path.relative_to(ROOT)}:{node.lineno}: imports {n}" for n in names
                         if n.split(".")[0] in fixtures or n == "grader.__main__"]
    assert not problems, "\n".join(problems)


def test_the_case_tables_import_an_api_not_the_engine():
    """grader/checks/<stem>.py declare cases (grader/cases.py) and compare values (grader/compare.py);
    they never import the judge's engine, so a change there cannot reach a case table."""
    offenders = []
    for path in sorted((ROOT / "grader" / "checks").glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else \
                [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if any(n in ("grader.judge", "grader.probe", "grader.session", "grader.autograde") for n in names):
                offenders.append(f"{path.name}: {names}")
    assert not offenders, offenders


# --------------------------------------------------------------------------- tests use the public API
def private_uses(source: str, module: str = "grader.autograde") -> list[str]:
    """Private names of ``module`` a test reaches: ``from module import _x`` and ``alias._x`` where
    ``alias`` is the module imported (``from grader import autograde``, ``import grader.autograde as a``)."""
    package, _, leaf = module.rpartition(".")
    found, aliases = [], set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module == module:
            found += [a.name for a in node.names if a.name.startswith("_")]
        elif isinstance(node, ast.ImportFrom) and node.module == package:
            aliases |= {a.asname or a.name for a in node.names if a.name == leaf}
        elif isinstance(node, ast.Import):
            aliases |= {a.asname for a in node.names if a.name == module and a.asname}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases \
                and node.attr.startswith("_") and not node.attr.startswith("__"):
            found.append(node.attr)
    return found


#: The batch's modules: grader.autograde and the steps it runs.
BATCH_MODULES = ("grader.autograde", "grader.results", "grader.launch", "grader.audit_step", "grader.fullrun",
                 "grader.scoring", "grader.steps", "grader.progress")


def test_no_test_reaches_into_the_batchs_private_names():
    """The tests hold the batch's modules to their public functions, so their insides can be rearranged."""
    offenders = {f"{p.name} -> {module}": private_uses(p.read_text(encoding="utf-8"), module)
                 for p in sorted((ROOT / "tests").rglob("*.py")) for module in BATCH_MODULES}
    assert not {name: uses for name, uses in offenders.items() if uses}


@pytest.mark.parametrize("code", ["from grader.autograde import _worse\n",
                                  "from grader import autograde\nautograde._overloaded([], {})\n",
                                  "import grader.autograde as ag\nag._Job\n"])
def test_the_private_name_scan_catches_a_planted_use(code):
    assert private_uses(code)


def test_the_batch_stays_small_enough_to_read():
    """grader/autograde.py holds the batch only (at most 450 lines, ``autograde()`` at most 60); each step it
    runs lives in a module of its own (BATCH_MODULES), each with a docstring that says what it does."""
    path = ROOT / "grader" / "autograde.py"
    source = path.read_text(encoding="utf-8")
    assert len(source.splitlines()) <= 450
    fn = next(n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef) and n.name == "autograde")
    assert fn.end_lineno - fn.lineno + 1 <= 60
    for module in BATCH_MODULES:
        tree = ast.parse((ROOT / (module.replace(".", "/") + ".py")).read_text(encoding="utf-8"))
        assert ast.get_docstring(tree), f"{module} has no module docstring"


def test_the_cli_tests_run_beside_others_assert_no_time_and_grade_no_class():
    """The full suite's first pass runs BESIDE_OTHERS on two workers, next to other tests: under that
    load an asserted duration, a time limit of the test's own or a "timed out" status would be flaky, and
    a class graded with workers of its own would only crowd the cores; such tests run alone."""
    import re

    from conftest import BESIDE_OTHERS, TIERS

    tests = Path(__file__).parent
    for stem in BESIDE_OTHERS:
        assert stem in TIERS["cli"], f"{stem} is not a cli-tier file: only those run alone otherwise"
        text = (tests / f"{stem}.py").read_text()
        found = [m for m in ("--timeout", "cell_timeout", "timed out", "overload", "--workers", "roundtrips")
                 if m in text]
        found += re.findall(r"assert .*(?:monotonic|perf_counter|seconds\s*[<>])", text)
        assert not found, f"{stem} times, limits or grades a class ({found}): it must run alone"
