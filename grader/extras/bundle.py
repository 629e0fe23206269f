"""The student bundle: the folder and zip a lecturer hands out, made by code.

    python -m grader bundle [--out build/bundle] [--pack-url URL] [--colab-url URL]

writes ``build/bundle/ex01-student/`` and ``build/bundle/ex01-student.zip`` holding exactly what a
student needs and nothing that grades:

- ``notebooks/ex01/*.ipynb``: the student release (regenerated from solutions/ by nbgrader into a
  scratch folder, so the bundle never depends on a stale committed copy), with the pack URL (where a
  hosted notebook fetches the pack, see ``utils.hosted_install.SETUP_BOOTSTRAP``) written into each setup cell;
- ``utils/`` (Python files only), ``data/`` (the tracked data files; never CIFAR-10 or caches);
- its own ``pyproject.toml`` (installs ``utils`` only), ``requirements.txt`` / ``environment.yml``
  (the pack's pins minus the test tools), ``pack.sh`` (``env``, ``lab``, ``run``), ``README.md``
  (install, open JupyterLab, work, validate, submit) and ``jupyter/labconfig/page_config.json``
  (hides nbgrader's staff menus in the student's JupyterLab).

Nothing from ``solutions/``, ``grader/``, ``tests/`` or ``benchmarks/`` is copied; ``leaks()`` checks
that no five consecutive lines of any solution block appear in any file of the bundle.

The pack URL (where hosted notebooks such as Google Colab fetch the zip) is set in ONE place,
``grader/extras/bundle.toml``, or per run with ``--pack-url``. ``--colab-url https://github.com/ORG/REPO/blob/BRANCH``
(or ``colab_url`` there) names the GitHub repository and branch where the lecturer publishes the bundle's
folder and its zip: the bundle's README then lists an "Open in Colab" link per notebook, and the setup cells
fetch the zip from that branch unless a pack URL is set.

``python -m grader.extras.bundle --rewrite-setup [NOTEBOOK_DIR]`` rewrites the setup cell of every source notebook
(solutions/ex01 by default) to the quiet form :func:`quiet_setup_source` describes, and nothing else.
"""

from __future__ import annotations

import io
import json
import keyword
import os
import re
import shutil
import stat
import tempfile
import time
import tokenize
import tomllib
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

import nbformat
from nbgrader.utils import compute_checksum

from utils.hosted_install import PACK_URL_LINE, with_setup_bootstrap
from utils.notebook_cells import cell_source, grade_id, is_rubric, nbgrader_meta, read_notebook, write_notebook_json

from .. import ASSIGNMENT, ROOT
from ..release import generate_release

BUNDLE_NAME = f"{ASSIGNMENT}-student"
HERE = Path(__file__).resolve().parent
CONFIG = HERE / "bundle.toml"
TEMPLATES = HERE / "bundle_files"
#: Staff-only: the test tools, and lm-evaluation-harness and datasets (only the tests and benchmarks
#: compare against them; lm_eval also pulls sqlitedict, an sdist whose build prints setuptools warnings
#: during the student's install), copydetect (``python -m grader similarity``) and seaborn (the tests compare
#: utils/plotting.py's written-out style with it; no notebook imports it). Any requirement line whose comment
#: says "staff only" is left out too. Students get everything else the notebooks import, pinned.
STAFF_ONLY_REQUIREMENTS = ("pytest", "pytest-xdist", "playwright", "lm_eval", "datasets", "copydetect", "seaborn")
#: nbgrader's JupyterLab plugins a student should not see (course and assignment lists need a
#: configured exchange; formgrader and create-assignment are for instructors).
HIDDEN_NBGRADER_PLUGINS = ("assignment-list", "course-list", "formgrader", "create-assignment", "menu")
#: ... and their server halves (formgrader's would warn that the course root is not under the server root)
HIDDEN_NBGRADER_SERVER_EXTENSIONS = ("formgrader", "assignment_list", "course_list")
#: Data that never ships: CIFAR-10 (the students' own download) and caches.
DATA_EXCLUDED = ("cifar-10-batches-py", "cache")


@dataclass(frozen=True)
class BundleConfig:
    """``grader/extras/bundle.toml``: ``pack_url`` (the zip's public URL, or a local path; "" = not set) and
    ``colab_url`` (``https://github.com/ORG/REPO/blob/BRANCH``, optionally ``/FOLDER``: where the bundle's
    folder and zip are published, for "Open in Colab" links; "" = none)."""

    pack_url: str = ""
    colab_url: str = ""


#: ``https://github.com/ORG/REPO/blob/BRANCH[/FOLDER]`` (``tree`` for ``blob`` too): where a lecturer
#: publishes the bundle on GitHub (see :func:`colab_publication`).
GITHUB_URL = re.compile(r"https://github\.com/(?P<repo>[\w.-]+/[\w.-]+)/(?:blob|tree)/(?P<branch>[\w./-]+?)/?")


def load_config(path: Path = CONFIG) -> BundleConfig:
    """Read ``grader/extras/bundle.toml`` (missing file: all defaults). Unknown keys raise ``ValueError``."""
    if not path.exists():
        return BundleConfig()
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    unknown = set(data) - set(BundleConfig.__dataclass_fields__)
    if unknown:
        raise ValueError(f"{path}: unknown keys {sorted(unknown)}; known: {sorted(BundleConfig.__dataclass_fields__)}")
    return BundleConfig(**{k: str(v) for k, v in data.items()})


def stamp_pack_url(source: str, url: str) -> str:
    """Return a setup cell's ``source`` with its ``PACK_URL = "..."`` line set to ``url``.

    Raises ``ValueError`` when the cell has no such line (the bootstrap went missing) or the URL
    contains a quote or a newline (it would break the cell)."""
    if '"' in url or "\n" in url or "\\" in url:
        raise ValueError(f"pack URL must not contain quotes, backslashes or newlines: {url!r}")
    if not PACK_URL_LINE.search(source):
        raise ValueError('no `PACK_URL = "..."` line in this setup cell')
    return PACK_URL_LINE.sub(lambda m: f'{m["indent"]}PACK_URL = "{url}"', source, count=1)


def colab_publication(colab_url: str) -> tuple[str, str]:
    """``(colab_base, zip_url)`` for the GitHub folder ``colab_url`` where the bundle's folder and zip are
    published (``https://github.com/ORG/REPO/blob/BRANCH``; a branch with a slash is read as BRANCH/FOLDER,
    so publish at the root of such a branch): ``colab_base`` + ``/notebooks/ex01/<name>`` opens a notebook in
    Colab, ``zip_url`` is the zip's raw download link. Raises ``ValueError`` on any other URL."""
    match = GITHUB_URL.fullmatch(colab_url.strip())
    if not match or '"' in colab_url:
        raise ValueError(f"--colab-url must look like https://github.com/ORG/REPO/blob/BRANCH (the GitHub branch, "
                         f"or a folder in it, where the bundle is published), got {colab_url!r}")
    repo, path = match["repo"], match["branch"].strip("/")
    return (f"https://colab.research.google.com/github/{repo}/blob/{path}",
            f"https://github.com/{repo}/raw/{path}/{BUNDLE_NAME}.zip")


def colab_links(colab_url: str, notebooks: list[str]) -> list[str]:
    """The "Open in Colab" URLs of ``notebooks`` (file names) published at ``colab_url``; [] if it is ""."""
    if not colab_url:
        return []
    base, _ = colab_publication(colab_url)
    return [f"{base}/notebooks/{ASSIGNMENT}/{name}" for name in notebooks]


def readme_colab_section(links: list[str]) -> str:
    """The student README's "Open in Colab" part: one link per notebook, or how to work on Colab without them."""
    if links:
        return "\n".join(f"- [{Path(link).name}]({link})" for link in links)
    return ("Your lecturer has published no Colab links with this copy. To work on Colab anyway: on "
            "colab.research.google.com, *File → Upload notebook* and pick a notebook from "
            f"`notebooks/{ASSIGNMENT}/`; upload `{BUNDLE_NAME}.zip` in the *Files* pane (it lands in `/content/`); "
            f"in a new cell above the setup cell run `%env LAS_PACK_URL=/content/{BUNDLE_NAME}.zip`, then run the "
            "notebook from the top. (Lecturers: `python -m grader bundle --colab-url "
            "https://github.com/ORG/REPO/blob/BRANCH` writes a link per notebook here.)")


# ------------------------------------------------------------------------- quiet setup cells
#: ``| config: {cfg}`` inside a setup cell's print: the preset's 13 to 30 settings, wrapped over lines
CONFIG_IN_PRINT = re.compile(r"\s*\|\s*config: \{cfg\}")
#: a setup cell's line that prints nothing but the preset's settings
CONFIG_PRINT_LINE = re.compile(r'^[ \t]*print\(f"Config: \{cfg\}"\)[ \t]*\n?', re.MULTILINE)


def quiet_setup_source(source: str) -> str:
    """A setup cell's ``source`` as it should be: the current hosted bootstrap
    (``utils.hosted_install.with_setup_bootstrap``: silent unless it fails) and no print of the preset's
    settings (``utils.presets`` says in the preset line how to see them), so that on success the cell
    prints at most three lines: the preset, the device, the data. Idempotent."""

    source = with_setup_bootstrap(source)
    source = CONFIG_PRINT_LINE.sub("", source)
    return CONFIG_IN_PRINT.sub("", source)


def rewrite_setup_cells(folder: Path | None = None) -> list[str]:
    """Rewrite, in place, the setup cell (grade_id ``setup``) of every notebook in ``folder`` (default
    solutions/ex01) with :func:`quiet_setup_source`; every other cell and the file's formatting stay as
    they are. Returns the names of the notebooks it changed (none on a second run)."""
    folder = Path(folder) if folder is not None else ROOT / "solutions" / ASSIGNMENT
    changed = []
    for nb in sorted(folder.glob("*.ipynb")):
        data = read_notebook(nb)
        setups = [cell for cell in data["cells"] if grade_id(cell) == "setup"]
        if len(setups) != 1:
            raise RuntimeError(f"{nb}: expected one setup cell (grade_id 'setup'), found {len(setups)}")
        before = cell_source(setups[0])
        after = quiet_setup_source(before)
        if after != before:
            setups[0]["source"] = after
            write_notebook_json(nb, data)
            changed.append(nb.name)
    return changed


def _student_requirements(text: str) -> str:
    keep = []
    for line in text.splitlines():
        name = re.split(r"[=<>~! ]", line.strip().lstrip("- "), maxsplit=1)[0]
        if name and not line.lstrip().startswith("#") and (name in STAFF_ONLY_REQUIREMENTS
                                                           or "staff only" in line.partition("#")[2].lower()):
            continue
        keep.append(line)
    return "\n".join(keep) + "\n"


def _copy_tree(src: Path, dst: Path, *, suffixes: tuple[str, ...] | None = None,
               exclude: tuple[str, ...] = ()) -> None:
    """Copy regular files (never links) under ``src``; skip caches, ``exclude`` names and, when given,
    files whose suffix is not in ``suffixes``."""
    for path in sorted(src.rglob("*")):
        rel = path.relative_to(src)
        if any(part in exclude or part in ("__pycache__", ".ipynb_checkpoints") or part.startswith(".")
               for part in rel.parts):
            continue
        if path.is_symlink() or not path.is_file():
            continue
        if suffixes is not None and path.suffix not in suffixes:
            continue
        target = dst / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)


def _release_notebooks(dest: Path, pack_url: str) -> list[str]:
    """Generate the release into ``dest`` (nbgrader, from solutions/) and stamp the pack URL."""


    with tempfile.TemporaryDirectory(prefix="las-bundle-") as tmp:
        generated = generate_release(Path(tmp))
        dest.mkdir(parents=True, exist_ok=True)
        names = []
        for nb in sorted(generated.glob("*.ipynb")):
            data = read_notebook(nb)
            stamped = 0
            for cell in data["cells"]:
                if grade_id(cell) == "setup":
                    cell["source"] = stamp_pack_url(cell_source(cell), pack_url)
                    # nbgrader validate compares a locked cell with its checksum: keep them in step.
                    nbgrader_meta(cell)["checksum"] = compute_checksum(nbformat.from_dict(cell))
                    stamped += 1
            if stamped != 1:
                raise RuntimeError(f"{nb.name}: expected one setup cell (grade_id 'setup'), found {stamped}")
            write_notebook_json(dest / nb.name, data)
            names.append(nb.name)
    return names


def _page_config() -> str:
    disabled = {f"@jupyter/nbgrader:{name}": True for name in HIDDEN_NBGRADER_PLUGINS}
    return json.dumps({"disabledExtensions": disabled}, indent=2) + "\n"


def _server_config() -> str:
    """jupyter_server config for the student's JupyterLab: no instructor or exchange server extensions
    (the Validate button's extension stays)."""
    off = {f"nbgrader.server_extensions.{name}": False for name in HIDDEN_NBGRADER_SERVER_EXTENSIONS}
    return json.dumps({"ServerApp": {"jpserver_extensions": off}}, indent=2) + "\n"


def bundle_urls(config: BundleConfig, pack_url: str | None = None, colab_url: str | None = None) -> tuple[str, str]:
    """``(pack_url, colab_url)`` of a build: each option (``None``: not given) overrides
    ``grader/extras/bundle.toml``; with a Colab URL and no pack URL anywhere, the zip published beside it."""
    colab = config.colab_url if colab_url is None else colab_url
    url = config.pack_url if pack_url is None else pack_url
    if colab and not url:
        url = colab_publication(colab)[1]
    elif colab:
        colab_publication(colab)  # refuse a malformed URL early
    return url, colab


def build_bundle(out: Path | None = None, *, pack_url: str | None = None, colab_url: str | None = None,
                 config: BundleConfig | None = None) -> tuple[Path, Path]:
    """Write the student bundle. Returns ``(folder, zip)``: ``out/ex01-student`` and its zip.

    ``pack_url`` and ``colab_url`` override ``grader/extras/bundle.toml``'s (``None``: use the file's; see
    :func:`bundle_urls`). The folder is rebuilt from scratch; the zip holds it under one top-level folder
    ``ex01-student/``."""
    config = config or load_config()
    url, colab = bundle_urls(config, pack_url, colab_url)
    out = Path(out) if out is not None else ROOT / "build" / "bundle"
    folder = out / BUNDLE_NAME
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)

    names = _release_notebooks(folder / "notebooks" / ASSIGNMENT, url)
    links = colab_links(colab, names)
    _copy_tree(ROOT / "utils", folder / "utils", suffixes=(".py",))
    _copy_tree(ROOT / "data", folder / "data", exclude=DATA_EXCLUDED)
    for name in ("requirements.txt", "environment.yml"):
        (folder / name).write_text(_student_requirements((ROOT / name).read_text(encoding="utf-8")), encoding="utf-8")
    for template in sorted(TEMPLATES.rglob("*")):
        if template.is_file():
            target = folder / template.relative_to(TEMPLATES)
            target.parent.mkdir(parents=True, exist_ok=True)
            text = template.read_text(encoding="utf-8")
            text = text.replace("{{BUNDLE_NAME}}", BUNDLE_NAME).replace("{{ASSIGNMENT}}", ASSIGNMENT)
            target.write_text(text.replace("{{COLAB_LINKS}}", readme_colab_section(links)), encoding="utf-8")
    (folder / "pack.sh").chmod(0o755)
    # read by JupyterLab through JUPYTER_CONFIG_PATH, which pack.sh points at jupyter/
    labconfig = folder / "jupyter" / "labconfig"
    labconfig.mkdir(parents=True)
    (labconfig / "page_config.json").write_text(_page_config(), encoding="utf-8")
    server = folder / "jupyter" / "jupyter_server_config.d"
    server.mkdir(parents=True)
    (server / "learning-at-scale-student.json").write_text(_server_config(), encoding="utf-8")

    found = leaks(folder)
    if found:
        shutil.rmtree(folder)
        raise RuntimeError("the bundle would hand out solution code:\n  " + "\n  ".join(found[:20]))

    # Every file carries the release's date (the student's file browser shows "modified today", not a fixed
    # date months ago): this build's time, or $SOURCE_DATE_EPOCH for a reproducible zip.
    released = int(os.environ.get("SOURCE_DATE_EPOCH") or time.time())
    stamp = time.localtime(released)[:6]
    archive = out / f"{BUNDLE_NAME}.zip"
    partial = archive.with_suffix(".zip.partial")
    with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as zf:
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                os.utime(path, (released, released))
                info = zipfile.ZipInfo(str(Path(BUNDLE_NAME) / path.relative_to(folder)), date_time=stamp)
                mode = 0o755 if os.access(path, os.X_OK) else 0o644
                info.external_attr = (stat.S_IFREG | mode) << 16
                info.compress_type = zipfile.ZIP_DEFLATED
                zf.writestr(info, path.read_bytes())
    os.replace(partial, archive)

    lecturer = out / "LECTURER.md"
    lecturer.write_text(_lecturer_notes(folder, archive, url, colab, links), encoding="utf-8")
    return folder, archive


def _lecturer_notes(folder: Path, archive: Path, url: str, colab: str, links: list[str]) -> str:
    lines = [f"# Handing out {BUNDLE_NAME}", "",
             f"- Folder: `{folder}`", f"- Zip: `{archive}` (upload it where students can download it)",
             f"- Pack URL written into every setup cell: "
             f"`{url or '(none: on a hosted notebook, students must upload the zip and set PACK_URL themselves)'}`"
             " (set it once in `grader/extras/bundle.toml`, or `python -m grader bundle --pack-url URL`)", ""]
    if links:
        lines += ["## Open in Colab", "",
                  f"Publish at {colab}: the contents of `{folder}` and `{archive.name}` beside them (e.g. clone the "
                  f"repository, copy both in, commit, push). The student README lists these links:", ""]
        lines += [f"- [{Path(link).name}]({link})" for link in links]
    else:
        lines += ["No \"Open in Colab\" links: `python -m grader bundle --colab-url "
                  "https://github.com/ORG/REPO/blob/BRANCH` (or `colab_url` in `grader/extras/bundle.toml`), where you "
                  "publish this folder and its zip, writes one per notebook into the student README (and the zip's "
                  "link into the setup cells when no pack URL is set)."]
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------ leak check
WINDOW = 5
CODE_SUFFIXES = (".py", ".ipynb", ".sh", ".md", ".toml", ".cfg", ".yml", ".yaml")


def _normalise(line: str) -> str:
    """One line of code as its shape: whitespace dropped and every identifier that is not a Python
    keyword replaced by ``_`` (so a copy with renamed variables still matches); comments and
    blank lines become ``""``. Lines that do not tokenise (prose, an open bracket) keep their words."""
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(line.strip() + "\n").readline))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return " ".join(line.split())
    out = []
    for tok in tokens:
        if tok.type == tokenize.NAME:
            out.append(tok.string if keyword.iskeyword(tok.string) else "_")
        elif tok.type in (tokenize.OP, tokenize.NUMBER, tokenize.STRING):
            out.append(tok.string)
        elif tok.type == tokenize.ERRORTOKEN and tok.string.strip():
            out.append(tok.string)
    return "".join(out)


def _prose(line: str) -> str:
    return " ".join(line.lower().split())


def solution_blocks(solutions: Path | None = None) -> list[tuple[str, str, list[str]]]:
    """``[(where, kind, lines)]``: the lines between ``### BEGIN SOLUTION`` and ``### END SOLUTION``
    of every cell of every source notebook (and every line of a TA's rubric cell), blank and comment
    lines dropped. ``kind`` is ``"code"``
    (lines normalised to their shape by :func:`_normalise`) or ``"prose"`` (a markdown model answer:
    lower case, whitespace collapsed)."""
    solutions = solutions or ROOT / "solutions" / ASSIGNMENT
    blocks = []
    for nb in sorted(solutions.glob("*.ipynb")):
        for index, cell in enumerate(read_notebook(nb)["cells"]):
            src = cell_source(cell)
            kind = "code" if cell.get("cell_type") == "code" else "prose"
            norm = _normalise if kind == "code" else _prose
            if is_rubric(cell):   # a TA's rubric (grader/extras/tiers.py): all of it is secret
                lines = [n for n in (_prose(raw) for raw in src.splitlines()) if n]
                if lines:
                    blocks.append((f"{nb.name} cell {index} (rubric)", "prose", lines))
                continue
            inside, lines = False, []
            for raw in src.splitlines():
                if "BEGIN SOLUTION" in raw:
                    inside, lines = True, []
                elif "END SOLUTION" in raw:
                    inside = False
                    if lines:
                        blocks.append((f"{nb.name} cell {index}", kind, lines))
                elif inside:
                    line = norm(raw)
                    if line:
                        lines.append(line)
    return blocks


def _file_text(path: Path) -> str | None:
    try:
        text = path.read_text(encoding="utf-8")
    except (UnicodeDecodeError, OSError):
        return None
    if path.suffix == ".ipynb":
        try:
            cells = json.loads(text)["cells"]
        except (ValueError, KeyError, TypeError):
            cells = []
        text = "\n".join(cell_source(c) for c in cells if isinstance(c, dict))
    return text


def leaks(folder: Path, solutions: Path | None = None, window: int = WINDOW) -> list[str]:
    """Every file under ``folder`` in which ``window`` consecutive lines of a solution block appear as
    consecutive lines (blank and comment lines skipped): code compared by shape, so renaming the
    variables does not hide a copy; prose compared word for word. ``[]`` means no leak."""
    shingles: dict[str, dict[tuple[str, ...], str]] = {"code": {}, "prose": {}}
    for where, kind, lines in solution_blocks(solutions):
        for i in range(len(lines) - window + 1):
            shingles[kind].setdefault(tuple(lines[i:i + window]), where)
    found = []
    for path in sorted(folder.rglob("*")):
        if not path.is_file() or path.is_symlink() or path.stat().st_size > 20_000_000:
            continue
        text = _file_text(path)
        if text is None:
            continue
        # Comparing by shape tokenises every line: skip it for the large data files (corpora, the
        # tokenizer), which are compared word for word like prose.
        code_like = path.suffix in CODE_SUFFIXES or path.stat().st_size < 256_000
        for kind, norm in ((("code", _normalise),) if code_like else ()) + (("prose", _prose),):
            lines = [n for n in (norm(line) for line in text.splitlines()) if n]
            hit = next((shingles[kind][tuple(lines[i:i + window])] for i in range(len(lines) - window + 1)
                        if tuple(lines[i:i + window]) in shingles[kind]), None)
            if hit:
                found.append(f"{path.relative_to(folder)} repeats {window} lines of {hit}")
                break
    return found


def main(argv: list[str] | None = None) -> int:
    """``python -m grader.extras.bundle --rewrite-setup [NOTEBOOK_DIR ...]``: :func:`rewrite_setup_cells`."""

    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] != "--rewrite-setup":
        print("usage: python -m grader.extras.bundle --rewrite-setup [NOTEBOOK_DIR ...]  (default solutions/ex01; "
              "the bundle itself: python -m grader bundle)", file=sys.stderr)
        return 2
    for folder in args[1:] or [None]:
        changed = rewrite_setup_cells(Path(folder) if folder else None)
        where = folder or f"solutions/{ASSIGNMENT}"
        print(f"{where}: setup cell rewritten in {', '.join(changed)}" if changed
              else f"{where}: every setup cell is already quiet")
    print("next: python -m grader release (the student notebooks follow the source ones)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
