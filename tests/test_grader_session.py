"""One student's grading session (grader/session.py): every notebook's full run and judge in one
sandboxed process, and what the TA then sees in the executed notebook.

On a Task-1-only course: the light full run (the default) and the full one give the same points; the
light one shows the outputs the student submitted under the course's demonstration cells, with a note
that says so, and the judge's report under each test cell, while the full one executes every cell; a
cell the student added runs in either; a cell past its time limit is interrupted, one that ignores the
interrupt is stopped, and a process that ends itself is reported, each with the points of the judge.
About a minute on two cores."""

from __future__ import annotations

import copy
import json
from functools import partial

import pytest

from conftest import SOLUTIONS

STEM = "task1_infonce"


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    from fixtures import scratch_course

    return scratch_course(tmp_path_factory.mktemp("session"), SOLUTIONS / f"{STEM}.ipynb")


def _text(cell) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def _grade(course, submissions: dict[str, dict], **settings) -> dict:
    """Grade each submission (student -> notebook dict) through grader.autograde.grade_student; returns
    student -> (NotebookResult, the executed notebook or None)."""
    import tempfile
    from pathlib import Path

    from grader import judge as judging
    from grader.autograde import grade_student
    from grader.results import Settings
    from grader.course import add_students

    course_, release, solution = course
    add_students(course_, list(submissions))
    options = Settings(workers=1, seed=7, **settings)
    out = {}
    with tempfile.TemporaryDirectory(prefix="las-session-test-") as tmp:
        tmp = Path(tmp)
        reference = judging.reference_records(STEM, release, solution, 7, tmp)
        for student, nb in submissions.items():
            folder = course_.folder("submitted", student)
            folder.mkdir(parents=True, exist_ok=True)
            (folder / f"{STEM}.ipynb").write_text(json.dumps(nb), encoding="utf-8")
            [result] = grade_student(course_, student, [STEM], options, tmp, {STEM: reference})
            executed = json.loads(result.autograded.read_text()) if result.autograded else None
            out[student] = (result, executed)
    return out


def _points(result) -> float:
    return sum(v[0] or 0.0 for v in (result.grades or {}).values() if not v[1])


def _submission(course, *, demo_output: str = "", extra_cell: str = "", answer_prefix: dict | None = None) -> dict:
    from grader.judge import cell_role
    from grader.mutants import student_copy

    _, release, solution = course
    nb = student_copy(release, solution)
    if demo_output:   # what the student's own run printed under the first demonstration cell
        demo = next(c for c in nb["cells"] if c["cell_type"] == "code" and cell_role(c) == "given")
        demo["outputs"] = [{"output_type": "stream", "name": "stdout", "text": demo_output}]
    for gid, prefix in (answer_prefix or {}).items():
        cell = next(c for c in nb["cells"] if (c["metadata"].get("nbgrader") or {}).get("grade_id") == gid)
        cell["source"] = prefix + _text(cell)
    if extra_cell:
        nb["cells"].append({"cell_type": "code", "metadata": {}, "source": extra_cell, "outputs": [],
                            "execution_count": None, "id": "student-extra"})
    return nb


@pytest.fixture(scope="module")
def light_and_full(course, tmp_path_factory):
    from fixtures import at_once, scratch_course
    from grader.mutants import student_copy

    _, release, solution = course
    wrong = student_copy(release, solution)
    for cell in wrong["cells"]:
        if (cell["metadata"].get("nbgrader") or {}).get("grade_id") == "nce_loss":
            assert "logits = scores - math.log(k)" in _text(cell)
            cell["source"] = _text(cell).replace("logits = scores - math.log(k)", "logits = scores", 1)
    subs = {"right": _submission(course, demo_output="MY OWN RUN: 0.57 nats\n",
                                 extra_cell="print('a cell the student added ran')"),
            "wrong": wrong}
    # the two modes at once, each in a course of its own: one grades with one worker, so a core would idle
    full_course = scratch_course(tmp_path_factory.mktemp("session-full"), SOLUTIONS / f"{STEM}.ipynb")
    courses = {"light": course, "full": full_course}
    return at_once({mode: partial(_grade, courses[mode], copy.deepcopy(subs), full_run=mode) for mode in courses})


def test_light_and_full_give_the_same_points(light_and_full):
    for student in ("right", "wrong"):
        light, full = light_and_full["light"][student][0], light_and_full["full"][student][0]
        assert _points(light) == _points(full), (student, light.grades, full.grades)
        assert light.status == full.status == "graded", (light.reasons, full.reasons)
    assert _points(light_and_full["light"]["right"][0]) == 11.0
    assert _points(light_and_full["light"]["wrong"][0]) == 8.0


def test_light_run_shows_the_submitted_demo_outputs_with_a_note(light_and_full):
    from grader.launch import DEMO_NOTE

    executed = light_and_full["light"]["right"][1]
    texts = ["".join(o.get("text", "")) for c in executed["cells"] for o in c.get("outputs", [])]
    assert any("MY OWN RUN: 0.57 nats" in t for t in texts)
    note = texts.index(DEMO_NOTE)
    assert "MY OWN RUN" in texts[note + 1], "the note must come right before the submitted outputs"
    assert any("a cell the student added ran" in t for t in texts), "a cell the student added must run"
    # the judge's report, not the visible checks, under each test cell
    tests = [c for c in executed["cells"] if (c["metadata"].get("nbgrader") or {}).get("grade") and c["cell_type"] == "code"]
    assert tests and all(any("Autograder" in "".join(o.get("text", "")) for o in c["outputs"]) for c in tests)


def test_full_run_executes_every_cell(light_and_full):
    from grader.launch import DEMO_NOTE

    executed = light_and_full["full"]["right"][1]
    texts = ["".join(o.get("text", "")) for c in executed["cells"] for o in c.get("outputs", [])]
    assert DEMO_NOTE not in texts and not any("MY OWN RUN" in t for t in texts)
    assert any("a cell the student added ran" in t for t in texts)
    images = sum("image/png" in o.get("data", {}) for c in executed["cells"] for o in c.get("outputs", []))
    assert images >= 1, "the demonstration cells' figures must be drawn in the full run"
    # every code cell ran (or is the setup cell, run once by the session): execution counts in order
    counts = [c["execution_count"] for c in executed["cells"] if c["cell_type"] == "code" and c["execution_count"]]
    assert counts == sorted(counts) and len(counts) >= 10


def test_time_limits_and_a_dying_process(course):
    results = _grade(course, {
        "sleeper": _submission(course, answer_prefix={"cosine_scores": "import time\ntime.sleep(600)\n"}),
        "stubborn": _submission(course, answer_prefix={"cosine_scores": (
            "import time\nwhile True:\n    try:\n        time.sleep(600)\n    except BaseException:\n        pass\n")}),
        "exits": _submission(course, answer_prefix={"cosine_scores": "import os\nos._exit(3)\n"}),
    }, cell_timeout=4, notebook_timeout=60, load_seconds=8)
    sleeper, executed = results["sleeper"]
    errors = [o for c in executed["cells"] for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert any(o["ename"] == "KeyboardInterrupt" for o in errors), errors
    assert sleeper.status == "timed out" and _points(sleeper) == 11.0, (sleeper.status, sleeper.reasons)
    stubborn = results["stubborn"][0]
    assert stubborn.status == "timed out" and "ignored the interrupt" in stubborn.reasons[0], stubborn.reasons
    assert _points(stubborn) == 11.0
    exits = results["exits"][0]
    assert exits.status == "kernel died" and "died in the full run" in exits.reasons[0], exits.reasons
    assert _points(exits) == 11.0, "the judge skips the statement that ended its loader and grades the functions"


def test_a_notebook_that_stops_its_grading_process_is_continued(course):
    """SIGSTOP cannot be ignored: a statement that stops the notebook's grading process (its parent, in
    the full run and in the judge's loader alike) used to hold the session for the notebook's whole time
    (about 420 s) and then void it. The session continues it at once, grades it and tells the TA."""
    results = _grade(course, {"stopper": _submission(course, answer_prefix={
        "cosine_scores": "import os, signal\nos.kill(os.getppid(), signal.SIGSTOP)\n"})})
    stopper = results["stopper"][0]
    assert any("stopped its own grading process" in r for r in stopper.reasons), stopper.reasons
    assert stopper.status == "review" and _points(stopper) == 11.0, (stopper.status, stopper.reasons)


def test_the_memory_cap_applies_inside_the_session(course):
    """--mem-gb reaches the sandboxed processes (grader/process.py Limits): a 4 GiB allocation under a
    2 GB cap raises MemoryError in the full run, where the machine itself has room for it."""
    results = _grade(course, {"hoarder": _submission(course, answer_prefix={
        "cosine_scores": "_block = bytearray(4 * 1024 ** 3)\n"})}, mem_gb=2)
    hoarder, executed = results["hoarder"]
    assert executed is not None, (hoarder.status, hoarder.reasons)
    errors = [o for c in executed["cells"] for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert any(o["ename"] == "MemoryError" for o in errors), (errors, hoarder.reasons)


HUNTER = r'''
import gc, glob, os, sys, utils
SEEDS, MARK = "case" + "_seeds", "@" + "probe("
found = [repr(frame.f_locals)[:20000] for frame in [sys._getframe(i) for i in range(len(__import__("inspect").stack()) - 1)]]
for o in gc.get_objects():
    if isinstance(o, dict) and "notebooks" in o:
        found.append("SE" + "SSION:" + repr({k: v for k, v in o.items() if k != "notebooks"}))
    if isinstance(o, dict) and SEEDS in o:
        found.append("PL" + "AN:" + repr(o)[:20000])
    if isinstance(o, str) and MARK in o and "(ns, gen)" in o:
        found.append("SO" + "URCE:" + o[:2000])
found += ["MO" + "DULE:" + name for name in list(sys.modules) if name.startswith("grader.probes.")]
for path in glob.glob(os.path.join(os.path.dirname(os.path.dirname(utils.__file__)), "grader", "probes", "t*.py")):
    try:
        found.append("FI" + "LE:" + open(path).read(2000))
    except OSError:
        pass
try:
    os.set_blocking(0, False)
    found.append("ST" + "DIN:" + os.read(0, 1 << 20).decode("latin-1"))
except OSError:
    pass
print("HUNT:" + " ".join(found)[::-1].replace("\n", " "))
'''


def test_the_full_run_finds_no_case_seed_and_no_probe_source(course):
    """The case seeds and the probes' source reach a notebook's grading process only after its full run
    (grader/launch.py sealed_part): a cell that searches its stack, every object, stdin and the
    repository finds the session's plan and nothing of the judge's; the judge still grades in full."""
    from grader.seed import secret_strings

    results = _grade(course, {"hunter": _submission(course, extra_cell=HUNTER)})
    hunter, executed = results["hunter"]
    texts = ["".join(o.get("text", "")) for c in executed["cells"] for o in c.get("outputs", [])]
    hunted = next(t for t in texts if t.startswith("HUNT:"))[5:].strip()[::-1].replace(HUNTER.replace("\n", " "), "")
    assert "SESSION:" in hunted and "notebook_timeout" in hunted, "the hunt must find the session's plan"
    assert not [m for m in ("PLAN:", "SOURCE:", "MODULE:", "FILE:") if m in hunted], hunted[:2000]
    assert not [s for s in secret_strings(7, [STEM]) if s in hunted]
    assert _points(hunter) == 11.0, (hunter.status, hunter.reasons)
