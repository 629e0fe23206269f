"""nbgrader configuration for Exercise Session 1 (assignment ``ex01``).

The course directory is the repository root: solutions/ is nbgrader's source, notebooks/ its
release; everything grading produces (submissions, autograded copies, feedback, the gradebook)
lives under the git-ignored grading/ folder.

Plain nbgrader commands read this file when run from grader/ (formgrader runs them the same way),
and give the same release and the same grades as the pack's command line (grader/nbgrader_bridge.py)::

    cd grader && nbgrader generate_assignment ex01 --force     # = python -m grader release
    cd grader && nbgrader autograde ex01 --student alice       # = python -m grader autograde --student alice
"""

import os
import sys
from pathlib import Path

c = get_config()  # noqa: F821  (provided by traitlets when nbgrader loads this file)

ROOT = Path(__file__).resolve().parents[1]
GRADING = Path(os.environ.get("LAS_GRADING_DIR", ROOT / "grading"))
GRADING.mkdir(parents=True, exist_ok=True)   # nbgrader's gradebook lives here, from the first command on
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))            # the preprocessors below are the pack's own

c.CourseDirectory.root = str(ROOT)
c.CourseDirectory.course_id = "learning-at-scale"
c.CourseDirectory.source_directory = "solutions"
# The release goes to notebooks/ (committed); a test points formgrader's *Generate* elsewhere.
c.CourseDirectory.release_directory = os.environ.get("LAS_RELEASE_DIR", "notebooks")
c.CourseDirectory.submitted_directory = str(GRADING / "submitted")
c.CourseDirectory.autograded_directory = str(GRADING / "autograded")
c.CourseDirectory.feedback_directory = str(GRADING / "feedback")
c.CourseDirectory.db_url = f"sqlite:///{GRADING / 'gradebook.db'}"
# Only notebooks are part of the assignment; the executed copies and caches never are.
c.CourseDirectory.ignore = [".ipynb_checkpoints", "*.pyc", "__pycache__", "build", ".pytest_cache"]

# A deleted test cell is put back and scored (nbgrader issue 1682); `python -m grader autograde`
# passes the same option on its command line.
c.OverwriteCells.add_missing_cells = True

# The release never holds the TA's rubric cells (formgrader's *Generate* included).
c.GenerateAssignment.preprocessors.append("grader.nbgrader_bridge.StripRubrics")
# ... and records which cells are the course's given code (the student's `./pack.sh validate` needs it)
c.GenerateAssignment.preprocessors.append("grader.nbgrader_bridge.MarkGivenCells")
# nbgrader's autograde (and formgrader's *Autograde* button) grades with the pack's judge in the
# pack's sandbox, instead of running the notebook unsandboxed and scoring the visible tests.
c.Autograde.autograde_preprocessors = [
    "grader.nbgrader_bridge.JudgeExecute", "nbgrader.preprocessors.IgnorePattern",
    "nbconvert.preprocessors.ClearMetadataPreprocessor", "nbgrader.preprocessors.LimitOutput",
    "nbgrader.preprocessors.SaveAutoGrades", "nbgrader.preprocessors.AssignLatePenalties",
    "nbgrader.preprocessors.CheckCellMetadata",
]

# nbgrader's own "Generate feedback" renders HTML without the pack's cleaning: let nbconvert sanitise it
# (`python -m grader feedback` is the supported way: grader/feedback.py and grader/safehtml.py)
c.HTMLExporter.sanitize_html = True
# The Validate button names each failing cell in the line `./pack.sh validate` prints, not by its whole source
from utils.validate import short_failure  # noqa: E402
c.Execute.on_cell_error = short_failure

c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}
c.ClearSolutions.text_stub = "YOUR ANSWER HERE"
