"""Mutation testing of the hidden tests: plausible wrong answers must lose points.

Each ``grader/mutants/<stem>.py`` lists ``MUTANTS = [Mutant(cell=..., name=..., find=..., replace=...)]``
for ``solutions/ex01/<stem>.ipynb``: ``cell`` is the grade_id of an autograded answer cell, ``find``
occurs exactly once in it (inside the solution block) and ``replace`` is a mistake a student could
make. ``visible=True`` marks a mutant that breaks one requirement the task text states which a
public input shows, and ``case`` names the judge's case (a probe of ``grader/checks/<stem>.py``) for
that requirement: the release's visible test cell must fail on it too, so that the hidden cases
differ from the visible checks only in their inputs (tests/test_visible_checks.py). ``edge=True`` marks a
mutant whose one bug is an edge case: it must lose its case's share and nothing more (tests/test_judge_gates.py).
:func:`run` judges the solution and every mutant with the autograder's judge (grader/judge.py) over 20 seeds;
a mutant is *killed* when it loses points of its own test cell on every seed. Each mutant is its
own notebook variant: two mutants never mask each other.
"""

from __future__ import annotations

import copy
import importlib
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

from utils.notebook_cells import cell_role, cell_source, grade_id, nbgrader_meta, read_notebook

from .. import ASSIGNMENT, ROOT

SOLUTIONS = ROOT / "solutions" / ASSIGNMENT
MIN_PER_FUNCTION = 5


@dataclass(frozen=True)
class Mutant:
    cell: str      # grade_id of the autograded answer cell
    name: str      # the mistake, in a few words
    find: str      # exact text in the solution (occurs once in that cell)
    replace: str   # the wrong version
    visible: bool = False  # the visible test cell fails on it (a stated requirement, shown on a public input)
    case: str = ""         # the judge case (probe) of the requirement it breaks; needed with visible=True
    edge: bool = False     # its one bug is an edge case (or a rule): it loses its case's share and nothing more


def notebooks_with_mutants() -> list[str]:
    here = Path(__file__).parent
    return sorted(p.stem for p in here.glob("*.py") if p.stem != "__init__" and (SOLUTIONS / f"{p.stem}.ipynb").exists())


def load(stem: str) -> list[Mutant]:
    return list(importlib.import_module(f"grader.mutants.{stem}").MUTANTS)


def answer_cells(nb: dict) -> dict[str, str]:
    """grade_id -> source of every autograded answer cell (solution: true, grade: false)."""
    return {grade_id(c): cell_source(c) for c in nb["cells"] if cell_role(c) == "answer"}


def functions_of(source: str) -> list[tuple[str, int]]:
    """(name, start offset) of the top-level functions a cell defines."""
    return [(m.group(1), m.start()) for m in re.finditer(r"^def (\w+)\(", source, re.M)]


def graded_functions(source: str) -> list[str]:
    """The functions of an answer cell that students write: those holding a solution block
    (helpers given in full in the same cell, like Task A's ``grayscale``, are not graded)."""
    starts = functions_of(source)
    graded = []
    for i, (name, start) in enumerate(starts):
        end = starts[i + 1][1] if i + 1 < len(starts) else len(source)
        if "### BEGIN SOLUTION" in source[start:end]:
            graded.append(name)
    return graded


def function_at(source: str, offset: int) -> str | None:
    name = None
    for fn, start in functions_of(source):
        if start <= offset:
            name = fn
    return name


def validate(stem: str, mutants: list[Mutant] | None = None) -> list[str]:
    """Problems with a mutant file (empty when it follows the format)."""
    cells = answer_cells(read_notebook(SOLUTIONS / f"{stem}.ipynb"))
    mutants = load(stem) if mutants is None else mutants
    problems, per_function = [], {}
    for m in mutants:
        if m.cell not in cells:
            problems.append(f"{m.name!r}: {m.cell!r} is not an autograded answer cell of {stem}")
            continue
        src = cells[m.cell]
        count = src.count(m.find)
        if count != 1:
            problems.append(f"{m.name!r}: find text occurs {count} times in {m.cell} (needs exactly 1)")
            continue
        at = src.index(m.find)
        blocks = [(b.start(), b.end()) for b in re.finditer(r"### BEGIN SOLUTION.*?### END SOLUTION", src, re.S)]
        if not any(b <= at and at + len(m.find) <= e for b, e in blocks):
            problems.append(f"{m.name!r}: find text is outside the solution block of {m.cell}")
        if m.find == m.replace:
            problems.append(f"{m.name!r}: replace equals find")
        fn = function_at(src, at) or m.cell
        per_function[(m.cell, fn)] = per_function.get((m.cell, fn), 0) + 1
    for cell, src in cells.items():
        for fn in graded_functions(src) or [cell]:
            if per_function.get((cell, fn), 0) < MIN_PER_FUNCTION:
                problems.append(f"{stem}:{cell}: {fn} has {per_function.get((cell, fn), 0)} mutants "
                                f"(at least {MIN_PER_FUNCTION} needed)")
    return problems


def student_copy(release: dict, solution: dict, mutant: Mutant | None = None) -> dict:
    """What a student would hand in: the release with every answer cell filled from the solution,
    and ``mutant`` applied to its cell."""
    answers = {grade_id(c): cell_source(c) for c in solution["cells"] if nbgrader_meta(c).get("solution")}
    nb = copy.deepcopy(release)
    for cell in nb["cells"]:
        gid = grade_id(cell)
        if nbgrader_meta(cell).get("solution") and gid in answers:
            src = answers[gid]
            if mutant is not None and gid == mutant.cell:
                src = src.replace(mutant.find, mutant.replace, 1)
            # a student's answer carries no nbgrader markers
            cell["source"] = "".join(line for line in src.splitlines(keepends=True)
                                     if "### BEGIN SOLUTION" not in line and "### END SOLUTION" not in line)
    return nb


def run(stems: list[str] | None = None, *, seeds: list[int] | None = None,
        mutants: dict[str, list[Mutant]] | None = None, progress=print, **_ignored) -> dict[str, dict]:
    """Judge the solution and every mutant of each notebook over ``seeds`` (default 0..19) with the
    judge the autograder uses (grader/judge.py: probes, evidence, cases), without nbgrader; a mutant
    is *killed* when it loses points of its own test cell on every seed. Returns stem -> report with
    ``total``, ``killed``, ``survivors`` and per-mutant ``results``."""
    from ..judge import points_per_test_cell, sweep

    stems = stems or notebooks_with_mutants()
    seeds = list(range(20)) if seeds is None else list(seeds)
    release_dir = ROOT / "notebooks" / ASSIGNMENT
    reports = {}
    for stem in stems:
        muts = (mutants or {}).get(stem) or load(stem)
        problems = validate(stem, muts) if mutants is None else []
        release = read_notebook(release_dir / f"{stem}.ipynb")
        solution = read_notebook(SOLUTIONS / f"{stem}.ipynb")
        points = points_per_test_cell(release)
        variants = {"solution": student_copy(release, solution)}
        cells = {}
        for i, m in enumerate(muts):
            variants[f"mutant{i:02d}"] = student_copy(release, solution, m)
            cells[f"mutant{i:02d}"] = [f"test_{m.cell}"] if f"test_{m.cell}" in points else list(points)
        progress(f"{stem}: judging the solution and {len(muts)} mutants over {len(seeds)} seeds")
        with tempfile.TemporaryDirectory(prefix=f"las-mutants-{stem}-") as tmp:
            verdicts = sweep(stem, release, solution, variants, seeds, cells=cells, workroot=Path(tmp))
        base = min(verdicts[("solution", s)].score for s in seeds)
        results = []
        for i, m in enumerate(muts):
            scores = [verdicts[(f"mutant{i:02d}", s)] for s in seeds]
            killed_on = sum(v.score < v.max_score - 1e-9 for v in scores)
            results.append({"cell": m.cell, "name": m.name, "score": max(v.score for v in scores),
                            "max_score": scores[0].max_score, "killed_on_seeds": killed_on,
                            "killed": killed_on == len(seeds)})
        killed = sum(r["killed"] for r in results)
        reports[stem] = {"total": len(results), "killed": killed, "baseline": base,
                         "baseline_max": verdicts[("solution", seeds[0])].max_score, "seeds": len(seeds),
                         "survivors": [f"{r['cell']}: {r['name']}" for r in results if not r["killed"]],
                         "problems": problems, "results": results}
    return reports
