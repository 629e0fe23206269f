"""The judge's cases, one module per notebook (``CASES``: named checks with their weights and the
requirement in the task text's words), compared outside the sandbox by grader/judge.py. Never
copied into the sandbox, the student bundle or a student's kernel."""
