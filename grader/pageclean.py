"""Making a feedback page safe to show: what the page cleaner keeps of a notebook, and the judge's lines it
must never show (``python -m grader feedback`` renders the pages, grader/feedback.py).

:func:`sanitise` makes an autograded notebook a page's notebook: hidden test blocks become a placeholder,
tracebacks through grader code shrink to their ``Error: message`` line (neither hidden tests nor reference
code leak through one), the integrity cell and the TA's rubrics go, outputs keep only the ANSI colour codes
nbconvert can render and lose the grading machine's paths, and nothing active stays (:func:`strip_active`,
with grader/safehtml.py). A rendered page is searched for the judge's own source lines that the student did
not write (:func:`leaked_judge_lines`).
"""

from __future__ import annotations

import base64
import binascii
import functools
import html
import json
import os
import re
import sys
from pathlib import Path

from utils.notebook_cells import RUBRIC_TAG, cell_source, cell_tags, grade_id, nbgrader_meta

from . import GRADER_DIR, ROOT
from .course import printable
from .safehtml import clean_fragment, clean_markdown, safe_markdown
from .submissions import INTEGRITY_TAG

HIDDEN_BLOCK = re.compile(r"[ \t]*### BEGIN HIDDEN TESTS.*?### END HIDDEN TESTS[ \t]*\n?", re.S)
PLACEHOLDER = "# (hidden tests ran here; their results are below)\n"
ANSI = re.compile(r"\x1b\[[0-9;]*m")
CSI = re.compile("\x1b\\[(.*?)([@-~])")                 # nbconvert.filters.ansi._ANSI_RE
OSC = re.compile("\x1b\\][^\x07\x1b]*(?:\x07|\x1b\\\\)?")  # window titles, hyperlinks
SGR_NUMBER = re.compile(r"\d{1,3}")


def _safe_sgr(params: str) -> bool:
    """Whether nbconvert's ansi2html renders these SGR parameters without failing: it raises
    IndexError on ``ESC[38m`` / ``ESC[48m`` (a colour code with nothing after it), so a 256-colour or
    RGB code is kept only when complete and in range."""
    parts = params.split(";") if params else []
    if not all(p == "" or SGR_NUMBER.fullmatch(p) for p in parts):
        return False
    nums = [int(p) if p else 0 for p in parts]
    i = 0
    while i < len(nums):
        if nums[i] in (38, 48):
            if nums[i + 1:i + 2] == [5] and len(nums) > i + 2 and nums[i + 2] <= 255:
                i += 3
            elif nums[i + 1:i + 2] == [2] and len(nums) > i + 4 and max(nums[i + 2:i + 5]) <= 255:
                i += 5
            else:
                return False
        else:
            i += 1
    return True


def clean_ansi(text: str) -> str:
    """``text`` with only the colour codes nbconvert can render: every other escape sequence (cursor moves,
    window titles, malformed colours, stray ESC characters), which could make the HTML conversion raise, is
    dropped."""
    if "\x1b" not in text:
        return text
    text = OSC.sub("", text)
    out, pos = [], 0
    for m in CSI.finditer(text):   # the same pattern and scan order as nbconvert's ansi filter
        out.append(text[pos:m.start()].replace("\x1b", ""))
        if m.group(2) == "m" and _safe_sgr(m.group(1)):
            out.append(m.group(0))
        pos = m.end()
    out.append(text[pos:].replace("\x1b", ""))
    return "".join(out)


def _clean_output(value):
    """Every string in an output (stream text, traceback, text/plain, ...) ANSI-cleaned and
    encodable as UTF-8 (a lone surrogate in an output would fail the HTML write)."""
    if isinstance(value, str):
        return printable(clean_ansi(value))
    if isinstance(value, list):
        return [_clean_output(v) for v in value]
    if isinstance(value, dict):
        return {k: _clean_output(v) for k, v in value.items()}
    return value


#: Output MIME types a page shows; every other one (application/javascript, text/javascript, widget
#: views and state, PDFs, anything new) is dropped before rendering.
SHOWN_MIME = ("text/plain", "text/html", "text/markdown", "text/latex", "image/png", "image/jpeg", "image/gif",
              "image/svg+xml")
BASE64 = re.compile(r"[A-Za-z0-9+/=\s]*")
SAFE_NAME = re.compile(r"[A-Za-z0-9_.\-]{1,100}")
SAFE_TAG = re.compile(r"[A-Za-z0-9_.\-]{1,64}")


def as_text(value) -> str | None:
    """A notebook's text field (a string, or a list of strings to join) as one string; None otherwise."""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return "".join(value)
    return None


CLEANERS = {"text/html": clean_fragment, "text/markdown": safe_markdown, "image/svg+xml": clean_markdown}


def _safe_mime(mime: str, value):
    """An output's value of ``mime`` with its active content removed, or None."""
    text = as_text(value)
    if text is None:
        return None
    if mime in CLEANERS:
        return CLEANERS[mime](text)
    if mime.startswith("image/"):
        return text if BASE64.fullmatch(text) else None   # it goes into an <img src="data:..."> as it is
    return text


ATTACHMENT_LINK = re.compile(r"attachment:([^\s)\]\"'<>]+)")
SCRATCH_PATH = re.compile(r"(?:/[^\s'\"/<>]+)*/las-(?:autograde|nbgrader|sync|release)-[^\s'\"<>]*")


def scrub_host(text: str) -> str:
    """``text`` without the grading machine's paths: its scratch folders, the pack's checkout and its
    Python environment (a student's output may print them; a page must not show them)."""
    text = SCRATCH_PATH.sub("<grading folder>", text)
    for path in sorted({str(ROOT), sys.prefix, os.path.realpath(sys.prefix)}, key=len, reverse=True):
        if len(path) > 4:
            text = text.replace(path, "<grader>")
    return text


def _safe_output(out: dict) -> dict | None:
    """An output a page can show: streams and errors (nbconvert escapes them), rich outputs with
    only the MIME types of SHOWN_MIME, each cleaned; None for anything else. No host path survives."""
    kind = out.get("output_type")
    if kind == "stream":
        return {"output_type": "stream", "name": "stderr" if out.get("name") == "stderr" else "stdout",
                "text": scrub_host(as_text(out.get("text")) or "")}
    if kind == "error":
        tb = out.get("traceback")
        return {"output_type": "error", "ename": str(out.get("ename", "")),
                "evalue": scrub_host(str(out.get("evalue", ""))),
                "traceback": [scrub_host(str(t)) for t in tb] if isinstance(tb, list) else []}
    if kind not in ("display_data", "execute_result"):
        return None
    data = out.get("data") if isinstance(out.get("data"), dict) else {}
    kept = {}
    for mime in SHOWN_MIME:
        if mime in data:
            value = _safe_mime(mime, data[mime])
            if value is not None:
                kept[mime] = scrub_host(value) if mime.startswith("text/") else value
    if not kept:
        dropped = ", ".join(sorted(str(m) for m in data)[:5]) or "no data"
        kept = {"text/plain": f"[this output ({dropped}) is not shown in the feedback]"}
    meta = out.get("metadata") if isinstance(out.get("metadata"), dict) else {}
    sizes = {}
    for mime in ("image/png", "image/jpeg"):   # nbconvert writes these into the <img> tag unquoted
        dims = meta.get(mime) if isinstance(meta.get(mime), dict) else {}
        dims = {k: v for k, v in dims.items() if k in ("width", "height") and isinstance(v, (int, float))
                and not isinstance(v, bool)}
        if dims:
            sizes[mime] = dims
    safe = {"output_type": kind, "data": kept, "metadata": sizes}
    if kind == "execute_result":
        count = out.get("execution_count")
        safe["execution_count"] = count if isinstance(count, int) and not isinstance(count, bool) else None
    return safe


def _safe_cell_metadata(cell: dict) -> dict:
    """The cell's metadata reduced to its tags (plain names) and a well-formed nbgrader block: nbgrader's
    feedback template writes the grade_id into links unescaped, nbconvert the tags into class names."""
    safe = {}
    tags = [t for t in cell_tags(cell) if isinstance(t, str) and SAFE_TAG.fullmatch(t)]
    if tags:
        safe["tags"] = tags
    gid = grade_id(cell)
    if gid is not None and SAFE_NAME.fullmatch(gid):
        safe["nbgrader"] = nbgrader_meta(cell)
    return safe


def _safe_attachments(attachments) -> dict:
    """A markdown cell's attachments: images only (nbconvert puts them in an <img src="data:...">)."""
    safe = {}
    for name, bundle in attachments.items() if isinstance(attachments, dict) else ():
        if not (isinstance(name, str) and SAFE_NAME.fullmatch(name) and isinstance(bundle, dict)):
            continue
        kept = {}
        for mime, value in bundle.items():
            value = as_text(value)   # base64, SVG too: nbconvert writes it into the data URL as it is
            if mime in ("image/png", "image/jpeg", "image/gif", "image/svg+xml") and value is not None \
                    and BASE64.fullmatch(value):
                kept[mime] = value
        if kept:
            safe[name] = kept
    return safe


def strip_active_outputs(nb: dict) -> dict:
    """``nb`` (in place) with every output made safe as for a page (:func:`_safe_output`) and active
    elements removed from markdown cells, its metadata kept: the autograded copy nbgrader's formgrader
    shows a TA, in the TA's own browser session."""
    for cell in nb.get("cells", []):
        if cell.get("cell_type") == "markdown":
            cell["source"] = clean_markdown(cell_source(cell))
        if "outputs" in cell and isinstance(cell["outputs"], list):
            cell["outputs"] = [o for o in (_safe_output(x) for x in cell["outputs"] if isinstance(x, dict)) if o]
    return nb


def strip_active(nb: dict) -> dict:
    """``nb`` (in place) without anything that would run in a browser: markdown and raw cells, HTML, markdown
    and SVG outputs and attachments cleaned (grader/safehtml.py), unknown outputs (JavaScript, widgets) and
    image data that is not base64 dropped, cell and notebook metadata reduced to what the page needs."""
    nb["metadata"] = {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
                      "language_info": {"name": "python", "pygments_lexer": "ipython3"}}
    for cell in nb["cells"]:
        kind = cell.get("cell_type")
        src = cell_source(cell)
        if kind == "markdown":
            kept = _safe_attachments(cell.get("attachments"))
            # a link to an attachment that is gone would stop nbconvert ("missing attachment")
            src = ATTACHMENT_LINK.sub(lambda m: m.group(0) if m.group(1) in kept else "#", src)
            cell["source"] = safe_markdown(src, kept)
            cell["attachments"] = kept
        elif kind == "raw":
            cell["source"] = clean_fragment(src)
        elif kind == "code":
            cell["outputs"] = [o for o in (_safe_output(out) for out in cell.get("outputs") or []
                                           if isinstance(out, dict)) if o is not None]
        cell["metadata"] = _safe_cell_metadata(cell)
    return nb


def sanitise(nb: dict) -> dict:
    """A copy of an autograded notebook that is safe to show the student (and safe to render)."""
    cells = []
    for cell in nb["cells"]:
        if {INTEGRITY_TAG, RUBRIC_TAG} & set(cell_tags(cell)):
            continue  # the grader's integrity note and the TA's rubrics are not for the student
        src = cell_source(cell)
        if "BEGIN HIDDEN TESTS" in src:
            src = HIDDEN_BLOCK.sub(PLACEHOLDER, src)
            if "HIDDEN TESTS" in src:   # unbalanced markers: drop everything from the marker on
                src = src.split("### BEGIN HIDDEN TESTS")[0] + PLACEHOLDER
        cell["source"] = printable(src)
        if "outputs" in cell:
            cell["outputs"] = _clean_output(cell["outputs"])
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error":
                tb = "\n".join(out.get("traceback", []))
                if "grader" in ANSI.sub("", tb) or nbgrader_meta(cell).get("grade"):
                    out["traceback"] = [f"{out.get('ename', 'Error')}: {out.get('evalue', '')}"]
        cells.append(cell)
    nb["cells"] = cells
    return strip_active(nb)


@functools.lru_cache(maxsize=None)
def judge_lines(stem: str) -> tuple[str, ...]:
    """The judge's own source lines for notebook ``stem`` that must never reach a page: every line of
    grader/checks/<stem>.py (cases and references) and grader/probes/<stem>.py (how hidden inputs are
    built) longer than 30 characters, comments, docstring openings and imports aside."""
    lines = []
    for path in (GRADER_DIR / "checks" / f"{stem}.py", GRADER_DIR / "probes" / f"{stem}.py"):
        if path.is_file():
            lines += [ln.strip() for ln in path.read_text(encoding="utf-8").splitlines()
                      if len(ln.strip()) > 30 and not ln.strip().startswith(("#", '"""', "from ", "import "))]
    return tuple(lines)   # read once per process: every page of the class is checked against it


def _strings(value) -> str:
    """Every string inside a JSON value, one per line: what a submitted notebook says, in any field."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        return "\n".join(_strings(v) for v in value.values())
    if isinstance(value, list):
        return "\n".join(_strings(v) for v in value)
    return ""


def leaked_judge_lines(page_text: str, stem: str, submitted: Path) -> list[str]:
    """The judge lines of ``stem`` found in a rendered page that the student's own submission does not
    hold: a line a student typed (a natural ``return ...`` can equal a reference's) is theirs to show;
    any other is the pack leaking its judge. An unreadable submission exempts nothing."""
    found = leaks_in(page_text, judge_lines(stem))
    if not found:
        return []
    try:
        own = _strings(json.loads(submitted.read_text(encoding="utf-8")))
    except (OSError, ValueError):
        own = ""
    mine = set(leaks_in(own, found, markup=False))   # the submission is text, not HTML: no tags to strip
    return [ln for ln in found if ln not in mine]


BASE64_RUN = re.compile(r"(?<![A-Za-z0-9+/=,])[A-Za-z0-9+/]{40,}={0,2}")


def decoded_runs(text: str, limit: int = 8 << 20) -> str:
    """The text hidden in ``text``'s base64 runs (40 characters and more, the first ``limit`` characters of
    them in all), decoded, one per line: a page that prints the judge's source in base64 shows it too."""
    out, seen = [], 0
    for m in BASE64_RUN.finditer(text):
        run = m.group(0)
        seen += len(run)
        if seen > limit:
            break
        try:
            out.append(base64.b64decode(run + "=" * (-len(run) % 4)).decode("utf-8", "ignore"))
        except (binascii.Error, ValueError):
            continue
    return "\n".join(out)


def leaks_in(text: str, lines: list[str], *, markup: bool = True) -> list[str]:
    """The ``lines`` found in ``text`` (an HTML page with ``markup``, else plain text), whitespace aside, also
    in its base64 runs (data: URIs of images are not runs: they follow a comma)."""
    plain = html.unescape(re.sub(r"<[^>]+>", "", text)) if markup else text
    plain += "\n" + decoded_runs(plain)
    flat = re.sub(r"\s+", "", plain)
    return [ln for ln in lines if ln in plain or re.sub(r"\s+", "", ln) in flat]
