"""The main job's outputs: copies for class that look finished, the lecturer's answer key, and a
student's own run that reports unfilled cells without stopping at the first notebook."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import nbformat.sign

from utils.run_notebooks import class_copy, publish

REPO = Path(__file__).resolve().parents[1]


def _executed_notebook() -> dict:
    """A notebook as papermill leaves it: solution markers, a hidden-test block, a bar redrawn over
    several stream outputs, and cells without ids (nbformat 4.4)."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_markdown_cell("**Question.** Why?\n\n=== BEGIN MARK SCHEME ===\n\nBecause.\n\n=== END MARK SCHEME ==="),
        nbformat.v4.new_markdown_cell("### BEGIN SOLUTION\nThe loss is log K.\n### END SOLUTION"),
        nbformat.v4.new_code_cell("def f(x):\n    ### BEGIN SOLUTION\n    return 2 * x\n    ### END SOLUTION"),
        nbformat.v4.new_code_cell("assert f(1) == 2, 'f(1)'\n### BEGIN HIDDEN TESTS\nassert f(2) == 4\n### END HIDDEN TESTS\n"
                                  "print('f passed')"),
        nbformat.v4.new_code_cell("for _ in tqdm(range(3)): pass"),
    ]
    nb.cells[4].outputs = [
        nbformat.v4.new_output("stream", name="stdout", text="training\n"),
        nbformat.v4.new_output("stream", name="stderr", text="\rbar:   0%|          | 0/3"),
        nbformat.v4.new_output("stream", name="stderr", text="\rbar:  33%|###       | 1/3"),
        nbformat.v4.new_output("stream", name="stderr", text="\rbar: 100%|##########| 3/3\n"),
    ]
    data = json.loads(nbformat.writes(nb))
    for cell in data["cells"]:
        cell.pop("id", None)
    data["nbformat_minor"] = 4
    return data


def test_class_copy_shows_no_markers_and_final_bars():
    copy = class_copy(_executed_notebook())
    text = json.dumps(copy)
    for marker in ("BEGIN SOLUTION", "END SOLUTION", "MARK SCHEME", "HIDDEN TESTS", "f(2) == 4"):
        assert marker not in text, f"{marker!r} left in the class copy"
    assert "return 2 * x" in copy["cells"][2]["source"] and "The loss is log K." in copy["cells"][1]["source"]
    assert "print('f passed')" in copy["cells"][3]["source"]
    outputs = copy["cells"][4]["outputs"]
    assert [o["name"] for o in outputs] == ["stdout", "stderr"], outputs
    assert outputs[1]["text"] == "bar: 100%|##########| 3/3\n", repr(outputs[1]["text"])
    assert all(cell.get("id") for cell in copy["cells"]) and copy["nbformat_minor"] >= 5
    nbformat.validate(nbformat.from_dict(copy))


def test_published_copies_open_trusted_and_the_answer_key_keeps_its_markers(tmp_path):
    raw = tmp_path / "run" / "task9_demo.ipynb"
    raw.parent.mkdir()
    raw.write_text(json.dumps(_executed_notebook()))
    out = tmp_path / "out"
    target = publish(raw, out, keep_solutions=True)
    key = out / "solutions" / "task9_demo.solutions.ipynb"
    assert target == out / "task9_demo.ipynb" and key.is_file()
    assert "BEGIN SOLUTION" in key.read_text() and "BEGIN SOLUTION" not in target.read_text()
    notary = nbformat.sign.NotebookNotary()
    for path in (target, key):
        nb = nbformat.read(path, as_version=4)
        assert notary.check_signature(nb), f"{path.name} would open untrusted"
        # What Jupyter does on opening (add missing ids, upgrade the minor version) changes nothing.
        assert nbformat.writes(nbformat.validator.normalize(nb)[1]) == nbformat.writes(nb)
    publish(raw, tmp_path / "student", keep_solutions=False)
    assert not (tmp_path / "student" / "solutions").exists()


def test_a_students_run_reports_unfilled_cells_and_runs_every_notebook(tmp_path):
    """`./pack.sh run` in the bundle: a notebook that stops at a stub is reported with the exception,
    and the next notebook still runs."""
    folder = tmp_path / "notebooks"
    folder.mkdir()
    for name, body in (("a_stub.ipynb", "raise NotImplementedError()"), ("b_fine.ipynb", "print('fine')")):
        nb = nbformat.v4.new_notebook()
        params = nbformat.v4.new_code_cell('PRESET = "auto"')
        params.metadata["tags"] = ["parameters"]
        nb.cells = [params, nbformat.v4.new_code_cell(body)]
        nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
        nbformat.write(nb, folder / name)
    env = dict(os.environ, LAS_BUILD_DIR=str(tmp_path / "build"))
    proc = subprocess.run([sys.executable, "-m", "utils.run_notebooks", "smoke", "--notebooks", str(folder)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    rows = {line.split()[0]: line for line in proc.stdout.splitlines() if line.endswith(tuple("0123456789"))}
    assert "NotImplementedError" in rows["a_stub.ipynb"] and "a cell still to fill in" in rows["a_stub.ipynb"], rows
    assert " ok " in rows["b_fine.ipynb"], rows
    executed = tmp_path / "build" / "notebooks" / "smoke"
    assert (executed / "b_fine.ipynb").is_file() and (executed / "a_stub.ipynb").is_file()
    assert not (executed / "solutions").exists(), "a student's run has no answer key"


def test_a_headless_run_prints_no_kernel_warning_a_student_cannot_act_on(tmp_path):
    """`./pack.sh run` once printed ipykernel's "... susceptible to eavesdropping" warning for every notebook
    (a kernel on the local TCP loopback, started and ended by the run itself: nothing for a student to do)."""
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [nbformat.v4.new_code_cell('PRESET = "cpu"', metadata={"tags": ["parameters"]}),
                nbformat.v4.new_code_cell("print('ran', PRESET)")]
    src, dst = tmp_path / "tiny.ipynb", tmp_path / "out" / "tiny.ipynb"
    nbformat.write(nb, src)
    code = ("import sys; from pathlib import Path; from utils.run_notebooks import execute_notebook; "
            "execute_notebook(Path(sys.argv[1]), Path(sys.argv[2]), 'smoke')")
    proc = subprocess.run([sys.executable, "-c", code, str(src), str(dst)], cwd=REPO, capture_output=True, text=True,
                          timeout=300, env=dict(os.environ, LAS_BUILD_DIR=str(tmp_path / "build")))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "eavesdropping" not in proc.stdout + proc.stderr, proc.stderr
    outputs = [o.get("text", "") for c in nbformat.read(dst, as_version=4).cells for o in c.get("outputs", [])]
    assert "ran smoke\n" in outputs, outputs
