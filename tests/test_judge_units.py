"""Unit tests of the judge's parts: the evidence codec, the definitions filter, the harness's
isolation of one case from the next, and the comparators (fast; no nbgrader)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from grader import judge
from grader.compare import expect_raises, expect_same
from grader.evidence import EvidenceError, Opaque, Raised, TooLarge, decode, encode, raised
from utils.answer_loader import load, statements


# ----------------------------------------------------------------------------- evidence
@pytest.mark.parametrize("value", [
    None, True, 3, -2 ** 70, 0.1, float("nan"), float("inf"), "text",
    torch.tensor([1.5, -2.0]), torch.zeros(2, 3, dtype=torch.float64), torch.arange(6).reshape(2, 3),
    torch.tensor([1.0], dtype=torch.bfloat16), torch.tensor(True), np.arange(4.0), np.float32(2.5),
    [1, (2.0, "x")], {"a": torch.ones(2), 3: [None]},
])
def test_evidence_round_trips(value):
    back = decode(json.loads(json.dumps(encode(value))))
    if isinstance(value, torch.Tensor):
        assert isinstance(back, torch.Tensor) and back.dtype == value.dtype and back.shape == value.shape
        assert torch.equal(back, value)
    elif isinstance(value, (np.ndarray, np.generic)):
        assert np.array_equal(back, np.asarray(value)) and back.dtype == np.asarray(value).dtype
    elif isinstance(value, float) and value != value:
        assert back != back
    elif isinstance(value, dict):
        assert set(back) == set(value)
    else:
        assert back == value


def test_evidence_of_odd_values_is_inert():
    class Liar:
        def __eq__(self, other):
            return True

        def __repr__(self):
            raise RuntimeError("no")

    assert isinstance(decode(encode(Liar())), Opaque)
    sub = torch.zeros(3).as_subclass(type("Sub", (torch.Tensor,), {"__eq__": lambda s, o: True}))
    back = decode(encode(sub))
    assert type(back) is torch.Tensor and back.tolist() == [0.0, 0.0, 0.0]
    assert isinstance(decode(encode(torch.zeros(8_000_000))), TooLarge)
    deep = []
    for _ in range(40):
        deep = [deep]
    assert "toolarge" in json.dumps(encode(deep))
    err = decode(encode(raised(type("MyError", (ValueError,), {})("bad"))))
    assert isinstance(err, Raised) and err.is_a("ValueError") and err.type == "MyError"


@pytest.mark.parametrize("bad", [
    {"tensor": {"dtype": "float32", "shape": [3], "data": "AAAA"}},           # wrong byte count
    {"tensor": {"dtype": "object", "shape": [1], "data": ""}},
    {"pickle": "gASVAAAAAAAAAAB9lC4="},
    {"int": "1" * 400}, {"float": "1e5", "x": 1}, [1, 2], {"list": {"a": 1}},
])
def test_malformed_evidence_is_refused(bad):
    with pytest.raises(EvidenceError):
        decode(bad)


# ----------------------------------------------------------------------------- the loader
EVERYDAY = """import math
from functools import partial
ce = nn.CrossEntropyLoss()
lse = partial(torch.logsumexp, dim=1)
normalize = lambda x: F.normalize(x, dim=-1)
TABLE = {}
for i in range(3):
    TABLE[i] = i * i
N = 0
N += 1
if torch.cuda.is_available():
    def where():
        return "cuda"
else:
    def where():
        return "cpu"
bad = 1 / 0
print("hi")
%timeit where()
!ls
def f(x):
    return ce(x, torch.zeros(x.shape[0], dtype=torch.long)) + lse(x).sum() * 0 + TABLE[2] * 0 + N * 0
"""


def test_the_loader_runs_every_statement_as_the_student_ran_it():
    import torch
    import torch.nn.functional as F
    from torch import nn

    names = {"torch": torch, "nn": nn, "F": F, "__name__": "__main__"}
    report = load([{"id": "answer", "role": "answer", "source": EVERYDAY}], names)
    assert names["TABLE"] == {0: 0, 1: 1, 2: 4} and names["N"] == 1 and names["where"]() == "cpu"
    assert float(names["f"](torch.zeros(2, 3))) == pytest.approx(math.log(3))
    assert [e["line"] for e in report.not_run] == [17], report.not_run
    entry = report.not_run[0]
    assert entry["binds"] == ["bad"] and "ZeroDivisionError" in entry["why"] and entry["text"] == "bad = 1 / 0"


def test_statements_of_unparseable_and_foreign_cells():
    stmts, problem = statements("def f(:\n", "answer")
    assert stmts == [] and "does not parse" in problem and "line 1" in problem
    stmts, problem = statements("%%bash\nls\n", "answer")
    assert stmts == [] and "%%bash" in problem
    stmts, problem = statements("%%time\nx = 1\n", "answer")
    assert problem == "" and [s.binds for s in stmts] == [("x",)]


def test_a_hung_statement_is_skipped_and_named_and_the_rest_is_graded(tmp_path):
    """A top-level statement that swallows the interrupt is killed by the harness; a fresh loader
    goes on without it, the functions after it are graded, and a function that needs what it would
    have defined fails with a message naming its line."""
    release = json.loads((judge.ROOT / "notebooks" / "ex01" / "task1_infonce.ipynb").read_text())
    solution = json.loads((judge.ROOT / "solutions" / "ex01" / "task1_infonce.ipynb").read_text())
    from grader.mutants import student_copy

    nb = student_copy(release, solution)
    for cell in nb["cells"]:
        if (cell.get("metadata", {}).get("nbgrader") or {}).get("grade_id") == "info_nce_loss":
            cell["source"] = ("import time\nwhile True:\n    try:\n        time.sleep(1)\n    except BaseException:\n"
                              "        pass\nce = nn.CrossEntropyLoss()\n" + SLOW_TAIL)
    plan = {"stem": "task1_infonce", "seed": 3, "isolate": "case", "case_timeout": 10, "statement_seconds": 2,
            "load_seconds": 20, "budget": 60,
            "cases": {"s": ["info_nce_uniform", "nce_values"]}, "variants": {"s": judge.notebook_cells(release, nb)}}
    records, tail = judge.run_harness(plan, workdir=tmp_path)
    assert not judge.void_problem(records), tail
    cases, header = judge.by_case(records, "s")
    hung = [e for e in header["not_run"] if e["kind"] == "timeout"]
    assert [(e["line"], e["cell"]) for e in hung] == [(2, "info_nce_loss")], header["not_run"]
    assert header["restarts"] == 1
    assert cases["nce_values"]["status"] == "ok"   # the next cell's function is graded
    assert cases["info_nce_uniform"]["status"] == "ok"   # ce was defined after the hung loop


SLOW_TAIL = """
def info_nce_loss(scores, positive_index=0):
    return ce(scores, torch.as_tensor(positive_index).long().expand(scores.shape[0]))
"""


# ----------------------------------------------------------------------------- comparators
def test_same_and_raises():
    check = expect_same(rtol=1e-5, atol=1e-6)
    check(torch.tensor(1.0), torch.tensor(1.0))
    for got, why in [(torch.tensor(1.0, dtype=torch.float64), "dtype"), (torch.tensor([1.0]), "shape"),
                     (torch.tensor(1.1), "off"), (1.0, "torch.Tensor"), (Raised("ValueError", ("ValueError",), ""),
                                                                        "raised")]:
        with pytest.raises(AssertionError, match=why):
            check(got, torch.tensor(1.0))
    expect_same(numbers="any")(np.float64(2.0), torch.tensor(2.0, dtype=torch.float64))
    expect_same(numbers="any")(2, 2.0)
    with pytest.raises(AssertionError, match="not finite"):
        check(torch.tensor(float("nan")), torch.tensor(1.0))
    expect_raises("ValueError")(Raised("MyErr", ("MyErr", "ValueError", "Exception"), "x"), None)
    with pytest.raises(AssertionError, match="KeyError"):
        expect_raises("ValueError")(Raised("KeyError", ("KeyError", "LookupError"), ""), None)
    with pytest.raises(AssertionError, match="returned"):
        expect_raises("ValueError")(torch.tensor(1.0), None)


def test_feedback_messages_do_not_show_expected_values():
    check = expect_same(rtol=0, atol=1e-9)
    with pytest.raises(AssertionError) as info:
        check(torch.tensor([1.2345678]), torch.tensor([9.8765432]))
    assert "9.87" not in str(info.value) and "1.23" not in str(info.value)


def comparator_problem(stem: str, check) -> str | None:
    """Why ``check`` (a ``Case.check`` of grader/checks/<stem>.py) breaks the checks' naming rule, or None.

    The rule (grader/compare.py's docstring): after unwrapping functools.partial, a comparator is a function
    of grader.compare or of the stem's own checks module, named ``check_*``, or the ``check`` closure that a
    factory named ``expect_*`` returned. Lambdas, bare nouns and comparators borrowed from elsewhere fail."""
    import functools
    import re
    import types

    fn = check
    while isinstance(fn, functools.partial):
        fn = fn.func
    if not isinstance(fn, types.FunctionType):
        return f"{check!r} is not a function"
    home = ("grader.compare", f"grader.checks.{stem}")
    if fn.__module__ not in home:
        return f"{fn.__qualname__} comes from {fn.__module__}, not from {' or '.join(home)}"
    if fn.__name__.startswith("check_") and "<locals>" not in fn.__qualname__:
        return None
    if re.fullmatch(r"expect_\w+\.<locals>\.check", fn.__qualname__):
        return None
    return f"{fn.__module__}.{fn.__qualname__} is neither a check_* comparator nor made by an expect_* factory"


def _checks_stems() -> list[str]:
    from pathlib import Path

    import grader.checks
    return sorted(p.stem for p in Path(grader.checks.__file__).parent.glob("*.py") if not p.stem.startswith("_"))


@pytest.mark.parametrize("stem", _checks_stems())
def test_every_case_uses_a_comparator_of_the_one_dialect(stem):
    """One check dialect: every Case.check comes from grader/compare.py or is its module's check_* (or expect_* product)."""
    problems = [f"{case.probe}: {why}" for case in judge.load_cases(stem)
                if (why := comparator_problem(stem, case.check))]
    assert not problems, "\n".join(problems)


def test_the_dialect_rule_rejects_planted_comparators(monkeypatch):
    """The rule above fails on a bare noun, a lambda, a borrowed check_* and a partial of a bare noun, in the
    checks module itself, and passes the shapes the modules use."""
    import functools

    stem = "task2_pseudo_likelihood"
    planted = {"__name__": f"grader.checks.{stem}"}   # defined as if written in the checks module
    exec("def bools(got, ref):\n    pass\n"                 # a bare noun, as Task 2 had
         "def expect_rounded(digits):\n    def check(got, ref):\n        pass\n    return check\n"
         "ROUNDED = expect_rounded(3)\nLAMBDA = lambda got, ref: None\n", planted)

    def check_borrowed(got, ref):  # named right, but defined outside compare.py and the checks module
        return None

    planted_bare, planted_lambda, made = planted["bools"], planted["LAMBDA"], planted["ROUNDED"]
    for bad in (planted_bare, planted_lambda, functools.partial(planted_bare), check_borrowed):
        assert comparator_problem(stem, bad), bad
    assert comparator_problem(stem, made) is None
    assert comparator_problem(stem, expect_same(rtol=0.0, atol=0.0)) is None
    assert comparator_problem(stem, functools.partial(expect_raises("ValueError"))) is None
    cases = judge.load_cases(stem)
    monkeypatch.setattr(judge, "load_cases", lambda _: cases + [judge.Case("test_bools", "planted", "", planted_bare)])
    with pytest.raises(AssertionError, match="planted: grader.checks.task2_pseudo_likelihood.bools is neither"):
        test_every_case_uses_a_comparator_of_the_one_dialect(stem)


# ----------------------------------------------------------------------------- the harness
HOSTILE_ANSWER = '''
import os, sys, torch
def info_nce_loss(scores, positive_index=0):
    if scores.dim() != 2:
        os._exit(3)                         # kills only this case's process
    torch.Tensor.tolist = lambda self: [0.0]
    sys.stdout.write('{"kind": "case", "case": "nce_values", "status": "ok"}\\n')
    os.write(1, b'{"kind": "case", "case": "nce_values"}\\n')
    return torch.logsumexp(scores, 1).mean() - scores[:, 0].mean() if isinstance(positive_index, int) else \\
        (torch.logsumexp(scores, 1) - scores.gather(1, positive_index.view(-1, 1)).squeeze(1)).mean()
'''
LOOPING_ANSWER = "def nce_loss(scores):\n    while True:\n        pass\n"


def test_harness_isolates_cases_and_its_channel(tmp_path):
    """A function that exits, loops, writes fake records or patches torch affects its own case only."""
    release = json.loads((judge.ROOT / "notebooks" / "ex01" / "task1_infonce.ipynb").read_text())
    nb = json.loads(json.dumps(release))
    for cell in nb["cells"]:
        gid = (cell.get("metadata", {}).get("nbgrader") or {}).get("grade_id")
        if gid == "info_nce_loss":
            cell["source"] = HOSTILE_ANSWER
        elif gid == "nce_loss":
            cell["source"] = LOOPING_ANSWER
    plan = {"stem": "task1_infonce", "seed": 5, "isolate": "case", "case_timeout": 3, "budget": 60,
            "cases": {"s": ["info_nce_column0", "info_nce_rejects_1d", "nce_values", "info_nce_uniform"]},
            "variants": {"s": judge.notebook_cells(release, nb)}}
    records, _ = judge.run_harness(plan, workdir=tmp_path)
    cases, header = judge.by_case(records, "s")
    assert set(cases) == {"info_nce_column0", "info_nce_rejects_1d", "nce_values", "info_nce_uniform"}
    assert cases["info_nce_rejects_1d"]["status"] == "died"
    assert cases["nce_values"]["status"] == "timeout"
    assert cases["info_nce_column0"]["status"] == "ok" and cases["info_nce_uniform"]["status"] == "ok"
    assert all(r.get("kind") in ("case", "header", "done") and "variant" in r for r in records
               if r.get("kind") != "done"), "a fake record got through"


FORK_BOMB = '''
import os, time
def info_nce_loss(scores, positive_index=0):
    children = 0
    for _ in range(400):
        try:
            if os.fork() == 0:
                time.sleep(30)
                os._exit(0)
            children += 1
        except OSError:
            break
    return torch.tensor(float(children))
'''


def test_a_fork_bomb_stays_inside_its_pids_cgroup(tmp_path):
    """A case that forks hundreds of processes is stopped by the job's pids cgroup (where this
    machine lets the grader make one), and everything it left behind is killed with the case."""
    from grader.sandbox import join_cgroup, pids_cgroup, remove_cgroup

    cgroup = pids_cgroup("unit-test", limit=64)
    if cgroup is None:
        pytest.skip("no writable pids cgroup here (not root, or cgroup v2 only): RLIMIT_NPROC applies instead")
    release = json.loads((judge.ROOT / "notebooks" / "ex01" / "task1_infonce.ipynb").read_text())
    nb = json.loads(json.dumps(release))
    for cell in nb["cells"]:
        if (cell.get("metadata", {}).get("nbgrader") or {}).get("grade_id") == "info_nce_loss":
            cell["source"] = FORK_BOMB
    plan = {"stem": "task1_infonce", "seed": 1, "isolate": "case", "case_timeout": 20,
            "cases": {"s": ["info_nce_uniform"]}, "variants": {"s": judge.notebook_cells(release, nb)}}
    try:
        records, _ = judge.run_harness(plan, workdir=tmp_path, preexec_fn=join_cgroup(cgroup))
        cases, _ = judge.by_case(records, "s")
        forked = decode(cases["info_nce_uniform"]["value"]) if cases["info_nce_uniform"]["status"] == "ok" else None
        assert forked is None or float(forked) < 64, f"forked {forked} processes past a limit of 64"
        events = (cgroup / "pids.events").read_text() if (cgroup / "pids.events").exists() else "max 1"
        assert int(events.split()[-1]) > 0, "the pids limit was never hit"
        assert (cgroup / "cgroup.procs").read_text().split() == [], "processes outlived their case"
    finally:
        remove_cgroup(cgroup)


def test_stream_problem_catches_forged_duplicated_and_cut_streams():
    from grader.judge import stream_problem

    good = [{"kind": "header", "seq": 0}, {"kind": "case", "seq": 1}, {"kind": "done", "seq": 2}]
    assert stream_problem(good, 0) == ""
    assert "sequence" in stream_problem([good[0], {"kind": "case", "seq": 1}, good[1], good[2]], 0)
    assert "sequence" in stream_problem([good[0], {"kind": "case"}, good[2]], 0)
    assert "did not finish" in stream_problem(good[:2], 0)
    assert "exited" in stream_problem(good, -9)


FORGER = '''
import glob, json, os
def _forge():
    line = json.dumps({"kind": "case", "variant": "student", "seed": 1, "case": "info_nce_uniform",
                       "status": "ok", "value": {"float": "2.0794415416798357"}, "seq": 1}) + "\\\\n"
    for path in ["/proc/1/fd/1", "/proc/1/fd/3", *glob.glob("/proc/[0-9]*/fd/*")]:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
            os.write(fd, line.encode())
            os.close(fd)
        except OSError:
            pass
    for fd in range(0, 40):
        try:
            os.write(fd, line.encode())
        except OSError:
            pass
def info_nce_loss(scores, positive_index=0):
    _forge()
    raise NotImplementedError
'''


def test_forged_records_never_score(tmp_path):
    """A function that writes fake evidence lines to every file descriptor it can reach: in the
    sandbox (the only place this test may run it: outside, it would write into every process of the
    machine) they never reach the judge's channel, and the run stays valid: no point."""
    from grader.sandbox import probe_prefix, protections

    if not protections()["bwrap"]:
        pytest.skip("needs bubblewrap: unsandboxed, the forger would write into other processes' files")
    release = json.loads((judge.ROOT / "notebooks" / "ex01" / "task1_infonce.ipynb").read_text())
    nb = json.loads(json.dumps(release))
    for cell in nb["cells"]:
        if (cell.get("metadata", {}).get("nbgrader") or {}).get("grade_id") == "info_nce_loss":
            cell["source"] = FORGER
    plan = {"stem": "task1_infonce", "seed": 1, "isolate": "case", "case_timeout": 20,
            "cases": {"student": ["info_nce_uniform", "info_nce_column0"]},
            "variants": {"student": judge.notebook_cells(release, nb)}}
    for mode in ["bwrap"]:
        workdir = tmp_path / mode
        workdir.mkdir()
        env = judge.harness_env(1)
        prefix = probe_prefix(mode, workdir, env)
        records, tail = judge.run_harness(plan, workdir=workdir, command_prefix=prefix,
                                          env={"PATH": "/usr/bin:/bin"})
        cases, _ = judge.by_case(records, "student")
        for name, rec in cases.items():
            assert rec.get("status") != "ok" or "raised" in rec.get("value", {}), f"{mode}: forged {name}: {rec}"
        if mode == "bwrap":
            assert not judge.void_problem(records), f"the sandbox let a forged record through: {tail[-500:]}"


def test_exception_identity_is_decided_by_the_real_class():
    """A class of the student's named ValueError (even one whose metaclass rewrites its mro) is not
    Python's ValueError; a real subclass of ValueError is one."""
    class Meta(type):
        def mro(cls):
            return [cls, RuntimeError, Exception, BaseException, object]

    FakeValueError = Meta("ValueError", (RuntimeError,), {})
    fake = raised(FakeValueError("no"))
    assert not fake.is_a("ValueError") and fake.is_a("RuntimeError") and "your own" in fake.type

    class Plain(RuntimeError):
        pass

    Plain.__name__ = "ValueError"
    assert not raised(Plain("x")).is_a("ValueError")

    class ShapeError(ValueError):
        pass

    real = raised(ShapeError("bad shape"))
    assert real.is_a("ValueError") and real.type == "ShapeError"
    assert raised(ValueError("v")).type == "ValueError" and raised(ValueError("v")).is_a("ValueError", "Exception")
    back = decode(encode(real))
    assert back.is_a("ValueError")


def test_student_messages_are_scrubbed_of_paths_and_seeds():
    text = "failed at /tmp/las-autograde-x1/alice-task1/judge/plan.json with seed 1234567 " + "x" * 900
    out = judge.scrub(text, ("1234567",), 300)
    assert "/tmp/las-autograde" not in out and "1234567" not in out and len(out) <= 300
    assert ".../plan.json" in out


def test_cases_forked_after_multithreaded_top_level_torch_code_do_not_hang(tmp_path):
    """A student's top-level torch code that runs on several threads starts an OpenMP pool in the
    loader; a case forked from it must not hang on that pool (each forked process uses one thread)."""
    release = json.loads((judge.ROOT / "notebooks" / "ex01" / "task1_infonce.ipynb").read_text())
    solution = json.loads((judge.ROOT / "solutions" / "ex01" / "task1_infonce.ipynb").read_text())
    from grader.mutants import student_copy

    nb = student_copy(release, solution)
    for cell in nb["cells"]:
        if (cell.get("metadata", {}).get("nbgrader") or {}).get("grade_id") == "info_nce_loss":
            cell["source"] = ("torch.set_num_threads(2)\n_warm = (torch.randn(1500, 1500) @ torch.randn(1500, 1500)).sum()\n"
                              "_warm = torch.randn(4_000_000).exp().sum()\n" + "".join(cell["source"]))
    plan = {"stem": "task1_infonce", "seed": 1, "isolate": "case", "case_timeout": 15, "budget": 90,
            "cases": {"s": ["info_nce_uniform", "info_nce_column0"]}, "variants": {"s": judge.notebook_cells(release, nb)}}
    records, tail = judge.run_harness(plan, workdir=tmp_path, threads=2)
    cases, header = judge.by_case(records, "s")
    assert header["not_run"] == [], header["not_run"]
    assert {k: v["status"] for k, v in cases.items()} == {"info_nce_uniform": "ok", "info_nce_column0": "ok"}, tail


# ----------------------------------------------------------------------------- the reference cache on disk
def test_reference_records_persist_on_disk_and_miss_when_anything_changes(tmp_path, monkeypatch):
    """A resumed batch, another shard or formgrader's next Autograde click reads the solution's records
    from the grading folder instead of running the solution again; another seed, notebook or grader code
    misses. The cache file does not name the seed."""
    monkeypatch.delenv("LAS_REFERENCE_CACHE", raising=False)
    stem = "task1_infonce"
    SEED = 2 ** 61 + 12345   # 19 digits: a file name holding it would name the seed
    probes = {c.probe for c in judge.load_cases(stem)}
    calls = []

    def fake_harness(plan, **kwargs):
        calls.append(plan["runs"][0]["label"])
        recs = [{"kind": "case", "variant": "reference", "case": p, "status": "ok", "value": encode(1.0)}
                for p in probes]
        return recs + [{"kind": "done"}], ""

    monkeypatch.setattr(judge, "run_harness", fake_harness)
    release, solution = {"cells": [{"cell_type": "code", "source": "x = 1"}]}, {"cells": []}
    cache = tmp_path / "grading" / "cache"
    first = judge.reference_records(stem, release, solution, SEED, tmp_path, cache_dir=cache)
    judge._REFERENCE_CACHE.clear()   # a new process: only the disk remembers
    again = judge.reference_records(stem, release, solution, SEED, tmp_path, cache_dir=cache)
    assert again == first and len(calls) == 1
    files = list(cache.iterdir())
    assert len(files) == 1 and str(SEED) not in files[0].name
    judge._REFERENCE_CACHE.clear()
    judge.reference_records(stem, release, solution, SEED + 1, tmp_path, cache_dir=cache)   # another seed
    judge._REFERENCE_CACHE.clear()
    judge.reference_records(stem, {"cells": []}, solution, SEED, tmp_path, cache_dir=cache)   # another release
    judge._REFERENCE_CACHE.clear()
    monkeypatch.setattr(judge, "code_digest", lambda: "changed grader code")
    judge.reference_records(stem, release, solution, SEED, tmp_path, cache_dir=cache)
    assert len(calls) == 4
    judge._REFERENCE_CACHE.clear()
    monkeypatch.setenv("LAS_REFERENCE_CACHE", "off")
    judge.reference_records(stem, release, solution, SEED, tmp_path, cache_dir=cache)
    assert len(calls) == 5
    judge._REFERENCE_CACHE.clear()


def test_case_seeds_are_one_way_and_in_range():
    """The sandbox receives case seeds, never the batch seed; a case seed must not give the batch seed
    back (the old linear formula did: seed = (case_seed - crc) / 1000003 mod p)."""
    from grader.probe import case_seed

    seeds = [case_seed(s, c) for s in (0, 1, 2, 2 ** 61 + 5) for c in ("a", "b", "info_nce_uniform")]
    assert all(0 <= x < 2 ** 31 - 1 for x in seeds) and len(set(seeds)) == len(seeds)
    assert case_seed(7, "a") == case_seed(7, "a")
    # neighbouring batch seeds give unrelated case seeds (no linear structure to solve)
    diffs = {case_seed(s + 1, "a") - case_seed(s, "a") for s in range(50)}
    assert len(diffs) > 45
