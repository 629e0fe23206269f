"""Batch breakers of the TA command line: one student's files must never make ``collect``,
``export`` or ``feedback`` die, hang or stop the batch. Each test builds the hostile input in
tmp_path (FIFOs, symbolic links, archive entries with path tricks, names that are not UTF-8,
spreadsheet formulas, odd ANSI escapes, a million cells) and checks that it is skipped or refused
with a reason while everyone else is still processed. Every blocking call runs under a deadline
(or in a subprocess with a timeout and a memory cap), so a regression fails instead of hanging."""

from __future__ import annotations

import contextlib
import copy
import csv
import json
import os
import resource
import signal
import stat
import subprocess
import time
import warnings
import zipfile
from pathlib import Path

import pytest

from conftest import SOLUTIONS
from fixtures.hostile import grader_command
from grader import ROOT

STEM = "task1_infonce"
NOTEBOOK = json.dumps({"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}).encode()


class DeadlinePassed(BaseException):
    """A BaseException, so that the grader's own ``except Exception`` cannot swallow it."""


@contextlib.contextmanager
def deadline(seconds: float):
    """Raise DeadlinePassed in the test if the block runs longer than ``seconds`` (SIGALRM also
    interrupts a blocking open() of a FIFO)."""
    def expire(signum, frame):
        raise DeadlinePassed(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _course(tmp_path: Path):
    from grader.course import Course

    return Course(grading=tmp_path / "grading", source=SOLUTIONS)


def _limit_memory():  # a regression that reads /dev/zero dies of MemoryError instead of eating the machine
    resource.setrlimit(resource.RLIMIT_AS, (3 * 1024 ** 3, 3 * 1024 ** 3))


def _cli(grading: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    from grader.course import nbgrader_env

    cmd = grader_command(grading, SOLUTIONS, *args)
    try:
        return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=nbgrader_env(),
                              preexec_fn=_limit_memory)
    except subprocess.TimeoutExpired:
        pytest.fail(f"python -m grader {' '.join(args)} hung for {timeout} s")


def _read_csv(path: Path) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


# ----------------------------------------------------------------------------- collect + export (CLI)
def test_collect_and_export_skip_links_fifos_and_odd_names_without_stopping(tmp_path):
    inbox, grading = tmp_path / "inbox", tmp_path / "grading"
    (inbox / "alice" / "ex01").mkdir(parents=True)
    (inbox / "alice" / "ex01" / f"{STEM}.ipynb").write_bytes(NOTEBOOK)
    os.mkfifo(inbox / f"bob__{STEM}.ipynb")                                   # loose FIFO
    (inbox / "carol").mkdir()
    os.mkfifo(inbox / "carol" / f"{STEM}.ipynb")                              # FIFO in a folder: hung collect
    (inbox / "dave").mkdir()
    os.symlink("/dev/zero", inbox / "dave" / f"{STEM}.ipynb")                 # MemoryError
    (inbox / "eve").mkdir()
    os.symlink(inbox / "alice" / "ex01" / f"{STEM}.ipynb", inbox / "eve" / f"{STEM}.ipynb")  # someone else's
    os.symlink(SOLUTIONS, inbox / "frank")                                    # into solutions/
    os.symlink(inbox / "alice" / "ex01" / f"{STEM}.ipynb", inbox / f"gina__{STEM}.ipynb")
    os.symlink("/dev/zero", inbox / "hank.zip")
    os.mkfifo(inbox / "ivan.zip")
    os.mkdir(os.fsencode(inbox) + b"/caf\xe9")                              # not UTF-8
    (inbox / "zoe" / "w\udcffrk").mkdir(parents=True)                        # last student, odd subfolder
    (inbox / "zoe" / "w\udcffrk" / f"{STEM}.ipynb").write_bytes(NOTEBOOK)

    proc = _cli(grading, "collect", str(inbox))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert "caf\\xe9" in proc.stdout and "not a usable student id" in proc.stdout
    for student in ("alice", "zoe"):
        assert (grading / "submitted" / student / "ex01" / f"{STEM}.ipynb").read_bytes() == NOTEBOOK
    why = {"bob": "not a regular file", "carol": "not a regular file", "dave": "symbolic link",
           "eve": "symbolic link", "frank": "symbolic link", "gina": "symbolic link", "hank": "symbolic link",
           "ivan": "not a regular file"}
    for student, reason in why.items():
        report = json.loads((grading / "collect" / f"{student}.json").read_text())
        assert report["unreadable"] and not report["notebooks"], (student, report)
        assert reason in "; ".join(report["problems"]), (student, report["problems"])
        assert not list((grading / "submitted" / student).rglob("*.ipynb")), student
    assert not (grading / "submitted" / "frank" / "ex01" / "source").exists()

    proc = _cli(grading, "export")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    rows = {r["student_id"]: r for r in _read_csv(grading / "grades.csv")}
    assert set(rows) == {"alice", "zoe", *why}
    assert rows["zoe"]["status"] == "not graded" and rows["bob"]["status"] == "unreadable"
    assert "symbolic link" in rows["frank"]["reason"]


# ----------------------------------------------------------------------------- collect (in-process)
def _zip_entry(zf: zipfile.ZipFile, name: str, data: bytes, mode: int) -> None:
    info = zipfile.ZipInfo(name, date_time=(2024, 1, 1, 0, 0, 0))
    info.create_system = 3  # unix: the mode bits below are meaningful
    info.external_attr = mode << 16
    zf.writestr(info, data)


def test_collect_skips_archive_links_path_tricks_and_bombs(tmp_path):
    from grader.collect import collect
    from grader.submissions import MAX_NOTEBOOK_BYTES

    inbox = tmp_path / "inbox"
    inbox.mkdir()
    with zipfile.ZipFile(inbox / "kim.zip", "w", zipfile.ZIP_DEFLATED) as zf:
        _zip_entry(zf, f"ex01/{STEM}.ipynb", b"../../solutions/ex01/task1_infonce.ipynb", stat.S_IFLNK | 0o777)
        _zip_entry(zf, f"fifo/{STEM}.ipynb", b"", stat.S_IFIFO | 0o644)
        _zip_entry(zf, f"/etc/{STEM}.ipynb", NOTEBOOK, stat.S_IFREG | 0o644)
        _zip_entry(zf, f"../../{STEM}.ipynb", NOTEBOOK, stat.S_IFREG | 0o644)
        _zip_entry(zf, f"bomb/{STEM}.ipynb", bytes(MAX_NOTEBOOK_BYTES + 1), stat.S_IFREG | 0o644)
    with zipfile.ZipFile(inbox / "lee.zip", "w") as zf:
        _zip_entry(zf, f"../{STEM}.ipynb", b"not this one", stat.S_IFREG | 0o644)
        _zip_entry(zf, f"ex01/{STEM}.ipynb", NOTEBOOK, stat.S_IFREG | 0o644)
    course = _course(tmp_path)
    with deadline(60):
        results = {r.student: r for r in collect(course, inbox)}
    kim = results["kim"]
    text = "; ".join(kim.problems)
    assert not kim.notebooks and kim.unreadable, kim
    for why in ("symbolic link", "not a regular file", "an absolute path", "a path with '..'", "too large"):
        assert why in text, (why, text)
    assert not list((course.grading / "submitted" / "kim").rglob("*.ipynb"))
    assert results["lee"].notebooks == {STEM: f"lee.zip:ex01/{STEM}.ipynb"}
    assert (course.folder("submitted", "lee") / f"{STEM}.ipynb").read_bytes() == NOTEBOOK


def test_collect_refuses_student_ids_unsafe_as_folder_names(tmp_path):
    from grader.collect import collect

    inbox = tmp_path / "inbox"
    inbox.mkdir()
    bad = ["alice\n", ".sneaky", "a..b", "back\\slash", "bell\x07", "=cmd", "-rf"]
    for name in bad:
        (inbox / name).mkdir()
        (inbox / name / f"{STEM}.ipynb").write_bytes(NOTEBOOK)
    with zipfile.ZipFile(inbox / ".hidden.zip", "w") as zf:
        zf.writestr(f"{STEM}.ipynb", NOTEBOOK)
    (inbox / f"..__{STEM}.ipynb").write_bytes(NOTEBOOK)
    (inbox / "zoe").mkdir()
    (inbox / "zoe" / f"{STEM}.ipynb").write_bytes(NOTEBOOK)
    course = _course(tmp_path)
    with deadline(60):
        results = collect(course, inbox)
    refused = [r for r in results if "not a usable student id" in "; ".join(r.problems)]
    assert len(refused) == len(bad) + 2, [(r.student, r.problems) for r in results]
    assert all(r.unreadable and not r.notebooks and r.student.isprintable() for r in refused)
    assert sorted(p.name for p in (course.grading / "submitted").iterdir()) == ["zoe"]
    assert sorted(p.name for p in (course.grading / "collect").iterdir()) == ["zoe.json"]


# ----------------------------------------------------------------------------- export
def _write_reports(grading: Path) -> None:
    """collect/status reports as collect and autograde leave them, some with odd names."""
    (grading / "collect").mkdir(parents=True)
    (grading / "status").mkdir()
    (grading / "submitted" / "zoe").mkdir(parents=True)
    (grading / "collect" / "alice.json").write_text(json.dumps(
        {"unreadable": True, "notebooks": {}, "problems": ["skipped alice/caf\udce9/x.ipynb: a symbolic link"]}))
    with open(os.fsencode(grading / "collect") + b"/caf\xe9.json", "w") as f:  # not UTF-8
        f.write(json.dumps({"unreadable": True}))
    os.mkdir(os.fsencode(grading / "submitted") + b"/b\xffd")
    (grading / "collect" / "zoe.json").write_text(json.dumps({"unreadable": False, "notebooks": {}, "problems": []}))


def test_export_survives_names_that_are_not_utf8(tmp_path):
    from grader.extras.export import export

    course = _course(tmp_path)
    _write_reports(course.grading)
    with deadline(60):
        out, rows = export(course)
    grades = {r["student_id"]: r for r in _read_csv(out)}
    assert set(grades) == {"alice", "caf\\xe9", "b\\xffd", "zoe"}, grades.keys()
    assert grades["b\\xffd"]["status"] == "unreadable"
    assert "caf\\xe9" in grades["alice"]["reason"]
    assert grades["caf\\xe9"]["status"] == "unreadable" and "not a usable student id" in grades["caf\\xe9"]["reason"]
    assert grades["zoe"]["status"] == "not graded"


def test_export_replaces_the_csv_atomically(tmp_path, monkeypatch):
    import grader.course
    from grader.extras.export import export

    course = _course(tmp_path)
    _write_reports(course.grading)
    out = course.grading / "grades.csv"
    out.write_text("previous export\n")
    safe = grader.course.spreadsheet_safe

    def fail_on_zoe(value):
        if value == "zoe":
            raise OSError("disk full")
        return safe(value)

    monkeypatch.setattr(grader.course, "spreadsheet_safe", fail_on_zoe)
    with pytest.raises(OSError, match="disk full"):
        export(course)
    assert out.read_text() == "previous export\n"
    assert sorted(p.name for p in course.grading.iterdir() if p.is_file()) == ["grades.csv"]


def test_export_escapes_spreadsheet_formulas(tmp_path):
    from grader.course import spreadsheet_safe
    from grader.extras.export import export

    course = _course(tmp_path)
    formulas = ['=HYPERLINK("evil.example","x")', "+1+1", "-2+3", "@SUM(A1)", "\tcmd", "\rcmd"]
    (course.grading / "collect").mkdir(parents=True)
    (course.grading / "status").mkdir()
    for name in formulas:
        (course.grading / "collect" / f"{name}.json").write_text(json.dumps({"unreadable": True}))
    (course.grading / "collect" / "alice.json").write_text(json.dumps({"unreadable": False}))
    (course.grading / "status" / "alice.json").write_text(json.dumps({"status": "graded", "reason": "=1+2"}))
    (course.grading / "collect" / "bob.json").write_text(json.dumps({"unreadable": True, "problems": ["-cmd|x"]}))
    (course.grading / "collect" / "carl.json").write_text(json.dumps({"unreadable": True, "problems": ["\tcmd"]}))
    out, _ = export(course)
    with open(out, newline="", encoding="utf-8") as f:
        cells = [cell for row in csv.reader(f) for cell in row]
    assert not [c for c in cells if c[:1] in ("=", "+", "-", "@", "\t", "\r")], cells
    grades = {r["student_id"]: r for r in _read_csv(out)}
    # control characters in an id are shown escaped (\\t), the rest get the quote
    assert set(grades) == {"'" + f for f in formulas[:4]} | {"\\tcmd", "\\rcmd", "alice", "bob", "carl"}
    assert grades["alice"]["reason"] == "'=1+2" and grades["bob"]["reason"] == "'-cmd|x"
    assert grades["carl"]["reason"] == "'\tcmd"
    assert grades["alice"]["score"] == "0.0"
    assert spreadsheet_safe(-1.5) == -1.5 and spreadsheet_safe("a=b") == "a=b"


# ----------------------------------------------------------------------------- read_notebook
@pytest.mark.parametrize("cell", [{"cell_type": "raw", "metadata": {}, "source": ""}, {}], ids=["raw", "empty"])
def test_read_notebook_refuses_a_million_cells_quickly(tmp_path, cell):
    from grader.submissions import MAX_NOTEBOOK_BYTES, Unreadable, read_notebook

    path = tmp_path / f"{STEM}.ipynb"
    cells = [cell] * 1_000_000
    path.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5},
                               separators=(",", ":")))
    assert path.stat().st_size < MAX_NOTEBOOK_BYTES
    started = time.monotonic()
    with deadline(10), pytest.raises(Unreadable, match="1000000 cells"):
        read_notebook(path)
    assert time.monotonic() - started < 10


def test_read_notebook_refuses_a_flood_of_outputs(tmp_path):
    from grader.submissions import Unreadable, read_notebook

    path = tmp_path / f"{STEM}.ipynb"
    output = {"output_type": "stream", "name": "stdout", "text": "x\n"}
    cell = {"cell_type": "code", "metadata": {}, "source": "", "execution_count": 1, "outputs": [output] * 100_000}
    path.write_text(json.dumps({"cells": [cell], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    with deadline(10), pytest.raises(Unreadable, match="100000 outputs"):
        read_notebook(path)


# ----------------------------------------------------------------------------- feedback
HOSTILE_ANSI = ["\x1b[38m", "\x1b[48m", "\x1b[1;38m", "\x1b[38;5m", "\x1b[38;2;1m", "\x1b[48;5;999m",
                "\x1b[38;5;-1m", "\x1b[" + "9" * 5000 + "m", "\x1b]0;title\x07", "\x1b[?25l", "\x1b\x1b[99m[38m"]


def _executed(release: dict, text: str) -> dict:
    """The release as if executed: ``text`` in a stream, a traceback and a result of the first code cell."""
    nb = copy.deepcopy(release)
    cell = next(c for c in nb["cells"] if c["cell_type"] == "code")
    cell["outputs"] = [
        {"output_type": "stream", "name": "stdout", "text": text},
        {"output_type": "execute_result", "execution_count": 1, "metadata": {}, "data": {"text/plain": text}},
        {"output_type": "error", "ename": "ValueError", "evalue": text, "traceback": [text, "\x1b[31mred\x1b[0m"]},
    ]
    return nb


def test_sanitised_outputs_render_whatever_escape_codes_they_hold():
    import nbformat
    from nbconvert import HTMLExporter

    from grader.pageclean import sanitise

    release = json.loads((SOLUTIONS / f"{STEM}.ipynb").read_text())
    nb = sanitise(_executed(release, "before " + "".join(HOSTILE_ANSI) + " after\n"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        html, _ = HTMLExporter().from_notebook_node(nbformat.from_dict(nb))
    assert "before" in html and "after" in html and "ansi-red-fg" in html   # plain colours survive


@pytest.fixture(scope="module")
def feedback_course(tmp_path_factory):
    """A Task-1 course with three 'autograded' students (no kernel: the release with outputs)."""
    from nbgrader.api import Gradebook

    from grader import ASSIGNMENT
    from fixtures import scratch_course
    from grader.course import COURSE_ID

    course, release, _ = scratch_course(tmp_path_factory.mktemp("feedback"), SOLUTIONS / f"{STEM}.ipynb")
    subs = {"alice": _executed(release, "plain output\n"),
            "bob": _executed(release, "".join(HOSTILE_ANSI) + "odd terminal output\n"),
            "carol": b"{ this is not json"}
    with warnings.catch_warnings(), Gradebook(course.db_url, COURSE_ID) as gb:
        warnings.simplefilter("ignore")
        for student in subs:
            gb.update_or_create_student(student)
            gb.add_submission(ASSIGNMENT, student)
    for student, nb in subs.items():
        data = nb if isinstance(nb, bytes) else json.dumps(nb).encode()
        for kind in ("submitted", "autograded"):
            course.folder(kind, student).mkdir(parents=True)
            (course.folder(kind, student) / f"{STEM}.ipynb").write_bytes(data)
    return course


def test_feedback_reports_a_broken_student_and_serves_the_others(feedback_course, monkeypatch):
    import grader.feedback

    with deadline(300):
        done, problems = grader.feedback.feedback(feedback_course)
    assert done == {"alice": [STEM], "bob": [STEM]}, problems
    assert set(problems) == {"carol"} and "could not be read" in problems["carol"][0]
    page = (feedback_course.folder("feedback", "bob") / f"{STEM}.html").read_text()
    assert "odd terminal output" in page

    # a notebook nbconvert cannot render (here: the ANSI clean-up switched off) fails only its student
    monkeypatch.setattr(grader.feedback, "sanitise", lambda nb: nb)
    with deadline(300):
        done, problems = grader.feedback.feedback(feedback_course, ["alice", "bob"])
    assert done == {"alice": [STEM]}, problems
    assert set(problems) == {"bob"} and "IndexError" in problems["bob"][0]
    assert not feedback_course.folder("feedback", "bob").exists()
