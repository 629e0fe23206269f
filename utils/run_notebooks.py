"""The pack's main job: execute every notebook end to end and keep the results.

    python -m utils.run_notebooks [PRESET] [--only NAME ...] [--notebooks DIR]   (or: ./pack.sh run [PRESET])

PRESET defaults to ``smoke``. In the course repository the notebooks come from ``solutions/ex01/``,
and from ``notebooks/ex01/`` in a student's copy (or ``--notebooks DIR``). A summary table lists
each notebook's status and time; the exit code is non-zero when any notebook failed, and one failing
notebook never stops the others.

What lands in ``build/notebooks/<preset>/`` (figures in ``build/figures/``):

- ``<stem>.ipynb``: the copy to show in class. Progress bars show their final state (plain text bars:
  a headless run cannot save a widget's state), solution markers and any hidden tests are removed,
  and the notebook is signed as trusted on this machine, so it opens unmodified with its outputs.
- in the course repository only, ``solutions/<stem>.solutions.ipynb``: the same run with the nbgrader
  markers kept, the lecturer's answer key.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path

from .notebook_cells import cell_source, drop_rubrics
from .paths import REPO_ROOT, build_dir
from .presets import PRESETS

SOLUTIONS = REPO_ROOT / "solutions" / "ex01"
RELEASE = REPO_ROOT / "notebooks" / "ex01"

#: Run in every headless kernel before the notebook (IPython startup file): tqdm.auto's widget
#: bars would be saved as their first text frame ("0%"), so use plain text bars instead, and
#: redraw them every few seconds rather than ten times a second (they are kept in the outputs).
PLAIN_PROGRESS_STARTUP = '''\
# Written by utils.run_notebooks for headless runs only.
import tqdm.auto, tqdm.autonotebook, tqdm.std
tqdm.auto.tqdm = tqdm.autonotebook.tqdm = tqdm.std.tqdm
tqdm.auto.trange = tqdm.autonotebook.trange = tqdm.std.trange
'''
_MARKER_LINE = re.compile(r"^[ \t]*(#+|=+)?[ \t]*(BEGIN|END) (SOLUTION|MARK SCHEME)[ \t=]*$")
_HIDDEN = re.compile(r"^[ \t]*#+[ \t]*BEGIN HIDDEN TESTS.*?^[ \t]*#+[ \t]*END HIDDEN TESTS[^\n]*\n?", re.M | re.S)


def default_notebooks() -> Path:
    """``solutions/ex01`` in the course repository, ``notebooks/ex01`` in a student's copy."""
    return SOLUTIONS if SOLUTIONS.is_dir() else RELEASE


def list_notebooks(folder: Path | None = None) -> list[Path]:
    """The notebooks of ``folder`` (default :func:`default_notebooks`), in the sheet's order."""
    folder = folder or default_notebooks()
    return sorted(p for p in folder.glob("*.ipynb") if ".ipynb_checkpoints" not in p.parts)


def solution_notebooks() -> list[Path]:
    """All nbgrader source notebooks, in the order of the exercise sheet (task1, task2, taskA, ...)."""
    return list_notebooks(SOLUTIONS)


def _headless_ipython_dir() -> Path:
    """An IPython profile whose startup file switches tqdm to plain text bars."""
    folder = build_dir() / "ipython-headless"
    startup = folder / "profile_default" / "startup"
    startup.mkdir(parents=True, exist_ok=True)
    path = startup / "00-plain-progress.py"
    if not path.exists() or path.read_text() != PLAIN_PROGRESS_STARTUP:
        path.write_text(PLAIN_PROGRESS_STARTUP)
    return folder


def execute_notebook(src: Path, dst: Path, preset: str, timeout: int | None = None) -> None:
    """Execute ``src`` with papermill (``PRESET`` injected into the parameters cell) into ``dst``,
    with plain-text progress bars."""
    import papermill as pm

    dst.parent.mkdir(parents=True, exist_ok=True)
    saved = {k: os.environ.get(k) for k in ("IPYTHONDIR", "TQDM_MININTERVAL")}
    os.environ["IPYTHONDIR"] = str(_headless_ipython_dir())
    os.environ.setdefault("TQDM_MININTERVAL", "2")
    try:
        pm.execute_notebook(
            str(src),
            str(dst),
            parameters={"PRESET": preset},
            cwd=str(src.parent),
            kernel_name="python3",
            progress_bar=False,
            execution_timeout=timeout,
            # the kernel's own log at ERROR: otherwise every notebook prints ipykernel's warning that TCP on the
            # loopback "is susceptible to eavesdropping", about a kernel this run starts and ends itself
            extra_arguments=["--IPKernelApp.log_level=ERROR"],
        )
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _final_frames(text: str) -> str:
    """Keep what a terminal would show: of each line redrawn with carriage returns, the last frame."""
    lines = text.split("\n")
    return "\n".join(line.rstrip("\r").rsplit("\r", 1)[-1] for line in lines)


def _with_ids(nb: dict) -> dict:
    """A deep copy of ``nb`` as nbformat 4.5: every cell has an id (Jupyter would add them on opening
    and mark the notebook modified)."""
    nb = json.loads(json.dumps(nb))
    for index, cell in enumerate(nb["cells"]):
        cell.setdefault("id", f"cell-{index:03d}")
    nb["nbformat"], nb["nbformat_minor"] = 4, max(5, int(nb.get("nbformat_minor", 5)))
    return nb


def class_copy(nb: dict) -> dict:
    """The executed notebook as shown in class: nbgrader's solution and mark-scheme marker lines and
    hidden-test blocks removed (the code and answers stay), progress bars at their final frame,
    every cell with an id (nbformat 4.5), the TA's rubric cells dropped. Returns a new dict."""
    nb = _with_ids(nb)
    drop_rubrics(nb)
    for cell in nb["cells"]:
        src = _HIDDEN.sub("", cell_source(cell))
        cell["source"] = "\n".join(line for line in src.split("\n") if not _MARKER_LINE.match(line))
        if "outputs" in cell:
            cell["outputs"] = _coalesce_streams(cell["outputs"])
    return nb


def _coalesce_streams(outputs: list[dict]) -> list[dict]:
    """Merge runs of stream outputs of the same name (each redraw of a bar is its own output) and
    keep each line's final frame."""
    merged: list[dict] = []
    for output in outputs:
        if output.get("output_type") == "stream":
            text = output.get("text", "")
            text = "".join(text) if isinstance(text, list) else text
            if merged and merged[-1].get("output_type") == "stream" and merged[-1].get("name") == output.get("name"):
                merged[-1]["text"] += text
                continue
            output = dict(output, text=text)
        merged.append(output)
    for output in merged:
        if output.get("output_type") == "stream":
            output["text"] = _final_frames(output["text"])
    return merged


def _write_signed(nb: dict, path: Path) -> None:
    """Validate, write atomically and sign (trusted on this machine: outputs render on opening)."""
    import nbformat
    import nbformat.sign

    node = nbformat.from_dict(nb)
    nbformat.validate(node)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".partial")
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        nbformat.write(node, handle)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)
    try:
        nbformat.sign.NotebookNotary().sign(node)
    except Exception as exc:  # noqa: BLE001 - an unwritable signature database only costs the trust mark
        print(f"(could not sign {path.name}: {exc}; Jupyter will ask to trust it)", file=sys.stderr)


def publish(executed: Path, out_dir: Path, *, keep_solutions: bool) -> Path:
    """Turn a papermill output into the class copy ``out_dir/<stem>.ipynb`` (and, with
    ``keep_solutions``, move the raw run to ``out_dir/solutions/<stem>.solutions.ipynb``)."""
    nb = json.loads(executed.read_text(encoding="utf-8"))
    target = out_dir / executed.name
    if keep_solutions:
        key = out_dir / "solutions" / f"{executed.stem}.solutions.ipynb"
        key.parent.mkdir(parents=True, exist_ok=True)
        _write_signed(_with_ids(nb), key)
    _write_signed(class_copy(nb), target)
    return target


def _failure(exc: Exception) -> str:
    """One line for the summary: the exception of the failing cell (papermill wraps it)."""
    name = getattr(exc, "ename", None) or exc.__class__.__name__
    cell = getattr(exc, "exec_count", None)
    where = f" in cell [{cell}]" if cell else ""
    hint = " (a cell still to fill in)" if name == "NotImplementedError" else ""
    return f"FAILED: {name}{where}{hint}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("preset", nargs="?", default="smoke", choices=PRESETS)
    parser.add_argument("--only", nargs="*", default=None, help="run only notebooks whose name contains one of these")
    parser.add_argument("--notebooks", type=Path, default=None,
                        help="folder of notebooks to execute (default: solutions/ex01, or notebooks/ex01 in a student's copy)")
    args = parser.parse_args(argv)

    from tqdm.auto import tqdm

    source = (args.notebooks or default_notebooks()).resolve()
    notebooks = list_notebooks(source)
    if args.only:
        notebooks = [nb for nb in notebooks if any(key in nb.stem for key in args.only)]
    if not notebooks:
        print(f"no notebooks matched in {source}", file=sys.stderr)
        return 2
    keep_solutions = source == SOLUTIONS.resolve()
    out_dir = build_dir() / "notebooks" / args.preset
    out_dir.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("LAS_BUILD_DIR", str(build_dir()))
    print(f"Executing {len(notebooks)} notebook(s) from {source} in the {args.preset} preset "
          f"(smoke: about a minute each; cpu: up to 15 minutes each) into {out_dir}")
    rows = []
    for nb in tqdm(notebooks, desc=f"notebooks ({args.preset})", unit="nb"):
        start = time.perf_counter()
        with tempfile.TemporaryDirectory(prefix="las-run-") as tmp:
            raw = Path(tmp) / nb.name
            try:
                execute_notebook(nb, raw, args.preset)
                status = "ok"
            except Exception as exc:  # papermill raises PapermillExecutionError with the cell's traceback
                status = _failure(exc)
                print(f"\n{nb.name} failed:\n{exc}", file=sys.stderr)
            if raw.exists():  # papermill writes the notebook up to the failing cell, too
                publish(raw, out_dir, keep_solutions=keep_solutions)
        rows.append((nb.name, status, time.perf_counter() - start))

    width = max(len(r[0]) for r in rows)
    print(f"\n{'notebook':<{width}}  {'status':<50} seconds")
    for name, status, seconds in rows:
        print(f"{name:<{width}}  {status:<50} {seconds:7.1f}")
    print(f"\nexecuted notebooks: {out_dir}" + (f"\nlecturer's answer key: {out_dir / 'solutions'}" if keep_solutions else "")
          + f"\nfigures:            {build_dir() / 'figures'}")
    return 0 if all(r[1] == "ok" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
