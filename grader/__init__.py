"""TA-side grading for the course pack. Run ``python -m grader --help`` from the repository root."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GRADER_DIR = Path(__file__).resolve().parent
ASSIGNMENT = "ex01"   # the default assignment; another: --assignment NAME or $LAS_ASSIGNMENT (grader/course.py)

# jsonschema (imported by nbformat and nbgrader, so by every verb) builds three Earley parsers at import
# when the optional rfc3987_syntax is installed (jupyter-events asks for it): about 1.4 s of every grader
# process, for the "iri" string formats that no notebook or gradebook schema uses. Without it, jsonschema
# simply does not check those formats (python-jsonschema/jsonschema#1428).
sys.modules.setdefault("rfc3987_syntax", None)
