"""Read a submitted notebook defensively and prepare it for nbgrader.

``prepare(path, release_path)`` returns a :class:`Prepared` notebook, or raises
:class:`Unreadable` with a reason a TA can act on. Preparing

* de-duplicates grade_ids (nbgrader fails a whole submission on a copied cell, issue 1083):
  copies of a locked cell (tests, setup) are dropped; of a copied answer cell the LAST copy keeps
  the grading metadata and the earlier ones stay as ordinary cells, so the notebook still runs
  exactly as the student ran it;
* compares every locked cell with the release: an edited or deleted test cell is reported as
  tampering (nbgrader then restores the original from the gradebook, so the grade is unaffected);
* strips grading metadata the student invented (a cell claiming to be a graded cell the
  assignment does not have);
* upgrades a notebook saved in an older format (nbformat 3, an old Jupyter) to nbformat 4 with
  nbformat's own converter, which keeps every cell, source and nbgrader metadata; the reasons say so.

None of this decides points: the judge (grader/judge.py) does, from the answer cells alone.
"""

from __future__ import annotations

import copy
import json
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from utils.hosted_install import without_pack_url
from utils.notebook_cells import cell_source, grade_id, is_graded, is_locked, nbgrader_meta


MAX_NOTEBOOK_BYTES = 64 * 1024 ** 2
MAX_CELLS = 5_000         # the assignment notebooks have under 100
MAX_OUTPUTS = 20_000      # validating 20,000 outputs takes about 3 s
INTEGRITY_TAG = "las-integrity"   # an older grader appended a cell with this tag; feedback still drops it


class Unreadable(Exception):
    """The file is not a notebook nbgrader can grade; the message says why."""


@dataclass
class Prepared:
    notebook: dict
    notes: list[str] = field(default_factory=list)      # what was changed, for the reason column
    tampered: list[str] = field(default_factory=list)   # tampering findings


def _check_counts(data: bytes, name: str) -> None:
    """Refuse a flood of cells or outputs from the raw bytes, before building a million Python
    objects: every cell and output carries a ``"cell_type"`` / ``"output_type"`` key, and inside a
    JSON string the quotes are escaped, so these counts can only over-estimate."""
    for key, limit, what, advice in ((b'"cell_type"', MAX_CELLS, "cells", "submit the assignment notebook with "
                                      "its original cells"),
                                     (b'"output_type"', MAX_OUTPUTS, "outputs", "clear its outputs and resubmit")):
        found = data.count(key)
        if found > limit:
            raise Unreadable(f"{name} has {found} {what} (limit {limit}); {advice}")


def _cells_of(nb) -> list | None:
    """The cells of a parsed notebook: ``cells`` in nbformat 4, the worksheets' cells in nbformat 3
    (and 2); None when there is no list of cells."""
    if not isinstance(nb, dict):
        return None
    if isinstance(nb.get("cells"), list):
        return nb["cells"]
    version = nb.get("nbformat")
    worksheets = nb.get("worksheets")
    if isinstance(version, int) and version < 4 and isinstance(worksheets, list) and worksheets \
            and all(isinstance(w, dict) and isinstance(w.get("cells", []), list) for w in worksheets):
        return [c for w in worksheets for c in w.get("cells", [])]
    return None


def _check_shape(nb, name: str) -> None:
    """Refuse a parsed notebook that nbformat would take minutes to validate and convert (a million
    cells, a flood of outputs): counting is cheap, validation is not (about 0.1 ms per output)."""
    cells = _cells_of(nb)
    if cells is None:
        raise Unreadable(f"{name} has no list of cells")
    if len(cells) > MAX_CELLS:
        raise Unreadable(f"{name} has {len(cells)} cells (limit {MAX_CELLS}); submit the assignment notebook "
                         "with its original cells")
    outputs = sum(len(c["outputs"]) for c in cells if isinstance(c, dict) and isinstance(c.get("outputs"), list))
    if outputs > MAX_OUTPUTS:
        raise Unreadable(f"{name} has {outputs} outputs (limit {MAX_OUTPUTS}); clear its outputs and resubmit")


def read_notebook(path: Path) -> dict:
    """Parse and validate a notebook (upgraded to nbformat 4 when it is older); raise
    :class:`Unreadable` with the reason.

    The size, cell and output limits are checked before nbformat sees the notebook, so a hostile
    file is refused in about a second instead of stalling the batch in validation."""
    return _read(path)[0]


def _read(path: Path) -> tuple[dict, str | None]:
    """(the notebook as nbformat 4, the format it was saved in when that was older, else None)."""
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise Unreadable(f"cannot read {path.name}: {exc.strerror}") from None
    if size > MAX_NOTEBOOK_BYTES:
        raise Unreadable(f"{path.name} is {size / 1024 ** 2:.0f} MB (limit {MAX_NOTEBOOK_BYTES // 1024 ** 2} MB); "
                         "clear its outputs and resubmit")
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_NOTEBOOK_BYTES + 1)  # the file may have grown since stat
    except OSError as exc:
        raise Unreadable(f"cannot read {path.name}: {exc.strerror}") from None
    if len(data) > MAX_NOTEBOOK_BYTES:
        raise Unreadable(f"{path.name} is larger than {MAX_NOTEBOOK_BYTES // 1024 ** 2} MB; clear its outputs "
                         "and resubmit")
    _check_counts(data, path.name)
    try:
        text = data.decode("utf-8")
        parsed = json.loads(text)
    except Exception as exc:  # noqa: BLE001 - UnicodeDecodeError, JSONDecodeError, RecursionError
        raise Unreadable(f"{path.name} is not a valid notebook ({exc.__class__.__name__}: "
                         f"{str(exc)[:160]})") from None
    _check_shape(parsed, path.name)   # exact counts, also of cells without a cell_type
    version = parsed.get("nbformat")
    old_format = None
    if isinstance(version, int) and version < 4:
        minor = parsed.get("nbformat_minor")
        old_format = f"{version}.{minor}" if isinstance(minor, int) else str(version)
    del parsed
    import nbformat   # only now: importing it takes longer than refusing a hostile file

    try:
        with warnings.catch_warnings():  # duplicate cell ids are repaired below, quietly
            warnings.simplefilter("ignore")
            nb = nbformat.reads(text, as_version=4)
    except Exception as exc:  # noqa: BLE001 - NotJSONError, UnicodeDecodeError, KeyError, RecursionError, ...
        raise Unreadable(f"{path.name} is not a valid notebook ({exc.__class__.__name__}: "
                         f"{str(exc)[:160]})") from None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            nbformat.validate(nb)
    except Exception:  # noqa: BLE001 - repairable: nbgrader only needs cells with sources
        pass
    if not isinstance(nb.get("cells"), list):
        raise Unreadable(f"{path.name} has no list of cells")
    try:
        return json.loads(nbformat.writes(nb)), old_format
    except Exception as exc:  # noqa: BLE001 - e.g. RecursionError on absurdly nested metadata
        raise Unreadable(f"{path.name} cannot be re-serialised ({exc.__class__.__name__}: {str(exc)[:160]})") from None


def prepare(path: Path, release_path: Path) -> Prepared:
    nb, old_format = _read(path)
    release = json.loads(release_path.read_text(encoding="utf-8"))
    released = {nbgrader_meta(c)["grade_id"]: c for c in release["cells"] if nbgrader_meta(c).get("grade_id")}
    out = Prepared(nb)
    if old_format:
        # nbformat 3 has no cell ids: the upgrade drew random ones. Give the graded cells the
        # release's ids and the others their position, so that a regrade sees the same notebook.
        for i, cell in enumerate(nb["cells"]):
            original = released.get(nbgrader_meta(cell).get("grade_id"))
            cell["id"] = (original or {}).get("id") or f"cell-{i}"
        out.notes.append(f"{path.name} was saved as nbformat {old_format} (an old Jupyter): upgraded to "
                         "nbformat 4 for grading, every cell and its grading metadata kept")

    # 1. duplicated grade_ids
    positions: dict[str, list[int]] = {}
    for i, cell in enumerate(nb["cells"]):
        gid = nbgrader_meta(cell).get("grade_id")
        if gid:
            positions.setdefault(gid, []).append(i)
    drop: set[int] = set()
    for gid, where in positions.items():
        if len(where) < 2:
            continue
        if is_locked(released.get(gid, {})) or is_locked(nb["cells"][where[0]]):
            drop.update(where[1:])
            out.notes.append(f"{len(where) - 1} copy(ies) of locked cell {gid} removed")
        else:
            for i in where[:-1]:
                nb["cells"][i]["metadata"].pop("nbgrader", None)
            out.notes.append(f"answer cell {gid} appears {len(where)} times: graded the last copy "
                             "(earlier copies still run)")
    nb["cells"] = [c for i, c in enumerate(nb["cells"]) if i not in drop]

    # 2. locked cells edited or deleted; grading metadata the assignment does not have
    seen = set()
    for cell in nb["cells"]:
        gid = nbgrader_meta(cell).get("grade_id")
        if not gid:
            continue
        if gid not in released:
            cell["metadata"].pop("nbgrader", None)
            out.tampered.append(f"unknown graded cell {gid!r} (metadata removed)")
            continue
        seen.add(gid)
        original = released[gid]
        if is_locked(original) and \
                without_pack_url(cell_source(cell)).strip() != without_pack_url(cell_source(original)).strip():
            out.tampered.append(f"edited locked cell {gid} (restored)")
        if nbgrader_meta(cell) != nbgrader_meta(original) and not is_locked(original):
            # e.g. an answer cell that claims points: nbgrader resets the metadata from the gradebook
            if {k: v for k, v in nbgrader_meta(cell).items() if k != "checksum"} != \
               {k: v for k, v in nbgrader_meta(original).items() if k != "checksum"}:
                out.tampered.append(f"changed grading metadata of {gid} (restored)")
    for gid, original in released.items():
        if gid not in seen and is_graded(original) and is_locked(original):
            out.tampered.append(f"deleted test cell {gid} (restored)")
        elif gid not in seen and is_locked(original):
            out.tampered.append(f"deleted read-only cell {gid} (not restored: later cells may fail)")
        elif gid not in seen:
            out.notes.append(f"answer cell {gid} missing")

    # 3. unique cell ids (copied cells share them; nbformat 4.5 rejects that)
    ids = set()
    for i, cell in enumerate(nb["cells"]):
        if "id" in cell and cell["id"] in ids:
            cell["id"] = f"{cell['id'][:50]}-{i}"
        ids.add(cell.get("id"))
    return out


def release_view(nb: dict, release: dict) -> dict:
    """The release view of a submission, what grading runs and the feedback page shows (one function
    for both): every locked cell (setup, given code, tests) with the release's source
    and grading metadata, as nbgrader's OverwriteCells restores them; a deleted test cell comes back
    after the cell that precedes it in the release. Outputs stay as submitted (the full run replaces
    those of every cell it runs; feedback for a notebook that never ran clears them). A new dict."""
    released = {}
    order = []
    for cell in release["cells"]:
        gid = grade_id(cell)
        if gid:
            released[gid] = cell
            order.append(gid)
    out = copy.deepcopy(nb)
    seen = set()
    for cell in out["cells"]:
        gid = grade_id(cell)
        if gid in released:
            seen.add(gid)
            original = released[gid]
            if not isinstance(cell.get("metadata"), dict):
                cell["metadata"] = {}
            cell["metadata"]["nbgrader"] = copy.deepcopy(nbgrader_meta(original))
            if is_locked(original):
                cell["source"] = original["source"]
                cell["cell_type"] = original["cell_type"]
        if cell.get("cell_type") == "code" and not isinstance(cell.get("outputs"), list):
            cell["outputs"], cell["execution_count"] = [], None
    for i, gid in enumerate(order):
        original = released[gid]
        if gid in seen or not (is_locked(original) and is_graded(original)):
            continue
        where = {grade_id(c): j for j, c in enumerate(out["cells"]) if grade_id(c)}
        after = next((where[prev] for prev in reversed(order[:i]) if prev in where), None)  # the nearest one
        cell = copy.deepcopy(original)
        if cell.get("cell_type") == "code":
            cell["outputs"], cell["execution_count"] = [], None
        out["cells"].insert(len(out["cells"]) if after is None else after + 1, cell)
        seen.add(gid)
    return out


def write(nb: dict, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(nb, indent=1, ensure_ascii=False), encoding="utf-8")
