"""Similarity of the students' answers: ``python -m grader similarity`` (a lead for a TA, never a grade).

Each student's answer cells (the release's answer and written-answer cells, found by grade_id, and any code
cell the student added) are compared with every other student's, notebook by notebook, with MOSS's
winnowing (Schleimer, Wilkerson and Aiken, SIGMOD 2003) as the copydetect library implements it
(requirements.txt pins it; https://copydetect.readthedocs.io): code is tokenized with Pygments and every
name becomes one symbol, so renaming variables does not hide a copy; written answers are compared as
lower-case words. Fingerprints that also occur in the release (given code, stubs, the task text) or in
the course's solution are removed first, so students who share the given code or write the model answer
are not reported as copying each other.

Writes ``grading/similarity/report.html`` (pairs ranked, the top ones side by side with the matching
passages highlighted; static HTML: no script, a Content-Security-Policy that forbids any) and
``pairs.csv`` (every pair with a nonzero score). Points never change. Scores: the share of both students'
answer text (after filtering) that the pair's common fingerprints cover, over all notebooks.

No student stops the report: each student's notebook is read and fingerprinted inside a guard (a file
that is not JSON, nested past Python's recursion limit, a cell that is not a dict, anything else that
fails), and one that cannot be is listed in the HTML and the CSV as "not compared: <why>" while everyone
else is compared. Text is written printable (a lone surrogate in a student's code is shown as ``\\udXXX``).
"""

from __future__ import annotations

import html
import io
import itertools
import json
import logging
import re
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from copydetect import CodeFingerprint, compare_files
from copydetect.utils import get_token_coverage

from ..course import Course, printable, shown, sync_assignment, write_csv
from utils.notebook_cells import cell_role, cell_source, grade_id

#: copydetect's defaults: noise threshold k = 25 characters of filtered code, guarantee threshold 30
CODE_K, CODE_WINDOW = 25, 6
TEXT_K, TEXT_WINDOW = 40, 8
MIN_SHARED = 2        # pairs sharing fewer fingerprints in a document are not compared further


@dataclass
class Document:
    student: str
    notebook: str
    kind: str              # "code" | "text"
    raw: str               # what the report shows
    hashes: set
    hash_idx: dict
    fingerprint: object    # copydetect.CodeFingerprint (with the boilerplate hashes removed)


@dataclass
class Pair:
    a: str
    b: str
    score: float = 0.0
    shared_a: int = 0      # filtered characters of a's answers inside matches
    shared_b: int = 0
    parts: list = field(default_factory=list)   # (notebook, kind, slices_a, slices_b, share, raw_a, raw_b)

    def notebook_summary(self) -> str:
        best = sorted(self.parts, key=lambda p: -p[4])[:3]
        return ", ".join(f"{nb} {kind} {100 * share:.0f} %" for nb, kind, _, _, share, *_ in best)


@dataclass
class Report:
    pairs: list
    students: int
    compared: int
    flagged: int
    seconds: float
    html: Path
    csv: Path
    not_compared: dict = field(default_factory=dict)   # (student, notebook) -> why


# ----------------------------------------------------------------------------- documents
def _text(source: str) -> str:
    """A written answer as compared: lower case, markup and punctuation dropped, one space between words."""
    return " ".join(re.findall(r"[a-z0-9]+", source.lower()))


def _fingerprint(raw: str, kind: str, boilerplate: set):
    """(hashes, hash_idx, copydetect fingerprint) of ``raw``, without the boilerplate's hashes."""
    logging.getLogger().setLevel(max(logging.getLogger().level, logging.ERROR))   # copydetect warns per document
    if kind == "code":
        fp = CodeFingerprint("answer.py", CODE_K, CODE_WINDOW, fp=io.StringIO(raw), language="python")
    else:
        fp = CodeFingerprint("answer.txt", TEXT_K, TEXT_WINDOW, fp=io.StringIO(raw), filter=False)
    if boilerplate:
        # removed here rather than through copydetect's `boilerplate` argument, whose np.intersect1d(...,
        # assume_unique=True) can drop the wrong positions when a hash occurs twice in one document
        fp.hashes = {h for h in fp.hashes if h not in boilerplate}
        fp.hash_idx = {h: i for h, i in fp.hash_idx.items() if h not in boilerplate}
        # the share of a document that matches counts only what is the student's own
        fp.token_coverage = get_token_coverage(fp.hash_idx, fp.k, len(fp.filtered_code))
    return fp


def _cells(nb: dict) -> tuple[list[tuple[str, str, str]], set[str]]:
    """[(grade_id, role, source)] of a notebook's cells, and the sources of its code cells."""
    cells = [(grade_id(c) or "", cell_role(c), printable(cell_source(c))) for c in nb.get("cells", [])
             if isinstance(c, dict)]   # a cell that is not a dict (``42``) is no answer
    unmarked = ("".join(ln for ln in src.splitlines(keepends=True) if "### BEGIN SOLUTION" not in ln
                        and "### END SOLUTION" not in ln) for _, _, src in cells)   # the solution as handed in
    return cells, {src.strip() for gid, role, src in cells if src.strip()} | {u.strip() for u in unmarked if u.strip()}


def _read(path: Path) -> dict:
    """A notebook of the course (release, solution): empty if it cannot be read."""
    try:
        return _read_student(path)
    except (OSError, ValueError, RecursionError):
        return {"cells": []}


def _read_student(path: Path) -> dict:
    """A student's notebook; raises (OSError, ValueError, RecursionError) when it cannot be read. A missing
    notebook, or JSON that is no notebook, has no cells."""
    if not path.exists():
        return {"cells": []}
    nb = json.loads(path.read_text(encoding="utf-8"))
    return nb if isinstance(nb, dict) and isinstance(nb.get("cells"), list) else {"cells": []}


def _why(exc: BaseException) -> str:
    """One printable line saying why a notebook was not compared."""
    if isinstance(exc, RecursionError):
        return "its JSON is nested too deeply to read"
    if isinstance(exc, UnicodeDecodeError):
        return "it is not UTF-8 text"
    if isinstance(exc, ValueError):
        return f"it is not valid JSON ({shown(str(exc))[:200]})"
    return shown(f"{type(exc).__name__}: {exc}")[:300]


def _boilerplate(release: dict, solution: dict) -> tuple[set, dict[str, str]]:
    """Hashes of everything the course wrote (release cells of every kind, the solution's answers), and
    grade_id -> role of the release's answer and written cells."""
    hashes: set = set()
    roles = {}
    for nb in (release, solution):
        for gid, role, src in _cells(nb)[0]:
            if not src.strip():
                continue
            code = role not in ("markdown", "written")
            hashes |= _fingerprint(src, "code", set()).hashes if code else set()
            hashes |= _fingerprint(_text(src), "text", set()).hashes
    for gid, role, _ in _cells(release)[0]:
        if gid and role in ("answer", "written"):
            roles[gid] = role
    return hashes, roles


def _documents(course: Course, student: str, notebook: str, roles: dict, release_sources: set,
               boilerplate: set) -> list[Document]:
    nb = _read_student(course.folder("submitted", student) / f"{notebook}.ipynb")
    code, text = [], []
    for gid, role, src in _cells(nb)[0]:
        if not src.strip() or src.strip() in release_sources:
            continue
        if roles.get(gid) == "written":
            text.append(src)
        elif roles.get(gid) == "answer" or (not gid and role == "given"):   # an answer, or a cell the student added
            code.append(src)
    docs = []
    for kind, parts in (("code", code), ("text", text)):
        raw = "\n\n".join(parts) if kind == "code" else "\n\n".join(_text(p) for p in parts)
        if len(raw) < (CODE_K if kind == "code" else TEXT_K):
            continue
        fp = _fingerprint(raw, kind, boilerplate)
        if fp.hashes:
            docs.append(Document(student, notebook, kind, raw, fp.hashes, fp.hash_idx, fp))
    return docs


# ----------------------------------------------------------------------------- comparing
def similarity(course: Course, out: Path | None = None, threshold: float = 0.5, top: int = 100,
               students: list[str] | None = None, progress=print) -> Report:
    """Compare every pair of students (see the module doc); writes the HTML report and the CSV."""
    started = time.monotonic()
    out = Path(out) if out else course.grading / "similarity"
    students = students or course.students()
    notebooks = course.notebook_names()
    if not course.release.is_dir() or not all((course.release / f"{nb}.ipynb").exists() for nb in notebooks):
        sync_assignment(course)
    progress(f"similarity: fingerprinting {len(students)} students x {len(notebooks)} notebooks")
    docs: dict[tuple[str, str], list[Document]] = defaultdict(list)   # (notebook, kind) -> documents
    totals: dict[str, int] = defaultdict(int)                         # student -> filtered characters
    not_compared: dict[tuple[str, str], str] = {}                     # (student, notebook) -> why
    for nb in notebooks:
        release = _read(course.release / f"{nb}.ipynb")
        solution = _read(course.source / f"{nb}.ipynb")
        boilerplate, roles = _boilerplate(release, solution)
        release_sources = _cells(release)[1] | _cells(solution)[1]
        for s in students:
            try:   # one student's notebook never stops the class: it is reported, everyone else compared
                found = _documents(course, s, nb, roles, release_sources, boilerplate)
            except Exception as exc:  # noqa: BLE001 - anything a submission can make a reader or copydetect raise
                not_compared[(s, nb)] = _why(exc)
                progress(f"similarity: {shown(s)} {nb}: not compared: {not_compared[(s, nb)]}")
                continue
            for d in found:
                docs[(nb, d.kind)].append(d)
                totals[s] += d.fingerprint.token_coverage
    pairs: dict[tuple[str, str], Pair] = {}
    for (nb, kind), group in docs.items():
        index: dict = defaultdict(list)        # hash -> documents holding it (inverted index: only pairs
        for i, d in enumerate(group):          # sharing fingerprints are compared)
            for h in d.hashes:
                index[h].append(i)
        shared: dict[tuple[int, int], int] = defaultdict(int)
        for holders in index.values():
            if len(holders) > 1:
                for i, j in itertools.combinations(holders, 2):
                    shared[(i, j)] += 1
        for (i, j), count in shared.items():
            if count < MIN_SHARED:
                continue
            da, db = group[i], group[j]
            if da.student > db.student:
                da, db = db, da
            overlap, (sim_a, sim_b), (slices_a, slices_b) = compare_files(da.fingerprint, db.fingerprint)
            if not overlap:
                continue
            pair = pairs.setdefault((da.student, db.student), Pair(da.student, db.student))
            cover_a = int(round(sim_a * da.fingerprint.token_coverage))   # characters of a inside matches
            cover_b = int(round(sim_b * db.fingerprint.token_coverage))
            pair.shared_a += cover_a
            pair.shared_b += cover_b
            share = (cover_a + cover_b) / max(1, da.fingerprint.token_coverage + db.fingerprint.token_coverage)
            pair.parts.append((nb, kind, slices_a, slices_b, share, da.raw, db.raw))
    ranked = []
    for pair in pairs.values():
        pair.score = (pair.shared_a + pair.shared_b) / max(1, totals[pair.a] + totals[pair.b])
        ranked.append(pair)
    ranked.sort(key=lambda p: (-p.score, p.a, p.b))
    out.mkdir(parents=True, exist_ok=True)
    csv_path = write_csv(out / "pairs.csv", ["rank", "student_a", "student_b", "similarity", "where"],
                         [{"rank": k, "student_a": p.a, "student_b": p.b, "similarity": round(p.score, 4),
                           "where": p.notebook_summary()} for k, p in enumerate(ranked, 1)]
                         + [{"rank": "", "student_a": s, "student_b": "", "similarity": "",
                             "where": f"{nb}: not compared: {why}"} for (s, nb), why in sorted(not_compared.items())])
    flagged = sum(p.score >= threshold for p in ranked)
    html_path = out / "report.html"
    html_path.write_text(_html(ranked, len(students), threshold, top, not_compared), encoding="utf-8",
                         errors="backslashreplace")
    n = len(students)
    return Report(ranked, n, n * (n - 1) // 2, flagged, time.monotonic() - started, html_path, csv_path,
                  not_compared)


# ----------------------------------------------------------------------------- the report
def _marked(raw: str, slices) -> str:
    """``raw`` as HTML with the character ranges in ``slices`` (2 x N starts/ends) inside <mark>."""
    spans = sorted(zip(*(np.asarray(s, dtype=int).tolist() for s in slices))) if len(slices) and len(slices[0]) else []
    out, pos = [], 0
    for start, end in spans:
        start, end = max(start, pos), min(end, len(raw))
        if start >= end:
            continue
        out.append(html.escape(printable(raw[pos:start])))
        out.append("<mark>" + html.escape(printable(raw[start:end])) + "</mark>")
        pos = end
    out.append(html.escape(printable(raw[pos:])))
    return "".join(out)


STYLE = """
body{font-family:system-ui,sans-serif;margin:1.5em;color:#222}
table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:.25em .6em;text-align:left}
.pair{margin:2em 0;border-top:2px solid #444}.side{display:flex;gap:1em}.side>div{flex:1;min-width:0}
pre{background:#f6f6f6;padding:.6em;white-space:pre-wrap;word-break:break-word;font-size:12px}
mark{background:#ffd54f}.high{color:#b00020;font-weight:bold}
"""


def _html(ranked: list[Pair], students: int, threshold: float, top: int, not_compared: dict | None = None) -> str:
    def e(text) -> str:
        return html.escape(printable(text))

    skipped = "".join(f"<li>{e(shown(s))} ({e(nb)}): not compared: {e(why)}</li>"
                      for (s, nb), why in sorted((not_compared or {}).items()))
    skipped = f"<h2>Not compared</h2><ul>{skipped}</ul>" if skipped else ""
    rows = "".join(
        f"<tr><td>{k}</td><td><a href='#pair{k}'>{e(shown(p.a))} / {e(shown(p.b))}</a></td>"
        f"<td class='{'high' if p.score >= threshold else ''}'>{100 * p.score:.0f} %</td><td>{e(p.notebook_summary())}</td></tr>"
        for k, p in enumerate(ranked[:top * 5], 1))
    sections = []
    for k, p in enumerate(ranked[:top], 1):
        parts = []
        for nb, kind, sa, sb, share, raw_a, raw_b in sorted(p.parts, key=lambda x: -x[4]):
            parts.append(f"<h4>{e(nb)} ({'code' if kind == 'code' else 'written answers'}): {100 * share:.0f} %</h4>"
                         f"<div class='side'><div><b>{e(shown(p.a))}</b><pre>{_marked(raw_a, sa)}</pre></div>"
                         f"<div><b>{e(shown(p.b))}</b><pre>{_marked(raw_b, sb)}</pre></div></div>")
        sections.append(f"<div class='pair' id='pair{k}'><h3>{k}. {e(shown(p.a))} / {e(shown(p.b))}: "
                        f"{100 * p.score:.0f} %</h3>{''.join(parts)}</div>")
    return ("<!DOCTYPE html><html><head><meta charset='utf-8'>"
            "<meta http-equiv='Content-Security-Policy' content=\"default-src 'none'; style-src 'unsafe-inline'\">"
            f"<title>Similarity report</title><style>{STYLE}</style></head><body>"
            f"<h1>Similarity of answers</h1><p>{students} students; {len(ranked)} pairs share answer text beyond the "
            "course's own (release and solution removed). Highlighted: matching passages (names normalised in "
            "code, so renamed variables still match). A lead for a TA to read, not a verdict; no points change.</p>"
            f"{skipped}<table><tr><th>#</th><th>pair</th><th>similarity</th><th>where</th></tr>{rows}</table>"
            f"{''.join(sections)}</body></html>")
