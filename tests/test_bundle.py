"""The student bundle (`python -m grader bundle`): what it holds, that it gives no answer away, that
it installs from its own files into a fresh environment and runs there, and that its setup cells carry
the lecturer's one configured pack URL (what a hosted notebook does with it: tests/test_hosted_setup.py)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import textwrap
import tomllib
import urllib.request
import zipfile
from pathlib import Path

import pytest

from grader.extras import bundle
from grader.extras.bundle import BUNDLE_NAME, build_bundle, leaks, solution_blocks, stamp_pack_url

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted(p.name for p in (REPO / "solutions" / "ex01").glob("*.ipynb"))


#: where the test's lecturer publishes the bundle on GitHub (``--colab-url``)
COLAB_URL = "https://github.com/course-org/las-ex01/blob/main"


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """(folder, zip) of a bundle whose setup cells point at its own zip (a local path), published on
    GitHub at COLAB_URL ("Open in Colab" links in its README)."""
    out = tmp_path_factory.mktemp("bundle")
    return build_bundle(out, pack_url=str(out / f"{BUNDLE_NAME}.zip"), colab_url=COLAB_URL)


def _setup_cell(nb_path: Path) -> dict:
    cells = json.loads(nb_path.read_text(encoding="utf-8"))["cells"]
    cell = next(c for c in cells if c["metadata"].get("nbgrader", {}).get("grade_id") == "setup")
    return dict(cell, source="".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"])


# ------------------------------------------------------------------------------------ contents
def test_bundle_holds_what_a_student_needs_and_nothing_that_grades(built):
    folder, archive = built
    top = sorted(p.name for p in folder.iterdir())
    assert top == ["README.md", "data", "environment.yml", "jupyter", "notebooks", "pack.sh", "pyproject.toml",
                   "requirements.txt", "utils"], top
    assert sorted(p.name for p in (folder / "notebooks" / "ex01").glob("*.ipynb")) == NOTEBOOKS
    everything = [p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()]
    for staff in ("solutions/", "grader/", "tests/", "benchmarks/", "cifar-10-batches-py", "__pycache__"):
        assert not any(staff in path for path in everything), f"{staff} shipped: {everything}"
    project = tomllib.loads((folder / "pyproject.toml").read_text())
    assert project["tool"]["setuptools"]["packages"] == ["utils"], "the bundle must install utils only"
    assert "pytest" not in (folder / "requirements.txt").read_text(), "test tools are staff-only"
    assert os.access(folder / "pack.sh", os.X_OK)
    page = json.loads((folder / "jupyter" / "labconfig" / "page_config.json").read_text())
    assert page["disabledExtensions"]["@jupyter/nbgrader:assignment-list"] is True
    assert page["disabledExtensions"]["@jupyter/nbgrader:course-list"] is True
    readme = (folder / "README.md").read_text()
    for must in ("./pack.sh env", "./pack.sh lab", "validate", "Submit", "Colab", "nbgrader"):
        assert must in readme, f"the student README does not mention {must!r}"
    with zipfile.ZipFile(archive) as zf:
        names = zf.namelist()
    assert names and all(n.startswith(f"{BUNDLE_NAME}/") for n in names), "one top-level folder in the zip"
    assert len(names) == len(everything)


def test_setup_cells_carry_the_pack_url_and_still_validate(built):
    """The URL is stamped into every setup cell, and the locked cell's checksum follows, so
    `nbgrader validate` does not report a changed cell and the grader does not call it tampering."""
    import nbformat
    from nbgrader.utils import compute_checksum

    from grader.submissions import without_pack_url

    folder, archive = built
    for name in NOTEBOOKS:
        cell = _setup_cell(folder / "notebooks" / "ex01" / name)
        assert f'PACK_URL = "{archive}"' in cell["source"], name
        assert cell["metadata"]["nbgrader"]["checksum"] == compute_checksum(nbformat.from_dict(cell)), name
        released = _setup_cell(REPO / "notebooks" / "ex01" / name)
        assert without_pack_url(cell["source"]) == without_pack_url(released["source"]), name


def test_stamp_pack_url_refuses_what_would_break_the_cell():
    cell = 'try:\n    import utils.presets\nexcept ImportError:\n    PACK_URL = ""  # set by the bundle\n'
    assert 'PACK_URL = "https://x.org/p.zip"  # set' in stamp_pack_url(cell, "https://x.org/p.zip")
    with pytest.raises(ValueError, match="quotes"):
        stamp_pack_url(cell, 'https://x.org/"; import os; "')
    with pytest.raises(ValueError, match="no `PACK_URL"):
        stamp_pack_url("import utils\n", "https://x.org/p.zip")


def test_bundle_config_is_read_from_one_place(tmp_path):
    config = tmp_path / "bundle.toml"
    config.write_text('pack_url = "https://example.org/ex01-student.zip"\n'
                      'colab_url = "https://github.com/course/ex01/blob/main"\n')
    loaded = bundle.load_config(config)
    assert loaded.pack_url == "https://example.org/ex01-student.zip"
    links = bundle.colab_links(loaded.colab_url, ["task1_infonce.ipynb"])
    assert links == ["https://colab.research.google.com/github/course/ex01/blob/main/notebooks/ex01/task1_infonce.ipynb"]
    assert bundle.bundle_urls(loaded) == (loaded.pack_url, loaded.colab_url), "a set pack URL wins"
    config.write_text('pack_ur1 = "typo"\n')
    with pytest.raises(ValueError, match="unknown keys"):
        bundle.load_config(config)


def test_the_colab_url_gives_links_and_the_zip_published_beside_them():
    """``--colab-url`` names the GitHub branch (or a folder in it) where the lecturer publishes the bundle's
    folder and zip: the "Open in Colab" links follow it, and so does the pack URL when none is set."""
    config = bundle.BundleConfig()
    assert bundle.bundle_urls(config) == ("", "")
    for url, base in ((COLAB_URL, "course-org/las-ex01/blob/main"),
                      ("https://github.com/course-org/teaching/tree/ws2026/ex01/", "course-org/teaching/blob/ws2026/ex01")):
        pack_url, colab = bundle.bundle_urls(config, colab_url=url)
        assert colab == url
        assert pack_url == f"https://github.com/{base.replace('/blob/', '/raw/', 1)}/{BUNDLE_NAME}.zip", pack_url
        assert bundle.colab_links(url, ["task1_infonce.ipynb"]) == [
            f"https://colab.research.google.com/github/{base}/notebooks/ex01/task1_infonce.ipynb"]
    assert bundle.bundle_urls(config, pack_url="https://x.org/p.zip", colab_url=COLAB_URL)[0] == "https://x.org/p.zip"
    for bad in ("https://gitlab.com/org/repo/blob/main", "https://github.com/org/repo", 'https://github.com/o/r/blob/m"'):
        with pytest.raises(ValueError, match="--colab-url must look like"):
            bundle.bundle_urls(config, colab_url=bad)


def test_the_students_readme_lists_the_colab_links_or_says_how_to_do_without(built):
    folder, _ = built
    readme = (folder / "README.md").read_text()
    assert "{{" not in readme, "a template placeholder was left in the README"
    for name in NOTEBOOKS:
        link = f"https://colab.research.google.com/github/course-org/las-ex01/blob/main/notebooks/ex01/{name}"
        assert f"[{name}]({link})" in readme, f"no Open in Colab link for {name}"
    lecturer = (folder.parent / "LECTURER.md").read_text()
    assert COLAB_URL in lecturer and f"{BUNDLE_NAME}.zip" in lecturer, lecturer
    without = bundle.readme_colab_section([])
    for must in ("Upload notebook", f"%env LAS_PACK_URL=/content/{BUNDLE_NAME}.zip",
                 "python -m grader bundle --colab-url https://github.com/ORG/REPO/blob/BRANCH"):
        assert must in without, f"without links the README does not say {must!r}"
    for name in NOTEBOOKS:   # the course repository's own notebooks keep an empty PACK_URL
        assert 'PACK_URL = ""' in _setup_cell(REPO / "solutions" / "ex01" / name)["source"], name


# ---------------------------------------------------------------------------------------- leaks
def test_no_solution_block_appears_in_any_file_of_the_bundle(built):
    folder, _ = built
    assert solution_blocks(), "no solution blocks found: the leak check would check nothing"
    assert leaks(folder) == []


def test_the_leak_check_catches_planted_leaks(built, tmp_path):
    """A solution block pasted with renamed variables into a helper, and a model answer pasted into a
    README, are both found; the same files without the paste are clean."""
    folder, _ = built
    copy = tmp_path / "copy"
    shutil.copytree(folder, copy)
    assert leaks(copy) == []
    code = next(lines for _, kind, lines in solution_blocks() if kind == "code" and len(lines) >= 6)
    where, source = _raw_block("code")
    renamed = source.replace("(", " ( ")  # whitespace changes must not hide it either
    for old in sorted(set(_identifiers(source)), key=len, reverse=True)[:5]:
        renamed = renamed.replace(old, old + "_renamed")
    (copy / "utils" / "helpers_planted.py").write_text("def planted(x):\n" + textwrap.indent(renamed, "    "))
    found = leaks(copy)
    assert len(found) == 1 and "helpers_planted.py" in found[0] and where in found[0], found
    (copy / "utils" / "helpers_planted.py").unlink()
    where, prose = _raw_block("prose")
    (copy / "data" / "NOTES.md").write_text("Some notes.\n\n" + prose + "\n")
    found = leaks(copy)
    assert len(found) == 1 and "NOTES.md" in found[0] and where in found[0], found
    assert code


def _raw_block(kind: str) -> tuple[str, str]:
    """(where, source) of the first solution block of ``kind`` with at least 6 meaningful lines."""
    for nb in sorted((REPO / "solutions" / "ex01").glob("*.ipynb")):
        for index, cell in enumerate(json.loads(nb.read_text())["cells"]):
            if ("code" if cell["cell_type"] == "code" else "prose") != kind:
                continue
            src = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
            if "BEGIN SOLUTION" not in src:
                continue
            block = src.split("BEGIN SOLUTION", 1)[1].split("\n", 1)[1].split("END SOLUTION", 1)[0]
            block = block.rsplit("\n", 1)[0]
            meaningful = [line for line in block.splitlines() if line.strip() and not line.strip().startswith("#")]
            if len(meaningful) >= 6:
                return f"{nb.name} cell {index}", textwrap.dedent(block)
    raise AssertionError(f"no {kind} solution block with 6 lines")


def _identifiers(source: str) -> list[str]:
    import keyword
    import re

    return [w for w in re.findall(r"\b[a-z_][a-z0-9_]{3,}\b", source) if not keyword.iskeyword(w)]


# --------------------------------------------------------------------- a fresh environment
def _fresh_venv(path: Path, *extra_paths: Path) -> Path:
    """A virtual environment with no pack installed. To keep the test fast, the heavy pinned packages
    are borrowed from the pack's own environment through a plain path entry (whose .pth files, such
    as the repository's editable install, are NOT processed); the bundle is installed from its files."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    python = path / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    lines = [str(p) for p in extra_paths] + [sysconfig.get_paths()["purelib"]]
    (Path(site) / "borrowed-packages.pth").write_text("\n".join(lines) + "\n")
    clean = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    probe = subprocess.run([str(python), "-c", "import utils"], cwd=path, env=clean, capture_output=True, text=True)
    assert probe.returncode != 0, "the fresh environment must not see the repository's utils"
    return python


def _env(tmp_path: Path, **extra) -> dict:
    """Offline, quiet, with the model cache shared with the rest of the test session."""
    build = tmp_path / "build"
    build.mkdir(exist_ok=True)
    shared = REPO / "build" / "cache"
    shared.mkdir(parents=True, exist_ok=True)
    if not (build / "cache").exists():
        (build / "cache").symlink_to(shared, target_is_directory=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV", "JUPYTER", "NBGRADER"))}
    env.update(LAS_BUILD_DIR=str(build), HF_HUB_OFFLINE="1", PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1",
               HOME=str(tmp_path / "home"), MPLBACKEND="Agg", **extra)
    (tmp_path / "home").mkdir(exist_ok=True)
    return env


RUN_GIVEN_CELLS = r'''
import json, sys
import nbformat
from nbclient import NotebookClient

path, out = sys.argv[1], sys.argv[2]
nb = nbformat.read(path, as_version=4)
for cell in nb.cells:
    if "parameters" in cell.metadata.get("tags", []):
        cell.source = 'PRESET = "smoke"\nMODEL_SUITE = "mini"' if "MODEL_SUITE" in cell.source else 'PRESET = "smoke"'
nb.cells.append(nbformat.v4.new_code_cell("import utils; print('UTILS FROM', utils.__file__)"))
NotebookClient(nb, kernel_name="python3", timeout=600, allow_errors=True).execute()
report = []
for cell in nb.cells:
    if cell.cell_type != "code":
        continue
    meta = cell.metadata.get("nbgrader", {})
    kind = "answer" if meta.get("solution") else "test" if meta.get("grade") else meta.get("grade_id") or "given"
    errors = [o.get("ename") for o in cell.get("outputs", []) if o.get("output_type") == "error"]
    text = "".join(o.get("text", "") for o in cell.get("outputs", []) if o.get("output_type") == "stream")
    report.append({"kind": kind, "errors": errors, "text": text[-2000:], "source": cell.source[:200]})
json.dump(report, open(out, "w"))
'''


@pytest.mark.slow
def test_bundle_installs_from_its_own_files_and_runs_in_a_fresh_environment(built, tmp_path):
    """Install the bundle as its README says (`pip install --no-deps -e .`, offline) into a fresh
    environment, then execute every student notebook there in the smoke preset: the setup cell and
    every given cell run; the only errors are the unfilled answers (NotImplementedError) and what
    depends on them (NameError)."""
    folder, _ = built
    python = _fresh_venv(tmp_path / "venv")
    env = _env(tmp_path)
    install = subprocess.run([str(python), "-m", "pip", "install", "--no-deps", "--no-build-isolation", "-e", "."],
                             cwd=folder, env=env, capture_output=True, text=True)
    assert install.returncode == 0, install.stdout + install.stderr
    driver = tmp_path / "run_given_cells.py"
    driver.write_text(RUN_GIVEN_CELLS)
    for name in NOTEBOOKS:
        out = tmp_path / f"{name}.json"
        proc = subprocess.run([str(python), str(driver), str(folder / "notebooks" / "ex01" / name), str(out)],
                              cwd=folder / "notebooks" / "ex01", env=env, capture_output=True, text=True, timeout=900)
        assert proc.returncode == 0, f"{name}: {proc.stdout[-3000:]}{proc.stderr[-3000:]}"
        report = json.loads(out.read_text())
        setup = next(r for r in report if r["kind"] == "setup")
        assert setup["errors"] == [], f"{name}: the setup cell failed: {setup['errors']} {setup['text']}"
        assert "Preset: smoke" in setup["text"], f"{name}: {setup['text']}"
        given = [r for r in report if r["kind"] == "given"]
        broken = [r for r in given if set(r["errors"]) - {"NotImplementedError", "NameError"}]
        assert not broken, f"{name}: given cells failed in the bundle: {broken}"
        assert any(not r["errors"] for r in given), f"{name}: no given cell ran"
        assert f"UTILS FROM {folder / 'utils'}" in report[-1]["text"], f"{name}: {report[-1]}"


# A hosted notebook (Colab, Kaggle, Binder, a JupyterHub) without the pack, installing it from PACK_URL:
# tests/test_hosted_setup.py.


GRADER_VIEW_CELL = '''
_seen = gen.initial_seed()   # the given critic experiment's generator: the grader does not rerun it


def n_pair_loss(positive_scores, negative_scores):
    diffs = negative_scores - positive_scores.unsqueeze(1)
    zeros = torch.zeros_like(positive_scores).unsqueeze(1)
    return torch.logsumexp(torch.cat([zeros, diffs], dim=1), dim=1).mean() + 0 * gen.initial_seed()
'''


@pytest.mark.slow
def test_validate_in_the_bundle_shows_the_graders_view(built, tmp_path):
    """`./pack.sh validate` in a bundle unpacked outside the repository: nbgrader's check, then the
    grader's view, which names the line it cannot run (cell and line) and the visible test that
    fails with the answers loaded as the grader loads them, ends with one line per notebook and
    exits non-zero; a notebook the grader runs entirely gets "ok"."""
    from grader.mutants import student_copy

    copy, env = _bundle_with_env(built, tmp_path)
    release = json.loads((REPO / "notebooks" / "ex01" / "task1_infonce.ipynb").read_text())
    solution = json.loads((REPO / "solutions" / "ex01" / "task1_infonce.ipynb").read_text())
    good = student_copy(release, solution)
    bad = json.loads(json.dumps(good))
    for cell in bad["cells"]:
        if cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") == "n_pair_loss":
            cell["source"] = GRADER_VIEW_CELL
    nbdir = copy / "notebooks" / "ex01"
    (nbdir / "task1_infonce.ipynb").write_text(json.dumps(bad))
    (nbdir / "good_task1.ipynb").write_text(json.dumps(good))
    (nbdir / "unfilled_task1.ipynb").write_text(json.dumps(release))
    proc = subprocess.run(["./pack.sh", "validate", "notebooks/ex01/task1_infonce.ipynb",
                           "notebooks/ex01/unfilled_task1.ipynb", "notebooks/ex01/good_task1.ipynb"],
                          cwd=copy, env=env, capture_output=True, text=True, timeout=900)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    assert "line 2 of your cell `n_pair_loss`, `_seen = gen.initial_seed()`" in out, out[-3000:]
    assert "the test cell of `n_pair_loss` in \u201c(d) The older contrastive losses\u201d fails" in out, out[-3000:]
    assert "name 'gen' is not defined" in out, out[-3000:]
    # the unfilled notebook: one line per problem, each cell named (nbgrader alone prints ~200 lines)
    unfilled = [line for line in out.splitlines() if line.startswith("unfilled_task1.ipynb:")]
    assert ("unfilled_task1.ipynb: nbgrader: the written answer in \u201c(b) InfoNCE and noise-contrastive "
            "estimation\u201d is still empty") in unfilled, unfilled   # the question the student sees, no grade id
    assert any("the test cell of `info_nce_loss`" in line and "stops at NotImplementedError" in line
               for line in unfilled), unfilled
    assert len(unfilled) <= 15, unfilled
    tail = proc.stdout.strip().splitlines()[-3:]
    assert tail[0].startswith("FAILED  task1_infonce.ipynb"), tail
    assert tail[1].startswith("FAILED  unfilled_task1.ipynb"), tail
    assert tail[2].startswith("ok  good_task1.ipynb"), tail
    # (exit 0 when every notebook is ready: tests/test_utils.py, without validating the solved notebook again)


JUPYTER_SHIM = '''#!/bin/sh
# the fresh test environment has the borrowed packages but not their console scripts
if [ "$1" = lab ]; then shift; exec "{python}" -m jupyterlab "$@"; fi
exec "{python}" -m jupyter "$@"
'''


def _bundle_with_env(built, tmp_path: Path) -> tuple[Path, dict]:
    """A copy of the bundle whose `.venv` is a fresh environment, already set up (pack.sh's stamp),
    with `jupyter` and `nbgrader` shims; and the environment to run its pack.sh in."""
    folder, _ = built
    copy = tmp_path / "bundle"
    shutil.copytree(folder, copy)
    python = _fresh_venv(tmp_path / "venv")
    env = _env(tmp_path)
    install = subprocess.run([str(python), "-m", "pip", "install", "--no-deps", "--no-build-isolation", "-e", "."],
                             cwd=copy, env=env, capture_output=True, text=True)
    assert install.returncode == 0, install.stdout + install.stderr
    (copy / ".venv").symlink_to(tmp_path / "venv", target_is_directory=True)
    want = subprocess.run("cat requirements.txt pyproject.toml | sha256sum | cut -c1-16", shell=True, cwd=copy,
                          capture_output=True, text=True, check=True).stdout.strip()
    (tmp_path / "venv" / f".pack-env-{want}").touch()
    for name, text in (("nbgrader", f'#!/bin/sh\nexec "{python}" -m nbgrader "$@"\n'),
                       ("jupyter", JUPYTER_SHIM.format(python=python))):
        shim = tmp_path / "venv" / "bin" / name
        shim.write_text(text)
        shim.chmod(0o755)
    return copy, env


@pytest.mark.slow
def test_student_lab_opens_at_the_bundle_root_with_no_instructor_menus(built, tmp_path):
    """`./pack.sh lab` in a bundle unpacked outside the repository, clicked in headless Chromium: the
    server's root is the bundle (README.md and data/ in reach), the file browser opens at the
    notebooks, no nbgrader warning in the log, no "Nbgrader" menu (an empty one was left before), and
    the notebook's Validate button is there."""
    import secrets

    from browser import CHROMIUM, CHROMIUM_ARGS, Server, free_port, lab_settings, playwright_or_skip

    api = playwright_or_skip()
    copy, env = _bundle_with_env(built, tmp_path)
    # nbgrader's JupyterLab extension lives in the pack's environment's share/jupyter
    env["JUPYTER_PATH"] = str(Path(sys.prefix) / "share" / "jupyter")
    env["JUPYTER_RUNTIME_DIR"] = str(tmp_path / "runtime")
    port, token = free_port(), secrets.token_hex(16)
    server = Server(["./pack.sh", "lab", "--no-browser", "--allow-root", f"--port={port}", "--ServerApp.ip=127.0.0.1",
                     f"--IdentityProvider.token={token}",
                     f"--LabApp.user_settings_dir={lab_settings(tmp_path / 'lab-settings')}",
                     f"--LabApp.workspaces_dir={tmp_path / 'lab-workspaces'}"],
                    cwd=copy, env=env, log=tmp_path / "lab.log", port=port, token=token)
    try:
        with urllib.request.urlopen(f"{server.url}/api/contents?token={token}") as response:
            root = {item["name"] for item in json.load(response)["content"]}
        assert {"README.md", "data", "notebooks", "utils"} <= root, f"the server's root is not the bundle: {root}"
        with api.sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            try:
                page.goto(f"{server.url}/?token={token}")
                page.wait_for_selector("#jp-main-dock-panel", timeout=90_000)
                listing = page.locator(".jp-DirListing-itemText")
                listing.filter(has_text="task1_infonce.ipynb").first.wait_for(timeout=30_000)
                assert "/lab/tree/notebooks/ex01" in page.url, page.url
                menus = page.locator(".lm-MenuBar-itemLabel").all_inner_texts()
                assert "File" in menus and "Nbgrader" not in menus, f"menus: {menus}"
                listing.filter(has_text="task1_infonce.ipynb").first.dblclick()
                page.get_by_role("button", name="Validate").first.wait_for(timeout=60_000)
            finally:
                browser.close()
        log = server.tail(100_000)
        assert "not a subdirectory of the notebook server root" not in log, log[-3000:]
        assert "formgrader" not in log.lower(), "the instructor's server extension was loaded:\n" + log[-3000:]
    finally:
        server.stop()


@contextlib.contextmanager
def _local_index(tmp_path: Path):
    """The URL of a local stand-in for PyTorch's CPU index (it answers, it holds nothing)."""
    import functools
    import http.server
    import threading

    (tmp_path / "index" / "whl" / "cpu" / "torch").mkdir(parents=True)
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(tmp_path / "index")))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/whl/cpu"
    finally:
        server.shutdown()
        server.server_close()


FAKE_PYTHON = '''#!/bin/sh
echo "$@" >> "{log}"
'''


@pytest.mark.parametrize("variant", ["", "cpu"])
def test_env_installs_the_pins_and_cpu_only_torch_on_request(built, tmp_path, variant):
    """`./pack.sh env` installs the pinned requirements; `./pack.sh env cpu` first takes the same
    pinned torch and torchvision from PyTorch's CPU-only index (no CUDA libraries). The pip calls are
    recorded by a stand-in interpreter, so nothing is downloaded."""
    folder, _ = built
    copy = tmp_path / "bundle"
    shutil.copytree(folder, copy)
    log = tmp_path / "pip-calls.txt"
    fake = copy / ".venv" / "bin" / "python"
    fake.parent.mkdir(parents=True)
    fake.write_text(FAKE_PYTHON.format(log=log))
    fake.chmod(0o755)
    with _local_index(tmp_path) as index:   # pack.sh first checks that the index answers
        proc = subprocess.run(["./pack.sh", "env", *([variant] if variant else [])], cwd=copy, capture_output=True,
                              text=True, timeout=60, env=dict(os.environ, PACK_CPU_INDEX=index))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "CPU_INDEX=${PACK_CPU_INDEX:-https://download.pytorch.org/whl/cpu}" in (copy / "pack.sh").read_text()
    assert "6.3 GB" in proc.stdout, "pack.sh must say the measured size before installing"
    calls = log.read_text().splitlines()
    pins = {line.split("==")[0]: line.split()[0] for line in (copy / "requirements.txt").read_text().splitlines()
            if "==" in line and not line.startswith("#")}
    cpu_calls = [c for c in calls if f"--index-url {index}" in c]
    if variant == "cpu":
        assert len(cpu_calls) == 1 and cpu_calls[0].split()[-2:] == [pins["torch"], pins["torchvision"]], calls
        assert calls.index(cpu_calls[0]) < next(i for i, c in enumerate(calls) if "-r requirements.txt" in c), calls
    else:
        assert not cpu_calls, calls
    assert any(c.endswith("install --quiet -r requirements.txt") for c in calls), calls
    assert any(c.endswith("install --quiet --no-deps -e .") for c in calls), calls
    assert not [p for p in pins if p in ("lm_eval", "datasets", "pytest", "playwright")], "staff-only pins shipped"


#: a reference to a file (a name with a known suffix, maybe behind folders) or to a folder ("data/")
PATH_REF = re.compile(r"(?<![\w/.$~@:\"'-])((?:[\w.-]+/)*[\w.-]+\.(?:py|ipynb|md|sh|yml|yaml|toml|txt|json|csv)"
                      r"|(?:[\w.-]+/)+)(?![\w/(])")
URL = re.compile(r"\w+://\S+")
#: what the student downloads (CIFAR-10, a hub model's config.json) or running makes (build/.../results.csv)
THEIRS = ("cifar-10-batches-py", "config.json", "results.csv")
#: the course repository's folders that the bundle leaves out, the ones utils/ docstrings may not name
REPOSITORY_ONLY = ("tests", "benchmarks", "grader", "solutions")
#: a reference to a file the student does not have must say whose it is
LECTURERS = "course repository"


def _student_texts(folder: Path):
    """(name, text) of everything a student reads: the README files, the install files, pack.sh and
    every cell of every notebook."""
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder).as_posix()
        if path.suffix == ".ipynb":
            for i, cell in enumerate(json.loads(path.read_text(encoding="utf-8"))["cells"]):
                src = cell["source"]
                yield f"{rel} cell {i}", "".join(src) if isinstance(src, list) else src
        elif path.name in ("README.md", "requirements.txt", "environment.yml", "pack.sh"):
            yield rel, path.read_text(encoding="utf-8")
        elif path.suffix == ".py" and rel.startswith("utils/"):
            yield rel, path.read_text(encoding="utf-8")   # docstrings and comments a student reads too


def missing_references(folder: Path) -> list[str]:
    """References in the student's texts to files or folders the bundle lacks, unless the same
    paragraph says they are in the course repository. Outputs the pack creates (build/, .venv/) and
    names found anywhere in the bundle count as present."""
    names = {p.name for p in folder.rglob("*")}
    found = []
    for where, text in _student_texts(folder):
        for paragraph in URL.sub(" ", text).split("\n\n"):
            for match in PATH_REF.finditer(paragraph):
                ref = match.group(1)
                parts = [p for p in ref.split("/") if p]
                if ref.endswith("/") and not any(len(p) >= 3 and re.search("[a-z]", p) for p in parts):
                    continue   # "C/" of a formula, not a folder
                if parts[0] in ("build", ".venv", "~", "..") or any(p in THEIRS for p in parts):
                    continue
                if where.endswith(".py") and parts[0] not in REPOSITORY_ONLY:
                    continue   # code names runtime files and placeholders; only the repository's folders count
                if (folder / ref).exists() or ref.rstrip("/").split("/")[-1] in names:
                    continue
                if LECTURERS in paragraph[:match.start()]:
                    continue
                found.append(f"{where}: {ref}")
    return found


def test_the_student_is_never_pointed_at_a_file_the_bundle_lacks(built, tmp_path):
    """Every file a student is told about (notebooks, READMEs, install files and the docstrings of utils/)
    is in the bundle, or the sentence says it is the course repository's: Task A once sent students to
    benchmarks/ and tests/ they do not have."""
    folder, _ = built
    assert missing_references(folder) == []
    # the check itself finds such a reference, and accepts it once it is attributed
    planted = tmp_path / "planted"
    shutil.copytree(folder, planted)
    readme = planted / "README.md"
    readme.write_text(readme.read_text() + "\n\nRun `python benchmarks/simclr.py` to time it.\n")
    assert missing_references(planted) == ["README.md: benchmarks/simclr.py"]
    readme.write_text(readme.read_text().replace("Run `python", "In the course repository, run `python"))
    assert missing_references(planted) == []


def test_the_students_check_of_every_notebook_agrees_with_the_grader(tmp_path):
    """The grader's view that `./pack.sh validate` prints (utils/answer_loader.py): each notebook with the
    course's own answers pasted into the release passes, as the grader gives it full marks (Task 2's and
    Task B's models cells need the parameters the grader sets, MODEL_SUITE included), and each release as
    handed out says what is missing."""
    import json
    from concurrent.futures import ThreadPoolExecutor

    from grader.mutants import student_copy
    from utils.answer_loader import check_notebook_isolated

    jobs = {}
    for solution_path in sorted((REPO / "solutions" / "ex01").glob("*.ipynb")):
        release = json.loads((REPO / "notebooks" / "ex01" / solution_path.name).read_text())
        solved = tmp_path / f"solved_{solution_path.name}"
        solved.write_text(json.dumps(student_copy(release, json.loads(solution_path.read_text()))))
        jobs[("solved", solution_path.stem)] = solved
        jobs[("release", solution_path.stem)] = REPO / "notebooks" / "ex01" / solution_path.name
    with ThreadPoolExecutor(2) as pool:
        verdicts = dict(zip(jobs, pool.map(lambda p: check_notebook_isolated(str(p)), jobs.values())))
    for (kind, stem), problems in verdicts.items():
        if kind == "solved":
            assert problems == [], (stem, problems)
        else:
            assert problems and any("NotImplementedError" in p for p in problems), (stem, problems)


#: a repository-relative path to a file (a known top-level folder, then a name with an extension)
REPO_PATH = re.compile(r"(?<![\w./-])((?:benchmarks|tests|grader|solutions|utils|data|notebooks|jupyter)/"
                       r"(?:[\w.-]+/)*[\w.-]*\w\.(?:py|ipynb|md|sh|toml|txt|json|yml|yaml|csv|cfg))(?![\w/])")
#: (file, path) pairs left as they are for now (none)
NOT_YET: set = set()


def absent_paths(folder: Path) -> list[str]:
    """``"file: path"`` for every repository-relative file path written in any text file of the bundle
    (every cell of a notebook) that the bundle does not hold, attributed to the course repository or not."""
    found = []
    for path in sorted(folder.rglob("*")):
        if not path.is_file():
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue   # binary (model weights, images)
        rel = path.relative_to(folder).as_posix()
        if path.suffix == ".ipynb":
            cells = json.loads(text)["cells"]
            text = "\n".join("".join(c["source"]) if isinstance(c["source"], list) else c["source"] for c in cells)
        for ref in sorted(set(REPO_PATH.findall(text))):
            if not (folder / ref).is_file() and (rel, ref) not in NOT_YET:
                found.append(f"{rel}: {ref}")
    return found


def test_the_bundle_names_only_files_it_ships(built, tmp_path):
    """No text of the bundle (README, notebooks, the setup cell's bootstrap, utils/ docstrings, data/ notes)
    names a repository file the student does not have: once Task A named four staff scripts and the setup
    cell the lecturer's settings file. "In the course repository", without a path, is how to refer to them."""
    folder, _ = built
    assert absent_paths(folder) == []
    planted = tmp_path / "planted"
    shutil.copytree(folder, planted)
    (planted / "data" / "NOTES.md").write_text(
        "See grader/extras/bundle.toml, `tests/test_x.py` and utils/device.py.\n")
    assert absent_paths(planted) == ["data/NOTES.md: grader/extras/bundle.toml", "data/NOTES.md: tests/test_x.py"]


#: what the student's tools run without the bundle's code importing it (requirement: why it ships)
RUN_WITHOUT_IMPORT = {"tokenizers": "transformers' fast tokenizers", "safetensors": "transformers' weight files",
                      "accelerate": "transformers' low-memory loading", "pillow": "torchvision's images",
                      "jupyterlab": "./pack.sh lab", "ipykernel": "the notebooks' kernel",
                      "nbclient": "./pack.sh run and validate", "nbconvert": "nbgrader's Validate"}
IMPORT_NAME = {"scikit-learn": "sklearn", "pillow": "PIL"}


def test_the_students_requirements_hold_only_what_a_student_runs(built):
    """requirements.txt and environment.yml of the bundle: every pin is imported by the bundle's notebooks or
    utils/, or run by the student's tools (RUN_WITHOUT_IMPORT); nothing staff-only (copydetect shipped once)."""
    folder, _ = built
    code = "\n".join(p.read_text(encoding="utf-8") for p in sorted(folder.rglob("*"))
                     if p.suffix in (".py", ".ipynb") and p.is_file())
    staff_marked = {line.split("==")[0] for line in (REPO / "requirements.txt").read_text().splitlines()
                    if "staff only" in line.lower() and "==" in line}
    assert "copydetect" in staff_marked | set(bundle.STAFF_ONLY_REQUIREMENTS)
    for name in ("requirements.txt", "environment.yml"):
        pins = [line.strip().lstrip("- ").split("==")[0] for line in (folder / name).read_text().splitlines()
                if "==" in line and not line.lstrip().startswith("#")]
        assert "torch" in pins and "jupyterlab" in pins, pins
        assert not (set(pins) & (staff_marked | set(bundle.STAFF_ONLY_REQUIREMENTS))), f"{name}: {pins}"
        unused = [pin for pin in pins if pin not in RUN_WITHOUT_IMPORT
                  and not re.search(rf"(?:import|from) {IMPORT_NAME.get(pin, pin).replace('-', '_')}\b", code)]
        assert unused == [], f"{name} ships what no student code imports: {unused}"


def test_the_bundles_files_carry_the_release_date(built):
    """Unzipped, every notebook shows the day the bundle was made, not a fixed date ("modified 11mo ago")."""
    import datetime
    import time

    folder, archive = built
    built_at = datetime.datetime.fromtimestamp(archive.stat().st_mtime)
    with zipfile.ZipFile(archive) as zf:
        dates = {datetime.datetime(*info.date_time) for info in zf.infolist()}
    assert len(dates) == 1 and abs(dates.pop() - built_at) < datetime.timedelta(hours=1), "zip entries' date"
    for nb in (folder / "notebooks" / "ex01").glob("*.ipynb"):
        assert abs(nb.stat().st_mtime - archive.stat().st_mtime) < 3600, nb.name
    assert time.time() - archive.stat().st_mtime < 86_400


#: A base interpreter whose venvs hold a stand-in python that fails at `pip install -r requirements.txt`
FAILING_VENV_PYTHON = r'''#!/bin/sh
if [ "$1" = -m ] && [ "$2" = venv ]; then
    mkdir -p "$3/bin"
    printf '#!/bin/sh\ncase "$*" in *requirements.txt*) echo "ERROR: no matching distribution" >&2; exit 1;; esac\n' > "$3/bin/python"
    chmod +x "$3/bin/python"
    exit 0
fi
exec "{python}" "$@"
'''


def test_env_cpu_without_its_index_says_why_in_one_line_and_leaves_nothing(built, tmp_path):
    """`./pack.sh env cpu` where PyTorch's CPU index cannot be reached once ended after ~50 pip retry warnings with
    "No matching distribution found for cuda-bindings" and a .venv holding only pip. It checks the index first:
    one line naming the index and the conda alternative, a non-zero exit, no .venv. And an install that fails
    later (the index answers, pip does not) removes the .venv it made."""
    folder, _ = built
    copy = tmp_path / "bundle"
    shutil.copytree(folder, copy)
    unreachable = "http://127.0.0.1:9/whl/cpu"   # the discard port: nothing listens
    env = dict(os.environ, PACK_CPU_INDEX=unreachable, PYTHON=sys.executable, PIP_NO_INDEX="1",
               PIP_DISABLE_PIP_VERSION_CHECK="1")
    proc = subprocess.run(["./pack.sh", "env", "cpu"], cwd=copy, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0, proc.stdout + proc.stderr
    lines = (proc.stdout + proc.stderr).strip().splitlines()
    assert len(lines) == 1 and unreachable in lines[0] and "conda env create -f environment.yml" in lines[0], lines
    assert not (copy / ".venv").exists(), "a half-made .venv was left"

    base = tmp_path / "python-base"
    base.write_text(FAILING_VENV_PYTHON.replace("{python}", sys.executable))
    base.chmod(0o755)
    with _local_index(tmp_path) as index:
        proc = subprocess.run(["./pack.sh", "env", "cpu"], cwd=copy, capture_output=True, text=True, timeout=120,
                              env=dict(env, PACK_CPU_INDEX=index, PYTHON=str(base)))
    assert proc.returncode != 0, proc.stdout + proc.stderr
    assert "no matching distribution" in proc.stderr and ".venv/ removed" in proc.stderr, proc.stderr
    assert not (copy / ".venv").exists(), "a half-made .venv was left"
