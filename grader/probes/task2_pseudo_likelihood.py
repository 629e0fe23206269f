"""Probes for Task 2 (pseudo-likelihood). Inputs only: the judge (grader/checks/task2_pseudo_likelihood.py)
compares with the solution's values from the same probes.

The models are tiny randomly initialised transformers built here from a seed drawn from ``gen`` (the
notebook's ``mlm_model``/``ar_model`` are top-level values of a given cell, which the harness does not run).
``initializer_range=0.5`` makes their conditionals far from uniform, so reading the wrong position or
forgetting the mask is off by whole nats. transformers is imported once, when the harness loads this
module, so every forked case starts with it in memory.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch
from transformers import BertConfig, BertForMaskedLM, GPTNeoXConfig, GPTNeoXForCausalLM

from grader.probes import attempt, probes, with_global_state

PROBES: dict = {}
probe = probes(PROBES)


# ------------------------------------------------------------------------------ fixtures
def _seed(gen: torch.Generator) -> int:
    return int(torch.randint(0, 2 ** 31 - 1, (1,), generator=gen))


def tiny_masked_lm(gen: torch.Generator, vocab_size: int = 37, hidden: int = 32, layers: int = 2):
    """(a random BertForMaskedLM in eval mode, its mask token id = vocab_size - 1)."""
    config = BertConfig(vocab_size=vocab_size, hidden_size=hidden, num_hidden_layers=layers,
                        num_attention_heads=2, intermediate_size=2 * hidden, max_position_embeddings=64,
                        initializer_range=0.5, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    seed = _seed(gen)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return BertForMaskedLM(config).eval(), vocab_size - 1


def tiny_causal_lm(gen: torch.Generator, vocab_size: int = 41, hidden: int = 32, layers: int = 2):
    """A random GPTNeoXForCausalLM (Pythia's class) in eval mode."""
    config = GPTNeoXConfig(vocab_size=vocab_size, hidden_size=hidden, num_hidden_layers=layers,
                           num_attention_heads=2, intermediate_size=2 * hidden, max_position_embeddings=64,
                           initializer_range=0.5, hidden_dropout=0.0, attention_dropout=0.0)
    seed = _seed(gen)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return GPTNeoXForCausalLM(config).eval()


COUNTER_REMOVED = "counter removed"   # the first of the counted sizes when the call removed the counter


@contextmanager
def count_forward_passes(model):
    """Yields a list that receives the batch size of every forward pass (hooked on the input embedding,
    so ``model(...)``, ``model.forward(...)`` and calls of the inner encoder all count)."""
    sizes: list[int] = []

    def hook(_module, inputs, _output):
        ids = inputs[0]
        sizes.append(int(ids.shape[0]) if ids.dim() > 1 else 1)

    embedding = model.get_input_embeddings()
    handle = embedding.register_forward_hook(hook)
    try:
        yield sizes
    finally:
        # a call that removed the counter (cleared the hooks, swapped the embedding) cannot be counted: say so,
        # so that the batching cases fail instead of seeing only the passes before the removal
        if handle.id not in embedding._forward_hooks or model.get_input_embeddings() is not embedding:
            sizes.insert(0, COUNTER_REMOVED)
        handle.remove()


def _table(gen: torch.Generator, t: int, v: int, dtype=torch.float32) -> torch.Tensor:
    return torch.log_softmax(2.0 * torch.randn(t, v, generator=gen, dtype=torch.float64), dim=-1).to(dtype)


def _size(gen: torch.Generator, low: int, high: int) -> int:
    return int(torch.randint(low, high + 1, (1,), generator=gen))


def _sequence(gen: torch.Generator, mask_id: int) -> torch.Tensor:
    return torch.randint(0, mask_id, (_size(gen, 9, 15),), generator=gen)


def _some_positions(gen: torch.Generator, t: int, k: int) -> torch.Tensor:
    return torch.randperm(t, generator=gen)[:k]


# ------------------------------------------------------------------------------ mlm_loss
# The shape and range checks of mlm_loss, masked_copies, causal_log_probs and the two perplexities are given
# code in their answer cells: no case grades them. A case that is not kind="value" scores only when the
# MAIN value cases of its function (MAIN below) pass; an edge-case value stands alone.
# mlm_loss: the test cell's 2 points, shared by the weights below
@probe("test_mlm_loss", "-sum over t in M of log_probs[t, x_t], a 0-dim tensor for a [T] mask", "LOSS", weight=2,
       main=True)
def mlm_loss_one_mask(ns, gen):
    out = []
    for t, v in [(1, 3), (_size(gen, 5, 9), 5), (_size(gen, 15, 30), 50)]:
        lp, x = _table(gen, t, v), torch.randint(v, (t,), generator=gen)
        mask = torch.rand(t, generator=gen) < 0.5
        mask[0] = True
        out.append(attempt(ns.mlm_loss, lp, x, mask))
    return out


@probe("test_mlm_loss", "K masks [K, T] give [K] losses, one per mask (0 for an empty mask)", "LOSS", weight=2,
       main=True)
def mlm_loss_many_masks(ns, gen):
    t, v, k = _size(gen, 10, 25), 30, _size(gen, 3, 12)
    lp, x = _table(gen, t, v), torch.randint(v, (t,), generator=gen)
    masks = torch.rand(k, t, generator=gen) < torch.rand(k, 1, generator=gen)
    masks[0] = False  # an empty mask
    masks[1] = True   # every position: S(x)
    return ns.mlm_loss(lp, x, masks)


@probe("test_mlm_loss", "keeps the dtype of log_probs (float64 in, float64 out with its precision; float32 in, "
       "float32 out)", "DTYPE_KEPT", weight=0.5, kind="rule", checks="dtype")
def mlm_loss_float64(ns, gen):
    """float64 log-probabilities (one mask and three), then float32 ones: each loss in its table's dtype."""
    t, v = _size(gen, 6, 12), 7
    lp, x = _table(gen, t, v, torch.float64), torch.randint(v, (t,), generator=gen)
    return [ns.mlm_loss(lp, x, torch.rand(t, generator=gen) < 0.5),
            ns.mlm_loss(lp, x, torch.rand(3, t, generator=gen) < 0.5),
            ns.mlm_loss(lp.float(), x, torch.rand(t, generator=gen) < 0.5)]


@probe("test_mlm_loss", "an unselected position contributes exactly zero, even at -inf", "LOSS")
def mlm_loss_unselected_inf(ns, gen):
    t, v = _size(gen, 6, 12), 5
    lp, x = _table(gen, t, v), torch.randint(v, (t,), generator=gen)
    mask = torch.rand(t, generator=gen) < 0.5
    mask[0], mask[1] = True, False
    lp[~mask, :] = float("-inf")  # unselected rows: impossible tokens
    masks = mask.unsqueeze(0).repeat(2, 1)
    return [ns.mlm_loss(lp, x, mask), ns.mlm_loss(lp, x, masks)]


# ------------------------------------------------------------------------------ masked_copies
# masked_copies: the test cell's 1 point, shared by the weights below
@probe("test_masked_copies", "row k is input_ids with positions[k] set to the mask id, repeats allowed (int64 [P, T])",
       "EXACT", weight=2, main=True)
def masked_copies_values(ns, gen):
    t = _size(gen, 6, 20)
    ids = torch.randint(5, 100, (t,), generator=gen)
    positions = torch.randint(0, t, (_size(gen, 3, 8),), generator=gen)
    positions[-1] = positions[0]  # a repeat
    return ns.masked_copies(ids, positions, 3)


@probe("test_masked_copies", "copy k replaces positions[k] by the mask token, for positions in any order (a "
       "permutation)", "EXACT")
def masked_copies_permutation(ns, gen):
    t = _size(gen, 6, 20)
    ids = torch.randint(5, 100, (t,), generator=gen)
    return ns.masked_copies(ids, torch.randperm(t, generator=gen), 101)


@probe("test_masked_copies", "input_ids is left unchanged", "EXACT", weight=0.5, kind="rule", checks="mutation")
def masked_copies_input_unchanged(ns, gen):
    t = _size(gen, 6, 20)
    ids = torch.randint(5, 100, (t,), generator=gen)
    ns.masked_copies(ids, torch.randperm(t, generator=gen)[:4], 1)
    return ids


# ------------------------------------------------------------------------------ conditional_log_probs
# conditional_log_probs: the test cell's 3 points, shared by the weights below
@probe("test_conditional_log_probs", "row t is the log-softmax at position t of the copy with t masked (float32 [T, "
       "V])", "TABLE", weight=2, main=True)
def conditional_all_positions(ns, gen):
    model, mask_id = tiny_masked_lm(gen)
    ids = _sequence(gen, mask_id)
    return ns.conditional_log_probs(model, ids, mask_id, batch_size=_size(gen, 3, 6))


@probe("test_conditional_log_probs", "with positions given, row k belongs to positions[k]", "TABLE", weight=2)
def conditional_given_positions(ns, gen):
    model, mask_id = tiny_masked_lm(gen)
    ids = _sequence(gen, mask_id)
    positions = _some_positions(gen, len(ids), 5)
    positions[-1] = positions[0]  # a repeat
    return ns.conditional_log_probs(model, ids, mask_id, positions=positions, batch_size=2)


@probe("test_conditional_log_probs", "copies evaluated in batches of batch_size (one forward pass per batch)",
       "check_batched_passes", kind="property")
def conditional_batches(ns, gen):
    model, mask_id = tiny_masked_lm(gen)
    ids = _sequence(gen, mask_id)
    batch_size = _size(gen, 3, 5)
    with count_forward_passes(model) as sizes:
        ns.conditional_log_probs(model, ids, mask_id, batch_size=batch_size)
    return {"sizes": sizes, "copies": len(ids), "batch_size": batch_size}


@probe("test_conditional_log_probs", "computed under torch.no_grad() (no autograd graph)", "NO_GRAPH", kind="property")
def conditional_no_grad(ns, gen):
    model, mask_id = tiny_masked_lm(gen)
    ids = _sequence(gen, mask_id)
    return bool(ns.conditional_log_probs(model, ids, mask_id, batch_size=8).requires_grad)


# ------------------------------------------------------------------------------ pseudo_log_likelihood
# pseudo_log_likelihood / pseudo_perplexity: the test cell's 2 points, shared by the weights below
@probe("test_pseudo_log_likelihood", "PLL = sum of log p(x_t | x without t) over all positions (a 0-dim float32 "
       "tensor)", "PLL", weight=2, main=True)
def pll_all_positions(ns, gen):
    model, mask_id = tiny_masked_lm(gen)
    ids = _sequence(gen, mask_id)
    return ns.pseudo_log_likelihood(model, ids, mask_id, batch_size=4)


@probe("test_pseudo_log_likelihood", "with positions given, the sum runs over them only", "PLL")
def pll_given_positions(ns, gen):
    model, mask_id = tiny_masked_lm(gen)
    ids = _sequence(gen, mask_id)
    positions = _some_positions(gen, len(ids), 4)
    return ns.pseudo_log_likelihood(model, ids, mask_id, positions=positions, batch_size=16)


@probe("test_pseudo_log_likelihood", "masked copies evaluated in batches of batch_size", "check_batched_passes",
       kind="property")
def pll_batches(ns, gen):
    model, mask_id = tiny_masked_lm(gen)
    ids = _sequence(gen, mask_id)
    batch_size = _size(gen, 3, 5)
    with count_forward_passes(model) as sizes:
        ns.pseudo_log_likelihood(model, ids, mask_id, batch_size=batch_size)
    return {"sizes": sizes, "copies": len(ids), "batch_size": batch_size}


@probe("test_pseudo_log_likelihood", "pseudo_perplexity = exp(-PLL / T) (a Python float)", "PYTHON_FLOATS",
       function="pseudo_perplexity", main=True)
def pppl_values(ns, gen):
    a = -float(torch.rand(1, generator=gen)) * 40
    b = -float(torch.rand(1, generator=gen)) * 5
    return [attempt(ns.pseudo_perplexity, a, _size(gen, 5, 20)),
            attempt(ns.pseudo_perplexity, b, 2)]


@probe("test_pseudo_log_likelihood", "the same formula for a PLL given as a 0-dim tensor, still a Python float",
       "PYTHON_FLOATS", weight=0.5, kind="rule", checks="input form", function="pseudo_perplexity")
def pppl_tensor(ns, gen):
    c = -torch.rand((), generator=gen) * 30
    return [attempt(ns.pseudo_perplexity, c, _size(gen, 5, 20)),
            attempt(ns.pseudo_perplexity, c.double(), 1)]


# ------------------------------------------------------------------------------ single_index_estimate
def _estimates(ns, gen, positions_count: int | None, num_samples: int):
    model, mask_id = tiny_masked_lm(gen)
    ids = torch.randint(0, mask_id, (_size(gen, 7, 9),), generator=gen)
    positions = None if positions_count is None else _some_positions(gen, len(ids), positions_count)
    draws = torch.Generator().manual_seed(_seed(gen))
    return ns.single_index_estimate(model, ids, mask_id, num_samples=num_samples, positions=positions,
                                    generator=draws)


# single_index_estimate: the test cell's 3 points, shared by the weights below. Its values are a
# distribution: each value case checks that every estimate is T * l_u AND that u is uniform, so a fixed
# position or one draw repeated earns nothing.
@probe("test_single_index_estimate", "num_samples values of T * (-log p(x_U | x without U)), U uniform (float32 "
       "[num_samples])", "check_uniform_estimates", weight=2, main=True)
def single_index_values(ns, gen):
    return _estimates(ns, gen, None, 400)


@probe("test_single_index_estimate", "U drawn uniformly from positions, and T = the number of scored positions",
       "check_uniform_estimates", weight=2)
def single_index_given_positions(ns, gen):
    return _estimates(ns, gen, 4, 400)


@probe("test_single_index_estimate", "U uniform over the scored positions (unbiased)", "check_uniform_estimates",
       weight=2)
def single_index_uniform(ns, gen):
    return _estimates(ns, gen, None, 3000)


@probe("test_single_index_estimate", "all samples in ONE batched forward pass", "check_passes_per_call",
       kind="property")
def single_index_one_pass(ns, gen):
    model, mask_id = tiny_masked_lm(gen)
    ids = _sequence(gen, mask_id)
    with count_forward_passes(model) as sizes:
        ns.single_index_estimate(model, ids, mask_id, num_samples=_size(gen, 40, 60),
                                 generator=torch.Generator().manual_seed(_seed(gen)))
    return {"sizes": sizes}


@probe("test_single_index_estimate", "U drawn with the given generator (reproducible)", "check_reproducible_pair",
       weight=0.25, kind="rule", checks="generator")
def single_index_generator(ns, gen):
    model, mask_id = tiny_masked_lm(gen)
    ids = _sequence(gen, mask_id)
    seed, out = _seed(gen), []
    for global_seed in (1, 2):  # the global random state must not matter
        torch.manual_seed(global_seed)
        out.append(ns.single_index_estimate(model, ids, mask_id, num_samples=30,
                                            generator=torch.Generator().manual_seed(seed)))
    return out


@probe("test_single_index_estimate", "U drawn with the given generator: another seed gives other draws",
       "check_other_seeds_differ", weight=0.25, kind="rule", checks="generator")
def single_index_seeds_differ(ns, gen):
    """Two differently seeded generators: 64 draws of U among 9 to 15 positions coincide with probability
    below 9^-64, so equal estimates mean the generator was not used."""
    model, mask_id = tiny_masked_lm(gen)
    ids = _sequence(gen, mask_id)
    seed = _seed(gen)
    return [ns.single_index_estimate(model, ids, mask_id, num_samples=64, generator=torch.Generator().manual_seed(s))
            for s in (seed, seed + 1)]


@probe("test_single_index_estimate", "U drawn with the given generator: the global random state is left alone",
       "check_global_state_untouched", weight=0.25, kind="rule", checks="global state")
def single_index_global_state(ns, gen):
    model, mask_id = tiny_masked_lm(gen)
    ids = _sequence(gen, mask_id)
    return with_global_state(ns.single_index_estimate, model, ids, mask_id, num_samples=20,
                             generator=torch.Generator().manual_seed(_seed(gen)))


# ------------------------------------------------------------------------------ causal_log_probs / perplexity
# causal_log_probs / perplexity: the test cell's 2 points, shared by the weights below
@probe("test_causal_log_probs", "log p(x_t | x_<t) from the logits shifted by one (float32 [T - 1])", "TABLE", weight=2,
       main=True)
def causal_no_context(ns, gen):
    model = tiny_causal_lm(gen)
    return ns.causal_log_probs(model, torch.randint(1, 41, (_size(gen, 8, 16),), generator=gen))


@probe("test_causal_log_probs", "with context_token_id prepended, all T tokens are predicted", "TABLE", weight=2)
def causal_with_context(ns, gen):
    model = tiny_causal_lm(gen)
    ids = torch.randint(1, 41, (_size(gen, 8, 16),), generator=gen)
    return [ns.causal_log_probs(model, ids, context_token_id=0), ns.causal_log_probs(model, ids[:1], 0)]


@probe("test_causal_log_probs", "ONE forward pass per sequence", "check_passes_per_call", kind="property")
def causal_one_pass(ns, gen):
    model = tiny_causal_lm(gen)
    ids = torch.randint(1, 41, (_size(gen, 8, 16),), generator=gen)
    with count_forward_passes(model) as sizes:
        ns.causal_log_probs(model, ids, context_token_id=0)
    with count_forward_passes(model) as sizes2:
        ns.causal_log_probs(model, ids)
    return {"sizes": sizes + sizes2, "calls": 2}


@probe("test_causal_log_probs", "computed under torch.no_grad() (no autograd graph)", "NO_GRAPH", kind="property")
def causal_no_grad(ns, gen):
    model = tiny_causal_lm(gen)
    ids = torch.randint(1, 41, (_size(gen, 8, 16),), generator=gen)
    return bool(ns.causal_log_probs(model, ids).requires_grad)


@probe("test_causal_log_probs", "perplexity = exp(-log p / T) (a Python float)", "PYTHON_FLOATS", function="perplexity",
       main=True)
def perplexity_values(ns, gen):
    a = -float(torch.rand(1, generator=gen)) * 40
    b = -float(torch.rand(1, generator=gen)) * 5
    return [attempt(ns.perplexity, a, _size(gen, 5, 20)),
            attempt(ns.perplexity, b, 2)]


@probe("test_causal_log_probs", "the same formula for a log-likelihood given as a 0-dim tensor, still a Python float",
       "PYTHON_FLOATS", weight=0.5, kind="rule", checks="input form", function="perplexity")
def perplexity_tensor(ns, gen):
    c = -torch.rand((), generator=gen) * 30
    return [attempt(ns.perplexity, c, _size(gen, 5, 20)),
            attempt(ns.perplexity, c.double(), 1)]


# ------------------------------------------------------------------------------ conditionals_compatible
def _conditionals_of(joint: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """p(a|b), p(b|a) of a joint table (the inputs of a compatible case; no answer is computed here)."""
    return joint / joint.sum(0, keepdim=True), joint / joint.sum(1, keepdim=True)


def _random_joint(gen, na, nb):
    joint = torch.rand(na, nb, generator=gen, dtype=torch.float64) + 0.05
    return joint / joint.sum()


def _joint_pair(gen, compatible: bool = True):
    """The conditionals of one joint of a drawn shape (square or not), or (``compatible=False``) p(a|b) of one
    joint with p(b|a) of another; float64 or float32, drawn."""
    na, nb = _size(gen, 2, 5), _size(gen, 2, 5)
    pa, pb = _conditionals_of(_random_joint(gen, na, nb))
    if not compatible:
        pb = _conditionals_of(_random_joint(gen, na, nb))[1]
    return (pa, pb) if _size(gen, 0, 1) else (pa.float(), pb.float())


def _in_seeded_order(ns, gen, makers: list, calls: int) -> list:
    """Calls of conditionals_compatible on pairs from ``makers`` (each ``gen -> (args, kwargs)``): every maker
    once and the rest drawn among them, ``calls`` in all, in an order drawn from ``gen``, one pair asked twice at
    two places. True and False answers are interleaved by the draw, so an answer that ignores its inputs (a
    call counter, a fixed pattern, the dtype, the shape) gets a fixed sequence right with odds of about 2^-calls."""
    chosen = list(makers) + [makers[_size(gen, 0, len(makers) - 1)] for _ in range(calls - 1 - len(makers))]
    pairs = [make(gen) for make in chosen]
    pairs = [pairs[i] for i in torch.randperm(len(pairs), generator=gen).tolist()]
    pairs.insert(_size(gen, 0, len(pairs)), pairs[_size(gen, 0, len(pairs) - 1)])
    return [attempt(ns.conditionals_compatible, *args, **kwargs) for args, kwargs in pairs]


# conditionals_compatible (extension): the test cell's 3 points, shared by the weights below
@probe("test_conditionals_compatible", "True for the conditionals of a joint, float64 or float32, among pairs that "
       "are not (a Python bool)", "check_bools", weight=2, main=True)
def compatible_joints(ns, gen):
    """The conditionals of joints (True) among pairs of two different joints (False)."""
    return _in_seeded_order(ns, gen, [lambda g: (_joint_pair(g), {}), lambda g: (_joint_pair(g, False), {})], 16)


def _column_redrawn(gen):
    """One column of a joint's p(a|b) redrawn: False."""
    pa, pb = _joint_pair(gen)
    bad = pa.double().clone()
    bad[:, 0] = torch.rand(pa.shape[0], generator=gen, dtype=torch.float64) + 0.05
    bad[:, 0] /= bad[:, 0].sum()
    return (bad.to(pa.dtype), pb), {}


def _two_random_tables(gen):
    """Random conditionals that come from no joint: False."""
    na, nb = _size(gen, 2, 5), _size(gen, 2, 5)
    pa, pb = torch.rand(2, na, nb, generator=gen, dtype=torch.float64) + 0.05
    return (pa / pa.sum(0, keepdim=True), pb / pb.sum(1, keepdim=True)), {}


def _independent_b(gen, a_depends_on_b: bool):
    """The sheet's pattern: p(b|a) uniform (b independent of a) against a p(a|b) that depends on b (False), or
    that does not (True: the product of the marginals)."""
    n = _size(gen, 2, 4)
    pa = torch.rand(n, n if a_depends_on_b else 1, generator=gen, dtype=torch.float64) + 0.1
    pa = (pa / pa.sum(0, keepdim=True)).expand(n, n).clone()
    return (pa, torch.full((n, n), 1.0 / n, dtype=torch.float64)), {}


@probe("test_conditionals_compatible", "False for conditionals that come from no joint", "check_bools", weight=2,
       main=True)
def incompatible_tables(ns, gen):
    """Conditionals from no joint (False) among conditionals of joints (True)."""
    return _in_seeded_order(ns, gen, [_column_redrawn, _two_random_tables, lambda g: _independent_b(g, True),
                                      lambda g: _independent_b(g, False), lambda g: (_joint_pair(g), {})], 16)


def _blocks_with_zeros(gen, same_support: bool):
    """The conditionals of a joint with a zero and two disconnected blocks (True), or with p(b|a) > 0 where
    p(a|b) = 0 (False); rows and columns in a drawn order."""
    joint = torch.zeros(4, 5, dtype=torch.float64)
    joint[:2, :3] = torch.rand(2, 3, generator=gen, dtype=torch.float64) + 0.1
    joint[2:, 3:] = torch.rand(2, 2, generator=gen, dtype=torch.float64) + 0.1
    joint[0, 1] = 0.0
    pa, pb = _conditionals_of(joint / joint.sum())
    if not same_support:
        pb = pb.clone()
        pb[0, 1], pb[0, 0] = pb[0, 0] / 2, pb[0, 0] / 2
    rows, cols = torch.randperm(4, generator=gen), torch.randperm(5, generator=gen)
    return (pa[rows][:, cols], pb[rows][:, cols]), {}


@probe("test_conditionals_compatible", "supports: zeros and disconnected blocks, different supports", "check_bools")
def compatible_zeros(ns, gen):
    return _in_seeded_order(ns, gen, [lambda g: _blocks_with_zeros(g, True), lambda g: _blocks_with_zeros(g, False)],
                            16)


def _noisy_or_exact(gen, noisy: bool, atol: float):
    """A joint's p(a|b) off by up to 0.1 % (compatible within atol = 0.05, not within 1e-6), or exact."""
    joint = torch.rand(3, 4, generator=gen, dtype=torch.float64) + 0.2
    pa, pb = _conditionals_of(joint / joint.sum())
    if noisy:
        pa = pa * (1 + 2e-3 * (torch.rand(3, 4, generator=gen, dtype=torch.float64) - 0.5))
        pa = pa / pa.sum(0, keepdim=True)
    return (pa, pb), {"atol": atol}


@probe("test_conditionals_compatible", "the reconstructed conditionals are compared within atol", "check_bools")
def compatible_atol(ns, gen):
    """Noisy conditionals within a loose atol (True) and a tight one (False), among exact ones with a tight atol
    (True) and different supports with a loose one (False): the atol alone does not tell the answer."""
    return _in_seeded_order(ns, gen, [lambda g: _noisy_or_exact(g, True, 0.05), lambda g: _noisy_or_exact(g, True, 1e-6),
                                      lambda g: _noisy_or_exact(g, False, 1e-6),
                                      lambda g: (_blocks_with_zeros(g, False)[0], {"atol": 0.05})], 16)


@probe("test_conditionals_compatible", "a ValueError for different shapes, negative entries, or rows/columns that do "
       "not sum to one", "RAISES_VALUE_ERROR", kind="rule", checks="raises")
def compatible_rejects(ns, gen):
    pa, pb = _conditionals_of(_random_joint(gen, 2, 3))
    neg_a = torch.tensor([[1.2, 0.5, 0.5], [-0.2, 0.5, 0.5]], dtype=torch.float64)
    neg_b = torch.tensor([[1.2, -0.2, 0.0], [0.5, 0.25, 0.25]], dtype=torch.float64)
    return [attempt(ns.conditionals_compatible, pa, pb.T.contiguous()),          # different shapes
            attempt(ns.conditionals_compatible, neg_a, pb),                       # negative entry
            attempt(ns.conditionals_compatible, pa, neg_b),
            attempt(ns.conditionals_compatible, pa * 0.7, pb),                    # columns of p(a|b) != 1
            attempt(ns.conditionals_compatible, pa, pb * 1.3)]                    # rows of p(b|a) != 1


# ------------------------------------------------------------------------------ bert_mask
SPECIALS = [0, 1]


def _batch(gen, rows: int = 256, cols: int = 256, low: int = 2, high: int = 10):
    ids = torch.randint(low, high, (rows, cols), generator=gen)
    ids[:, 0], ids[:, -1] = 0, 1  # like [CLS] ... [SEP]
    run = max(2, cols // 8)
    start = _size(gen, 1, cols - run - 1)
    ids[::7, start:start + run] = 0  # runs of padding-like special tokens
    return ids


def _compact(x):
    """int64 results travel as int16 (the values fit: ids < 16, labels -100): a smaller evidence record.
    Anything else travels as it is, so the judge still sees a wrong type or dtype."""
    return x.to(torch.int16) if isinstance(x, torch.Tensor) and x.dtype == torch.int64 else x


def _large_batch_evidence(ns, gen, q: float):
    """Two calls on one [192, 192] batch with differently seeded generators: the judge checks the rates in
    every quarter of the rows and columns, and that the second call draws afresh (a fixed pattern fails)."""
    ids = _batch(gen, 192, 192)  # tokens 2..9 only: random replacements must also reach 10..14 (and 0, 1, 15)
    seed = _seed(gen)
    result = ns.bert_mask(ids.clone(), SPECIALS, 15, 16, q=q, generator=torch.Generator().manual_seed(seed))
    if not isinstance(result, (tuple, list)) or len(result) != 2:
        return result
    again = ns.bert_mask(ids.clone(), SPECIALS, 15, 16, q=q, generator=torch.Generator().manual_seed(seed + 1))
    if not isinstance(again, (tuple, list)) or len(again) != 2:
        return again
    return {"ids": ids.to(torch.int8), "masked": _compact(result[0]), "labels": _compact(result[1]),
            "masked2": _compact(again[0]), "labels2": _compact(again[1])}


# bert_mask (extension): the test cell's 3 points, shared by the weights below. Both value cases call it
# twice, with differently seeded generators: a fixed pattern, however well its rates are tuned, fails.
@probe("test_bert_mask", "selection with probability q on non-special tokens, anywhere in the batch (drawn from the "
       "generator); labels the original id where selected, else -100", "check_bert_labels_and_specials", weight=2,
       main=True)
def bert_mask_selection(ns, gen):
    return _large_batch_evidence(ns, gen, 0.15)


@probe("test_bert_mask", "selected: 80 % [MASK], 10 % uniformly random token, 10 % unchanged, drawn per token (not by "
       "its place)", "check_bert_80_10_10", weight=2)
def bert_mask_replacements(ns, gen):
    return _large_batch_evidence(ns, gen, 0.5)


@probe("test_bert_mask", "q = 0 selects nothing, q = 1 every non-special token", "check_bert_q_edges", kind="property")
def bert_mask_q_edges(ns, gen):
    ids = _batch(gen, 16, 40)
    seed = _seed(gen)
    m0, l0 = ns.bert_mask(ids.clone(), SPECIALS, 15, 16, q=0.0, generator=torch.Generator().manual_seed(seed))
    m1, l1 = ns.bert_mask(ids.clone(), SPECIALS, 15, 16, q=1.0, generator=torch.Generator().manual_seed(seed))
    return {"ids": ids, "q0": [m0, l0], "q1": [m1, l1]}


@probe("test_bert_mask", "one sequence [T] works as well as a batch [B, T]", "check_bert_one_sequence", kind="rule",
       checks="input form")
def bert_mask_one_sequence(ns, gen):
    ids = _batch(gen, 1, 50)[0]
    masked, labels = ns.bert_mask(ids.clone(), SPECIALS, 15, 16, q=0.5,
                                  generator=torch.Generator().manual_seed(_seed(gen)))
    return {"ids": ids, "masked": masked, "labels": labels}


@probe("test_bert_mask", "everything drawn from the given generator", "check_reproducible_pair", kind="rule",
       checks="generator")
def bert_mask_generator(ns, gen):
    ids = _batch(gen, 8, 40)
    seed, out = _seed(gen), []
    for global_seed in (1, 2):  # the global random state must not matter
        torch.manual_seed(global_seed)
        out.append(list(ns.bert_mask(ids.clone(), SPECIALS, 15, 16, q=0.5,
                                     generator=torch.Generator().manual_seed(seed))))
    return out


@probe("test_bert_mask", "everything drawn from the given generator: another seed gives other draws",
       "check_other_seeds_differ", kind="rule", checks="generator")
def bert_mask_seeds_differ(ns, gen):
    """Two differently seeded generators on about 290 non-special tokens with q = 0.5: the same selection
    twice has probability about 2^-290."""
    ids = _batch(gen, 8, 40)
    seed = _seed(gen)
    return [list(ns.bert_mask(ids.clone(), SPECIALS, 15, 16, q=0.5, generator=torch.Generator().manual_seed(s)))
            for s in (seed, seed + 1)]


@probe("test_bert_mask", "everything drawn from the given generator: the global random state is left alone",
       "check_global_state_untouched", kind="rule", checks="global state")
def bert_mask_global_state(ns, gen):
    ids = _batch(gen, 8, 40)
    return with_global_state(ns.bert_mask, ids.clone(), SPECIALS, 15, 16, q=0.5,
                             generator=torch.Generator().manual_seed(_seed(gen)))


@probe("test_bert_mask", "input_ids is not modified", "check_unchanged_input", kind="rule", checks="mutation")
def bert_mask_input_unchanged(ns, gen):
    ids = _batch(gen, 8, 40)
    before = ids.clone()
    ns.bert_mask(ids, SPECIALS, 15, 16, q=0.5, generator=torch.Generator().manual_seed(_seed(gen)))
    return [before, ids]


@probe("test_bert_mask", "a ValueError unless 0 <= q <= 1", "RAISES_VALUE_ERROR", kind="rule", checks="raises")
def bert_mask_rejects_q(ns, gen):
    ids = _batch(gen, 4, 40)
    return [attempt(ns.bert_mask, ids, SPECIALS, 15, 16, q=1.0 + float(torch.rand(1, generator=gen)) + 0.01),
            attempt(ns.bert_mask, ids, SPECIALS, 15, 16, q=-0.1)]
