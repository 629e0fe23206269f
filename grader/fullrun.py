"""The executed notebook of the full run, built from the session's cell records: outputs scrubbed and
capped, submitted outputs treated as untrusted, the full run's status (timeouts, a dead process, memory
cap) taken from the session's own observations, never from what an output says."""

from __future__ import annotations

import json
from pathlib import Path

from utils.notebook_cells import grade_id
from .launch import DEMO_NOTE, session_cells
from .pageclean import BASE64, as_text
from .policy import Settings
from .results import Job, NotebookResult
from .seed import scrub_value


#: Caps on the outputs a student SUBMITTED under a demonstration cell (shown, never run, never evidence).
SUBMITTED_OUTPUTS = 20
SUBMITTED_TEXT = 20_000          # characters of text per cell
SUBMITTED_IMAGE = 1024 ** 2      # characters of base64 per image, and 2 MiB per cell in all
SUBMITTED_IMAGES = 2 * 1024 ** 2


def submitted_outputs(outputs, secrets: tuple = ()) -> list[dict]:
    """What a student submitted under a demonstration cell, as untrusted text and images: streams and
    plain text (capped), PNG/JPEG images (capped), an error as plain stderr text (never an error
    output, so nothing reads it as the full run's); no HTML, markdown, SVG or script (no overlay, no
    external image or link), never more than :data:`SUBMITTED_OUTPUTS` outputs."""
    items = outputs if isinstance(outputs, list) else []
    kept: list[dict] = []   # every item not kept is counted as not shown
    text_left, image_left = SUBMITTED_TEXT, SUBMITTED_IMAGES

    def text_of(value) -> str:
        nonlocal text_left
        value = as_text(value) or ""
        cut, text_left = value[:max(text_left, 0)], text_left - len(value)
        return cut
    for out in items:
        if not isinstance(out, dict) or len(kept) >= SUBMITTED_OUTPUTS or text_left <= 0:
            continue
        kind = out.get("output_type")
        if kind == "stream":
            kept.append({"output_type": "stream", "name": "stderr" if out.get("name") == "stderr" else "stdout",
                         "text": text_of(out.get("text"))})
        elif kind == "error":
            kept.append({"output_type": "stream", "name": "stderr",
                         "text": text_of(f"{out.get('ename', '')}: {out.get('evalue', '')}"[:2000]) + "\n"})
        elif kind in ("display_data", "execute_result"):
            data = out.get("data") if isinstance(out.get("data"), dict) else {}
            shown = {}
            for mime in ("image/png", "image/jpeg"):
                image = as_text(data.get(mime))
                if image and len(image) <= min(SUBMITTED_IMAGE, image_left) and BASE64.fullmatch(image):
                    shown[mime] = image
                    image_left -= len(image)
                    break
            if as_text(data.get("text/plain")) is not None:
                shown["text/plain"] = text_of(data["text/plain"])
            if shown:
                kept.append({"output_type": "display_data", "data": shown, "metadata": {}})
    dropped = len(items) - len(kept)
    if dropped:
        kept.append({"output_type": "stream", "name": "stderr",
                     "text": f"[grader] {dropped} more submitted output(s) not shown (too large, or HTML/scripts)\n"})
    return scrub_value(kept, secrets)


def _run_output(out: dict) -> bool:
    return isinstance(out, dict) and out.get("output_type") in ("stream", "display_data", "execute_result", "error")


def write_notebook(path: Path, nb: dict) -> None:
    """An executed notebook as the grader writes it: ASCII JSON, so a lone surrogate a student printed
    (``print("\\ud800")``) is stored escaped instead of making the file unwritable."""
    path.write_text(json.dumps(nb, indent=1, ensure_ascii=True), encoding="utf-8")


def full_run_notebook(release_view: dict, job: Job, records: list[dict], tail: str, settings: Settings,
                      secrets: tuple = ()) -> dict | None:
    """The executed notebook (step ``attach_full_run`` of grader/steps.py): a new copy of ``release_view`` with
    the outputs of the session's cell records, scrubbed of the batch's seeds, or None when no cell ran. The full
    run's status goes in ``job.result``, from the session's own observations (the ``full_run`` record), never
    from what an output says."""
    result, notebook = job.result, job.notebook
    result.log = tail
    nb = json.loads(json.dumps(release_view))
    roles = {c["index"]: c["role"] for c in session_cells(release_view, job.release, settings.full_run)}
    submitted = {i: nb["cells"][i].get("outputs") for i in roles}
    for i in roles:   # a cell the full run did not reach shows no output
        nb["cells"][i]["outputs"], nb["cells"][i]["execution_count"] = [], None
    run_outputs: dict[int, list] = {}   # index -> the outputs the full run made there
    for rec in records:
        if rec.get("kind") == "cell" and rec.get("index") in roles and isinstance(rec.get("outputs"), list):
            i = rec["index"]
            outputs = scrub_value([o for o in rec["outputs"] if _run_output(o)][:100], secrets)
            run_outputs[i] = outputs
            if roles[i] == "demo":
                outputs = [*outputs, {"output_type": "stream", "name": "stdout", "text": DEMO_NOTE},
                           *submitted_outputs(submitted[i], secrets)]
            nb["cells"][i]["outputs"] = outputs
            count = rec.get("execution_count")
            nb["cells"][i]["execution_count"] = count if isinstance(count, int) and roles[i] != "demo" else None
    full = next((r for r in records if r.get("kind") == "full_run"), None)
    status = full.get("status") if isinstance(full, dict) else "died"
    where = _cell_name(nb, full.get("index")) if isinstance(full, dict) else ""
    problems = {
        "budget": ("timed out", f"{notebook}: the full run was still going after the {settings.notebook_timeout} s "
                   "limit per notebook (a loop that ignores interrupts?); the cells after it were not "
                   "run, the judge graded the functions"),
        "timeout": ("timed out", f"{notebook}: a cell ({where}) ran past {settings.cell_timeout} s and ignored the "
                    "interrupt; the full run stopped there"),
        "forged": ("review", f"{notebook}: something in the notebook wrote into the full run's own channel at "
                   f"{where or 'its start'}; the full run stopped there (the judge graded the functions); "
                   "look at it by hand")}
    if status != "ok":
        died = ("kernel died", f"{notebook}: the kernel died in the full run{f' at {where}' if where else ''} "
                f"(os._exit, a crash, or the {settings.mem_gb:g} GB memory cap); look at it by hand")
        result.flag(*problems.get(str(status), died), first=True)
        result.full_run_reason = result.reasons[0]
    result.full_run_ok = status == "ok"
    interrupted = full.get("interrupted") if isinstance(full, dict) and isinstance(full.get("interrupted"), list) else []
    inspect_outputs(nb, run_outputs, interrupted, result, settings)
    return nb if run_outputs else None


def _cell_name(nb: dict, index) -> str:
    if not isinstance(index, int) or not 0 <= index < len(nb["cells"]):
        return ""
    return grade_id(nb["cells"][index]) or f"cell {index + 1}"


def inspect_outputs(nb: dict, run_outputs: dict[int, list], interrupted: list, result: NotebookResult,
                     settings: Settings) -> None:
    """Timeouts and memory errors of the full run: the cells the session itself interrupted at their
    time limit (``interrupted``, its own clock), and MemoryErrors among the outputs the full run made
    (``run_outputs``; never the outputs a student submitted under a demonstration cell)."""
    for index in dict.fromkeys(i for i in interrupted if isinstance(i, int)):
        result.flag("timed out", f"{_cell_name(nb, index) or 'a cell'} ran past {settings.cell_timeout} s and was "
                    "interrupted in the full run")
    for index, outputs in run_outputs.items():
        errors = [(str(o.get("ename", "")), str(o.get("evalue", ""))) for o in outputs
                  if o.get("output_type") == "error"]
        if any(ename == "MemoryError" or "can't allocate memory" in evalue or "out of memory" in evalue.lower()
               for ename, evalue in errors):
            result.flag(None, f"{_cell_name(nb, index) or 'a cell'} hit the {settings.mem_gb:g} GB memory cap")
