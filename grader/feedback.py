"""The students' feedback pages (``python -m grader feedback``), made by nbgrader from safe copies.

Each autograded notebook is staged sanitised (grader/pageclean.py: no hidden test, no grader traceback, no
active content, no seed); nbgrader renders the pages, whose body then goes through the allow-list of
grader/safehtml.py; a page that shows the judge's own source lines is withheld and reported. A notebook whose
full run failed (no executed copy) still gets a page: the submitted notebook without outputs, the judge's
report under each test cell and a note at the top that says why. A notebook that cannot be read or rendered
is reported for its student alone. Late penalties are written into the gradebook first (grader/extras/export.py
``class_rows``), so a page shows the same penalty as grades.csv.
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from nbgrader.api import Gradebook, MissingEntry

from utils.notebook_cells import grade_id

from .course import COURSE_ID, Course, nbgrader, nbgrader_failures, printable, snapshot_db, valid_student_id
from .extras.export import class_rows
from .judge import cell_reports
from .pageclean import leaked_judge_lines, sanitise
from .safehtml import clean_page
from .seed import course_secrets, hide_secrets, scrub_value
from .submissions import prepare, release_view


HOST_PATH = re.compile(r"(?:/[^\s/'\"|()\[\]]+)+/([^\s/'\"|()\[\]]*)")   # /tmp/las-autograde-x/a/b.ipynb -> b.ipynb


def _not_run_note(entry: dict, stem: str, partial: bool = False) -> dict:
    """The markdown cell at the top of a page whose notebook could not be run to the end (``partial``:
    the page shows the outputs of the cells that did run)."""
    status = str(entry.get("status") or "not run")
    reasons = [str(r) for r in entry.get("reasons") or []]
    why = str(entry.get("full_run_reason") or next((r for r in reasons if "full run" in r), "") or status)
    why = re.sub(r"\s+", " ", printable(why.removeprefix(f"{stem}: "))).strip()
    why = HOST_PATH.sub(lambda m: m.group(1), why)[:600]   # nbgrader's log names the grader's scratch folders
    shown = ("notebook with the outputs of the cells that ran before it stopped" if partial else
             "notebook as you submitted it, without outputs")
    text = (f"This notebook could not be run to the end when it was graded ({status}: {why}). Below is the "
            f"{shown}; under each test cell the autograder lists its checks of your functions, which it ran "
            "on their own.")
    return {"cell_type": "markdown", "metadata": {}, "id": "feedback-not-run",
            "source": '<div class="alert alert-warning tex2jax_ignore"><strong>Not run to the end.</strong> '
                      f"{html.escape(text)}</div>"}


def not_run_notebook(course: Course, student: str, stem: str, entry: dict) -> dict:
    """The page's notebook for a student whose full run of ``stem`` failed: the submitted notebook, read and
    repaired as for grading, in the release view grading uses (grader/submissions.py), without outputs, the
    judge's report under each test cell (as grader/steps.py ``annotate_reports`` does) and a note at the top.
    Still to be sanitised like any other page."""
    release_path = course.release / f"{stem}.ipynb"
    release = json.loads(release_path.read_text(encoding="utf-8"))
    nb = release_view(prepare(course.folder("submitted", student) / f"{stem}.ipynb", release_path).notebook, release)
    reports = cell_reports(stem, entry, release)
    released = {grade_id(c) for c in release["cells"] if grade_id(c)}
    for cell in nb["cells"]:
        if cell.get("cell_type") == "code":
            cell["outputs"], cell["execution_count"] = [], None
            gid = grade_id(cell)
            if gid in reports and gid in released:
                cell["outputs"].append({"output_type": "stream", "name": "stdout", "text": reports[gid] + "\n"})
    nb["cells"].insert(0, _not_run_note(entry, stem))
    return nb


def _stage(course: Course, student: str, tmp: Path) -> list[str]:
    """Copy the student's autograded notebooks, sanitised, into the scratch course; returns the problems met.
    A notebook that cannot be read or sanitised is left out and reported. One the judge graded without an
    executed copy is staged from the submission (:func:`not_run_notebook`); one that stopped part-way gets the
    same note on top."""
    problems, staged = [], set()
    secrets = course_secrets(course)
    src = course.folder("autograded", student)
    out = tmp / "autograded" / student / course.assignment
    status = course.read_json("status", student)
    notebooks = status.get("notebooks") if isinstance(status, dict) else None
    notebooks = notebooks if isinstance(notebooks, dict) else {}
    for path in sorted(src.glob("*.ipynb")) if src.is_dir() else []:
        try:
            nb = scrub_value(sanitise(json.loads(path.read_text(encoding="utf-8"))), secrets)
            entry = notebooks.get(path.stem)
            if isinstance(entry, dict) and entry.get("full_run_reason"):   # stopped part-way: say so on top
                nb["cells"].insert(0, _not_run_note(entry, path.stem, partial=True))
            out.mkdir(parents=True, exist_ok=True)
            (out / path.name).write_text(json.dumps(nb), encoding="utf-8")
            staged.add(path.stem)
        except Exception as exc:  # noqa: BLE001 - a corrupt autograded file: report it, go on
            problems.append(f"{path.name}: no feedback, the autograded notebook could not be read "
                            f"({exc.__class__.__name__}: {str(exc)[:160]}); look at it by hand")
    for stem in course.notebook_names():
        entry = notebooks.get(stem)
        if stem in staged or not isinstance(entry, dict) or not isinstance(entry.get("judge"), dict):
            continue
        try:
            nb = scrub_value(sanitise(not_run_notebook(course, student, stem, entry)), secrets)
            out.mkdir(parents=True, exist_ok=True)
            (out / f"{stem}.ipynb").write_text(json.dumps(nb), encoding="utf-8")
        except Exception as exc:  # noqa: BLE001 - e.g. the submission is gone: report it, go on
            problems.append(f"{stem}.ipynb: no feedback, its full run failed and the submitted notebook could not "
                            f"be read ({exc.__class__.__name__}: {str(exc)[:160]}); look at it by hand")
    return problems


def pending_manual_grades(course: Course, students: list[str]) -> dict[tuple[str, str], list[str]]:
    """(student, notebook) -> the grade ids of the answers a TA has not graded yet (nbgrader's gradebook)."""
    out: dict[tuple[str, str], list[str]] = {}
    with Gradebook(course.db_url, COURSE_ID) as gb:
        for student in students:
            try:
                submission = gb.find_submission(course.assignment, student)
            except MissingEntry:
                continue
            for notebook in submission.notebooks:
                waiting = [g.cell.name for g in notebook.grades if g.needs_manual_grade and g.manual_score is None]
                if waiting:
                    out[(student, notebook.name)] = waiting
    return out


def mark_pending(page: str, grade_ids) -> str:
    """A feedback page with "to be graded" where nbgrader's template prints "0 / 3" for an answer the TA has
    not graded yet (the table of contents and the answer's own score line)."""
    for gid in grade_ids:
        name = re.escape(str(gid))
        page = re.sub(rf'(<a href="#{name}">[^<]*</a> \(Score: )[0-9.]+( / )', r"\g<1>to be graded\g<2>", page)
        page = re.sub(rf'(<a name="{name}"></a>.{{0,600}}?Score: )[0-9.]+( / )', r"\g<1>to be graded\g<2>", page,
                      count=1, flags=re.S)
    return page


#: Students per nbgrader process at least: each process costs about 3 s to start, a page about 0.5 s.
STUDENTS_PER_RENDERER = 8


def feedback_workers(requested: int | None, students: int) -> int:
    """How many nbgrader processes render the pages: ``requested`` (default: the machine's cores, at most
    4), never more than one per STUDENTS_PER_RENDERER students, at least 1."""
    wanted = requested if requested and requested > 0 else min(4, os.cpu_count() or 1)
    return max(1, min(wanted, -(-students // STUDENTS_PER_RENDERER)))


def _render(root: Path, students: list[str], assignment: str) -> dict[str, str]:
    """``nbgrader generate_feedback`` on the scratch course ``root`` (its gradebook and the staged
    ``autograded/<student>``); returns student -> why nbgrader could not render them."""
    proc = nbgrader(["generate_feedback", assignment, "--force", "--log-level=WARN"],
                    course_root=root, db_url=f"sqlite:///{root / 'gradebook.db'}")
    failed = {s: why for s, why in nbgrader_failures(proc.stdout + "\n" + proc.stderr).items() if s in students}
    if proc.returncode != 0 and not failed:
        raise RuntimeError("nbgrader generate_feedback failed:\n" + proc.stdout[-3000:] + proc.stderr[-3000:])
    return failed


def feedback(course: Course, students: list[str] | None = None,
             workers: int | None = None) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """Write grading/feedback/<student>/ex01/<notebook>.html.

    Returns (student -> notebooks done, student -> problems). A notebook that cannot be read or rendered, or
    a page that shows a line of the judge's code the student did not write (:func:`leaked_judge_lines`, the
    page deleted), is a problem for that student only. ``workers`` nbgrader processes render the pages
    (:func:`feedback_workers`), each a share of the class in a scratch course of its own (a page does not
    depend on who shares it)."""
    students = students or course.students()
    done: dict[str, list[str]] = {}
    problems: dict[str, list[str]] = {}
    with tempfile.TemporaryDirectory(prefix="las-feedback-") as tmp:
        tmp = Path(tmp)
        staged = []
        for student in students:
            if not valid_student_id(student):
                problems.setdefault(student, []).append("not a usable student id; no feedback written")
                continue
            problems_here = _stage(course, student, tmp)
            if problems_here:
                problems[student] = problems_here
            if (tmp / "autograded" / student).is_dir():
                staged.append(student)
        if not staged:
            return done, problems
        class_rows(course)   # the late penalties into the gradebook, as export writes them
        pending = pending_manual_grades(course, staged)
        count = feedback_workers(workers, len(staged))
        shares = [staged[i::count] for i in range(count)]
        roots = [tmp / f"part-{i}" for i in range(count)]
        root_of = {student: roots[i % count] for i, student in enumerate(staged)}   # staged[i] is in shares[i % count]
        snapshot_db(course.db_path, tmp / "gradebook.db")
        for root in roots:
            (root / "autograded").mkdir(parents=True)
            shutil.copyfile(tmp / "gradebook.db", root / "gradebook.db")
        for student, root in root_of.items():
            (tmp / "autograded" / student).rename(root / "autograded" / student)
        with ThreadPoolExecutor(count) as pool:
            failed = {s: why for part in pool.map(_render, roots, shares, [course.assignment] * count)
                      for s, why in part.items()}
        secrets = course_secrets(course)
        for student in staged:
            out_dir = root_of[student] / "feedback" / student / course.assignment
            dest = course.folder("feedback", student)
            if dest.exists():
                shutil.rmtree(dest)
            if student in failed or not out_dir.is_dir():
                why = failed.get(student) or "no page written"
                problems.setdefault(student, []).append(f"nbgrader could not render the feedback ({why}); "
                                                        "look at the autograded notebook by hand")
                continue
            shutil.copytree(out_dir, dest)
            for page in sorted(dest.glob("*.html")):
                try:   # the last word: the body through the allow-list, whatever the steps before missed
                    text = hide_secrets(clean_page(page.read_text(encoding="utf-8")), secrets)
                    text = mark_pending(text, pending.get((student, page.stem), ()))
                    page.write_text(text, encoding="utf-8")
                except Exception as exc:  # noqa: BLE001 - never leave a page that was not cleaned
                    page.unlink()
                    problems.setdefault(student, []).append(f"{page.name}: not written, it could not be cleaned "
                                                            f"({exc.__class__.__name__}); look at it by hand")
                    continue
                leaked = leaked_judge_lines(text, page.stem, course.folder("submitted", student) / f"{page.stem}.ipynb")
                if leaked:
                    page.unlink()
                    problems.setdefault(student, []).append(
                        f"{page.name}: not written, it showed {len(leaked)} line(s) of the judge's code, such as "
                        f"{leaked[0][:80]!r}; look at the autograded notebook by hand")
                else:
                    done.setdefault(student, []).append(page.stem)
    return done, problems
