"""The judge's side of each notebook's cases, one module per notebook: the comparators the probes name
(grader/probes/<stem>.py declares each case on its probe) and ``CASES``, ``FUNCTIONS`` and ``MAIN`` derived
from them, compared outside the sandbox by grader/judge.py with the coercers, factories and thresholds of
grader/compare.py. Never copied into the sandbox, the student bundle or a student's kernel."""
