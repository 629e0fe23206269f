"""TA-side grading for the course pack. Run ``python -m grader --help`` from the repository root."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GRADER_DIR = Path(__file__).resolve().parent
ASSIGNMENT = "ex01"
