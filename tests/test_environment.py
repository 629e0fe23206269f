"""The pinned environment is coherent: requirements.txt and environment.yml agree, the matched
torch/torchvision pair is what is installed, and the editable packages import from anywhere."""

from __future__ import annotations

import re
import subprocess
import sys
from importlib.metadata import version

from roundtrip import REPO


def _pins(lines):
    pins = {}
    for line in lines:
        line = line.split("#")[0].strip().lstrip("-").strip()
        m = re.fullmatch(r"([A-Za-z0-9_.\-]+)==([A-Za-z0-9_.\-+]+)", line)
        if m:
            pins[m.group(1).lower().replace("_", "-")] = m.group(2)
    return pins


def test_requirements_and_environment_yml_pin_the_same_versions():
    req = _pins((REPO / "requirements.txt").read_text().splitlines())
    env = _pins((REPO / "environment.yml").read_text().splitlines())
    assert req, "requirements.txt pins nothing"
    assert req == env, f"differences: {set(req.items()) ^ set(env.items())}"


def test_every_requirement_is_pinned_exactly():
    for line in (REPO / "requirements.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            assert "==" in line, f"requirements.txt: {line!r} is not pinned with =="


def test_installed_versions_match_the_pins():
    req = _pins((REPO / "requirements.txt").read_text().splitlines())
    for name in ("torch", "torchvision", "nbgrader", "transformers", "jupyterlab"):
        assert version(name).split("+")[0] == req[name], f"{name} {version(name)} installed, {req[name]} pinned"


def test_utils_and_grader_import_from_any_directory(tmp_path):
    code = "import utils, grader.checks, pathlib; print(pathlib.Path(utils.__file__).parent.parent)"
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == str(REPO)


def test_readme_opens_with_the_two_commands_and_ci_runs_the_test_command_verbatim():
    readme = (REPO / "README.md").read_text()
    blocks = re.findall(r"```(?:bash|sh)?\n(.*?)```", readme, flags=re.S)
    assert blocks, "README.md has no command block"
    first = [l.split("#")[0].strip() for l in blocks[0].splitlines() if l.split("#")[0].strip()]
    assert first[0].startswith("./pack.sh run"), first
    assert first[1] == "./pack.sh test", first
    ci = (REPO / ".ci" / "run").read_text()
    assert "\n" + first[1] + "\n" in ci, ".ci/run must run the README's test command verbatim"
