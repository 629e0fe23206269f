"""Every sentence true, every number measured. The course text against its sources.

Three rules, read off the notebooks' text (no kernel, no execution):

* an **Erratum** box is for an error of one of the course's sources, and names it: the (exercise) sheet, the
  (lecture) slides, the lecture summary or the talk. The sheet has no text for Tasks 3 and 4 (it says "See Task A /
  Task B in the Jupyter notebook"), so no Task A or Task B erratum can blame it;
* the pack's own history ("an earlier version of this notebook ...") goes to CHANGELOG.md for TAs, never into a
  cell a student sees;
* every speed, time or accuracy that a notebook's markdown quotes is printed by the notebook itself or listed in
  docs/figures.md's table "Figures quoted in the notebooks" with the command that measured it (or, for a published
  figure, a target or a limit, where it comes from); and every row of that table is still quoted somewhere, so the
  list cannot go stale. Workload estimates ("Core: about 2 h") are checked against README.md's notebook table
  instead; percentages that are shares of tokens or masks (BERT's 15 %, 80/10/10) are not measurements.

Each rule has a test that shows it can fail, on sentences the notebooks once held.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from conftest import RELEASE, SOLUTIONS
from grader.extras import tiers

README = Path(__file__).resolve().parents[1] / "README.md"
FIGURES = README.parent / "docs" / "figures.md"   # the table "Figures quoted in the notebooks"
CHANGELOG = Path(__file__).resolve().parents[1] / "CHANGELOG.md"
ALL_SOURCES = sorted(SOLUTIONS.glob("*.ipynb"))

#: The course's source documents an erratum may name (shared/seeds: sheet, two slide decks, summary, talk).
SOURCES = ("sheet", "slides", "lecture summary", "talk")
#: Notebooks whose sheet task only says "see the notebook": an erratum there cannot be the sheet's.
NO_SHEET_TEXT = ("taskA_simclr", "taskB_pythia_scaling")

_HISTORY = re.compile(r"\b(?:earlier|previous|older|former|first) (?:version|draft|edition) of (?:this|the) "
                      r"(?:notebook|pack|course pack|exercise|task)", re.I)

# ------------------------------------------------------------------------------ reading the text
_NUM = r"\d[\d,]*(?:\.\d+)?"
_VAGUE = r"(?:a few|a couple of|several|tens of|hundreds of|thousands of)(?: (?:hundred|thousand))?"
_UNIT = (r"(?:views/s|images/s|tokens/s|(?:views|images|tokens) per second|seconds?|minutes?|hours?|min|s|h|%"
         r"|times (?:faster|slower))")
#: A number (or a range, or a vague quantity such as "a few thousand") with a unit of speed, time or accuracy.
FIGURE = re.compile(rf"(?<![\w.,])(?:{_NUM}(?:\s?(?:to|-|–)\s?{_NUM})?|{_VAGUE})(?:\s{_UNIT}|%)(?![\w/]|\.e\.)", re.I)
#: "Core: about 2 h", "Extensions (optional): about 1.5 h", "Optional, about 1.5 h": the course's time plan.
_WORKLOAD = re.compile(r"(?P<which>Core|optional\)|optional)[:,]?\s+about\s+$", re.I)
#: A percentage that is a share of tokens or masks (BERT's 15 %, 80/10/10) or of training, not an accuracy.
_SHARE = re.compile(r"mask|token", re.I)


def _source(cell) -> str:
    src = cell["source"]
    return "".join(src) if isinstance(src, list) else src


def _plain(markdown: str) -> str:
    """Markdown without maths and code: "1 - h(s)" in a formula or a command line is no quoted figure."""
    text = re.sub(r"\$\$.*?\$\$", " ", markdown, flags=re.S)
    text = re.sub(r"\$[^$\n]*\$", " ", text)
    text = re.sub(r"```.*?```", " ", text, flags=re.S)
    # inline code with a digit is a command or a value ("--timeout 60 s"); without one it is a word ("[MASK]") that
    # says what a percentage is a share of
    return re.sub(r"`([^`\n]*)`", lambda m: " " if re.search(r"\d", m[1]) else f" {m[1]} ", text)


def _norm(figure: str) -> str:
    return re.sub(r"\s+", " ", figure.strip().strip("`")).strip()


def _paragraph(text: str, pos: int) -> str:
    start = text.rfind("\n\n", 0, pos)
    end = text.find("\n\n", pos)
    return text[start + 1 if start >= 0 else 0:end if end >= 0 else len(text)]


def quoted_figures(cells) -> tuple[set, list]:
    """(figures, workload estimates) quoted in the markdown of ``cells``: figures as normalised strings; workload
    estimates as ("core" or "extensions", hours)."""
    figures, workload = set(), []
    for cell in cells:
        if cell["cell_type"] != "markdown":
            continue
        text = _plain(_source(cell))
        for m in FIGURE.finditer(text):
            figure = _norm(m.group(0))
            before = text[max(0, m.start() - 40):m.start()]
            if (w := _WORKLOAD.search(before)) and re.search(r"\bh(ours?)?$", figure):
                which = "core" if w["which"].lower() == "core" else "extensions"
                workload.append((which, float(re.match(_NUM, figure).group(0))))
            elif figure.endswith("%") and (_SHARE.search(_paragraph(text, m.start()))
                                           or text[m.end():].startswith(" of training")):
                continue
            else:
                figures.add(figure)
    return figures, workload


def printed_strings(cells) -> str:
    """The code lines of ``cells`` that print: a figure written there is produced by the notebook itself."""
    return "\n".join(line for cell in cells if cell["cell_type"] == "code"
                     for line in _source(cell).splitlines() if "print(" in line or line.lstrip().startswith(("f\"", "\"")))


def readme_figures(readme: str) -> dict[str, set]:
    """docs/figures.md's table under "Figures quoted in the notebooks": {notebook stem or "all": {figure}}; every row
    must say where its figure comes from."""
    section = readme.split("### Figures quoted in the notebooks", 1)
    assert len(section) == 2, "docs/figures.md has no section '### Figures quoted in the notebooks'"
    table = []
    for line in section[1].splitlines():
        if line.startswith("|"):
            table.append(line)
        elif table:    # the first table after the heading ends at its first other line
            break
    rows = {}
    for line in table:
        cols = [c.strip() for c in line.strip().strip("|").split("|")]
        assert len(cols) == 3, f"docs/figures.md, quoted figures: a row without 3 columns: {line!r}"
        if set(cols[0]) <= {"-", " ", ":"} or cols[0] == "figure":
            continue
        figure, notebook, where = cols
        assert where, f"docs/figures.md, quoted figures: {figure!r} ({notebook}) says nothing about where it comes from"
        rows.setdefault(notebook.strip("`"), set()).add(_norm(figure))
    return rows


def readme_workload(readme: str) -> dict[str, dict[str, float | None]]:
    """README.md's notebook table: {stem: {"core": hours or None, "extensions": hours or None}}."""
    out = {}
    for line in readme.splitlines():
        m = re.match(r"\|\s*`(?P<stem>\w+)\.ipynb`\s*\|", line)
        if not m:
            continue
        cols = [c.strip() for c in line.strip().strip("|").split("|")]
        hours = [re.match(r"(\d+(?:\.\d+)?) h\b", c) for c in cols[3:5]]
        out[m["stem"]] = {k: float(h.group(1)) if h else None for k, h in zip(("core", "extensions"), hours)}
    return out


def erratum_boxes(cells) -> list[tuple[int, str]]:
    """(cell index, text) of every erratum: from its "**Erratum" header to the end of its quote block (or line)."""
    boxes = []
    for i, cell in enumerate(cells):
        if cell["cell_type"] != "markdown":
            continue
        lines = _source(cell).splitlines()
        for j, line in enumerate(lines):
            if "**Erratum" not in line:
                continue
            box = [line]
            if line.lstrip().startswith(">"):
                for more in lines[j + 1:]:
                    if not more.lstrip().startswith(">") or "**Erratum" in more:
                        break
                    box.append(more)
            boxes.append((i, " ".join(part.lstrip("> ").strip() for part in box)))
    return boxes


def erratum_problems(stem: str, cells) -> list[str]:
    """An erratum that names no source in its header or first sentence, or blames the sheet where it has no text."""
    problems = []
    for i, box in erratum_boxes(cells):
        head = re.match(r"\*\*Erratum(?: \((?P<named>[^)]*)\))?\.?\*\*\.?\s*(?P<rest>.*)", box)
        if not head:
            problems.append(f"{stem} [{i}]: an erratum without a '**Erratum.**' or '**Erratum (source).**' header")
            continue
        first = re.split(r"(?<=[.;])\s+(?=[A-Z>])", head["rest"], maxsplit=1)[0]
        said = f"{head['named'] or ''} {first}".lower()
        named = [s for s in SOURCES if s in said]
        if not named:
            problems.append(f"{stem} [{i}]: the erratum does not name its source ({', '.join(SOURCES)}) "
                            f"in its first sentence: {box[:120]!r}")
        elif stem in NO_SHEET_TEXT and named == ["sheet"]:
            problems.append(f"{stem} [{i}]: the erratum blames the sheet, which has no text for this task "
                            f"(it says 'see the notebook'): {box[:120]!r}")
    return problems


def history_problems(stem: str, cells, *, release: bool = False) -> list[str]:
    """Student-facing cells (all but the TA's rubrics) that tell the pack's history instead of the statement."""
    return [f"{stem}{' (release)' if release else ''} [{i}]: {m.group(0)!r} (the pack's history goes to CHANGELOG.md)"
            for i, cell in enumerate(cells) if not tiers.is_rubric(cell)
            for m in [_HISTORY.search(_source(cell))] if m]


def course_docs() -> str:
    """docs/figures.md (the quoted figures) and README.md (its notebook table of hours), as one text; figures.md
    first, so that its table is the one read while README.md still holds an older copy."""
    return FIGURES.read_text(encoding="utf-8") + "\n" + README.read_text(encoding="utf-8")


def figure_problems(stem: str, cells, readme: str) -> list[str]:
    listed = readme_figures(readme)
    allowed = listed.get(stem, set()) | listed.get("all", set())
    printed = printed_strings(cells)
    figures, workload = quoted_figures(cells)
    problems = [f"{stem}: {figure!r} is quoted in the markdown but neither printed by the notebook nor listed in "
                f"docs/figures.md ('Figures quoted in the notebooks', with the command that measured it)"
                for figure in sorted(figures) if figure not in allowed and figure not in printed]
    plan = readme_workload(readme).get(stem, {})
    for which, hours in workload:
        if plan.get(which) != hours:
            problems.append(f"{stem}: the text plans {hours:g} h for the {which}, README.md's notebook table "
                            f"{plan.get(which)}")
    return problems


def _cells(path: Path) -> list:
    return json.loads(path.read_text(encoding="utf-8"))["cells"]


def _md(text: str, *tags: str) -> dict:
    return {"cell_type": "markdown", "metadata": {"tags": list(tags)} if tags else {}, "source": text}


# ------------------------------------------------------------------------------ the rules, on the pack
@pytest.mark.parametrize("path", ALL_SOURCES, ids=lambda p: p.stem)
def test_every_erratum_names_its_source(path):
    problems = erratum_problems(path.stem, _cells(path))
    assert not problems, "\n".join(problems)


def test_the_pack_has_errata_and_each_names_a_source():
    """The rule is not met by having no boxes: the sources' known errors are flagged (sheet, slides, lecture
    summary, talk), each at least once."""
    named = set()
    for path in ALL_SOURCES:
        for _, box in erratum_boxes(_cells(path)):
            named |= {s for s in SOURCES if s in box.lower()}
    assert named == set(SOURCES), f"errata name {sorted(named)}; expected each of {SOURCES}"


@pytest.mark.parametrize("folder", [SOLUTIONS, RELEASE], ids=["solutions", "release"])
def test_no_student_facing_cell_tells_the_packs_history(folder):
    problems = [p for path in sorted(folder.glob("*.ipynb"))
                for p in history_problems(path.stem, _cells(path), release=folder == RELEASE)]
    assert not problems, "\n".join(problems)
    assert CHANGELOG.is_file() and "CHANGELOG.md" in README.read_text(encoding="utf-8"), (
        "the pack's own corrections belong in CHANGELOG.md, and README.md must point TAs to it")


@pytest.mark.parametrize("path", ALL_SOURCES, ids=lambda p: p.stem)
def test_every_quoted_figure_is_printed_or_listed_with_its_command(path):
    problems = figure_problems(path.stem, _cells(path), course_docs())
    assert not problems, "\n".join(problems)


def test_every_listed_figure_is_still_quoted():
    """The README list cannot go stale: each row's figure is quoted in its notebook (or, for "all", in every one)."""
    quoted = {path.stem: quoted_figures(_cells(path))[0] for path in ALL_SOURCES}
    stale = []
    for notebook, figures in readme_figures(course_docs()).items():
        stems = list(quoted) if notebook == "all" else [notebook]
        for stem in stems:
            if stem not in quoted:
                stale.append(f"{notebook}: no such notebook")
                continue
            stale += [f"{stem}: {figure!r} is listed but no longer quoted" for figure in figures - quoted[stem]]
    assert not stale, "\n".join(stale)


# ------------------------------------------------------------------------------ the rules can fail
def test_the_erratum_rule_can_fail():
    """Sentences the notebooks once held: a box blaming the sheet for Task B's text, a box without a
    source; and boxes that pass."""
    taskB_before = ("> **Erratum.** The sheet said the fit uses L-BFGS; `fit_chinchilla` minimises with BFGS (scipy's "
                    "`method=\"BFGS\"`,\n> with the analytic gradient).")
    assert erratum_problems("taskB_pythia_scaling", [_md(taskB_before)])
    assert erratum_problems("task2_pseudo_likelihood", [_md("> **Erratum.** It is best on NER (both columns).")])
    assert erratum_problems("task1_infonce", [_md("**Erratum.** Fixed a typo.\nThe sheet is right.")])
    assert not erratum_problems("task2_pseudo_likelihood",
                                [_md("> **Erratum (lecture slides).** The slides' code sets rows to -inf.")])
    assert not erratum_problems("taskB_pythia_scaling",
                                [_md("> **Erratum (lecture summary).** The lecture summary says ... Both are wrong.")])
    assert not erratum_problems("bonus_masked_pretraining_bayes",
                                [_md("> **Erratum.** The talk's code computes log p(x) as ...")])


def test_the_history_rule_can_fail():
    before = ("> **Erratum.** An earlier version of this notebook computed uniformity over both views concatenated, so\n"
              "> the $N$ positive pairs ...")
    assert history_problems("taskA_simclr", [_md(before)])
    assert not history_problems("taskA_simclr", [_md(before, "rubric")]), "rubrics are for TAs, not students"
    assert not history_problems("taskA_simclr", [_md("Uniformity is computed per view.")])


def test_the_figure_rule_can_fail():
    readme = ("### Figures quoted in the notebooks\n\n| figure | notebook | command or source |\n|---|---|---|\n"
              "| `1,762 views/s` | `taskA_simclr` | `python benchmarks/simclr.py --cifar DIR --cpu-preset` |\n"
              "| `30 s` | all | a limit |\n\n"
              "| `taskA_simclr.ipynb` | Task A | SimCLR | 2.5 h | 1.5 h: fast batched augmentation |\n")
    before = [_md("On a CPU it is simple and slow, a few thousand views per second per core; the optional extension"),
              _md("The usual way ... manages about\n3,000 views per second per CPU core: a GPU that consumes 8,000 views "
                  "per second starves on a 2-core\nJupyter kernel.")]
    problems = figure_problems("taskA_simclr", before, readme)
    assert len(problems) == 3, problems    # "a few thousand views per second", "3,000 ...", "8,000 ..."
    after = [_md("It made 1,762 views/s in the pack's benchmark (`python benchmarks/simclr.py`); at most 30 s a line."),
             _md("**Time.** Core: about 2.5 h. Extensions (optional): about 1.5 h."),
             _md("BERT selects 15 % of the tokens; $1 - h(s)$ is maths, `--timeout 60 s` is code."),
             _md("It measured 5 min on this machine.")]
    assert figure_problems("taskA_simclr", after, readme) == [
        "taskA_simclr: '5 min' is quoted in the markdown but neither printed by the notebook nor listed in docs/figures.md "
        "('Figures quoted in the notebooks', with the command that measured it)"]
    printed = after + [{"cell_type": "code", "source": 'print("It measured 5 min on this machine.")'}]
    assert figure_problems("taskA_simclr", printed, readme) == [], "a figure the notebook prints itself is fine"
    wrong_plan = [_md("**Time.** Core: about 3 h. Extensions (optional): about 1.5 h.")]
    assert figure_problems("taskA_simclr", wrong_plan, readme) == [
        "taskA_simclr: the text plans 3 h for the core, README.md's notebook table 2.5"]
