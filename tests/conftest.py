"""Shared fixtures. The expensive ones (the nbgrader round trips) run once per test session."""

from __future__ import annotations

import atexit
import json
import os
import shutil
import tempfile
from functools import partial
from pathlib import Path

import pytest

from fixtures import at_once
from roundtrip import REPO, collect, copy_prepared_course, prepare_course, start_autograde

pytest_plugins = ["conftest_lm"]  # the session-scoped `micro_suite` fixture

SOLUTIONS = REPO / "solutions" / "ex01"
RELEASE = REPO / "notebooks" / "ex01"


#: The test pyramid: each test file's tier, a marker of the same name (``-m unit``, ``-m "unit or judge"``).
#: ``./pack.sh test fast`` runs the unit and judge tiers and one small class end to end (FAST_END_TO_END).
TIERS = {
    # every notebook's own tests/test_<stem>.py is a unit file: derived from solutions/, so a new notebook's
    # tests join the fast tier without a list to keep
    "unit": ("test_judge_units", "test_grader_units", "test_utils", "test_layout", "test_core_and_rubrics",
             "test_course_text", "test_miniature_suite", "test_distributed", "test_augmentation_stats",
             "test_deadlines", "test_lms", "test_lms_downloads", "test_lms_fixtures", "test_points_for_ideas")
            + tuple(f"test_{path.stem}" for path in sorted(SOLUTIONS.glob("*.ipynb"))),
    "judge": ("test_judge", "test_visible_checks", "test_judge_gates"),
    "cli": ("test_grader", "test_grader_audit", "test_grader_batch", "test_grader_honest", "test_grader_session",
            "test_grader_shards", "test_feedback_safety", "test_nbgrader_bridge", "test_slurm", "test_similarity",
            "test_grader_round5", "test_taskA_demo", "test_semester"),
    "notebooks": ("test_notebooks", "test_run_notebooks"),
    "env": ("test_environment", "test_hosted_setup", "test_bundle", "test_colab_validate"),
    "browser": ("test_formgrader_browser",),
}
#: cli-tier files that share the machine well: one process each (a core of the second pass would idle beside
#: them), and nothing in them asserts a time, sets a limit of its own or expects "timed out". The full suite
#: runs them beside the unit, judge, notebook and environment tiers on two workers (./pack.sh test, first
#: pass). Every other cli and browser test is marked ``alone`` and runs in the second pass, one test at a
#: time: it grades with two workers (both cores busy: beside other tests the pass took longer, measured),
#: or with limits of seconds, the overload rule or a cluster that assume the machine is its own.
BESIDE_OTHERS = ("test_similarity", "test_taskA_demo")
#: the one small class graded end to end in the fast tier: the tests of this file that use this fixture
#: (a Task-1 class graded light and full); the file's timing and memory-cap tests stay in the cli tier
FAST_END_TO_END = ("tests/test_grader_session.py", "light_and_full")


def sweep_seeds(default: int) -> list[int]:
    """The judge sweeps' input seeds 0..N-1: N is ``$LAS_SWEEP_SEEDS`` when set (``./pack.sh test fast``
    sets 1), else ``default`` (what the full suite and CI run)."""
    raw = os.environ.get("LAS_SWEEP_SEEDS", "")
    if raw and not (raw.isdigit() and int(raw) > 0):
        raise pytest.UsageError(f"LAS_SWEEP_SEEDS must be a positive whole number of seeds, not {raw!r}")
    return list(range(int(raw) if raw else default))


#: The grader's disk caches, one of each for the whole run (``./pack.sh test`` shares them between its passes
#: through ``$LAS_TEST_CACHE``; xdist's workers inherit them), never the user's ``~/.cache``: a fresh grading
#: folder copies the release generated once per source (grader/course.py release_cache_dir), and a class graded
#: again with a judge seed used before (shards, Slurm tasks, resumes) reads the solution's reference records
#: (grader/judge.py reference_cache_dir). Outside the sandbox's view: its /tmp is a tmpfs of its own.
TEST_CACHES = {"LAS_RELEASE_CACHE": "releases", "LAS_REFERENCE_CACHE": "references"}


def pytest_configure(config):
    if not os.environ.get("LAS_TEST_CACHE"):
        os.environ["LAS_TEST_CACHE"] = tempfile.mkdtemp(prefix="las-test-cache-")
        atexit.register(shutil.rmtree, os.environ["LAS_TEST_CACHE"], True)
    for variable, folder in TEST_CACHES.items():
        os.environ.setdefault(variable, os.path.join(os.environ["LAS_TEST_CACHE"], folder))
    for tier in TIERS:
        config.addinivalue_line("markers", f"{tier}: the {tier} tier of the test pyramid (tests/conftest.py TIERS)")
    config.addinivalue_line("markers", "fast_e2e: the small end-to-end class of ./pack.sh test fast")
    config.addinivalue_line("markers", "alone: a cli or browser test the full suite runs with the machine to itself")


def pytest_collection_modifyitems(config, items):
    """Mark every test with its file's tier; a test that needs the nbgrader round trips of every notebook
    (the ``roundtrips`` fixture, minutes) is a CLI test wherever it lives. A file no tier names is "cli"
    (the slow side, run alone), so a new file never slips into the fast loop or beside other tests by accident."""
    tier_of = {name: tier for tier, names in TIERS.items() for name in names}
    for item in items:
        stem = Path(str(item.fspath)).stem
        tier = tier_of.get(stem, "cli")
        if "roundtrips" in getattr(item, "fixturenames", ()):
            tier = "cli"
        item.add_marker(getattr(pytest.mark, tier))
        if tier in ("cli", "browser") and stem not in BESIDE_OTHERS:
            item.add_marker(pytest.mark.alone)
        path, fixture = FAST_END_TO_END
        if Path(str(item.fspath)).as_posix().endswith(path) and fixture in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.fast_e2e)


def solution_notebooks() -> list[Path]:
    """The source notebooks; ``LAS_TEST_NOTEBOOKS=stem1,stem2`` narrows the notebook tests to a few
    (a quick round trip while editing one notebook; CI always runs all)."""
    only = [s for s in os.environ.get("LAS_TEST_NOTEBOOKS", "").split(",") if s]
    return sorted(p for p in SOLUTIONS.glob("*.ipynb") if not only or p.stem in only)


def graded_cells(notebook: Path, *, autograded_only: bool = True) -> list[str]:
    """grade_ids of the notebook's grade cells (autograded tests only, by default)."""
    cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
    ids = []
    for cell in cells:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if meta.get("grade") and (not autograded_only or not meta.get("solution")):
            ids.append(meta["grade_id"])
    return ids


def _prebuild_models() -> None:
    """Build the cached miniature model suite the smoke presets load, before any timed cell needs it."""
    try:
        from utils import lm
    except ImportError:
        return
    if hasattr(lm, "build_suite"):
        lm.build_suite("micro", progress=False)


@pytest.fixture(scope="session")
def roundtrips(tmp_path_factory):
    """Autograde the solution and the unmodified release, each in its own course, side by side.

    Returns {"solution": RoundTrip, "release": RoundTrip}.
    """
    _prebuild_models()
    notebooks = solution_notebooks()
    courses = {submission: tmp_path_factory.mktemp(f"course-{submission}") for submission in ("solution", "release")}
    prepare_course(courses["solution"], notebooks)
    # the same source gives the same release and gradebook: generated once, copied before any student is added
    copy_prepared_course(courses["solution"], courses["release"])
    runs = {name: (course, start_autograde(course, name, name)) for name, course in courses.items()}
    return at_once({name: partial(collect, course, name, proc) for name, (course, proc) in runs.items()})
