"""Sandbox-side probes, one module per notebook: ``grader/probes/<stem>.py``.

A probe builds inputs from a seeded ``torch.Generator``, calls the student's functions through the
namespace ``ns`` and returns whatever they gave. Probes hold **no reference implementation and no
expected value**: they run inside the grading sandbox next to student code. The judge runs the same
probes on the solution (outside the sandbox) and compares the two (grader/checks/<stem>.py).
"""
