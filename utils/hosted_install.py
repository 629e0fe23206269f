"""The course pack on a hosted notebook (Google Colab, Kaggle, Binder, a course JupyterHub: any Jupyter
where pip works): unpacks the pack and installs its pinned requirements into the running kernel's
environment.

Every notebook's setup cell starts with :data:`SETUP_BOOTSTRAP`. When ``import utils.presets`` fails and
the cell's ``PACK_URL`` is set, the bootstrap does only what must happen before the pack is on disk: it
fetches ``ex01-student.zip`` and imports this module straight from the zip (``zipimport``: the module is
a top-level ``hosted_install`` there, standard library only), whose :func:`install_pack` does the rest.
The pack itself is never built or pip-installed: ``pip install -e`` without build isolation needs a
recent setuptools and wheel in the runtime (``invalid command 'bdist_wheel'`` where they are missing),
and a build with isolation downloads setuptools first. ``utils/`` is plain Python, so the unpacked
folder on ``sys.path`` is all it needs.

What is installed: every line of the pack's ``requirements.txt`` at its pinned version, except

- torch and torchvision when the runtime already has both. A hosted GPU runtime ships a pair built
  for its CUDA driver; the pinned pair from PyPI is a 3 GB download that may not match that driver.
  The runtime's versions are passed to pip as constraints, so no other requirement replaces them.
  A runtime without both gets the pinned pair.
- the Jupyter stack (``JUPYTER_STACK``). The runtime's own notebook server and kernel run on it
  (Colab pins its own ipykernel and notebook server; replacing them under a running kernel can break
  the runtime), no notebook imports it, and it serves only ``./pack.sh lab`` and ``validate`` on a
  student's own machine.
"""

from __future__ import annotations

import importlib
import importlib.metadata as metadata
import os
import re
import site
import subprocess
import sys
import tempfile
import zipfile

#: Kept as the runtime has them when it has both (see the module's docstring).
TORCH_PAIR = ("torch", "torchvision")
#: Never installed on a hosted notebook: the runtime's own Jupyter runs on these.
JUPYTER_STACK = ("jupyterlab", "ipykernel", "nbgrader", "nbformat", "nbclient", "nbconvert", "papermill")


#: The start of every notebook's setup cell (the course repository's tests check that all five carry
#: it verbatim; :func:`with_setup_bootstrap` writes it into a cell). On a hosted notebook without the pack it
#: fetches the zip from ``PACK_URL``, which ``python -m grader bundle`` stamps (``stamp_pack_url``, in the course
#: repository; the grader's check of locked cells ignores that one line), and runs
#: :func:`install_pack` from the zip. Only what must run before the pack is on disk is here.
SETUP_BOOTSTRAP = r"""
try:  # Setup, run it first: the course pack, then imports, preset, device, seed and data
    import utils.presets  # the course pack, installed as its README says (./pack.sh env)
except ImportError:  # a hosted notebook (Colab, Kaggle, Binder, a JupyterHub) without the pack: fetch it
    import os, sys, urllib.request
    PACK_URL = "" or os.environ.get("LAS_PACK_URL", "")  # `python -m grader bundle` writes the zip's link here
    if not PACK_URL:
        raise ImportError("The course pack is not installed and this notebook has no PACK_URL. Own computer: run "
                          "./pack.sh env in the unpacked ex01-student folder. Colab & co.: ask your lecturer for the "
                          "link to ex01-student.zip (or upload ex01-student.zip), run %env LAS_PACK_URL=<the link or "
                          "path> in a new cell above, then this cell again. Lecturer: python -m grader bundle "
                          "--pack-url URL.") from None
    PACK_ZIP = urllib.request.urlretrieve(PACK_URL)[0] if "://" in PACK_URL else PACK_URL  # a link or a path
    sys.path.insert(0, os.path.join(PACK_ZIP, "ex01-student", "utils"))  # the installer, read from the zip
    import hosted_install
    hosted_install.install_pack(PACK_ZIP, PACK_URL)  # into ~/ex01-student with its pinned packages; silent if ok
""".lstrip("\n")


#: The one line of every setup cell that ``python -m grader bundle`` rewrites: the pack's URL.
PACK_URL_LINE = re.compile(r'^(?P<indent>\s*)PACK_URL = "[^"\n]*"', re.MULTILINE)


def without_pack_url(source: str) -> str:
    """``source`` (a cell's text) with any ``PACK_URL = "..."`` line reset to ``""``: the one line of a locked
    setup cell that differs between the release and a bundle (the grader compares locked cells through this)."""
    return PACK_URL_LINE.sub(lambda m: f'{m["indent"]}PACK_URL = ""', source)


def with_setup_bootstrap(source: str) -> str:
    """``source`` (a setup cell) with its bootstrap, from a ``try:`` line through the indented block under
    its ``except ImportError:``, replaced by :data:`SETUP_BOOTSTRAP` (``PACK_URL`` empty, as the course
    repository's source notebooks keep it); comment lines above the ``try:`` are dropped too (the bootstrap's first line says what the
    cell does). For the pack's maintainers, after a change of the text. Raises ``ValueError`` when the
    cell has no such block."""
    lines = source.splitlines(keepends=True)
    start = next((i for i in range(len(lines) - 1) if lines[i].lstrip().startswith("try:")
                  and lines[i + 1].strip().startswith("import utils.presets")), None)
    if start is None:
        raise ValueError("no `try:` / `import utils.presets` bootstrap in this setup cell")
    head = start
    while head > 0 and lines[head - 1].lstrip().startswith("#"):
        head -= 1
    end = start + 1
    while end < len(lines) and (not lines[end].strip() or lines[end][0] in " \t" or lines[end].startswith("except")):
        end += 1
    while end > start + 1 and not lines[end - 1].strip():  # blank lines after the block stay
        end -= 1
    return "".join(lines[:head]) + SETUP_BOOTSTRAP + "".join(lines[end:])


def install_pack(pack_zip: str, pack_url: str) -> None:
    """The hosted bootstrap's second half (:data:`SETUP_BOOTSTRAP`), run from the fetched zip ``pack_zip``
    (downloaded from, or the path, ``pack_url``): unpack the pack into ``~/<its folder>`` (all but its
    notebooks/: a notebook unpacked there earlier may hold the student's answers), import the pack from
    that folder from now on (not from the zip, and never a runtime's own ``utils``), then
    :func:`install_pinned_requirements`.

    Silent when it succeeds: the setup cell's own lines (preset, device, data) are what a student reads.
    While it runs, a notebook shows one status line that is removed at the end (:class:`_TransientStatus`);
    what it decided and pip's output go to :data:`INSTALL_LOG` in the unpacked folder. A failure is one
    ``RuntimeError`` line that says what to do."""
    in_zip = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # <zip>/ex01-student
    pack_dir = os.path.join(os.path.expanduser("~"), os.path.basename(in_zip))
    with _TransientStatus(f"Installing the course pack from {pack_url} into {pack_dir} with its pinned packages: "
                          "1 to 3 minutes, once per runtime (up to 10 if PyTorch is missing too) ..."):
        with zipfile.ZipFile(pack_zip) as pack:
            pack.extractall(os.path.dirname(pack_dir), [n for n in pack.namelist() if "/notebooks/" not in n])
        zip_entries = os.path.abspath(pack_zip) + os.sep
        sys.path[:] = [p for p in sys.path if not os.path.abspath(p).startswith(zip_entries)]
        sys.path.insert(0, pack_dir)
        for name in [m for m in sys.modules if m == "utils" or m.startswith("utils.")]:
            del sys.modules[name]  # a `utils` of the runtime's own must not hide the pack's
        importlib.invalidate_caches()
        install_pinned_requirements(pack_dir)  # keeps the runtime's torch and torchvision when it has both


#: What the hosted install decided and pip's whole output, in the unpacked pack's folder.
INSTALL_LOG = "hosted-install.log"


class _TransientStatus:
    """A status line shown in the notebook while a long step runs and removed when it succeeds (a
    display updated to nothing); it stays when the step fails. Outside a notebook kernel (a script,
    a test) nothing is shown."""

    def __init__(self, text: str):
        self.text, self.handle = text, None

    def __enter__(self):
        try:
            from IPython import get_ipython
            from IPython.display import display
        except ImportError:
            return self
        shell = get_ipython()
        if shell is not None and getattr(shell, "kernel", None) is not None:
            self.handle = display({"text/plain": self.text}, raw=True, display_id=True)
        return self

    def __exit__(self, kind, value, traceback):
        if self.handle is not None and kind is None:
            self.handle.update({"text/plain": ""}, raw=True)
        return False


def canonical(name: str) -> str:
    """A distribution name as pip compares it (PEP 503): ``Scikit_Learn`` -> ``scikit-learn``."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(line: str) -> str:
    """The distribution name of one requirements.txt line (``"numpy==2.4.6  # why"`` -> ``"numpy"``)."""
    return re.split(r"[\s=<>~!;\[@]", line.strip(), maxsplit=1)[0]


def requirement_lines(text: str) -> list[str]:
    """The requirement lines of a requirements.txt (comments and blank lines dropped)."""
    lines = (line.split(" #", 1)[0].strip() for line in text.splitlines())
    return [line for line in lines if line and not line.startswith("#")]


def pins(text: str) -> dict[str, str]:
    """``{canonical name: version}`` of every ``name==version`` line of a requirements.txt."""
    found = {}
    for line in requirement_lines(text):
        match = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*([^\s;]+)", line)
        if match:
            found[canonical(match[1])] = match[2]
    return found


def installed_version(name: str) -> str | None:
    """The version of ``name`` this interpreter would import (the first on ``sys.path``), or None."""
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def plan(requirements: str, installed: dict[str, str | None]) -> tuple[list[str], list[str], list[str]]:
    """What to hand pip on this runtime: ``(requirement lines, constraint lines, notes to print)``.

    ``installed`` maps the canonical names of the torch pair to the runtime's versions (None: absent)."""
    skip = set(JUPYTER_STACK)
    constraints, notes = [], []
    pinned = pins(requirements)
    if all(installed.get(name) for name in TORCH_PAIR):
        skip |= set(TORCH_PAIR)
        constraints = [f"{name}=={installed[name]}" for name in TORCH_PAIR]
        notes.append("Keeping this runtime's own " + " and ".join(f"{n} {installed[n]}" for n in TORCH_PAIR)
                     + " (built for its hardware; the pack pins "
                     + " / ".join(f"{n} {pinned.get(n, '?')}" for n in TORCH_PAIR) + ").")
    lines = [line for line in requirement_lines(requirements) if canonical(requirement_name(line)) not in skip]
    left_alone = [name for name in JUPYTER_STACK if name in pinned]
    if left_alone:
        notes.append(f"Leaving this runtime's own Jupyter as it is ({', '.join(left_alone)}): no notebook imports it.")
    return lines, constraints, notes


def _import_names() -> dict[str, set[str]]:
    """``{canonical distribution name: its top-level import names}`` for every installed distribution."""
    names: dict[str, set[str]] = {}
    for module, dists in metadata.packages_distributions().items():
        for dist in dists:
            names.setdefault(canonical(dist), set()).add(module)
    return names


def install_pinned_requirements(pack_dir: str) -> None:
    """Install the pinned requirements of the unpacked pack in ``pack_dir`` (see the module's docstring)
    with this kernel's pip, and check that this kernel now sees each at its pin. Prints nothing: what it
    kept and why, pip's output and what pip changed go to :data:`INSTALL_LOG` in ``pack_dir``.

    Raises ``RuntimeError``, one line that says what to do, when pip fails (its last line and the log's
    path), and when the kernel must be restarted: a package pip changed was already imported here, or pip put a package where this
    kernel does not look yet (a user site created by this install)."""
    with open(os.path.join(pack_dir, "requirements.txt"), encoding="utf-8") as f:
        requirements = f.read()
    log_path = os.path.join(pack_dir, INSTALL_LOG)
    lines, constraints, notes = plan(requirements, {name: installed_version(name) for name in TORCH_PAIR})
    to_install = {canonical(requirement_name(line)) for line in lines}
    wanted = {name: version for name, version in pins(requirements).items() if name in to_install}
    before = {name: installed_version(name) for name in wanted}
    with tempfile.TemporaryDirectory(prefix="las-pack-") as tmp:
        requirement_file, constraint_file = os.path.join(tmp, "requirements.txt"), os.path.join(tmp, "constraints.txt")
        with open(requirement_file, "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
        with open(constraint_file, "w", encoding="utf-8") as f:
            f.write("\n".join(constraints) + "\n")
        command = [sys.executable, "-m", "pip", "install", "--disable-pip-version-check", "-q",
                   "-r", requirement_file, "-c", constraint_file]
        pip = subprocess.run(command, capture_output=True, text=True)
    with open(log_path, "w", encoding="utf-8") as log:
        log.write("\n".join(notes + [f"$ {' '.join(command)}", f"(exit {pip.returncode})", pip.stdout + pip.stderr]))
    if pip.returncode != 0:
        last = next((ln.strip() for ln in reversed((pip.stdout + pip.stderr).splitlines()) if ln.strip()), "")
        raise RuntimeError(f"pip could not install the course pack's pinned packages (exit {pip.returncode}: "
                           f"{last[:160]}); this runtime needs internet access to PyPI: if it has it, run the cell "
                           f"again, and if that fails too, show {log_path} (pip's whole output) to your lecturer.")

    importlib.invalidate_caches()  # packages new to an existing folder of sys.path become importable
    user_site = site.getusersitepackages() if site.ENABLE_USER_SITE else None
    if user_site and os.path.isdir(user_site) and user_site not in sys.path:
        # pip's fallback when the runtime's site-packages is read-only: what the runtime lacked becomes
        # importable now; a package the runtime also has is shadowed until a restart (checked below)
        site.addsitedir(user_site)
    after = {name: installed_version(name) for name in wanted}
    changed = sorted(name for name in wanted if after[name] != before[name])
    imports = _import_names() if changed else {}
    already_loaded = [f"{name} {before[name]}" for name in changed if before[name] is not None
                      and any(module in sys.modules for module in imports.get(name, ()))]
    not_seen = [f"{name} (sees {after[name] or 'none'}, pinned {version})" for name, version in wanted.items()
                if after[name] != version]
    with open(log_path, "a", encoding="utf-8") as log:
        log.write(f"\npip changed {len(changed)} of {len(wanted)} pinned packages: "
                  f"{', '.join(f'{n} {after[n]}' for n in changed) or 'none'}\n")
    if already_loaded or not_seen:
        why = ([f"already imported at another version: {', '.join(already_loaded)}"] if already_loaded else []) + (
            [f"not visible yet: {', '.join(not_seen)}"] if not_seen else [])
        raise RuntimeError(
            "Restart the kernel (Colab: Runtime > Restart session; Jupyter: Kernel > Restart Kernel) and run the "
            "notebook again from the top: pip installed the course pack's pinned packages, but this kernel cannot "
            f"use them before a restart ({'; '.join(why)}). The next run finds everything installed and takes "
            f"seconds; if this comes back after a restart, show {log_path} to your lecturer.")
