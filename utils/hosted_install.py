"""The course pack on a hosted notebook (Google Colab, Kaggle, Binder, a course JupyterHub: any Jupyter
where pip works): installs the pack's pinned requirements into the running kernel's environment.

Every notebook's setup cell calls :func:`install_pinned_requirements` when ``import utils.presets``
fails and its ``PACK_URL`` is set, after unpacking ``ex01-student.zip`` and putting the unpacked folder
on ``sys.path``. The pack itself is never built or pip-installed: ``pip install -e`` without build
isolation needs a recent setuptools and wheel in the runtime (``invalid command 'bdist_wheel'`` where
they are missing), and a build with isolation downloads setuptools first. ``utils/`` is plain Python,
so the unpacked folder on ``sys.path`` is all it needs. Standard library only: this module runs
before any requirement is installed.

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

#: Kept as the runtime has them when it has both (see the module's docstring).
TORCH_PAIR = ("torch", "torchvision")
#: Never installed on a hosted notebook: the runtime's own Jupyter runs on these.
JUPYTER_STACK = ("jupyterlab", "ipykernel", "nbgrader", "nbformat", "nbclient", "nbconvert", "papermill")


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
    with this kernel's pip, and check that this kernel now sees each at its pin.

    Raises ``RuntimeError`` when pip fails (with the end of its output), and when the kernel must be
    restarted: a package pip changed was already imported here, or pip put a package where this
    kernel does not look yet (a user site created by this install)."""
    with open(os.path.join(pack_dir, "requirements.txt"), encoding="utf-8") as f:
        requirements = f.read()
    lines, constraints, notes = plan(requirements, {name: installed_version(name) for name in TORCH_PAIR})
    for note in notes:
        print(note)
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
    if pip.returncode != 0:
        tail = "\n".join((pip.stdout + pip.stderr).strip().splitlines()[-25:])
        raise RuntimeError(f"pip could not install the course pack's pinned requirements (exit {pip.returncode}). "
                           f"The end of its output:\n{tail}\nThis runtime needs internet access to PyPI; if it has "
                           "it, show this message to your lecturer.")

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
    if already_loaded or not_seen:
        raise RuntimeError(
            "pip installed the course pack's pinned packages, but this kernel cannot use them until it restarts: "
            + (f"already imported at another version: {', '.join(already_loaded)}. " if already_loaded else "")
            + (f"not visible yet: {', '.join(not_seen)}. " if not_seen else "")
            + "Restart the kernel (Colab: Runtime > Restart session; Jupyter: Kernel > Restart Kernel) and run the "
              "notebook again from the top: the next run finds everything installed and takes seconds. If this "
              "message comes back after a restart, show it to your lecturer.")
    print(f"The course pack is ready ({pack_dir} on sys.path); pip changed {len(changed)} of "
          f"{len(wanted)} pinned packages" + (f": {', '.join(f'{n} {after[n]}' for n in changed)}." if changed else "."))
