"""Grader-only reference checks, imported inside hidden tests (students never see these)."""
