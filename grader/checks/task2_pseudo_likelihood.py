"""The judge's cases for Task 2 (pseudo-likelihood), compared outside the sandbox.

Each case is declared by its probe in grader/probes/task2_pseudo_likelihood.py (where it says, in the words of the
task text, what it checks); this module holds the comparators it names. Deterministic functions are compared with
the solution's value from the same probe (tolerances that accept float64 inside and batched against unbatched
forward passes); the randomised ones (``single_index_estimate``, ``bert_mask``) by their distribution: every value
is a possible one and the draws are uniform (a fixed position fails), the selection rate is q and the outcomes
80/10/10 within five standard errors in every quarter of the rows and of the columns (a rule applied in reading
order fails), and a second, differently seeded call draws afresh (a fixed pattern fails). Interface conventions are
"rule" cases with a small share (grader/cases.py RULE_CHECKS): generator hygiene (a seeded call is reproducible,
another seed gives other draws, the global random states of torch, NumPy and ``random`` are left alone), a dtype
kept, a 0-dim tensor accepted for a float, one sequence for a batch, untouched inputs; batching, one forward pass,
no_grad and the q edges are "property" cases: neither earns anything unless the function's main value cases pass
(grader/judge.py).

The independent float64 references (one masked copy or one prefix per forward pass) that
tests/test_task2_pseudo_likelihood.py checks the solution against are in tests/references/task2_pseudo_likelihood.py.
"""

from __future__ import annotations

import math

import torch

from grader.compare import (SIGMAS, as_dict, as_tensor, describe, expect_dtype_kept, expect_false, expect_raises,
                             expect_same, global_states_moved)
from grader.evidence import Raised
from grader.cases import declared_cases, function_tables
from grader.probes.task2_pseudo_likelihood import PROBES


# =============================================================================== comparators
def expect_python_floats(rtol: float = 1e-6):
    """A list of Python floats (a numpy float64 is one too) matching the solution's, or the same exception."""
    values = expect_same(rtol=rtol, atol=0.0)

    def check(got, ref) -> None:
        if not isinstance(got, list) or len(got) != len(ref):
            raise AssertionError(f"expected {len(ref)} results, but it {describe(got)}")
        for i, (g, r) in enumerate(zip(got, ref)):
            if isinstance(r, float):
                numpy_float = (getattr(g, "shape", None) == () and getattr(getattr(g, "dtype", None), "name", "")
                               == "float64" and not isinstance(g, torch.Tensor))
                if not (isinstance(g, float) or numpy_float):
                    raise AssertionError(f"call {i + 1}: expected a Python float, but it {describe(g)}")
                g = float(g)
            values(g, r, f"call {i + 1}")

    return check


def check_batched_passes(got, ref) -> None:
    """ceil(copies / batch_size) forward passes of at most batch_size copies (inputs from the reference run)."""
    sizes = as_dict(got).get("sizes")
    copies, batch_size = ref["copies"], ref["batch_size"]
    need = math.ceil(copies / batch_size)
    if not isinstance(sizes, list) or not sizes:
        raise AssertionError("no forward pass through the model was counted")
    if not all(isinstance(s, int) for s in sizes):
        raise AssertionError("the forward-pass counter on the model's input embedding was removed during the call, "
                             "so its passes cannot be counted: leave the model's hooks and modules as they are")
    if len(sizes) > need or max(sizes) > batch_size:
        raise AssertionError(f"{copies} masked copies with batch_size={batch_size} take {need} forward passes of at "
                             f"most {batch_size} copies; counted {len(sizes)} passes of sizes {sizes}")


def check_passes_per_call(got, ref) -> None:
    sizes = as_dict(got).get("sizes")
    calls = ref.get("calls", 1)
    if isinstance(sizes, list) and not all(isinstance(s, int) for s in sizes):
        raise AssertionError("the forward-pass counter on the model's input embedding was removed during the call, "
                             "so its passes cannot be counted: leave the model's hooks and modules as they are")
    if not isinstance(sizes, list) or len(sizes) != calls:
        n = len(sizes) if isinstance(sizes, list) else 0
        raise AssertionError(f"expected ONE forward pass per call; counted {n} over {calls} call(s)")


def _clusters(values: torch.Tensor, rtol: float, atol: float) -> torch.Tensor:
    """The distinct values of ``values`` (sorted), merging those within the tolerance."""
    v = values.double().sort().values
    keep = [0] + [i for i in range(1, len(v)) if float(v[i] - v[i - 1]) > atol + rtol * abs(float(v[i]))]
    return v[keep]


def _nearest(got: torch.Tensor, centres: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    dist = (got.double().unsqueeze(1) - centres.unsqueeze(0)).abs()
    d, idx = dist.min(1)
    return d, idx


_EST_RTOL, _EST_ATOL = 1e-4, 1e-3


def check_possible_estimates(got, ref) -> None:
    """float32 [num_samples]; every value is T * l_u for a scored position u (the values the solution takes)."""
    g = as_tensor(got, "result", tuple(ref.shape), torch.float32)
    if not bool(torch.isfinite(g).all()):
        raise AssertionError("some estimates are not finite")
    centres = _clusters(ref, _EST_RTOL, _EST_ATOL)
    d, _ = _nearest(g, centres)
    bad = d > _EST_ATOL + _EST_RTOL * g.double().abs()
    if bool(bad.any()):
        raise AssertionError(f"{int(bad.sum())} of {len(g)} estimates are not T * (-log p(x_u | x without u)) for "
                             f"any scored position u (T = the number of scored positions)")


def check_uniform_estimates(got, ref) -> None:
    """Every value is T * l_u for a scored position u, and the scored positions are drawn uniformly: each
    possible value is as frequent as in the solution's draws (two binomial proportions, five standard
    errors), so the mean is S(x). A fixed position, or one draw repeated, fails."""
    check_possible_estimates(got, ref)
    centres = _clusters(ref, _EST_RTOL, _EST_ATOL)
    _, gi = _nearest(got, centres)
    _, ri = _nearest(ref, centres)
    n_g, n_r = len(got), len(ref)
    fg = torch.bincount(gi, minlength=len(centres)).double() / n_g
    fr = torch.bincount(ri, minlength=len(centres)).double() / n_r
    p = (fg * n_g + fr * n_r) / (n_g + n_r)
    sd = (p * (1 - p) * (1 / n_g + 1 / n_r)).sqrt()
    z = (fg - fr).abs() / sd.clamp(min=1e-12)
    if bool((z > SIGMAS).any()):
        raise AssertionError(f"U is not uniform over the scored positions: the frequencies of the {len(centres)} "
                             f"positions are off by up to {float(z.max()):.1f} standard errors")


def check_reproducible_pair(got, ref) -> None:
    if not isinstance(got, list) or len(got) != 2:
        raise AssertionError(f"it {describe(got)}")
    a, b = got
    if isinstance(ref[0], torch.Tensor):
        as_tensor(a, "first call", ref[0].shape, ref[0].dtype)
        as_tensor(b, "second call", ref[0].shape, ref[0].dtype)
        same_ = torch.equal(a, b)
    else:  # a (masked, labels) pair
        same_ = all(isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor) and x.shape == y.shape
                    and torch.equal(x, y) for x, y in zip(a, b)) and len(a) == len(b) == len(ref[0])
    if not same_:
        raise AssertionError("two calls with generators seeded alike gave different results (draw everything "
                             "from the given generator, not from the global random state)")


def _tensors(x, where: str) -> list:
    """The tensors of one call's result (a tensor, or a tuple/list of tensors), in order."""
    if isinstance(x, Raised):
        raise AssertionError(f"{where}: it raised {x}")
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (list, tuple)) and x and all(isinstance(t, torch.Tensor) for t in x):
        return list(x)
    raise AssertionError(f"{where}: it {describe(x)}")


def _like_reference(got, ref, where: str) -> list:
    """The result's tensors, each of the reference's shape and dtype."""
    g, r = _tensors(got, where), _tensors(ref, where)
    if len(g) != len(r):
        raise AssertionError(f"{where}: {len(g)} results, expected {len(r)}")
    for i, (a, b) in enumerate(zip(g, r)):
        as_tensor(a, where if len(g) == 1 else f"{where}, result {i + 1}", b.shape, b.dtype)
    return g


def check_other_seeds_differ(got, ref) -> None:
    """Two calls with differently seeded generators (on inputs where a coincidence is astronomically
    unlikely) give different draws: the randomness comes from the generator, not from a fixed one."""
    if not isinstance(got, list) or len(got) != 2:
        raise AssertionError(f"expected 2 results, but it {describe(got)}")
    a, b = (_like_reference(g, r, f"call {i + 1}") for i, (g, r) in enumerate(zip(got, ref)))
    if all(torch.equal(x, y) for x, y in zip(a, b)):
        raise AssertionError("two generators seeded differently gave the same draws: draw from the given "
                             "`generator`, not from a generator of your own seeded with a fixed number")


def check_global_state_untouched(got, ref) -> None:
    """The call succeeded (a result of the reference's shape and dtype) and left the global random
    states of torch, NumPy and Python as they were: every draw came from the given generator."""
    moved = global_states_moved(got, ref, lambda g, r: _like_reference(g, r, "the call"))
    if moved:
        raise AssertionError(f"the call drew from {' and '.join(moved)}; draw every random number from the given "
                             "`generator`")


def check_bools(got, ref) -> None:
    """A Python bool per call, equal to the solution's (or the same kind of exception)."""
    if not isinstance(got, list) or len(got) != len(ref):
        raise AssertionError(f"expected {len(ref)} results, but it {describe(got)}")
    for i, (g, r) in enumerate(zip(got, ref)):
        if isinstance(r, Raised):
            if not isinstance(g, Raised) or not g.is_a(r.type):
                raise AssertionError(f"call {i + 1}: expected a {r.type}, but it {describe(g)}")
            continue
        if isinstance(g, Raised):
            raise AssertionError(f"call {i + 1}: it raised {g}")
        if type(g) is not bool:
            raise AssertionError(f"call {i + 1}: expected a Python bool, but it {describe(g)}")
        if g != r:
            raise AssertionError(f"call {i + 1}: answered {g}, which is wrong for these tables")


# ------------------------------------------------------------------------------ bert_mask
def _bert_output(got, ref, second: bool = False):
    """(ids, masked_ids, labels) as int64 (``second``: of the call with the other seed). The two large-batch
    probes ship int64 results as int16 (the values fit) to keep the evidence small; any other dtype is the
    student's and is reported."""
    g = as_dict(got)
    ids = ref["ids"].long()
    compact = ref["ids"].dtype == torch.int8
    out = []
    for key, name in (("masked", "masked_ids"), ("labels", "labels")):
        x = g.get(key + "2" if second else key)
        if compact and isinstance(x, torch.Tensor) and x.dtype == torch.int16:
            x = x.long()
        out.append(as_tensor(x, name + (" (second seed)" if second else ""), ids.shape, torch.long))
    return ids, out[0], out[1]


def _special(ids):
    return (ids == 0) | (ids == 1)


def _blocks(shape) -> list[tuple[str, torch.Tensor]]:
    """Where in the batch: each quarter of the rows and each quarter of the columns, as bool masks. A rule
    applied in reading order (the first rows or columns get one outcome, the last another) shows here."""
    rows, cols = shape
    out = []
    for k in range(4):
        r = torch.zeros(shape, dtype=torch.bool)
        r[k * rows // 4:(k + 1) * rows // 4] = True
        c = torch.zeros(shape, dtype=torch.bool)
        c[:, k * cols // 4:(k + 1) * cols // 4] = True
        out += [(f"rows {k * rows // 4}-{(k + 1) * rows // 4 - 1}", r), (f"columns {k * cols // 4}-{(k + 1) * cols // 4 - 1}", c)]
    return out


def _rate_off(count: int, total: int, p: float) -> float:
    """How many binomial standard errors ``count`` of ``total`` lies from ``total * p``."""
    sd = math.sqrt(max(total * p * (1 - p), 1e-12))
    return abs(count - total * p) / sd


def _check_labels(ids, masked, labels, where: str = "") -> torch.Tensor:
    special = _special(ids)
    selected = labels != -100
    if bool(selected[special].any()) or not torch.equal(masked[special], ids[special]):
        raise AssertionError(f"special tokens were selected or replaced{where}")
    if not torch.equal(labels[selected], ids[selected]):
        raise AssertionError(f"labels must hold the original token where selected and -100 elsewhere{where}")
    if not torch.equal(masked[~selected], ids[~selected]):
        raise AssertionError(f"a position that is not selected (label -100) was changed{where}")
    return selected


def check_bert_labels_and_specials(got, ref) -> None:
    """int64 of the input's shape; specials never selected nor replaced; labels = original id where
    selected, -100 elsewhere; unselected positions keep their token; selection rate q = 0.15 in every
    quarter of the rows and of the columns; a second seed selects independently (a fixed pattern fails)."""
    ids, masked, labels = _bert_output(got, ref)
    special = _special(ids)
    selected = _check_labels(ids, masked, labels)
    q = 0.15
    for where, block in [("the whole batch", torch.ones_like(special))] + _blocks(ids.shape):
        n, k = int((~special & block).sum()), int((selected & block).sum())
        if _rate_off(k, n, q) > SIGMAS:
            raise AssertionError(f"{where}: {k / n:.3f} of the non-special tokens were selected, expected q = {q} "
                                 f"(off by {_rate_off(k, n, q):.1f} standard errors)")
    ids, masked2, labels2 = _bert_output(got, ref, second=True)
    selected2 = _check_labels(ids, masked2, labels2, " (second seed)")
    n, both = int((~special).sum()), int((selected & selected2).sum())
    if _rate_off(both, n, q * q) > SIGMAS:
        raise AssertionError(f"two generators seeded differently selected {both / n:.3f} of the tokens in both calls; "
                             f"independent draws select q^2 = {q * q:.4f}: draw the selection from the given "
                             "`generator` (torch.rand(..., generator=generator) < q), not from a fixed pattern")


def check_bert_80_10_10(got, ref) -> None:
    """Selected tokens: [MASK] 80 %, a uniformly random token 10 %, unchanged 10 % (five standard errors),
    in the whole batch and in every quarter of its rows and of its columns, and for a second seed the
    outcome of each position is drawn afresh."""
    ids, masked, labels = _bert_output(got, ref)
    vocab, mask_id = 16, 15
    selected = (labels != -100) & ~_special(ids)
    k = int(selected.sum())
    if k < 1000:
        raise AssertionError(f"only {k} tokens were selected; expected about half of the non-special tokens (q = 0.5)")
    is_mask, unchanged = masked == mask_id, masked == ids
    rand = ~is_mask & ~unchanged
    rates = {"[MASK]": (is_mask, 0.8 + 0.1 / vocab), "unchanged": (unchanged, 0.1 + 0.1 / vocab),
             "random": (rand, 0.1 * (1 - 2 / vocab))}
    for where, block in [("", torch.ones_like(selected))] + _blocks(ids.shape):
        chosen = selected & block
        k_b = int(chosen.sum())
        for name, (hit, p) in rates.items():
            c = int((hit & chosen).sum())
            if _rate_off(c, k_b, p) > SIGMAS:
                raise AssertionError(
                    f"{name}: {c / k_b:.3f} of the selected tokens{' in ' + where if where else ''}, expected {p:.3f} "
                    f"(80/10/10 rule, drawn for each selected token independently of its place; off by "
                    f"{_rate_off(c, k_b, p):.1f} standard errors)")
    out, orig = masked[selected], ids[selected]
    counts = torch.bincount(out[rand[selected]], minlength=vocab).double()
    for tok in range(vocab):
        if tok == mask_id:
            continue
        eligible, p_tok = int((orig != tok).sum()), 0.1 / vocab
        sd = math.sqrt(eligible * p_tok * (1 - p_tok))
        if abs(counts[tok].item() - eligible * p_tok) > SIGMAS * sd + 1:
            raise AssertionError(f"the random replacements are not uniform over [0, vocab_size): one token is off by "
                                 f"{abs(counts[tok].item() - eligible * p_tok) / sd:.1f} standard errors")
    _, masked2, labels2 = _bert_output(got, ref, second=True)
    both = selected & (labels2 != -100)
    n_both = int(both.sum())
    if n_both > 100:  # among positions both seeds select, [MASK] twice with probability about 0.8^2
        twice = int((both & is_mask & (masked2 == mask_id)).sum())
        p = (0.8 + 0.1 / vocab) ** 2
        if _rate_off(twice, n_both, p) > SIGMAS:
            raise AssertionError(f"positions selected by two differently seeded calls got [MASK] in both {twice / n_both:.3f} "
                                 f"of the time, expected about {p:.3f}: draw the 80/10/10 outcome from the given "
                                 "`generator`, one uniform number per position")


def check_bert_q_edges(got, ref) -> None:
    g = as_dict(got)
    ids = ref["ids"]
    special = _special(ids)
    for key, want, what in (("q0", torch.zeros_like(special), "q=0 must select nothing"),
                            ("q1", ~special, "q=1 must select every non-special token")):
        pair = g.get(key)
        if not isinstance(pair, list) or len(pair) != 2:
            raise AssertionError(f"{what}: it {describe(pair)}")
        masked = as_tensor(pair[0], "masked_ids", ids.shape, torch.long)
        labels = as_tensor(pair[1], "labels", ids.shape, torch.long)
        if not torch.equal(labels != -100, want):
            raise AssertionError(what)
        if key == "q0" and not torch.equal(masked, ids):
            raise AssertionError("q=0 must leave the input unchanged")


def check_bert_one_sequence(got, ref) -> None:
    ids, masked, labels = _bert_output(got, ref)
    selected = labels != -100
    if bool(selected[_special(ids)].any()) or not torch.equal(labels[selected], ids[selected]) \
            or not torch.equal(masked[~selected], ids[~selected]):
        raise AssertionError("on one sequence [T], the labels or the kept tokens are wrong")


def check_unchanged_input(got, ref) -> None:
    if not isinstance(got, list) or len(got) != 2:
        raise AssertionError(f"it {describe(got)}")
    after = as_tensor(got[1], "input_ids")
    if after.shape != ref[0].shape or not torch.equal(after, ref[0]):
        raise AssertionError("input_ids was modified in place")


# =============================================================================== the cases
# mlm_loss's values only: the dtype kept is its rule (mlm_loss_float64), so a dtype slip costs that share alone.
LOSS = expect_same(rtol=1e-5, atol=1e-5, dtype=False)
TABLE = expect_same(rtol=1e-4, atol=1e-4)
PLL = expect_same(rtol=1e-4, atol=1e-3)
EXACT = expect_same(rtol=0.0, atol=0.0)

# What each comparator checks about the draws of a function that takes a generator
# (tests/test_judge_gates.py).
check_reproducible_pair.draws = ("same seed",)
check_other_seeds_differ.draws = ("other seed",)
check_global_state_untouched.draws = ("global state",)
# What each comparator of an interface rule checks (grader/cases.py RULE_CHECKS; tests/test_points_for_ideas.py).
check_unchanged_input.interface = "mutation"


# Comparators the probes name, besides those above.
DTYPE_KEPT = expect_dtype_kept(rtol64=1e-9)
NO_GRAPH = expect_false("the result requires grad: compute it under torch.no_grad()")
PYTHON_FLOATS = expect_python_floats()
RAISES_VALUE_ERROR = expect_raises("ValueError")

# Each case is declared by its probe (grader/probes/task2_pseudo_likelihood.py: @probe(cell, says, check, ...)), which
# names its comparator here: a case's weight is its share of its test cell's points.
CASES = declared_cases(PROBES, globals())

# What each function computes on ordinary inputs: the value cases that gate its other cases (grader/judge.py
# value_gates). Edge-case values (an -inf left out, positions in another order, the 80/10/10 split, zeros in
# the tables) stand alone: a failed value costs its own share.
FUNCTIONS, MAIN = function_tables(CASES)
