"""What a TA sees while a batch grades: one line per notebook and per student, a time left, a bar.

``autograde`` reports through one :class:`BatchProgress`; the lines go to any ``say`` function (print by
default, the CLI's logger, or nothing in a benchmark), and on a terminal a tqdm bar counts the students
below them.
"""

from __future__ import annotations

import sys
import time

from tqdm.auto import tqdm


def minutes(seconds: float) -> str:
    """``seconds`` as the TA reads a duration: '45 s', '12.5 min', '3.2 h'."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.1f} min" if seconds < 5400 else f"{seconds / 3600:.1f} h"


class BatchProgress:
    """Progress of ``total`` students: ``say(line)`` for each message, ``student_done`` after each student
    (with the time left, from the mean time per student so far), ``finish`` for the closing line.
    ``bar`` adds a tqdm bar on a terminal's stderr; the lines are then written above it."""

    def __init__(self, say=print, total: int = 0, *, bar: bool = False, workers: int = 1):
        self._say, self.total, self.workers = say, total, workers
        self.started, self.done, self.worker_seconds = time.monotonic(), 0, 0.0
        self.bar = None
        if bar and total:
            self.bar = tqdm(total=total, unit="student", file=sys.stderr, disable=None, dynamic_ncols=True)

    def say(self, line: str) -> None:
        if self.bar is not None and not self.bar.disable:
            with self.bar.external_write_mode():
                self._say(line)
        else:
            self._say(line)

    def notebook_done(self, student: str, result) -> None:
        self.worker_seconds += result.seconds
        self.say(f"[{self.done + 1}/{self.total}] {student} {result.notebook}: {result.status} "
                 f"{result.score:g}/{result.max_score:g} ({result.seconds:.0f} s)")

    def student_done(self, student: str, status: dict) -> None:
        self.done += 1
        elapsed = time.monotonic() - self.started
        left = elapsed / self.done * (self.total - self.done)
        self.say(f"[{self.done}/{self.total}] {student}: {status['status']} {status['score']:g}/"
                 f"{status['max_score']:g} | {minutes(elapsed)} so far, "
                 + (f"about {minutes(left)} left" if self.done < self.total else "done"))
        if self.bar is not None:
            self.bar.update(1)

    def finish(self, skipped: int) -> dict:
        """The closing line; returns the run's figures (graded, skipped, seconds, worker_seconds)."""
        wall = time.monotonic() - self.started
        if self.total:
            self.say(f"graded {self.total} students in {minutes(wall)}: {60 * self.total / max(wall, 1e-9):.1f} "
                     f"students per minute with {self.workers} worker(s), {self.worker_seconds / self.total:.0f} "
                     f"worker-seconds per student" + (f"; {skipped} skipped" if skipped else ""))
        return dict(graded=self.total, skipped=skipped, seconds=wall, worker_seconds=self.worker_seconds)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
