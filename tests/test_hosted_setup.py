"""Hosted notebooks (Google Colab, Kaggle, Binder, a course JupyterHub: any Jupyter where pip works):
every notebook's setup cell carries the same bootstrap (``utils.hosted_install.SETUP_BOOTSTRAP``), which,
when the pack is missing and ``PACK_URL`` is set, fetches the bundle's zip and runs
``utils/hosted_install.py`` from it: that unpacks the pack, puts it on ``sys.path`` and installs the
bundle's PINNED requirements without building anything; with ``PACK_URL`` empty the cell says what the
student and the lecturer should do.

The slow tests run the bootstrap of a bundle made by ``grader.extras.bundle.build_bundle`` in a fresh
``python -m venv`` with setuptools and wheel uninstalled, as in hosted runtimes with no recent setuptools
and no wheel, where the old bootstrap's ``pip install --no-build-isolation -e`` failed with ``invalid
command 'bdist_wheel'``; with neither, it fails with ``No module named 'setuptools'``. Installing
torch & co. for real would download gigabytes: the pack's own environment lends them through a .pth
file, so pip finds them installed at their pins. Proof that pins are enforced comes from a package of
the test's own, ``las-pin-probe``: the runtime has 2.0, the test's copy of the bundle pins 1.0, and a
local folder offers both. pip runs with no index and no configuration file: no network at all, and no
build is possible (there is no setuptools to build with)."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from utils.hosted_install import INSTALL_LOG

REPO = Path(__file__).resolve().parents[1]
NOTEBOOK_DIRS = {"solutions": REPO / "solutions" / "ex01", "release": REPO / "notebooks" / "ex01"}
PROBE = "las-pin-probe"     # the test's own package: the runtime has RUNTIME_PROBE, the bundle pins PINNED_PROBE
RUNTIME_PROBE, PINNED_PROBE = "2.0", "1.0"


def _setup_source(nb_path: Path) -> str:
    cells = json.loads(nb_path.read_text(encoding="utf-8"))["cells"]
    setup = [c for c in cells if c.get("metadata", {}).get("nbgrader", {}).get("grade_id") == "setup"]
    assert len(setup) == 1, f"{nb_path.name}: expected one setup cell, found {len(setup)}"
    source = setup[0]["source"]
    return "".join(source) if isinstance(source, list) else source


# ------------------------------------------------------------------------------ the cell itself
@pytest.mark.parametrize("where", sorted(NOTEBOOK_DIRS))
def test_every_setup_cell_carries_the_one_hosted_bootstrap(where):
    from utils.hosted_install import SETUP_BOOTSTRAP

    notebooks = sorted(NOTEBOOK_DIRS[where].glob("*.ipynb"))
    assert len(notebooks) == 5, notebooks
    differ = [nb.name for nb in notebooks if SETUP_BOOTSTRAP not in _setup_source(nb)]
    assert not differ, (f"{where}: the setup cell of {differ} does not carry utils.hosted_install.SETUP_BOOTSTRAP "
                        "verbatim; rewrite it with utils.hosted_install.with_setup_bootstrap (see its docstring), "
                        "then run `python -m grader release`")


def test_a_stamped_or_student_set_pack_url_is_no_setup_tampering(tmp_path):
    """The bundle stamps PACK_URL into the locked setup cell, and a student on a hosted notebook may set
    it by hand: neither is an edited locked cell for the grader, nor code its audit flags. Any other
    edit of the setup cell still is."""
    import copy

    from conftest import SOLUTIONS
    from utils.hosted_install import SETUP_BOOTSTRAP
    from grader.audit_step import instructor_cells_as_released
    from grader.extras.bundle import stamp_pack_url
    from utils.hosted_install import PACK_URL_LINE, without_pack_url
    from grader.mutants import student_copy
    from grader.submissions import prepare

    assert len(PACK_URL_LINE.findall(SETUP_BOOTSTRAP)) == 1, "the bootstrap needs exactly one stampable PACK_URL line"
    stamped_template = stamp_pack_url(SETUP_BOOTSTRAP, "https://example.org/ex01-student.zip")
    assert stamped_template != SETUP_BOOTSTRAP and without_pack_url(stamped_template) == SETUP_BOOTSTRAP

    release_path = NOTEBOOK_DIRS["release"] / "task1_infonce.ipynb"
    release = json.loads(release_path.read_text())
    solution = json.loads((SOLUTIONS / "task1_infonce.ipynb").read_text())

    def submitted(edit) -> dict:
        nb = student_copy(release, solution)
        setup = next(c for c in nb["cells"] if c["metadata"].get("nbgrader", {}).get("grade_id") == "setup")
        setup["source"] = edit("".join(setup["source"]) if isinstance(setup["source"], list) else setup["source"])
        return nb

    for url in ("https://example.org/ex01-student.zip", "/content/ex01-student.zip"):
        nb = submitted(lambda source: stamp_pack_url(source, url))
        path = tmp_path / "stamped.ipynb"
        path.write_text(json.dumps(nb))
        assert prepare(path, release_path).tampered == [], url
        assert "setup" in instructor_cells_as_released(copy.deepcopy(nb), release_path), url

    nb = submitted(lambda source: source + "\nimport ctypes\n")
    path = tmp_path / "edited.ipynb"
    path.write_text(json.dumps(nb))
    assert "edited locked cell setup (restored)" in prepare(path, release_path).tampered
    assert "setup" not in instructor_cells_as_released(nb, release_path)


def test_empty_pack_url_says_what_the_student_and_the_lecturer_do(tmp_path):
    """The release's setup cell (PACK_URL empty) in a Python that lacks the pack (``-S``: no
    site-packages), on no particular host: an ImportError that names both ways for a student and
    the lecturer's setting."""
    cell = _setup_source(NOTEBOOK_DIRS["release"] / "task1_infonce.ipynb")
    (tmp_path / "cell.py").write_text("PRESET = 'smoke'\n" + cell)
    env = {k: v for k, v in os.environ.items() if k != "LAS_PACK_URL"}
    proc = subprocess.run([sys.executable, "-S", str(tmp_path / "cell.py")], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0, proc.stdout
    assert proc.stdout == "", "nothing but the error: " + proc.stdout
    message = proc.stderr.strip().splitlines()[-1]   # one line says it all
    assert message.startswith("ImportError: The course pack is not installed"), proc.stderr
    for must in ("./pack.sh env",                                    # a student on their own machine
                 "ask your lecturer for the link to ex01-student.zip",  # a student on a hosted notebook...
                 "upload ex01-student.zip", "PACK_URL",                  # ... or uploads the zip themselves,
                 "%env LAS_PACK_URL=",                                   # also where the cell is read-only
                 "python -m grader bundle --pack-url URL"):              # the lecturer
        assert must in message, f"the message does not say {must!r}:\n{proc.stderr[-2000:]}"
    assert "No module named 'utils'" not in proc.stderr, "the ImportError should not chain the first one"


#: what a setup cell may print when it succeeds: the preset, the device, the data (or models) it uses
SETUP_LINES = 3

SMOKE_SETUP = r'''
import json, sys
with open(sys.argv[1], encoding="utf-8") as notebook:
    cells = json.load(notebook)["cells"]
source = lambda cell: "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
parameters = next(c for c in cells if "parameters" in c.get("metadata", {}).get("tags", []))
setup = next(c for c in cells if c.get("metadata", {}).get("nbgrader", {}).get("grade_id") == "setup")
exec(compile(source(parameters) + "\nPRESET = 'smoke'\n" + source(setup), "setup-cell", "exec"))
'''


@pytest.mark.parametrize("notebook", sorted(p.stem for p in NOTEBOOK_DIRS["solutions"].glob("*.ipynb")))
def test_a_setup_cell_prints_at_most_three_lines(notebook, tmp_path):
    """The parameters and setup cells of each source notebook, in the smoke preset, in a process of their
    own: at most SETUP_LINES lines (nothing on stderr either), the first the preset. The preset's settings
    are a print(cfg) away, not printed (they were 13 to 30 settings wrapped over 3 lines)."""
    (tmp_path / "setup.py").write_text(SMOKE_SETUP)
    env = {k: v for k, v in os.environ.items() if k not in ("LAS_PRESET", "NBGRADER_EXECUTION")}
    proc = subprocess.run([sys.executable, str(tmp_path / "setup.py"), str(NOTEBOOK_DIRS["solutions"] / f"{notebook}.ipynb")],
                          cwd=REPO, env=dict(env, MPLBACKEND="Agg", PYTHONWARNINGS="default"),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    printed = (proc.stdout + proc.stderr).strip().splitlines()
    assert len(printed) <= SETUP_LINES, (f"{notebook}'s setup cell printed {len(printed)} lines, at most {SETUP_LINES} "
                                         "(rewrite it: python -m grader.extras.bundle --rewrite-setup):\n"
                                         + "\n".join(printed))
    assert printed[0].startswith("Preset: smoke (set in the parameters cell; its ") and "print(cfg)" in printed[0], printed
    assert not any("namespace(" in line for line in printed), printed


def test_install_plan_keeps_a_runtimes_torch_pair_and_its_jupyter():
    from utils.hosted_install import plan

    requirements = ("# pins\ntorch==2.14.1\ntorchvision==0.29.1\nnumpy==2.4.6\ntransformers==5.23.0\n"
                    "jupyterlab==4.6.6\nipykernel==7.4.0  # the student's own JupyterLab\n")
    lines, constraints, notes = plan(requirements, {"torch": "2.5.1+cu121", "torchvision": "0.20.1+cu121"})
    assert lines == ["numpy==2.4.6", "transformers==5.23.0"]
    assert constraints == ["torch==2.5.1+cu121", "torchvision==0.20.1+cu121"]
    assert notes[0] == ("Keeping this runtime's own torch 2.5.1+cu121 and torchvision 0.20.1+cu121 (built for its "
                        "hardware; the pack pins torch 2.14.1 / torchvision 0.29.1).")
    assert "jupyterlab, ipykernel" in notes[1]
    # torch without torchvision (or neither): the pinned, matched pair
    for installed in ({"torch": "2.5.1", "torchvision": None}, {"torch": None, "torchvision": None}):
        lines, constraints, notes = plan(requirements, installed)
        assert lines[:2] == ["torch==2.14.1", "torchvision==0.29.1"] and constraints == [], installed
        assert not any("Keeping" in note for note in notes)


# --------------------------------------------------------------------- a hosted runtime, for real
def _wheel(folder: Path, name: str, version: str) -> Path:
    """A pure-Python wheel made by hand (a zip with its metadata): no setuptools, no download."""
    module = name.replace("-", "_")
    info = f"{module}-{version}.dist-info"
    files = {f"{module}/__init__.py": f'__version__ = "{version}"\n',
             f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
             f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: tests/test_hosted_setup.py\nRoot-Is-Purelib: true\n"
                              "Tag: py3-none-any\n"}
    record = [f"{path},sha256={base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).decode().rstrip('=')},"
              f"{len(text.encode())}" for path, text in files.items()] + [f"{info}/RECORD,,"]
    files[f"{info}/RECORD"] = "\n".join(record) + "\n"
    path = folder / f"{module}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for member, text in files.items():
            zf.writestr(member, text)
    return path


@pytest.fixture(scope="module")
def hosted_pack(tmp_path_factory):
    """(zip, pins, wheels): a bundle made by build_bundle whose requirements.txt also pins the probe
    package at PINNED_PROBE, zipped as the lecturer's zip is; its pins; a folder with both probe wheels."""
    from grader.extras.bundle import BUNDLE_NAME, build_bundle
    from utils.hosted_install import pins

    out = tmp_path_factory.mktemp("hosted")
    archive = out / "served" / f"{BUNDLE_NAME}.zip"
    folder, _ = build_bundle(out / "bundle", pack_url=str(archive))
    requirements = folder / "requirements.txt"
    requirements.write_text(requirements.read_text() + f"{PROBE}=={PINNED_PROBE}  # the test's deliberately different pin\n")
    archive.parent.mkdir()
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zf:
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                zf.write(path, f"{BUNDLE_NAME}/{path.relative_to(folder).as_posix()}")
    wheels = out / "wheels"
    wheels.mkdir()
    for version in (PINNED_PROBE, RUNTIME_PROBE):
        _wheel(wheels, PROBE, version)
    return archive, pins(requirements.read_text()), wheels


#: Lent by the pack's environment: everything but pip (the new venv has its own), the build tools,
#: and the repository's own editable install. setuptools keeps its metadata only: torch's metadata
#: requires it, so pip's resolver must see it installed, but nothing can import it to build with.
NOT_LENT = ("pip", "setuptools", "pkg_resources", "_distutils_hack", "wheel", "__editable__", "learning_at_scale_pack")


def _hosted_runtime(path: Path, *, colab: bool, wheels: Path) -> tuple[Path, dict]:
    """A runtime where pip works but the pack is missing: a fresh venv without setuptools and wheel,
    the pack environment's packages lent through a .pth file, las-pin-probe RUNTIME_PROBE installed,
    and with ``colab`` a stand-in ``google.colab`` module. Returns (python, environment)."""
    subprocess.run([sys.executable, "-m", "venv", str(path)], check=True, capture_output=True)
    python = path / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    lent = path.parent / f"{path.name}-lent"
    lent.mkdir()
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        metadata_only = entry.name.startswith("setuptools-") and entry.name.endswith(".dist-info")
        if metadata_only or not (entry.name.startswith(NOT_LENT) or entry.suffix == ".pth"):
            (lent / entry.name).symlink_to(entry)
    extra = [lent]
    if colab:
        stand_in = path.parent / f"{path.name}-colab"
        (stand_in / "google" / "colab").mkdir(parents=True)
        (stand_in / "google" / "colab" / "__init__.py").write_text("# a stand-in: Colab imports this before any cell\n")
        extra.append(stand_in)
    (site / "lent-packages.pth").write_text("".join(f"{p}\n" for p in extra))

    home = path.parent / f"{path.name}-home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV", "PIP_", "JUPYTER"))}
    # pip: no index, no configuration file (this machine's points at local mirrors), the probe wheels only
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_NO_INDEX="1", PIP_FIND_LINKS=str(wheels),
               PIP_DISABLE_PIP_VERSION_CHECK="1", HOME=str(home), LAS_BUILD_DIR=str(home / "build"),
               HF_HUB_OFFLINE="1", MPLBACKEND="Agg")
    for tool in ("setuptools", "wheel"):
        subprocess.run([str(python), "-m", "pip", "uninstall", "-y", "-q", tool], env=env, capture_output=True)
    subprocess.run([str(python), "-m", "pip", "install", "-q", f"{PROBE}=={RUNTIME_PROBE}"], env=env, check=True)
    return python, env


def _versions(python: Path, env: dict, names) -> dict:
    """What the runtime has now: each name's version (None: absent) and the build tools it can import."""
    script = ("import importlib.metadata as md, importlib.util, json, sys\n"
              "def version(n):\n"
              "    try: return md.version(n)\n"
              "    except md.PackageNotFoundError: return None\n"
              "print(json.dumps({'versions': {n: version(n) for n in sys.argv[1:]},\n"
              "                  'build_tools': [m for m in ('setuptools', 'wheel') if importlib.util.find_spec(m)]}))")
    proc = subprocess.run([str(python), "-c", script, *names], env=env, capture_output=True, text=True, check=True)
    return json.loads(proc.stdout)


DRIVER = r'''
import json, sys
cell = json.load(open(sys.argv[1]))
for module in sys.argv[2:]:   # what the runtime imported before the notebook's first cell
    __import__(module)
PRESET = "smoke"
exec(compile(cell, "setup-cell", "exec"))
import utils
print("UTILS FROM", utils.__file__)
'''


def _run_setup_cell(python: Path, env: dict, cell: str, *preloaded: str) -> subprocess.CompletedProcess:
    home = Path(env["HOME"])
    (home / "cell.json").write_text(json.dumps(cell))
    (home / "driver.py").write_text(DRIVER)
    return subprocess.run([str(python), str(home / "driver.py"), str(home / "cell.json"), *preloaded],
                          cwd=home, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_colab_setup_cell_installs_the_pinned_pack_without_setuptools_or_wheel(hosted_pack, tmp_path):
    """Colab stand-in, PACK_URL a local path (as the bundle stamped it): Task 1's setup cell unpacks
    the pack, installs every pin (the probe goes from the runtime's 2.0 to the pinned 1.0; the torch
    pair is the runtime's, kept), imports utils.presets from the unpacked folder and runs to its end,
    in a runtime that cannot build a package; a notebook already unpacked there is left alone."""
    from grader.extras.bundle import BUNDLE_NAME

    archive, pinned, wheels = hosted_pack
    python, env = _hosted_runtime(tmp_path / "venv", colab=True, wheels=wheels)
    before = _versions(python, env, pinned)
    assert before["build_tools"] == [], f"the runtime must lack setuptools and wheel: {before['build_tools']}"
    assert before["versions"][PROBE] == RUNTIME_PROBE
    home = Path(env["HOME"])
    students_work = home / BUNDLE_NAME / "notebooks" / "ex01" / "task1_infonce.ipynb"
    students_work.parent.mkdir(parents=True)
    students_work.write_text("a student's answers, unpacked here earlier")

    bundle_nb = archive.parent.parent / "bundle" / BUNDLE_NAME / "notebooks" / "ex01" / "task1_infonce.ipynb"
    cell = _setup_source(bundle_nb)
    assert f'PACK_URL = "{archive}"' in cell, "build_bundle did not stamp the zip's path"
    proc = _run_setup_cell(python, env, cell, "google.colab")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert "bdist_wheel" not in out and "setuptools" not in proc.stderr, out[-4000:]
    *printed, utils_from = proc.stdout.strip().splitlines()
    assert utils_from == f"UTILS FROM {home / BUNDLE_NAME / 'utils' / '__init__.py'}", proc.stdout
    # the bootstrap is silent when it works: the cell prints its own few lines only
    assert len(printed) <= SETUP_LINES and printed[0].startswith("Preset: smoke"), out[-3000:]
    assert proc.stderr.strip() == "", proc.stderr[-3000:]
    log = (home / BUNDLE_NAME / INSTALL_LOG).read_text()   # what it decided and did, for the lecturer
    assert "Keeping this runtime's own torch 2.14.1 and torchvision 0.29.1" in log, log[-3000:]
    assert "Leaving this runtime's own Jupyter as it is" in log, log[-3000:]
    assert f"{PROBE} {PINNED_PROBE}" in log.splitlines()[-1], "the log's last line names what pip changed:\n" + log

    after = _versions(python, env, pinned)
    wrong = {name: (after["versions"][name], pin) for name, pin in pinned.items() if after["versions"][name] != pin}
    assert not wrong, f"installed versions that differ from the bundle's pins (installed, pinned): {wrong}"
    assert after["build_tools"] == [], f"the bootstrap installed build tools: {after['build_tools']}"
    assert students_work.read_text() == "a student's answers, unpacked here earlier", "the bootstrap overwrote a notebook"


@pytest.mark.slow
def test_any_jupyter_with_pip_installs_the_pack_and_asks_for_a_restart_when_needed(hosted_pack, tmp_path):
    """No google.colab (Kaggle, Binder, a JupyterHub), the release's cell (PACK_URL empty) with the
    student's `%env LAS_PACK_URL=` a file:// URL, and the runtime already imported the probe at its
    other version: the cell installs the pins, then asks for a restart rather than run on a
    half-replaced package; after the restart the same cell goes through."""
    archive, pinned, wheels = hosted_pack
    python, env = _hosted_runtime(tmp_path / "venv", colab=False, wheels=wheels)
    assert subprocess.run([str(python), "-c", "import google.colab"], env=env, capture_output=True).returncode != 0
    cell = _setup_source(NOTEBOOK_DIRS["release"] / "task1_infonce.ipynb")
    env["LAS_PACK_URL"] = archive.as_uri()

    first = _run_setup_cell(python, env, cell, PROBE.replace("-", "_"))
    assert first.returncode != 0, first.stdout[-3000:]
    assert first.stdout == "", first.stdout
    message = first.stderr.strip().splitlines()[-1]   # one line: what to do, then why
    assert message.startswith("RuntimeError: Restart the kernel"), first.stderr[-3000:]
    assert f"already imported at another version: {PROBE} {RUNTIME_PROBE}" in message, first.stderr[-3000:]
    assert _versions(python, env, [PROBE])["versions"][PROBE] == PINNED_PROBE

    again = _run_setup_cell(python, env, cell)
    assert again.returncode == 0, (again.stdout + again.stderr)[-4000:]
    assert again.stdout.startswith("Preset: smoke") and len(again.stdout.strip().splitlines()) <= SETUP_LINES + 1
    from grader.extras.bundle import BUNDLE_NAME

    assert "pip changed 0 of" in (Path(env["HOME"]) / BUNDLE_NAME / INSTALL_LOG).read_text()
    after = _versions(python, env, pinned)
    assert {n: v for n, v in after["versions"].items() if v != pinned[n]} == {}, after
    assert after["build_tools"] == [], after


@pytest.mark.slow
def test_a_failing_pip_is_one_line_that_names_the_log(hosted_pack, tmp_path):
    """pip cannot install a pin (here: the probe's pinned version is nowhere to be found, as when the
    runtime is offline): the cell stops with one line that says what to do and where pip's output is."""
    from grader.extras.bundle import BUNDLE_NAME

    archive, _, wheels = hosted_pack
    python, env = _hosted_runtime(tmp_path / "venv", colab=True, wheels=wheels)
    nowhere = tmp_path / "no-wheels"
    nowhere.mkdir()
    env["PIP_FIND_LINKS"] = str(nowhere)
    env["LAS_PACK_URL"] = str(archive)
    proc = _run_setup_cell(python, env, _setup_source(NOTEBOOK_DIRS["release"] / "task1_infonce.ipynb"), "google.colab")
    assert proc.returncode != 0 and proc.stdout == "", proc.stdout[-3000:]
    message = proc.stderr.strip().splitlines()[-1]
    log = Path(env["HOME"]) / BUNDLE_NAME / INSTALL_LOG
    assert message.startswith("RuntimeError: pip could not install the course pack's pinned packages"), proc.stderr[-3000:]
    assert "internet access to PyPI" in message and str(log) in message, message
    assert PROBE in log.read_text(), "the log holds pip's whole output"
