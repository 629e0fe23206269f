"""Core and extension, and the rubrics of the written answers: conventions read from the source notebooks.

**Tiers.** Every graded cell is *core* unless it carries the Jupyter cell tag ``extension``. Extension
cells sit in a final section of their notebook headed "Extensions (optional)" (the whole bonus notebook
is an extension), so a student who stops after the core still gets a notebook that runs top to bottom.
``export`` reports core and extension points in separate columns; the tier always comes from the
source notebook in ``solutions/``, never from a student's copy.

**Rubrics.** Every manually graded (written) answer cell is followed directly by a markdown cell tagged
``rubric`` that starts with ``**Rubric: `<grade_id>` (<points> points)**`` and lists the partial-credit
items as ``- **<p> point(s)**: ...``; the items add up to the cell's points. ``python -m grader release``
drops rubric cells (students never see them); TAs read them in the source notebook and in the
autograded copy, where ``autograde`` puts each rubric under the answer it grades.

**The core proxy.** The issue's stand-in for "the core fits 8 hours": at most :data:`MAX_CORE_LINES`
non-blank, non-comment lines between solution markers over all core answer cells, and at most
:data:`MAX_CORE_WRITTEN` core written answers; the student reads at most :data:`MAX_CORE_MARKDOWN_WORDS`
words of markdown in the core notebooks' release. ``python -m grader.extras.tiers`` prints the table.

**Points follow ideas.** Each core test cell's points are split over its judge cases by weight; a case's
kind says what it checks (grader/cases.py CASE_KINDS): the core's "rule" cases (an interface convention:
a dtype, a return type, an argument convention, an input form, generator use, the global random state,
inputs left unchanged, an error) weigh at most :data:`MAX_CORE_RULE_SHARE` of the core's autograded points
(:func:`core_rule_share`), and ``python -m grader tiers`` says what they buy (:func:`core_points_by_check`).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from grader.cases import RULE_CHECKS, rule_check
from grader.judge import CASE_KINDS, case_kind, function_of, load_cases, main_cases, value_gates
from .. import ROOT
from utils.notebook_cells import EXTENSION_TAG, RUBRIC_TAG, cell_source, is_extension, is_rubric, \
    is_written_answer, nbgrader_meta, notebook_cells  # noqa: F401 - EXTENSION_TAG: re-exported

MAX_CORE_LINES = 150
MAX_CORE_WRITTEN = 11
#: At most this share of the core's autograded points may go to "rule" cases (input validation,
#: typing, random-state hygiene; grader/judge.py's CASE_KINDS); "given" cases weigh nothing.
MAX_CORE_RULE_SHARE = 0.10
#: At most this many words (whitespace-split, math included) in the markdown cells of the core notebooks'
#: student release (notebooks/<assignment>/<stem>.ipynb of every notebook with core points).
MAX_CORE_MARKDOWN_WORDS = 8500

_RUBRIC_HEAD = re.compile(r"^\*\*Rubric: `(?P<gid>[A-Za-z0-9_]+)` \((?P<pts>[0-9.]+) points?\)\*\*")
_RUBRIC_ITEM = re.compile(r"^\s*[-*] \*\*(?P<pts>[0-9.]+) points?\*\*")

def is_code_answer(cell: dict) -> bool:
    m = nbgrader_meta(cell)
    return bool(m.get("solution")) and cell.get("cell_type") == "code"


def grade_tiers(nb) -> dict[str, str]:
    """{grade_id: "core" | "extension"} for every cell of ``nb`` (a path or a notebook dict) that
    carries points: autograder test cells and written answers."""
    out = {}
    for cell in notebook_cells(nb):
        m = nbgrader_meta(cell)
        if m.get("grade") and m.get("grade_id"):
            out[m["grade_id"]] = "extension" if is_extension(cell) else "core"
    return out


def solution_lines(source: str) -> int:
    """Non-blank, non-comment lines between ``### BEGIN SOLUTION`` and ``### END SOLUTION``."""
    n, inside = 0, False
    for line in source.splitlines():
        if "### BEGIN SOLUTION" in line:
            inside = True
        elif "### END SOLUTION" in line:
            inside = False
        elif inside and line.strip() and not line.strip().startswith("#"):
            n += 1
    return n


def core_proxy(nb) -> dict:
    """{"core_lines", "extension_lines", "core_written", "extension_written", "core_points",
    "extension_points"} of one source notebook."""
    out = dict.fromkeys(("core_lines", "extension_lines", "core_written", "extension_written"), 0)
    out.update(core_points=0.0, extension_points=0.0)
    for cell in notebook_cells(nb):
        tier = "extension" if is_extension(cell) else "core"
        if is_code_answer(cell):
            out[f"{tier}_lines"] += solution_lines(cell_source(cell))
        if is_written_answer(cell):
            out[f"{tier}_written"] += 1
        m = nbgrader_meta(cell)
        if m.get("grade"):
            out[f"{tier}_points"] += float(m.get("points") or 0)
    return out


def core_case_points(nb, stem: str):
    """(case, points) for every judge case of a core test cell of one source notebook: the cell's points
    split over its cases by weight (grader/checks/<stem>.py); a cell without weighted cases gives
    (None, its points)."""
    cases = load_cases(stem)
    for cell in notebook_cells(nb):
        m = nbgrader_meta(cell)
        if not (m.get("grade") and cell.get("cell_type") == "code") or is_extension(cell):
            continue
        pts = float(m.get("points") or 0)
        mine = [c for c in cases if c.cell == m.get("grade_id")]
        total = sum(c.weight for c in mine)
        if not total:
            yield None, pts
            continue
        for c in mine:
            yield c, pts * c.weight / total


def core_points_by_kind(nb, stem: str) -> dict[str, float]:
    """{case kind: core autograded points} of one source notebook, summed per kind (``value``,
    ``property``, ``rule``, ``given``). A cell without cases counts as ``value``."""
    out = dict.fromkeys(CASE_KINDS, 0.0)
    for case, points in core_case_points(nb, stem):
        out["value" if case is None else case_kind(case)] += points
    return out


def core_points_by_check(nb, stem: str) -> dict[str, float]:
    """{what a rule checks (grader/cases.py RULE_CHECKS): core autograded points} of one source notebook,
    over its "rule" cases only (a "given" check of a rule weighs nothing)."""
    out = dict.fromkeys(RULE_CHECKS, 0.0)
    for case, points in core_case_points(nb, stem):
        if case is not None and case_kind(case) == "rule":
            tag = rule_check(case) or "unnamed"
            out[tag] = out.get(tag, 0.0) + points
    return out


def core_stems(folder: Path) -> list[str]:
    """The notebooks of ``folder`` (source notebooks) that carry core points, by name."""
    return [p.stem for p in sorted(folder.glob("*.ipynb")) if core_proxy(p)["core_points"] > 0]


def core_rule_share(folder: Path | None = None) -> tuple[dict[str, float], float]:
    """({case kind: core autograded points} summed over the source notebooks of ``folder``, the share of
    those points that "rule" cases earn): the number the 10 % limit holds."""

    folder = folder or ROOT / "solutions" / "ex01"
    kinds: dict[str, float] = {}
    for path in sorted(folder.glob("*.ipynb")):
        try:
            by_kind = core_points_by_kind(path, path.stem)
        except ModuleNotFoundError:
            continue   # a notebook without a case table
        for kind, pts in by_kind.items():
            kinds[kind] = kinds.get(kind, 0.0) + pts
    return kinds, kinds.get("rule", 0.0) / (sum(kinds.values()) or 1.0)


def markdown_words(nb) -> int:
    """Whitespace-split words of every markdown cell of ``nb`` (a path or a notebook dict), math included."""
    return sum(len(cell_source(c).split()) for c in notebook_cells(nb) if c.get("cell_type") == "markdown")


def core_markdown_words(folder: Path | None = None) -> dict[str, int]:
    """{stem: markdown words of its student release} for every core notebook of the source ``folder``
    (solutions/<assignment>); the release is notebooks/<assignment>/<stem>.ipynb."""

    folder = folder or ROOT / "solutions" / "ex01"
    release = ROOT / "notebooks" / folder.name
    return {stem: markdown_words(release / f"{stem}.ipynb") for stem in core_stems(folder)}


def gate_lines(stem: str) -> list[str]:
    """One line per graded function of ``stem`` that has cases other than value cases: its main value cases
    (``MAIN`` of grader/checks/<stem>.py) and every case they gate, with its kind (grader/judge.py value_gates)."""

    fn = function_of(stem)
    main = main_cases(stem)
    gated: dict[str, list[str]] = {}
    for case, gate in zip(load_cases(stem), value_gates(stem)):
        if case_kind(case) != "value":
            extra = [g for g in gate if g not in main.get(fn[case.probe], ())]
            gated.setdefault(fn[case.probe], []).append(
                f"{case.probe} ({case_kind(case)}{', also ' + ', '.join(extra) if extra else ''})")
    return [f"{f}: main {', '.join(main.get(f, ())) or 'NONE'} -> gates {'; '.join(cases)}"
            for f, cases in gated.items()]


def rubric_problems(nb) -> list[str]:
    """What is wrong with the rubrics of ``nb``: a written answer without a rubric cell right after it,
    a rubric naming another cell, points that do not add up, a rubric with no written answer above."""
    cells = notebook_cells(nb)
    problems = []
    for i, cell in enumerate(cells):
        if is_written_answer(cell):
            gid, pts = nbgrader_meta(cell)["grade_id"], float(nbgrader_meta(cell).get("points") or 0)
            nxt = cells[i + 1] if i + 1 < len(cells) else None
            if nxt is None or not is_rubric(nxt):
                problems.append(f"{gid}: no rubric cell (tag {RUBRIC_TAG!r}) directly after the answer")
                continue
            text = cell_source(nxt)
            head = _RUBRIC_HEAD.match(text.strip())
            if not head:
                problems.append(f"{gid}: the rubric does not start with **Rubric: `{gid}` ({pts:g} points)**")
                continue
            if head["gid"] != gid:
                problems.append(f"{gid}: the rubric below it names {head['gid']!r}")
            if float(head["pts"]) != pts:
                problems.append(f"{gid}: the rubric says {head['pts']} points, the cell is worth {pts:g}")
            items = [float(m["pts"]) for line in text.splitlines() if (m := _RUBRIC_ITEM.match(line))]
            if len(items) < 2:
                problems.append(f"{gid}: the rubric needs at least two partial-credit items")
            if abs(sum(items) - pts) > 1e-9:
                problems.append(f"{gid}: the rubric's items add up to {sum(items):g}, the cell is worth {pts:g}")
            if is_extension(cell) != is_extension(nxt):
                problems.append(f"{gid}: the rubric and its answer are in different tiers")
        elif is_rubric(cell) and not (i and is_written_answer(cells[i - 1])):
            problems.append(f"cell {i}: a rubric cell with no written answer directly above it")
        if is_rubric(cell) and nbgrader_meta(cell):
            problems.append(f"cell {i}: a rubric cell must not be an nbgrader cell")
    return problems


def main(argv: list[str] | None = None) -> int:
    """Print the core proxy of every source notebook and the rubric problems; exit 1 over the limits."""

    folder = Path(argv[0]) if argv else ROOT / "solutions" / "ex01"
    total = dict.fromkeys(("core_lines", "extension_lines", "core_written", "extension_written",
                           "core_points", "extension_points"), 0)
    print(f"{'notebook':<36}{'core lines':>11}{'ext lines':>10}{'core written':>13}{'ext written':>12}"
          f"{'core pts':>9}{'ext pts':>8}")
    bad = False
    for path in sorted(folder.glob("*.ipynb")):
        p = core_proxy(path)
        for k in total:
            total[k] += p[k]
        print(f"{path.stem:<36}{p['core_lines']:>11}{p['extension_lines']:>10}{p['core_written']:>13}"
              f"{p['extension_written']:>12}{p['core_points']:>9g}{p['extension_points']:>8g}")
        for problem in rubric_problems(path):
            bad = True
            print(f"  rubric: {problem}")
    print(f"{'total':<36}{total['core_lines']:>11}{total['extension_lines']:>10}{total['core_written']:>13}"
          f"{total['extension_written']:>12}{total['core_points']:>9g}{total['extension_points']:>8g}")
    kinds, rule_share = core_rule_share(folder)
    autograded = sum(kinds.values()) or 1.0
    print("core autograded points by what each case checks (its kind): "
          + ", ".join(f"{k} {v:.2f} ({v / autograded:.1%})" for k, v in kinds.items()))
    for path in sorted(folder.glob("*.ipynb")):
        try:
            by_kind = core_points_by_kind(path, path.stem)
            by_check = core_points_by_check(path, path.stem)
        except ModuleNotFoundError:
            continue
        if sum(by_kind.values()):
            print(f"  {path.stem:<34}" + ", ".join(f"{k} {v:.2f}" for k, v in by_kind.items())
                  + "; rules: " + (", ".join(f"{k} {v:.2f}" for k, v in by_check.items() if v) or "none"))
    words = core_markdown_words(folder)
    print(f"core markdown words (student release): {sum(words.values())} (limit {MAX_CORE_MARKDOWN_WORDS:,}): "
          + ", ".join(f"{stem} {n}" for stem, n in words.items()))
    print("gates (a case that is not a value case scores only when the main value cases of its function pass):")
    for path in sorted(folder.glob("*.ipynb")):
        try:
            lines = gate_lines(path.stem)
        except ModuleNotFoundError:
            continue   # a notebook without a case table
        for line in lines:
            print(f"  {path.stem}: {line}")
    print(f"limits: core lines <= {MAX_CORE_LINES}, core written answers <= {MAX_CORE_WRITTEN}, "
          f"rule cases <= {MAX_CORE_RULE_SHARE:.0%} of core autograded points, given-code cases 0, "
          f"core markdown words <= {MAX_CORE_MARKDOWN_WORDS:,}")
    bad |= total["core_lines"] > MAX_CORE_LINES or total["core_written"] > MAX_CORE_WRITTEN
    bad |= rule_share > MAX_CORE_RULE_SHARE or kinds.get("given", 0) > 0
    bad |= sum(words.values()) > MAX_CORE_MARKDOWN_WORDS
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
