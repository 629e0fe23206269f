"""Fast checks of the grading pieces (no kernel, no nbgrader run): submission repair and tamper
detection, collect's handling of archives, feedback sanitising, the sandbox command line, the
comparison helpers under monkeypatching, and the mutant files."""

from __future__ import annotations

import copy
import json
import re
import zipfile
from pathlib import Path

import pytest

from conftest import RELEASE, SOLUTIONS
from grader.mutants import notebooks_with_mutants, student_copy, validate

STEM = "task1_infonce"


@pytest.fixture(scope="module")
def notebooks():
    release = json.loads((RELEASE / f"{STEM}.ipynb").read_text())
    solution = json.loads((SOLUTIONS / f"{STEM}.ipynb").read_text())
    return release, solution


def _gid(cell):
    return (cell.get("metadata", {}).get("nbgrader") or {}).get("grade_id")


def _save(nb, path: Path) -> Path:
    path.write_text(json.dumps(nb))
    return path


# ----------------------------------------------------------------------------- submissions
def test_prepare_clean_copy_has_no_findings(notebooks, tmp_path):
    from grader.submissions import prepare

    release, solution = notebooks
    prep = prepare(_save(student_copy(release, solution), tmp_path / "a.ipynb"), RELEASE / f"{STEM}.ipynb")
    assert prep.tampered == [] and prep.notes == []
    assert len(prep.notebook["cells"]) == len(release["cells"]), "nothing is appended to a submission"


def test_prepare_dedupes_and_flags_tampering(notebooks, tmp_path):
    from grader.submissions import prepare

    release, solution = notebooks
    nb = student_copy(release, solution)
    cells = nb["cells"]
    answer = next(c for c in cells if _gid(c) == "nce_loss")
    test = next(c for c in cells if _gid(c) == "test_info_nce_loss")
    cells.insert(cells.index(answer), copy.deepcopy(answer))          # duplicated answer cell
    cells.insert(cells.index(test), copy.deepcopy(test))              # duplicated test cell
    test["source"] = "pass"                                           # edited test (the later copy)
    cells.remove(next(c for c in cells if _gid(c) == "test_cosine_scores"))  # deleted test
    fake = copy.deepcopy(answer)
    fake["metadata"]["nbgrader"].update(grade_id="bonus_points", grade=True, points=100)
    cells.append(fake)                                                # invented graded cell
    prep = prepare(_save(nb, tmp_path / "b.ipynb"), RELEASE / f"{STEM}.ipynb")
    ids = [_gid(c) for c in prep.notebook["cells"] if _gid(c)]
    assert len(ids) == len(set(ids)), "grade_ids must be unique after preparing"
    assert ids.count("nce_loss") == 1 and ids.count("test_info_nce_loss") == 1
    text = "; ".join(prep.tampered + prep.notes)
    assert "answer cell nce_loss appears 2 times" in text
    assert "deleted test cell test_cosine_scores" in text
    assert "unknown graded cell 'bonus_points'" in text
    cell_ids = [c.get("id") for c in prep.notebook["cells"]]
    assert len(cell_ids) == len(set(cell_ids))


def _as_nbformat3(nb: dict) -> str:
    """``nb`` as an old Jupyter (nbformat 3: worksheets, ``input`` instead of ``source``, no cell ids) saved it."""
    import nbformat

    return nbformat.writes(nbformat.convert(nbformat.reads(json.dumps(nb), as_version=4), 3), version=3)


def test_prepare_upgrades_an_nbformat_3_notebook(notebooks, tmp_path):
    """A correct answer saved by an old Jupyter was `unreadable` (0 points): it is upgraded losslessly,
    the reasons say so, and grading sees the same cells as in the nbformat 4 copy."""
    import nbformat

    from grader.submissions import prepare

    release, solution = notebooks
    good = student_copy(release, solution)
    v3 = tmp_path / "v3.ipynb"
    v3.write_text(_as_nbformat3(good))
    raw = json.loads(v3.read_text())
    assert raw["nbformat"] == 3 and "cells" not in raw and raw["worksheets"][0]["cells"]
    prep = prepare(v3, RELEASE / f"{STEM}.ipynb")
    ref = prepare(_save(good, tmp_path / "v4.ipynb"), RELEASE / f"{STEM}.ipynb")

    def cells(nb):
        return [(c["cell_type"], "".join(c["source"]), (c.get("metadata") or {}).get("nbgrader"))
                for c in nb["cells"]]

    assert cells(prep.notebook) == cells(ref.notebook)
    assert prep.tampered == [] and any("nbformat 3" in n and "upgraded" in n for n in prep.notes), prep.notes
    assert prep.notebook["nbformat"] == 4
    released_ids = {_gid(c): c["id"] for c in release["cells"] if _gid(c)}
    assert all(c["id"] == released_ids[_gid(c)] for c in prep.notebook["cells"] if _gid(c))
    ids = [c["id"] for c in prep.notebook["cells"]]
    assert len(ids) == len(set(ids)) and ids == [c["id"] for c in prepare(v3, RELEASE / f"{STEM}.ipynb").notebook["cells"]]
    nbformat.validate(nbformat.from_dict(prep.notebook))


@pytest.mark.parametrize("content,why", [(b"{not json", "not a valid notebook"), (b"", "not a valid notebook"),
                                         (b'{"cells": 3, "nbformat": 4}', None)])
def test_prepare_rejects_broken_files(tmp_path, content, why):
    from grader.submissions import Unreadable, prepare

    path = tmp_path / "x.ipynb"
    path.write_bytes(content)
    with pytest.raises(Unreadable, match=why):
        prepare(path, RELEASE / f"{STEM}.ipynb")


# ----------------------------------------------------------------------------- collect
def test_collect_handles_zips_folders_and_loose_files(notebooks, tmp_path):
    from grader.collect import collect
    from grader.course import Course

    release, solution = notebooks
    data = json.dumps(student_copy(release, solution)).encode()
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    with zipfile.ZipFile(inbox / "s1.zip", "w") as zf:
        zf.writestr(f"../../escape/{STEM}.ipynb", data)                  # path tricks are skipped
        zf.writestr(f"old/{STEM} (1).ipynb", data)
        zf.writestr(f"ex01/{STEM}.ipynb", data)
    with zipfile.ZipFile(inbox / "s2.zip", "w") as zf:
        zf.writestr("notes.txt", b"no notebook here")
    (inbox / "s3.zip").write_bytes(b"garbage")
    (inbox / "s4" / "deep" / "er").mkdir(parents=True)
    (inbox / "s4" / "deep" / "er" / f"{STEM}-Copy1.ipynb").write_bytes(data)
    (inbox / f"s5__{STEM}.ipynb").write_bytes(data)
    (inbox / "bad id!.zip").write_bytes(data)
    course = Course(grading=tmp_path / "grading", source=SOLUTIONS)
    results = {r.student: r for r in collect(course, inbox)}
    assert STEM in results["s1"].notebooks and f"taken s1.zip:ex01/{STEM}.ipynb as {STEM}.ipynb" in results["s1"].files
    assert f"superseded s1.zip:old/{STEM} (1).ipynb by s1.zip:ex01/{STEM}.ipynb (the same content)" in results["s1"].files
    assert "a path with '..'" in "; ".join(results["s1"].problems)
    assert results["s2"].unreadable and "no assignment notebook" in results["s2"].problems[-1]
    assert results["s3"].unreadable and "cannot open s3.zip" in results["s3"].problems[0]
    assert STEM in results["s4"].notebooks and STEM in results["s5"].notebooks
    assert results["bad id!"].unreadable
    assert not (tmp_path / "escape").exists() and not (tmp_path / "grading" / "escape").exists()
    for s in ("s1", "s4", "s5"):
        assert (course.folder("submitted", s) / f"{STEM}.ipynb").read_bytes() == data


# ----------------------------------------------------------------------------- feedback
def test_sanitise_removes_hidden_tests_tracebacks_and_integrity_cell(notebooks):
    from grader.pageclean import PLACEHOLDER, sanitise

    _, solution = notebooks
    nb = copy.deepcopy(solution)
    test = next(c for c in nb["cells"] if _gid(c) == "test_info_nce_loss")
    # the notebooks hold no hidden tests any more (the judge's cases live in grader/checks/); an old
    # source that still has a block must still be scrubbed
    test["source"] = "".join(test["source"]) + "\n### BEGIN HIDDEN TESTS\ncheck_secret(info_nce_loss)\n### END HIDDEN TESTS"
    test["outputs"] = [{"output_type": "error", "ename": "AssertionError", "evalue": "InfoNCE is off",
                        "traceback": ["File /repo/grader/checks/task1_infonce.py:60", "_ref_info_nce(scores)"]}]
    nb["cells"].append({"cell_type": "code", "metadata": {"tags": ["las-integrity"]}, "outputs": [], "source": "x"})
    out = sanitise(nb)
    text = json.dumps(out)
    assert PLACEHOLDER.strip() in text and "HIDDEN TESTS" not in text
    assert "_ref_info_nce" not in text and "InfoNCE is off" in text
    assert "las-integrity" not in text
    assert "check_secret" not in text


# ----------------------------------------------------------------------------- sandbox
def test_sandbox_binds_only_what_notebooks_need(tmp_path, monkeypatch):
    from grader import ROOT
    from grader.sandbox import describe, probe_prefix, session_prefix

    monkeypatch.setenv("SECRET_TOKEN", "hunter2")
    # one student's grading session: its own working folder writable, the judge's cases never bound
    cmd = session_prefix("bwrap", tmp_path, {"PATH": "/usr/bin"})
    bound = session_bound = [cmd[i + 2] for i, a in enumerate(cmd) if a in ("--ro-bind", "--bind")]
    assert cmd[cmd.index(str(tmp_path)) - 1] == "--bind" and str(ROOT / "grader" / "session.py") in bound
    for forbidden in ("solutions", "grading", "grader/mutants", "grader/checks", "grader/judge.py", "tests"):
        assert not any(p.startswith(str(ROOT / forbidden)) for p in bound), forbidden
    assert str(ROOT) not in bound, "the whole repository must not be visible"
    assert "--unshare-all" in cmd and "--clearenv" in cmd and "hunter2" not in " ".join(cmd)
    # the judge's probe harness sees the probes' API, never the cases, the references or a notebook's probes
    # (they come in the plan: grader/launch.py sealed_part)
    probe = probe_prefix("bwrap", tmp_path, {"PATH": "/usr/bin"})
    bound = [probe[i + 2] for i, a in enumerate(probe) if a in ("--ro-bind", "--bind")]
    assert str(ROOT / "grader" / "probes" / "__init__.py") in bound and str(ROOT / "grader" / "probe.py") in bound
    for forbidden in ("solutions", "grading", "grader/mutants", "grader/checks", "grader/judge.py", "tests",
                      "grader/probes/task1_infonce.py"):
        assert not any(p.startswith(str(ROOT / forbidden)) for p in bound), forbidden
        assert not any(p.startswith(str(ROOT / forbidden)) for p in session_bound), forbidden
    assert probe[-1] == "--" and "--size" in probe, "a size-capped /tmp"
    off = describe({"network": False, "filesystem": False, "memory": True, "bwrap": False, "overlay": False})
    assert "REACHABLE" in off and "NOT isolated" in off


def test_a_sandboxed_process_reads_the_machines_font_list_instead_of_scanning_the_fonts(tmp_path):
    """Every sandboxed process starts in an empty home: without the font list bound in, each one's first
    matplotlib import scanned the system's fonts again (0.1 to 0.3 CPU-seconds per session)."""
    import subprocess
    import sys

    from grader.judge import harness_env
    from grader.sandbox import matplotlib_font_list, probe_prefix, protections

    if not protections()["bwrap"]:
        pytest.skip("needs bubblewrap")
    fonts = matplotlib_font_list()
    assert fonts is not None and fonts.name.startswith("fontlist-v") and json.loads(fonts.read_text())["ttflist"]
    code = ("import logging; logging.basicConfig(level=logging.INFO); import matplotlib.font_manager as fm; "
            "print(len(fm.fontManager.ttflist))")
    out = subprocess.run([*probe_prefix("bwrap", tmp_path, harness_env(1)), sys.executable, "-c", code],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "generated new fontManager" not in out.stderr, "the sandboxed process scanned the fonts again"
    assert int(out.stdout.split()[-1]) == len(json.loads(fonts.read_text())["ttflist"])


# ----------------------------------------------------------------------------- mutants
@pytest.mark.parametrize("stem", notebooks_with_mutants())
def test_mutant_file_follows_the_format(stem):
    assert validate(stem) == []


def test_tiers_is_a_verb_of_the_command_line(capsys):
    """``python -m grader tiers`` prints what ``python -m grader.extras.tiers`` prints, with its exit code."""
    from grader.extras import tiers
    from grader.__main__ import main

    code = main(["tiers"])
    via_verb = capsys.readouterr().out
    assert code == tiers.main([]) and via_verb == capsys.readouterr().out
    assert "limits: core lines" in via_verb


def test_command_line_docstring_names_every_status():
    """The statuses ``python -m grader --help`` lists are the grader's (grader/results.py STATUS_ORDER)."""
    import grader.__main__ as cli
    from grader.results import STATUS_ORDER

    listed = cli.__doc__.split("Statuses", 1)[1].split("Every verb", 1)[0]
    listed = re.sub(r"\([^)]*\)", "", listed)   # the explanations in brackets
    named = [" ".join(part.split()).strip(":. ") for part in listed.split("|")]
    assert named == STATUS_ORDER, named


def _fake_release(calls: list):
    """A stand-in for grader.release.release_notebooks (nbgrader, seconds): copies the source notebooks as
    the release, records the assignment in the gradebook at ``db_url`` and appends the source to ``calls``."""
    import sqlite3

    def fake_release(src, dest, *, db_url, assignment="ex01"):
        calls.append(src)
        dest.mkdir(parents=True, exist_ok=True)
        for nb in Path(src).glob("*.ipynb"):
            (dest / nb.name).write_text(nb.read_text())
        Path(db_url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
        with sqlite3.connect(db_url.removeprefix("sqlite:///")) as db:
            db.execute("CREATE TABLE IF NOT EXISTS assignment (name TEXT)")
            db.execute("INSERT INTO assignment VALUES ('ex01')")
        return dest

    return fake_release


def test_the_release_is_generated_again_only_when_its_source_changes(tmp_path, monkeypatch):
    """Each CLI autograde, shard and formgrader click syncs the assignment; nbgrader's generate_assignment
    (about 15 s) runs only when the source notebooks or the release code changed."""
    import shutil

    from grader import course as course_mod

    source = tmp_path / "source"
    shutil.copytree(SOLUTIONS, source)
    course = course_mod.Course(grading=tmp_path / "grading", source=source)
    monkeypatch.setenv("LAS_RELEASE_CACHE", "off")   # this folder's own rule (the cache has a test of its own)
    calls = []
    monkeypatch.setattr(course_mod, "release_notebooks", _fake_release(calls))
    course_mod.sync_assignment(course)
    course_mod.sync_assignment(course)
    assert len(calls) == 1
    first = next(source.glob("*.ipynb"))
    first.write_text(first.read_text().replace("Task", "Tusk", 1))
    course_mod.sync_assignment(course)
    assert len(calls) == 2
    course.db_path.unlink()   # a lost gradebook: the assignment must be recorded again
    course_mod.sync_assignment(course)
    assert len(calls) == 3


def test_a_fresh_grading_folder_copies_the_release_synced_before(tmp_path, monkeypatch):
    """A fresh grading folder (a shard, a second class, a test's) whose source was synced before takes that
    release and gradebook from the release cache instead of running generate_assignment; an entry whose
    files were changed after it was stored is not used, and ``LAS_RELEASE_CACHE=off`` stores nothing."""
    import shutil
    import sqlite3

    from grader import course as course_mod

    source = tmp_path / "source"
    shutil.copytree(SOLUTIONS, source)
    cache = tmp_path / "cache"
    monkeypatch.setenv("LAS_RELEASE_CACHE", str(cache))
    calls = []

    def synced(name: str):
        course = course_mod.Course(grading=tmp_path / name, source=source)
        course_mod.sync_assignment(course)
        with sqlite3.connect(course.db_path) as db:
            rows = db.execute("SELECT name FROM assignment").fetchall()
        return course, {p.name: p.read_text() for p in course.release.glob("*.ipynb")}, rows

    monkeypatch.setattr(course_mod, "release_notebooks", _fake_release(calls))
    _, first, rows = synced("a")
    assert len(calls) == 1 and rows == [("ex01",)] and len(list(cache.iterdir())) == 1
    _, second, rows = synced("b")
    assert len(calls) == 1, "the second fresh folder ran generate_assignment again"
    assert second == first and rows == [("ex01",)]
    (entry,) = cache.iterdir()
    victim = next((entry / "release").glob("*.ipynb"))
    victim.write_text(victim.read_text().replace("Task", "Tusk", 1))   # changed after it was stored
    _, third, _ = synced("c")
    assert len(calls) == 2 and third == first
    synced("e")   # "c" stored a sound entry in its place
    assert len(calls) == 2
    monkeypatch.setenv("LAS_RELEASE_CACHE", "off")
    shutil.rmtree(cache)
    synced("d")
    assert len(calls) == 3 and not cache.exists()


def test_a_deleted_test_cell_comes_back_in_its_place_when_graded_and_on_the_feedback_page(tmp_path):
    """One release view (grader.submissions.release_view) serves grading and the page of a notebook that
    never ran: a test cell the student deleted is back right after the nearest graded cell before it in
    the release, locked cells as released, on both paths."""
    from grader.course import Course
    from grader.feedback import not_run_notebook
    from grader.submissions import release_view
    from utils.notebook_cells import grade_id, nbgrader_meta

    stem = "task1_infonce"
    release = json.loads((RELEASE / f"{stem}.ipynb").read_text())
    gids = [grade_id(c) for c in release["cells"] if grade_id(c)]
    tests = [g for g in gids if nbgrader_meta(next(c for c in release["cells"] if grade_id(c) == g)).get("locked")
             and nbgrader_meta(next(c for c in release["cells"] if grade_id(c) == g)).get("grade")]
    deleted = tests[len(tests) // 2]          # a test cell in the middle of the notebook
    before = gids[gids.index(deleted) - 1]
    submitted = copy.deepcopy(release)
    submitted["cells"] = [c for c in submitted["cells"] if grade_id(c) != deleted]
    edited = next(c for c in submitted["cells"] if grade_id(c) == tests[0])
    edited["source"] = "assert True  # the student's edit of a locked test"

    course = Course(grading=tmp_path / "grading", source=SOLUTIONS)
    course.release.mkdir(parents=True)
    (course.release / f"{stem}.ipynb").write_text(json.dumps(release))
    course.folder("submitted", "alice").mkdir(parents=True)
    (course.folder("submitted", "alice") / f"{stem}.ipynb").write_text(json.dumps(submitted))
    page = not_run_notebook(course, "alice", stem, {"status": "kernel died", "reports": {}})
    for nb in (release_view(submitted, release), page):
        order = [grade_id(c) for c in nb["cells"] if grade_id(c)]
        assert order == gids, "graded cells out of the release's order"
        assert order.index(deleted) == order.index(before) + 1
        restored = next(c for c in nb["cells"] if grade_id(c) == tests[0])
        assert "".join(restored["source"]) == "".join(next(c for c in release["cells"] if grade_id(c) == tests[0])["source"])
    assert page["cells"][0]["cell_type"] == "markdown" and "could not be run" in "".join(page["cells"][0]["source"])


def test_the_memory_cap_reaches_the_sandbox_as_one_limits_object(tmp_path):
    """Settings.mem_gb -> policy.session_policy -> one environment variable -> process.Limits.apply in
    the sandboxed process: a child that applies the session's Limits cannot allocate past the cap."""
    import os
    import subprocess
    import sys

    from grader import ROOT
    from grader.policy import Settings, session_policy
    from grader.launch import session_command
    from grader.process import LIMITS_ENV, Limits

    settings = Settings(mem_gb=0.25, sandbox="none")
    limits = session_policy(settings).limits
    assert limits.mem_bytes == 256 * 1024 ** 2 and Limits.from_env(limits.to_env()) == limits
    _, env = session_command(settings, tmp_path, 1)
    assert Limits.from_env(env) == limits, env.get(LIMITS_ENV)
    probe = ("import os\nfrom grader.process import Limits\nLimits.from_env().apply()\n"
             "try:\n    block = bytearray(512 * 1024 ** 2)\n    print('allocated')\n"
             "except MemoryError:\n    print('capped')\n")
    done = subprocess.run([sys.executable, "-c", probe], env={**os.environ, **limits.to_env()},
                          capture_output=True, text=True, timeout=120, cwd=str(ROOT))
    assert done.stdout.strip() == "capped", done.stdout + done.stderr


def test_batch_progress_says_each_notebook_student_and_time_left():
    """The TA's progress lines: each notebook, each student with the time so far and left, and the figures."""
    from types import SimpleNamespace

    from grader.progress import BatchProgress, minutes

    lines = []
    report = BatchProgress(lines.append, 2, workers=2)
    report.notebook_done("ann", SimpleNamespace(notebook="task1_infonce", status="graded", score=17, max_score=17,
                                                seconds=12.4))
    report.student_done("ann", {"status": "graded", "score": 17, "max_score": 17})
    report.student_done("bob", {"status": "review", "score": 3.5, "max_score": 17})
    figures = report.finish(skipped=1)
    assert lines[0] == "[1/2] ann task1_infonce: graded 17/17 (12 s)"
    assert lines[1].startswith("[1/2] ann: graded 17/17 | ") and "left" in lines[1]
    assert lines[2].startswith("[2/2] bob: review 3.5/17 | ") and lines[2].endswith("done")
    assert "graded 2 students" in lines[3] and "2 worker(s)" in lines[3] and "; 1 skipped" in lines[3]
    assert figures["graded"] == 2 and figures["skipped"] == 1 and figures["worker_seconds"] == 12.4
    assert (minutes(45), minutes(750), minutes(3.5 * 3600 + 1)) == ("45 s", "12.5 min", "3.5 h")


def test_a_session_imports_optional_libraries_only_for_notebooks_that_use_them():
    """transformers costs about 3 s of every session's start and pandas about 0.45 s: a session imports
    each only when one of its notebooks uses it (its code imports the library, or utils.lm), and then
    before any notebook, once. A Task-1 class imports neither."""
    from grader.session import OPTIONAL_IMPORTS, session_imports
    from utils.notebook_cells import cell_source

    code = {}
    for path in sorted(SOLUTIONS.glob("*.ipynb")):
        code[path.stem] = "\n".join(cell_source(c) for c in json.loads(path.read_text())["cells"]
                                    if c["cell_type"] == "code")
    assert session_imports([]) == session_imports(["task1_infonce"])
    for modules, users in OPTIONAL_IMPORTS:
        tops = sorted({m if m.startswith("utils.") else m.split(".")[0] for m in modules})
        pattern = re.compile(r"^\s*(from|import)\s+(" + "|".join(map(re.escape, tops)) + r")\b", re.M)
        uses = {stem: bool(pattern.search(source)) for stem, source in code.items()}
        assert sum(uses.values()) >= 1 and not all(uses.values()), (tops, uses)
        assert {stem for stem, used in uses.items() if used} == set(users), f"{tops}: used by {uses}, listed {users}"
        for stem in code:
            imported = session_imports([stem])
            assert (stem in users) == (set(modules) <= set(imported)), f"{stem}: imports {imported}"
            assert imported[:len(session_imports([]))] == session_imports([]), "the common imports come first"
    everything = session_imports(sorted(code))
    assert len(everything) == len(set(everything))
    assert all(set(modules) <= set(everything) for modules, _ in OPTIONAL_IMPORTS)


def test_grader_processes_import_jsonschema_without_its_iri_parsers():
    """grader/__init__.py keeps jsonschema from building rfc3987_syntax's parsers (about 1.4 s of every
    grader and nbgrader process the grader starts, grader.release.NBGRADER); nbformat still validates a
    notebook. Without the grader first, the parsers are built: the premise holds for this jsonschema."""
    import subprocess
    import sys

    from grader import ROOT
    from grader.release import NBGRADER

    check = ("import sys, nbformat; nbformat.validate(nbformat.read(sys.argv[1], 4)); "
             "print(sys.modules.get('rfc3987_syntax') is not None)")
    notebook = str(SOLUTIONS / "task1_infonce.ipynb")
    loaded = {first: subprocess.run([sys.executable, "-c", first + check, notebook], cwd=ROOT, capture_output=True,
                                    text=True).stdout.strip() for first in ("import grader; ", "")}
    assert loaded == {"import grader; ": "False", "": "True"}, loaded
    assert "import grader" in NBGRADER[-1]


def test_a_batch_computes_reference_values_only_for_the_notebooks_its_students_handed_in(tmp_path, monkeypatch):
    """The solution's reference values cost seconds per notebook: a batch computes them only for the notebooks
    at least one of its students submitted (a shard of students who skipped the bonus never runs the bonus's);
    a notebook nobody submitted is graded 0 without the judge."""
    from grader import autograde, judge
    from grader.course import Course
    from grader.results import Settings

    stems = sorted(p.stem for p in SOLUTIONS.glob("*.ipynb"))
    course = Course(grading=tmp_path / "grading", source=SOLUTIONS)
    course.release.mkdir(parents=True)
    for stem in stems:
        (course.release / f"{stem}.ipynb").write_text((RELEASE / f"{stem}.ipynb").read_text())
    handed_in = {"alice": ["task1_infonce", "bonus_masked_pretraining_bayes"], "bob": ["task1_infonce"], "carol": []}
    for student, notebooks in handed_in.items():
        course.folder("submitted", student).mkdir(parents=True)
        for stem in notebooks:
            (course.folder("submitted", student) / f"{stem}.ipynb").write_text("{}")
    computed = []
    monkeypatch.setattr(judge, "reference_records", lambda stem, *args, **kwargs: computed.append(stem) or {})

    def references(students):
        computed.clear()
        got = autograde.reference_values(course, course.handed_in(students, stems), Settings(workers=1), tmp_path,
                                         lambda line: None)
        assert sorted(got) == sorted(computed)
        return sorted(computed)

    assert references(["alice", "bob", "carol"]) == ["bonus_masked_pretraining_bayes", "task1_infonce"]
    assert references(["bob", "carol"]) == ["task1_infonce"]
    assert references(["carol"]) == references([]) == []


def test_a_worse_status_never_hides_what_the_audit_flagged():
    """A notebook whose kernel died (say, by a deliberate faulthandler crash) keeps its worse status, and the
    audit's findings still say, in so many words, that the code needs a review."""
    from grader.audit_step import audit_submission
    from grader.results import NotebookResult

    nb = {"cells": [{"cell_type": "code", "metadata": {}, "source": "import faulthandler\nfaulthandler._sigsegv()"}],
          "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    died = NotebookResult("mallory", STEM, status="kernel died")
    audit_submission(nb, STEM, died)
    assert died.status == "kernel died" and "ALSO FOR REVIEW" in died.reasons[-1] and "process control" in died.reasons[-1]
    fine = NotebookResult("mallory", STEM)
    audit_submission(nb, STEM, fine)
    assert fine.status == "review" and "ALSO FOR REVIEW" not in fine.reasons[-1]


def test_secrets_are_found_in_hex_and_judge_lines_in_base64():
    """A page that prints the case seeds in hex (a stack walk's frame locals) or the judge's source in base64
    is caught like one in plain text: the seeds are hidden, the judge line is found."""
    import base64

    from grader.pageclean import judge_lines, leaks_in
    from grader.seed import hide_secrets, secret_strings

    secrets = secret_strings(1234567, ["task1_infonce"])
    seed = max((s for s in secrets if s.isdigit()), key=len)
    page = f"<pre>seed {int(seed):x} and {int(seed):X} and 0x{int(seed):x}</pre>"
    shown = hide_secrets(page, secrets)
    assert f"{int(seed):x}" not in shown and f"{int(seed):X}" not in shown, shown
    line = judge_lines("task1_infonce")[0]
    encoded = base64.b64encode(("\n" + line + "\n").encode()).decode()
    assert leaks_in(f"<pre>{encoded}</pre>", [line]) == [line]
    assert leaks_in('<img src="data:image/png;base64,' + encoded + '">', [line]) == [], "an image's data is no text"
