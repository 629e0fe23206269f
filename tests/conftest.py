"""Shared fixtures. The expensive ones (the nbgrader round trips) run once per test session."""

from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from roundtrip import REPO, collect, prepare_course, start_autograde

pytest_plugins = ["conftest_lm"]  # the session-scoped `micro_suite` fixture

SOLUTIONS = REPO / "solutions" / "ex01"
RELEASE = REPO / "notebooks" / "ex01"


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
    runs = {}
    for submission in ("solution", "release"):
        course = tmp_path_factory.mktemp(f"course-{submission}")
        prepare_course(course, notebooks)
        runs[submission] = (course, start_autograde(course, submission, submission))
    with ThreadPoolExecutor(2) as pool:
        futures = {name: pool.submit(collect, course, name, proc) for name, (course, proc) in runs.items()}
        return {name: f.result() for name, f in futures.items()}
