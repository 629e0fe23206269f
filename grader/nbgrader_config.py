"""nbgrader configuration for Exercise Session 1 (assignment ``ex01``).

The course directory is the repository root: solutions/ is nbgrader's source, notebooks/ its
release; everything grading produces (submissions, autograded copies, feedback, the gradebook)
lives under the git-ignored grading/ folder.

Plain nbgrader commands read this file when run from grader/, e.g.::

    cd grader && nbgrader generate_assignment ex01 --force

but the supported way is ``python -m grader release`` (and ``collect``, ``autograde``, ``export``,
``feedback``) from the repository root.
"""

import os
from pathlib import Path

c = get_config()  # noqa: F821  (provided by traitlets when nbgrader loads this file)

ROOT = Path(__file__).resolve().parents[1]
GRADING = Path(os.environ.get("LAS_GRADING_DIR", ROOT / "grading"))

c.CourseDirectory.root = str(ROOT)
c.CourseDirectory.course_id = "learning-at-scale"
c.CourseDirectory.source_directory = "solutions"
c.CourseDirectory.release_directory = "notebooks"
c.CourseDirectory.submitted_directory = str(GRADING / "submitted")
c.CourseDirectory.autograded_directory = str(GRADING / "autograded")
c.CourseDirectory.feedback_directory = str(GRADING / "feedback")
c.CourseDirectory.db_url = f"sqlite:///{GRADING / 'gradebook.db'}"
# Only notebooks are part of the assignment; the executed copies and caches never are.
c.CourseDirectory.ignore = [".ipynb_checkpoints", "*.pyc", "__pycache__", "build", ".pytest_cache"]

# Per-cell limit during autograde (nbgrader's default, 30 s, is too tight for a model-loading
# cell on a busy grading machine; infinite loops still end).
c.ExecutePreprocessor.timeout = 120
c.ExecutePreprocessor.interrupt_on_timeout = True

# A deleted test cell is put back and scored (nbgrader issue 1682); `python -m grader autograde`
# passes the same option on its command line.
c.OverwriteCells.add_missing_cells = True

c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}
c.ClearSolutions.text_stub = "YOUR ANSWER HERE"
