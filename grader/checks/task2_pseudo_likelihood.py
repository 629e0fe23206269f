"""Hidden-test reference checks for solutions/ex01/task2_pseudo_likelihood.ipynb (grader only).

Every ``check_*`` function takes the student's function(s), calls them on fresh inputs (tiny
randomly initialised transformers built here, seeded, no downloads; and, where the notebook
passes one, its real masked or causal model), and compares with an independent reference:

- conditionals of a masked LM: one masked copy per forward pass, in float64 (the student batches);
- autoregressive log-probabilities: one prefix per forward pass, reading the last logits (the
  student shifts the logits of one pass);
- statistical properties (Monte-Carlo means, masking rates) against binomial / CLT tolerances of
  five standard errors, with seeded generators, so a correct answer never fails by chance.

Failures raise ``AssertionError`` with a message that says what was expected.
"""

from __future__ import annotations

import copy
import functools
import math
from contextlib import contextmanager

import torch

_SIGMAS = 5.0  # statistical tolerance of every Monte-Carlo check


def _one_thread(check):
    """Run a check with one intra-op thread (restored afterwards): the models here are tiny, and on a busy
    grading machine two threads per forward pass cost ten times more in synchronisation than they save."""

    @functools.wraps(check)
    def wrapper(*args, **kwargs):
        before = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            return check(*args, **kwargs)
        finally:
            torch.set_num_threads(before)

    return wrapper


# ------------------------------------------------------------------------------ tiny models
def tiny_masked_lm(seed: int = 0, vocab_size: int = 37, hidden: int = 32, layers: int = 2):
    """A random BertForMaskedLM small enough to run a reference loop in float64 in milliseconds.

    ``initializer_range=0.5`` makes the conditionals far from uniform, so an implementation that
    forgets to mask, reads the wrong position or the wrong copy is off by whole nats.
    Returns ``(model, mask_token_id)``; the model is in eval mode, float32, on the CPU.
    """
    from transformers import BertConfig, BertForMaskedLM

    config = BertConfig(vocab_size=vocab_size, hidden_size=hidden, num_hidden_layers=layers,
                        num_attention_heads=2, intermediate_size=2 * hidden, max_position_embeddings=128,
                        initializer_range=0.5, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    with torch.random.fork_rng(devices=[]):  # leave the notebook's global random state alone
        torch.manual_seed(seed)
        return BertForMaskedLM(config).eval(), vocab_size - 1


def tiny_causal_lm(seed: int = 0, vocab_size: int = 41, hidden: int = 32, layers: int = 2):
    """A random GPTNeoXForCausalLM (Pythia's class), eval mode, float32, CPU."""
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    config = GPTNeoXConfig(vocab_size=vocab_size, hidden_size=hidden, num_hidden_layers=layers,
                           num_attention_heads=2, intermediate_size=2 * hidden, max_position_embeddings=128,
                           initializer_range=0.5, hidden_dropout=0.0, attention_dropout=0.0)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return GPTNeoXForCausalLM(config).eval()


@contextmanager
def count_forward_passes(model):
    """Count forward passes (and the batch size of each) through the model's input embedding.

    Hooking the embedding rather than the model catches ``model(...)`` and ``model.forward(...)``
    alike. Yields a list that receives one batch size per pass.
    """
    sizes: list[int] = []

    def hook(_module, inputs, _output):
        ids = inputs[0]
        sizes.append(int(ids.shape[0]) if ids.dim() > 1 else 1)

    handle = model.get_input_embeddings().register_forward_hook(hook)
    try:
        yield sizes
    finally:
        handle.remove()


def _device(model) -> torch.device:
    return next(model.parameters()).device


# ------------------------------------------------------------------------ reference formulas
@torch.no_grad()
def reference_conditionals(model, input_ids: torch.Tensor, mask_token_id: int, positions=None,
                           dtype=torch.float64) -> torch.Tensor:
    """log p(x_t = . | x_without_t) for each position, ONE masked copy per forward pass. [P, V] float64."""
    ids = input_ids.to(_device(model))
    positions = range(ids.numel()) if positions is None else [int(p) for p in positions]
    work = copy.deepcopy(model).to(dtype) if dtype != next(model.parameters()).dtype else model
    rows = []
    for t in positions:
        masked = ids.clone()
        masked[t] = mask_token_id
        logits = work(input_ids=masked.unsqueeze(0)).logits[0, t]
        rows.append(torch.log_softmax(logits.to(torch.float64), dim=-1).cpu())
    return torch.stack(rows)


@torch.no_grad()
def reference_causal_log_probs(model, input_ids: torch.Tensor, context_token_id=None,
                               dtype=torch.float64) -> torch.Tensor:
    """log p(x_t | x_<t) from one PREFIX per forward pass (the last logits of each), float64."""
    ids = input_ids.to(_device(model))
    if context_token_id is not None:
        ids = torch.cat([ids.new_tensor([context_token_id]), ids])
    work = copy.deepcopy(model).to(dtype) if dtype != next(model.parameters()).dtype else model
    out = []
    for t in range(1, ids.numel()):
        logits = work(input_ids=ids[:t].unsqueeze(0)).logits[0, -1]
        out.append(torch.log_softmax(logits.to(torch.float64), dim=-1)[ids[t]].cpu())
    return torch.stack(out)


def _random_log_probs(gen: torch.Generator, t: int, v: int, dtype=torch.float32) -> torch.Tensor:
    return torch.log_softmax(2.0 * torch.randn(t, v, generator=gen, dtype=torch.float64), dim=-1).to(dtype)


def _is_scalar_tensor(x, dtype=torch.float32) -> bool:
    return isinstance(x, torch.Tensor) and x.shape == () and x.dtype == dtype


def _assert_value_error(fn, what: str) -> None:
    try:
        fn()
    except ValueError:
        return
    except Exception as exc:  # noqa: BLE001 - the message names the wrong exception type
        raise AssertionError(f"{what}: expected a ValueError, got {exc.__class__.__name__}: {exc}") from None
    raise AssertionError(f"{what}: expected a ValueError, but nothing was raised")


# ------------------------------------------------------------------------------ (a) mlm_loss
@_one_thread
def check_mlm_loss(mlm_loss) -> None:
    """mlm_loss(log_probs [T, V], targets [T], mask [T] or [K, T]) = -sum_{t in M} log_probs[t, x_t]."""
    gen = torch.Generator().manual_seed(20240401)
    for t, v in [(7, 5), (23, 50), (1, 3)]:
        lp = _random_log_probs(gen, t, v)
        x = torch.randint(v, (t,), generator=gen)
        m = torch.rand(t, generator=gen) < 0.4
        lp_copy, x_copy, m_copy = lp.clone(), x.clone(), m.clone()
        out = mlm_loss(lp, x, m)
        assert _is_scalar_tensor(out), (
            f"mlm_loss with a mask of shape [T] must return a 0-dim float32 tensor, got "
            f"{type(out).__name__} {getattr(out, 'shape', '')} {getattr(out, 'dtype', '')}")
        nll = -lp.double()[torch.arange(t), x]
        want = (nll * m.double()).sum()
        assert abs(out.item() - want.item()) < 1e-4 * (1 + abs(want.item())), (
            f"mlm_loss = {out.item():.6f}, expected -sum of log p(x_t | x_without_t) over the masked "
            f"positions = {want.item():.6f} (T={t}, V={v}, {int(m.sum())} masked)")
        assert torch.equal(lp, lp_copy) and torch.equal(x, x_copy) and torch.equal(m, m_copy), \
            "mlm_loss must not modify its inputs in place"
        # several masks at once
        masks = torch.rand(9, t, generator=gen) < 0.5
        out_k = mlm_loss(lp, x, masks)
        assert isinstance(out_k, torch.Tensor) and out_k.shape == (9,) and out_k.dtype == torch.float32, (
            f"mlm_loss with masks [K, T] must return a float32 tensor [K], got "
            f"{getattr(out_k, 'shape', type(out_k))} {getattr(out_k, 'dtype', '')}")
        want_k = (nll.unsqueeze(0) * masks.double()).sum(-1)
        assert torch.allclose(out_k.double(), want_k, atol=1e-4, rtol=1e-5), \
            f"mlm_loss per mask: got {out_k.tolist()}, expected {want_k.tolist()}"
        # empty and full masks
        assert abs(mlm_loss(lp, x, torch.zeros(t, dtype=torch.bool)).item()) < 1e-7, \
            "an empty mask must give a loss of exactly 0"
        full = mlm_loss(lp, x, torch.ones(t, dtype=torch.bool)).item()
        assert abs(full - nll.sum().item()) < 1e-4 * (1 + abs(full)), \
            "with every position masked the loss must equal S(x), the full negative pseudo-log-likelihood"
    # dtype follows the table
    lp64 = _random_log_probs(gen, 6, 4, torch.float64)
    x = torch.randint(4, (6,), generator=gen)
    out64 = mlm_loss(lp64, x, torch.ones(6, dtype=torch.bool))
    assert isinstance(out64, torch.Tensor) and out64.dtype == torch.float64, \
        "mlm_loss must keep the dtype of log_probs (float64 in, float64 out)"
    # bad shapes
    _assert_value_error(lambda: mlm_loss(lp64, x[:5], torch.ones(6, dtype=torch.bool)),
                        "targets of length 5 with a table of 6 rows")
    _assert_value_error(lambda: mlm_loss(lp64, x, torch.ones(5, dtype=torch.bool)),
                        "a mask of length 5 with a table of 6 rows")
    _assert_value_error(lambda: mlm_loss(lp64[0], x, torch.ones(6, dtype=torch.bool)),
                        "a 1-D log_probs")


@_one_thread
def check_mlm_loss_expectation(mlm_loss, log_probs=None, targets=None, num_masks: int = 20000) -> None:
    """E over Bernoulli(q) masks of mlm_loss equals q * S(x), within five Monte-Carlo standard errors.

    With ``log_probs``/``targets`` (e.g. the notebook's real-model table) the check runs on them too.
    """
    gen = torch.Generator().manual_seed(7)
    cases = [(_random_log_probs(gen, 19, 11), None, 0.15), (_random_log_probs(gen, 40, 30), None, 0.5)]
    if log_probs is not None:
        cases.append((log_probs.detach().cpu().float(), targets.detach().cpu(), 0.15))
    for lp, x, q in cases:
        t = lp.shape[0]
        if x is None:
            x = torch.randint(lp.shape[1], (t,), generator=gen)
        s = -lp.double()[torch.arange(t), x].sum().item()
        masks = torch.rand(num_masks, t, generator=gen) < q
        losses = mlm_loss(lp, x, masks).double()
        assert losses.shape == (num_masks,), f"expected {num_masks} losses, got shape {tuple(losses.shape)}"
        mean, se = losses.mean().item(), losses.std().item() / math.sqrt(num_masks)
        assert abs(mean - q * s) <= _SIGMAS * se + 1e-6, (
            f"Monte-Carlo mean of the MLM loss over {num_masks} Bernoulli({q}) masks is {mean:.4f} "
            f"+- {se:.4f}, but q * S(x) = {q * s:.4f} (T={t})")


# --------------------------------------------------------------------- (b) masked copies, PLL
@_one_thread
def check_masked_copies(masked_copies) -> None:
    """masked_copies(input_ids [T], positions [P], mask_token_id) -> long [P, T]."""
    gen = torch.Generator().manual_seed(11)
    ids = torch.randint(5, 100, (13,), generator=gen)
    positions = torch.tensor([4, 0, 12, 7, 4])
    before = ids.clone()
    out = masked_copies(ids, positions, 3)
    assert isinstance(out, torch.Tensor) and out.shape == (5, 13) and out.dtype == torch.long, (
        f"masked_copies must return an int64 tensor [P, T] = [5, 13], got "
        f"{getattr(out, 'shape', type(out))} {getattr(out, 'dtype', '')}")
    assert torch.equal(ids, before), "masked_copies must not modify input_ids"
    for k, p in enumerate(positions.tolist()):
        want = ids.clone()
        want[p] = 3
        assert torch.equal(out[k], want), f"copy {k} should equal input_ids with position {p} set to the mask id"
    out2 = masked_copies(ids, torch.arange(13), 99)
    assert torch.equal(out2.diagonal(), torch.full((13,), 99)), "copy t must hold the mask at position t"
    off = ~torch.eye(13, dtype=torch.bool)
    assert torch.equal(out2[off], ids.expand(13, 13)[off]), "copies must agree with input_ids off the masked position"
    _assert_value_error(lambda: masked_copies(ids.view(1, -1), positions, 3), "a 2-D input_ids")
    _assert_value_error(lambda: masked_copies(ids, torch.tensor([13]), 3), "a position past the end")


def _check_batched_table(conditional_log_probs, model, mask_id, ids, positions, batch_size, ref) -> None:
    with count_forward_passes(model) as sizes:
        out = conditional_log_probs(model, ids, mask_id, positions=positions, batch_size=batch_size)
    p = len(ref)
    assert isinstance(out, torch.Tensor) and out.dtype == torch.float32 and out.shape == ref.shape, (
        f"conditional_log_probs must return a float32 tensor [P, V] = {list(ref.shape)}, got "
        f"{getattr(out, 'shape', type(out))} {getattr(out, 'dtype', '')}")
    assert not out.requires_grad, "compute the conditionals under torch.no_grad() (no autograd graph)"
    err = (out.detach().cpu().double() - ref).abs().max().item()
    assert err < 2e-4 * max(1.0, ref.abs().max().item()), (
        f"conditional_log_probs differs from log_softmax of the masked copy's logits by up to {err:.2e} "
        f"(row k must be log p(. | x without position positions[k]), read at that position)")
    need = math.ceil(p / batch_size)
    assert 1 <= len(sizes) <= need and max(sizes) <= batch_size, (
        f"{p} masked copies with batch_size={batch_size} should take {need} batched forward passes of at "
        f"most {batch_size} copies; counted {len(sizes)} passes of sizes {sizes}")


@_one_thread
def check_conditional_log_probs(conditional_log_probs, model=None, input_ids=None, mask_token_id=None) -> None:
    """Batched conditionals [P, V] against one-copy-per-pass float64 references."""
    tiny, mask_id = tiny_masked_lm(seed=3)
    gen = torch.Generator().manual_seed(5)
    ids = torch.randint(0, mask_id, (23,), generator=gen)
    ref = reference_conditionals(tiny, ids, mask_id)
    _check_batched_table(conditional_log_probs, tiny, mask_id, ids, None, 5, ref)
    _check_batched_table(conditional_log_probs, tiny, mask_id, ids, None, 64, ref)
    positions = torch.tensor([2, 17, 9])
    _check_batched_table(conditional_log_probs, tiny, mask_id, ids, positions, 2, ref[positions])
    if model is not None:
        pos = torch.arange(min(int(input_ids.numel()), 12))
        ref_real = reference_conditionals(model, input_ids, mask_token_id, pos, dtype=next(model.parameters()).dtype)
        out = conditional_log_probs(model, input_ids, mask_token_id, positions=pos, batch_size=4)
        err = (out.detach().cpu().double() - ref_real).abs().max().item()
        assert out.shape == ref_real.shape and err < 1e-3, (
            f"on the notebook's masked LM, conditional_log_probs is off by {err:.2e} from the "
            f"one-copy-at-a-time reference")


@_one_thread
def check_pseudo_log_likelihood(pseudo_log_likelihood, pseudo_perplexity, model=None, input_ids=None,
                                mask_token_id=None) -> None:
    """PLL (0-dim float32, batched) and PPPL = exp(-PLL / T)."""
    tiny, mask_id = tiny_masked_lm(seed=8)
    gen = torch.Generator().manual_seed(9)
    ids = torch.randint(0, mask_id, (17,), generator=gen)
    ref = reference_conditionals(tiny, ids, mask_id)
    token_ll = ref[torch.arange(17), ids]
    with count_forward_passes(tiny) as sizes:
        pll = pseudo_log_likelihood(tiny, ids, mask_id, batch_size=4)
    assert _is_scalar_tensor(pll), (
        f"pseudo_log_likelihood must return a 0-dim float32 tensor, got "
        f"{type(pll).__name__} {getattr(pll, 'shape', '')} {getattr(pll, 'dtype', '')}")
    assert abs(pll.item() - token_ll.sum().item()) < 1e-3, (
        f"PLL = {pll.item():.5f}, expected sum_t log p(x_t | x_without_t) = {token_ll.sum().item():.5f}")
    assert 1 <= len(sizes) <= math.ceil(17 / 4) and max(sizes) <= 4, (
        f"17 masked copies with batch_size=4 should take at most 5 batched forward passes; counted "
        f"{len(sizes)} of sizes {sizes} (evaluate the T copies in batches, not one by one)")
    positions = torch.tensor([0, 3, 16, 8])
    pll_sub = pseudo_log_likelihood(tiny, ids, mask_id, positions=positions, batch_size=16)
    assert abs(pll_sub.item() - token_ll[positions].sum().item()) < 1e-3, \
        "with positions given, the PLL sums only over those positions"
    # pseudo-perplexity
    for value, n in [(pll, 17), (float(pll_sub), 4), (torch.tensor(-3.25, dtype=torch.float64), 2)]:
        got = pseudo_perplexity(value, n)
        want = math.exp(-float(value) / n)
        assert isinstance(got, float), f"pseudo_perplexity must return a Python float, got {type(got).__name__}"
        assert abs(got - want) < 1e-5 * want, f"pseudo_perplexity({float(value):.4f}, {n}) = {got}, expected {want}"
    _assert_value_error(lambda: pseudo_perplexity(-1.0, 0), "pseudo_perplexity with num_tokens=0")
    if model is not None:
        n = min(int(input_ids.numel()), 12)
        pos = torch.arange(n)
        ref_real = reference_conditionals(model, input_ids, mask_token_id, pos, dtype=next(model.parameters()).dtype)
        want = ref_real[pos, input_ids[:n].cpu()].sum().item()
        got = pseudo_log_likelihood(model, input_ids, mask_token_id, positions=pos, batch_size=4).item()
        assert abs(got - want) < 1e-3 * max(1.0, abs(want)), \
            f"on the notebook's masked LM: PLL = {got:.4f}, the one-copy-at-a-time reference gives {want:.4f}"


@_one_thread
def check_single_index_estimate(single_index_estimate, num_samples: int = 6000) -> None:
    """Values are T * (-log p(x_u | x_without_u)) for some scored u; mean -> S(x); one forward pass; U uniform."""
    tiny, mask_id = tiny_masked_lm(seed=13)
    gen = torch.Generator().manual_seed(17)
    ids = torch.randint(0, mask_id, (11,), generator=gen)
    ref = reference_conditionals(tiny, ids, mask_id)
    nll = -ref[torch.arange(11), ids]
    for positions in (None, torch.tensor([1, 4, 5, 9])):
        scored = torch.arange(11) if positions is None else positions
        t = len(scored)
        values = t * nll[scored]  # the T possible values of the estimator
        s = nll[scored].sum().item()
        with count_forward_passes(tiny) as sizes:
            est = single_index_estimate(tiny, ids, mask_id, num_samples=num_samples, positions=positions,
                                        generator=torch.Generator().manual_seed(1))
        assert isinstance(est, torch.Tensor) and est.shape == (num_samples,) and est.dtype == torch.float32, (
            f"single_index_estimate must return a float32 tensor [num_samples] = [{num_samples}], got "
            f"{getattr(est, 'shape', type(est))} {getattr(est, 'dtype', '')}")
        assert len(sizes) == 1, f"all samples must be evaluated in ONE batched forward pass, counted {len(sizes)}"
        est64 = est.detach().cpu().double()
        dist = (est64.unsqueeze(1) - values.unsqueeze(0)).abs()
        closest = dist.argmin(1)
        assert dist.min(1).values.max().item() < 1e-3 * max(1.0, values.abs().max().item()), (
            "every estimate must equal T * (-log p(x_u | x_without_u)) for one scored position u "
            f"(T = number of scored positions = {t})")
        mean, se = est64.mean().item(), est64.std().item() / math.sqrt(num_samples)
        assert abs(mean - s) <= _SIGMAS * se, (
            f"the estimator must be unbiased: mean of {num_samples} estimates = {mean:.3f} +- {se:.3f}, "
            f"S(x) = {s:.3f}")
        counts = torch.bincount(closest, minlength=t).double()
        expected, sd = num_samples / t, math.sqrt(num_samples * (1 / t) * (1 - 1 / t))
        assert (counts - expected).abs().max().item() <= _SIGMAS * sd, (
            f"U must be uniform over the scored positions: counts {counts.long().tolist()}, expected about "
            f"{expected:.0f} each")
    again = single_index_estimate(tiny, ids, mask_id, num_samples=50, generator=torch.Generator().manual_seed(4))
    again2 = single_index_estimate(tiny, ids, mask_id, num_samples=50, generator=torch.Generator().manual_seed(4))
    assert torch.equal(again, again2), "draw U with the given generator, so a seeded call is reproducible"


# -------------------------------------------------------------------------- (c) autoregressive
@_one_thread
def check_causal_log_probs(causal_log_probs, perplexity, model=None, input_ids=None, context_token_id=None) -> None:
    """log p(x_t | x_<t) from one pass, against a prefix-by-prefix float64 reference."""
    tiny = tiny_causal_lm(seed=21)
    gen = torch.Generator().manual_seed(22)
    ids = torch.randint(1, 41, (15,), generator=gen)
    for ctx in (None, 0):
        ref = reference_causal_log_probs(tiny, ids, ctx)
        with count_forward_passes(tiny) as sizes:
            out = causal_log_probs(tiny, ids, context_token_id=ctx)
        assert isinstance(out, torch.Tensor) and out.dtype == torch.float32 and out.shape == ref.shape, (
            f"causal_log_probs (context_token_id={ctx}) must return a float32 tensor of shape "
            f"{list(ref.shape)}, got {getattr(out, 'shape', type(out))} {getattr(out, 'dtype', '')}")
        assert not out.requires_grad, "compute the log-probabilities under torch.no_grad()"
        err = (out.detach().cpu().double() - ref).abs().max().item()
        assert err < 2e-4 * max(1.0, ref.abs().max().item()), (
            f"causal_log_probs is off by up to {err:.2e} from log p(x_t | x_<t) (did you shift the logits "
            f"by one position?)")
        assert len(sizes) == 1, f"a causal model scores the whole sequence in ONE forward pass; counted {len(sizes)}"
    for value, n in [(-20.5, 10), (torch.tensor(-3.0), 3)]:
        got = perplexity(value, n)
        want = math.exp(-float(value) / n)
        assert isinstance(got, float), f"perplexity must return a Python float, got {type(got).__name__}"
        assert abs(got - want) < 1e-6 * want, f"perplexity({float(value)}, {n}) = {got}, expected {want}"
    _assert_value_error(lambda: perplexity(-1.0, 0), "perplexity with num_tokens=0")
    _assert_value_error(lambda: causal_log_probs(tiny, ids[:1]), "a single token without context")
    if model is not None:
        ids_real = input_ids[:16]
        ref = reference_causal_log_probs(model, ids_real, context_token_id, dtype=next(model.parameters()).dtype)
        out = causal_log_probs(model, ids_real, context_token_id=context_token_id)
        err = (out.detach().cpu().double() - ref).abs().max().item()
        assert out.shape == ref.shape and err < 1e-3, \
            f"on the notebook's causal LM, causal_log_probs is off by {err:.2e} from the prefix-by-prefix reference"


# --------------------------------------------------------------------------- BERT 80/10/10
@_one_thread
def check_bert_mask(bert_mask) -> None:
    """Selection rate q on non-special tokens; 80 % [MASK], 10 % random, 10 % unchanged; labels -100."""
    vocab, mask_id, specials = 12, 11, [0, 1]
    gen = torch.Generator().manual_seed(31)
    ids = torch.randint(2, 11, (400, 250), generator=gen)  # 100,000 tokens, none is the mask token
    ids[:, 0], ids[:, -1] = 0, 1  # like [CLS] ... [SEP]
    ids[::7, 100:130] = 0  # and a run of padding-like special tokens
    before = ids.clone()
    q = 0.15
    masked, labels = bert_mask(ids, specials, mask_id, vocab, q=q, generator=torch.Generator().manual_seed(0))
    for name, x in (("masked_ids", masked), ("labels", labels)):
        assert isinstance(x, torch.Tensor) and x.shape == ids.shape and x.dtype == torch.long, (
            f"{name} must be an int64 tensor of the input's shape {list(ids.shape)}, got "
            f"{getattr(x, 'shape', type(x))} {getattr(x, 'dtype', '')}")
    assert torch.equal(ids, before), "bert_mask must not modify input_ids in place"
    selected = labels != -100
    special = (ids == 0) | (ids == 1)
    assert not selected[special].any(), "special tokens must never be selected for prediction"
    assert torch.equal(masked[special], ids[special]), "special tokens must never be replaced"
    assert torch.equal(labels[selected], ids[selected]), "labels must hold the original token at selected positions"
    assert torch.equal(masked[~selected], ids[~selected]), "unselected positions must keep their token"
    n = int((~special).sum())
    k = int(selected.sum())
    sd = math.sqrt(n * q * (1 - q))
    assert abs(k - n * q) <= _SIGMAS * sd, (
        f"{k} of {n} non-special tokens selected; with q={q} expected {n * q:.0f} +- {_SIGMAS * sd:.0f}")
    out = masked[selected]
    orig = ids[selected]
    is_mask = out == mask_id
    unchanged = out == orig
    rand = ~is_mask & ~unchanged
    # a random replacement hits the original token with probability 1/vocab and the mask id with 1/vocab
    rates = {"[MASK]": (is_mask, 0.8 + 0.1 / vocab), "unchanged": (unchanged, 0.1 + 0.1 / vocab),
             "random other token": (rand, 0.1 * (1 - 2 / vocab))}
    for name, (hit, p) in rates.items():
        c = int(hit.sum())
        sd = math.sqrt(k * p * (1 - p))
        assert abs(c - k * p) <= _SIGMAS * sd, (
            f"{name}: {c} of {k} selected tokens ({c / k:.3f}); expected a fraction {p:.3f} (80/10/10 rule)")
    # the random replacements are uniform over [0, vocab): token v shows up as a visible "random other
    # token" when the random branch (probability 0.1) draws v at a selected position whose original is not v
    counts = torch.bincount(out[rand], minlength=vocab).double()
    for tok in range(vocab):
        if tok == mask_id:
            continue
        eligible = int((orig != tok).sum())
        p_tok = 0.1 / vocab
        sd = math.sqrt(eligible * p_tok * (1 - p_tok))
        c = counts[tok].item()
        assert abs(c - eligible * p_tok) <= _SIGMAS * sd + 1, (
            f"random replacements should be uniform over the vocabulary [0, {vocab}): token {tok} replaced "
            f"{c:.0f} selected tokens, expected about {eligible * p_tok:.0f}")
    # edge cases and reproducibility
    m0, l0 = bert_mask(ids, specials, mask_id, vocab, q=0.0, generator=torch.Generator().manual_seed(1))
    assert torch.equal(m0, ids) and bool((l0 == -100).all()), "q=0 must select nothing"
    m1, l1 = bert_mask(ids, specials, mask_id, vocab, q=1.0, generator=torch.Generator().manual_seed(1))
    assert torch.equal(l1 != -100, ~special), "q=1 must select every non-special token"
    a = bert_mask(ids[:3], specials, mask_id, vocab, q=0.5, generator=torch.Generator().manual_seed(2))
    b = bert_mask(ids[:3], specials, mask_id, vocab, q=0.5, generator=torch.Generator().manual_seed(2))
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]), "draw everything from the given generator"
    one_d = bert_mask(ids[0], specials, mask_id, vocab, q=0.5, generator=torch.Generator().manual_seed(2))
    assert one_d[0].shape == ids[0].shape, "bert_mask must accept a 1-D sequence too"
    _assert_value_error(lambda: bert_mask(ids, specials, mask_id, vocab, q=1.5), "q=1.5")


# ------------------------------------------------------------------------ (c)(i) compatibility
def _conditionals_of(joint: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """p(a|b) and p(b|a) of a joint table [A, B] whose marginals are positive."""
    return joint / joint.sum(0, keepdim=True), joint / joint.sum(1, keepdim=True)


def _cross_ratio_compatible(p_a_given_b: torch.Tensor, p_b_given_a: torch.Tensor) -> bool:
    """Independent reference for FULL support: R = p(a|b) / p(b|a) must have rank one (all 2x2 minors 0)."""
    r = (p_a_given_b / p_b_given_a).double().log()
    centred = r - r.mean(0, keepdim=True) - r.mean(1, keepdim=True) + r.mean()
    return bool(centred.abs().max() < 1e-9)


@_one_thread
def check_conditionals_compatible(conditionals_compatible) -> None:
    """Known answers: conditionals of a joint (also with zeros and disconnected support) are compatible;
    perturbed or independently drawn ones are not; the 'b says nothing about a, a says a lot about b'
    example is not."""
    gen = torch.Generator().manual_seed(41)

    def ask(pa, pb, want, what):
        got = conditionals_compatible(pa, pb)
        assert isinstance(got, bool), f"conditionals_compatible must return a Python bool, got {type(got).__name__}"
        assert got == want, f"{what}: expected {want}, got {got}"

    for na, nb in [(2, 2), (3, 5), (6, 4)]:
        joint = torch.rand(na, nb, generator=gen, dtype=torch.float64) + 0.05
        pa, pb = _conditionals_of(joint / joint.sum())
        assert _cross_ratio_compatible(pa, pb)
        ask(pa, pb, True, f"conditionals of a random {na}x{nb} joint")
        ask(pa.float(), pb.float(), True, f"float32 conditionals of a random {na}x{nb} joint")
        # perturb one column of p(a|b): still a conditional table, no longer from one joint
        bad = pa.clone()
        bad[:, 0] = torch.rand(na, generator=gen, dtype=torch.float64) + 0.05
        bad[:, 0] /= bad[:, 0].sum()
        want = _cross_ratio_compatible(bad, pb)
        ask(bad, pb, want, f"{na}x{nb} conditionals with the first column of p(a|b) redrawn")
        # two independently drawn conditional tables
        pa2 = torch.rand(na, nb, generator=gen, dtype=torch.float64) + 0.05
        pb2 = torch.rand(na, nb, generator=gen, dtype=torch.float64) + 0.05
        pa2, pb2 = pa2 / pa2.sum(0, keepdim=True), pb2 / pb2.sum(1, keepdim=True)
        ask(pa2, pb2, _cross_ratio_compatible(pa2, pb2), f"independently drawn {na}x{nb} conditionals")
    # zeros: a joint with structural zeros and two disconnected blocks
    joint = torch.zeros(4, 5, dtype=torch.float64)
    joint[:2, :3] = torch.rand(2, 3, generator=gen, dtype=torch.float64) + 0.1
    joint[2:, 3:] = torch.rand(2, 2, generator=gen, dtype=torch.float64) + 0.1
    joint[0, 1] = 0.0
    pa, pb = _conditionals_of(joint / joint.sum())
    ask(pa, pb, True, "conditionals of a joint with zeros and two disconnected blocks")
    wrong_support = pb.clone()
    wrong_support[0, 1], wrong_support[0, 0] = pb[0, 0] / 2, pb[0, 0] / 2
    ask(pa, wrong_support, False, "p(b|a) > 0 where p(a|b) = 0 (different supports)")
    # the notebook's example: p(b|a) does not depend on a (independence), p(a|b) does
    pa = torch.tensor([[0.9, 0.1], [0.1, 0.9]], dtype=torch.float64)
    pb = torch.full((2, 2), 0.5, dtype=torch.float64)
    ask(pa, pb, False, "p(a|b) = [[.9,.1],[.1,.9]] with p(b|a) = 1/2 everywhere")
    ask(torch.full((2, 2), 0.5), torch.full((2, 2), 0.5), True, "two uniform conditionals (independence)")
    # the tolerance is the caller's: conditionals of a joint, off by about 1e-3, pass a loose atol only
    joint = torch.rand(3, 4, generator=gen, dtype=torch.float64) + 0.2
    pa, pb = _conditionals_of(joint / joint.sum())
    noisy = pa * (1 + 2e-3 * (torch.rand(3, 4, generator=gen, dtype=torch.float64) - 0.5))
    noisy = noisy / noisy.sum(0, keepdim=True)
    for atol, want in ((0.05, True), (1e-6, False)):
        got = conditionals_compatible(noisy, pb, atol=atol)
        assert got is want, (f"conditionals of a joint perturbed by about 1e-3, atol={atol}: expected {want}, got {got} "
                             "(compare the reconstructed conditionals with the given ones within atol)")
    # not conditional tables at all
    _assert_value_error(lambda: conditionals_compatible(torch.full((2, 2), 0.3), torch.full((2, 2), 0.5)),
                        "columns of p(a|b) that do not sum to one")
    _assert_value_error(lambda: conditionals_compatible(torch.full((2, 3), 1 / 2), torch.full((3, 2), 0.5)),
                        "tables of different shapes")
