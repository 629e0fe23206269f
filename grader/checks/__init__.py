"""The judge's cases, one module per notebook (``CASES``: named checks with their weights and the
requirement in the task text's words, and the task's own ``check_*`` comparators), compared outside the
sandbox by grader/judge.py with the coercers, factories and thresholds of grader/compare.py. Never
copied into the sandbox, the student bundle or a student's kernel."""
