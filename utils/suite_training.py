"""Training the miniature suite's models: the corpus, the grouped-vocabulary trick, the training loops.

:func:`train_causal` trains one mini-pythia and saves its checkpoints; :func:`train_bert` trains
mini-bert. :func:`time_causal_step` and :func:`time_bert_step` measure one step of each, so that
:mod:`utils.suite_build` can say how long a build will take before it starts. The recipes live in
:mod:`utils.suite_recipes`.

Why training is cheap enough for a CPU: the vocabulary trick
-------------------------------------------------------------
The 50,304-way unembedding dominates the cost of a tiny model, but only ~11,000 token ids ever
occur in tiny-shakespeare. Under full-vocabulary training, every row of the unembedding whose token
never occurs as a target receives the *same* gradient (``p_v * h`` with identical logits), so rows
that start equal stay equal, step after step, under AdamW too (its update is elementwise). We
therefore initialise all never-seen rows to one shared vector and train them as a single row
whose logit counts ``n_unseen`` times in the softmax (``+ log n_unseen``), with its gradient and
its share of the clipping norm rescaled to one row's. Never-seen *input* rows get no gradient,
only AdamW's decay, which we apply in closed form. The saved models are ordinary full-vocabulary
models, and this training is mathematically identical to full-softmax training over all 50,304
rows (up to float rounding); the test suite checks that the loss recorded in training equals the
loss of the reloaded full model.

mini-bert's corruption
----------------------
mini-bert predicts a random ``mask_probability`` share of the positions (at least one per sequence).
The recipe's ``bert_corruption`` says what its input holds there: ``"all-mask"``, the mask token
everywhere (the "100/0/0" variant of Devlin et al. 2019, Table 8), or ``"80/10/10"``, BERT's rule (the
mask token 80 %, a random token of the training vocabulary 10 %, unchanged 10 %), which the ``small``
and ``default`` suites use: on the same budget it learned to use its context clearly better (see
:mod:`utils.suite_recipes`). Task 2's bonus asks students to implement the rule themselves.
"""

from __future__ import annotations

import contextlib
import functools
import math
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from .data import load_text, split_text
from .device import seed_everything
from .suite_recipes import ModelSize, SuiteRecipe, bert_config, neox_config

#: Before a build, each model's training steps are timed (after one warm-up step) for about this many
#: seconds, at least 3 and at most :data:`MAX_TIMED_STEPS` steps, to estimate the build's duration.
TIMING_SECONDS = 1.0
MAX_TIMED_STEPS = 20


# ------------------------------------------------------------------------------------------- data
@dataclass
class Corpus:
    """Token windows of the training and held-out parts, plus the training vocabulary.

    train / held_out: ``int64 [n_windows, context + 1]`` (inputs are ``[:, :-1]``, targets ``[:, 1:]``).
    seen_ids: ``int64 [K]`` sorted token ids that occur anywhere in the training windows.
    description: sizes and provenance, copied into the suite's manifest.
    """

    train: torch.Tensor
    held_out: torch.Tensor
    seen_ids: torch.Tensor
    description: dict


@functools.lru_cache(maxsize=4)
def _tokenized(corpus: str, held_out_fraction: float) -> tuple[torch.Tensor, torch.Tensor]:
    """GPT-NeoX token ids ``int64 [n]`` of the training and held-out parts (cached per process)."""
    from .tokenizer import load_tokenizer

    tokenizer = load_tokenizer()
    parts = split_text(load_text(corpus), held_out_fraction)
    return tuple(torch.tensor(tokenizer(p, verbose=False)["input_ids"], dtype=torch.int64) for p in parts)


def load_corpus(recipe: SuiteRecipe) -> Corpus:
    """The :class:`Corpus` of ``recipe``: its corpus tokenized with the GPT-NeoX tokenizer, the held-out
    end split off (``held_out_fraction`` of the characters, at a line boundary) and both parts cut into
    non-overlapping windows of ``recipe.context + 1`` tokens."""
    train_ids, held_ids = _tokenized(recipe.corpus, recipe.held_out_fraction)

    def windows(ids: torch.Tensor) -> tuple[torch.Tensor, int]:
        n = (len(ids) - 1) // recipe.context
        # Window i covers tokens [i*T, (i+1)*T]; consecutive windows share one boundary token so
        # every token except the first is a target exactly once.
        idx = torch.arange(n)[:, None] * recipe.context + torch.arange(recipe.context + 1)[None, :]
        return ids[idx], len(ids)

    train, n_train = windows(train_ids)
    held_out, n_held = windows(held_ids)
    seen = torch.unique(train)
    return Corpus(
        train=train,
        held_out=held_out,
        seen_ids=seen,
        description={
            "corpus": f"data/text/{recipe.corpus} (public domain)",
            "held_out": f"last {recipe.held_out_fraction:.0%} of the characters (utils.data.split_text)",
            "train_tokens": n_train,
            "held_out_tokens": n_held,
            "train_windows": len(train),
            "held_out_windows": len(held_out),
            "distinct_train_token_ids": int(len(seen)),
        },
    )


def data_order(recipe: SuiteRecipe, n_windows: int, steps: int) -> torch.Tensor:
    """Which training windows each step sees: ``int64 [steps, recipe.batch_size]`` indices into
    ``n_windows`` windows, one seeded permutation per epoch, the same for every model size (as Pythia)."""
    g = torch.Generator().manual_seed(recipe.seed)
    needed = steps * recipe.batch_size
    order = torch.cat([torch.randperm(n_windows, generator=g) for _ in range(math.ceil(needed / n_windows))])
    return order[:needed].view(steps, recipe.batch_size)


def lr_at(step: int, peak: float, recipe: SuiteRecipe, total: int) -> float:
    """Learning rate (float) at 0-based ``step`` of ``total``: linear warmup over
    ``recipe.warmup_fraction`` of the steps to ``peak``, then cosine decay to
    ``recipe.min_lr_ratio * peak`` (Pythia's schedule shape)."""
    warmup = max(1, round(recipe.warmup_fraction * total))
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return peak * (recipe.min_lr_ratio + (1 - recipe.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))


# ------------------------------------------------------------------------- grouped-vocabulary head
class GroupedVocabulary:
    """The training-time view of a full-vocabulary model (see the module docstring).

    Built from the full model's input embedding ``[V, d]``, output matrix ``[V, d]`` (and optional
    output bias ``[V]``) and the seen token ids ``[K]``. Holds compact input rows ``[K, d]`` for the
    seen ids, compact output rows ``[K, d]`` (+ bias ``[K]``), and ONE shared output row ``[1, d]``
    (+ bias ``[1]``) standing for all never-seen ids.
    """

    def __init__(self, embed_in: torch.Tensor, embed_out: torch.Tensor, seen_ids: torch.Tensor,
                 out_bias: torch.Tensor | None = None):
        vocab = embed_out.shape[0]
        self.seen_ids = seen_ids
        unseen_mask = torch.ones(vocab, dtype=torch.bool)
        unseen_mask[seen_ids] = False
        self.unseen_ids = unseen_mask.nonzero().squeeze(1)
        self.n_unseen = len(self.unseen_ids)
        first_unseen = int(self.unseen_ids[0])
        self.to_compact = torch.full((vocab,), len(seen_ids), dtype=torch.int64)  # unseen -> group K
        self.to_compact[seen_ids] = torch.arange(len(seen_ids))
        self.unseen_in_init = embed_in.detach().clone()
        self.in_decay = 1.0  # product of AdamW's (1 - lr * wd) factors applied to never-seen input rows
        self.emb_in = torch.nn.Parameter(embed_in.detach()[seen_ids].clone())
        self.w_out = torch.nn.Parameter(embed_out.detach()[seen_ids].clone())
        self.w_group = torch.nn.Parameter(embed_out.detach()[first_unseen:first_unseen + 1].clone())
        self.b_out = self.b_group = None
        if out_bias is not None:
            self.b_out = torch.nn.Parameter(out_bias.detach()[seen_ids].clone())
            self.b_group = torch.nn.Parameter(out_bias.detach()[first_unseen:first_unseen + 1].clone())

    def parameters(self) -> list[torch.nn.Parameter]:
        """The trainable compact tensors (input rows, output rows, shared row, biases if any)."""
        return [p for p in (self.emb_in, self.w_out, self.w_group, self.b_out, self.b_group) if p is not None]

    def group_parameters(self) -> list[torch.nn.Parameter]:
        """The shared never-seen row ``[1, d]`` (and its bias ``[1]``, if any)."""
        return [p for p in (self.w_group, self.b_group) if p is not None]

    def full_input_rows(self) -> torch.Tensor:
        """``[V, d]`` input embedding of the full model (never-seen rows: decayed init)."""
        full = self.unseen_in_init * self.in_decay
        full[self.seen_ids] = self.emb_in.detach()
        return full

    def embed(self, full_ids: torch.Tensor, *, training: bool) -> torch.Tensor:
        """``int64 [B, T]`` full-vocabulary ids -> ``[B, T, d]`` input embeddings."""
        if training:
            return F.embedding(self.to_compact[full_ids], self.emb_in)
        return F.embedding(full_ids, self.full_input_rows())

    def nll(self, hidden: torch.Tensor, full_targets: torch.Tensor) -> torch.Tensor:
        """Per-token negative log-likelihood over the FULL vocabulary, ``[N, d], [N] -> [N]`` nats."""
        logits = hidden @ self.w_out.T
        group = hidden @ self.w_group.T + math.log(self.n_unseen)
        if self.b_out is not None:
            logits = logits + self.b_out
            group = group + self.b_group
        targets = self.to_compact[full_targets]
        nll = F.cross_entropy(torch.cat([logits, group], dim=-1), targets, reduction="none")
        # A never-seen target is one of n_unseen equal rows: its own share is 1/n_unseen of the group.
        return nll + (targets == len(self.seen_ids)).to(nll.dtype) * math.log(self.n_unseen)

    def rescale_group_grads(self) -> None:
        """Turn the shared row's gradient (a sum over n_unseen rows) into one row's gradient, in place."""
        for p in self.group_parameters():
            if p.grad is not None:
                p.grad /= self.n_unseen

    def write_full(self, embed_in: torch.Tensor, embed_out: torch.Tensor,
                   out_biases: tuple[torch.Tensor, ...] = ()) -> None:
        """Copy the trained rows into the full model's ``[V, d]`` matrices (and ``[V]`` biases), in place."""
        with torch.no_grad():
            embed_in.copy_(self.full_input_rows())
            embed_out.copy_(self.w_group.detach().expand_as(embed_out))
            embed_out[self.seen_ids] = self.w_out.detach()
            for bias in out_biases:
                bias.copy_(self.b_group.detach().expand_as(bias))
                bias[self.seen_ids] = self.b_out.detach()


def clip_grad_norm_(params: list[torch.Tensor], groups: GroupedVocabulary, max_norm: float) -> float:
    """Global-norm clipping of ``params``' gradients, in place, as if the shared row were
    ``n_unseen`` separate rows (call after :meth:`GroupedVocabulary.rescale_group_grads`).
    Returns the pre-clipping norm (float)."""
    group_ids = {id(p) for p in groups.group_parameters()}
    total = 0.0
    for p in params:
        if p.grad is None:
            continue
        sq = float(p.grad.detach().pow(2).sum())
        total += sq * (groups.n_unseen if id(p) in group_ids else 1)
    norm = math.sqrt(total)
    if norm > max_norm:
        scale = max_norm / (norm + 1e-6)
        for p in params:
            if p.grad is not None:
                p.grad.mul_(scale)
    return norm


def _optimizer_step(opt, params, groups: "GroupedVocabulary", recipe, loss: torch.Tensor, lr: float) -> float:
    """The update every suite model shares: set ``lr``, backpropagate ``loss`` (0-dim), rescale the
    grouped vocabulary's gradients, clip, step, decay the grouped rows; returns the loss as a float."""
    for group in opt.param_groups:
        group["lr"] = lr
    opt.zero_grad(set_to_none=True)
    loss.backward()
    groups.rescale_group_grads()
    clip_grad_norm_(params, groups, recipe.grad_clip)
    opt.step()
    groups.in_decay *= 1 - lr * recipe.weight_decay
    return float(loss.detach())


@contextlib.contextmanager
def quiet_transformers():
    """Context manager: silences transformers' per-file progress bars (weights loading, shard
    writing) inside the block and restores them afterwards. Yields nothing."""
    from transformers.utils import logging as hf_logging

    was_disabled = hf_logging.is_progress_bar_enabled() is False
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if not was_disabled:
            hf_logging.enable_progress_bar()


def _make_optimizer(params, lr: float, recipe: SuiteRecipe) -> torch.optim.AdamW:
    return torch.optim.AdamW(params, lr=lr, betas=recipe.betas, weight_decay=recipe.weight_decay,
                             eps=1e-8, foreach=True)


# ------------------------------------------------------------------------------------ causal models
class _CausalRun:
    """One mini-pythia in training: the seeded model, its grouped vocabulary and its optimizer."""

    def __init__(self, size: ModelSize, recipe: SuiteRecipe, corpus: Corpus):
        from transformers import GPTNeoXForCausalLM

        seed_everything(recipe.seed)
        self.size, self.recipe, self.corpus = size, recipe, corpus
        self.model = GPTNeoXForCausalLM(neox_config(size, recipe.context))
        self.model.train()
        self.body = self.model.gpt_neox
        self.groups = GroupedVocabulary(self.body.embed_in.weight, self.model.get_output_embeddings().weight,
                                        corpus.seen_ids)
        body_params = [p for n, p in self.body.named_parameters() if not n.startswith("embed_in")]
        self.params = body_params + self.groups.parameters()
        self.opt = _make_optimizer(self.params, size.lr, recipe)

    def step(self, step: int, windows: torch.Tensor) -> float:
        """One optimizer step (0-based ``step``) on ``windows [B, T+1]``; returns the training loss."""
        lr = lr_at(step, self.size.lr, self.recipe, self.recipe.total_steps)
        h = self.body(inputs_embeds=self.groups.embed(windows[:, :-1], training=True)).last_hidden_state
        loss = self.groups.nll(h.reshape(-1, h.shape[-1]), windows[:, 1:].reshape(-1)).mean()
        return _optimizer_step(self.opt, self.params, self.groups, self.recipe, loss, lr)

    @torch.no_grad()
    def held_out_loss(self, windows: torch.Tensor, batch: int = 16) -> float:
        """Mean nats/token of ``windows [n, T+1]`` under the full-vocabulary model (computed grouped)."""
        self.body.eval()
        total, count = 0.0, 0
        for i in range(0, len(windows), batch):
            w = windows[i:i + batch]
            h = self.body(inputs_embeds=self.groups.embed(w[:, :-1], training=False)).last_hidden_state
            nll = self.groups.nll(h.reshape(-1, h.shape[-1]), w[:, 1:].reshape(-1))
            total += float(nll.sum())
            count += nll.numel()
        self.body.train()
        return total / count

    def save(self, folder: Path) -> None:
        """Write the full-vocabulary model as a ``save_pretrained`` folder."""
        self.groups.write_full(self.body.embed_in.weight, self.model.get_output_embeddings().weight)
        with quiet_transformers():
            self.model.save_pretrained(folder)


def train_causal(size: ModelSize, recipe: SuiteRecipe, corpus: Corpus, out_dir: Path, bar=None) -> dict:
    """Train one mini-pythia of ``size`` under ``recipe`` on ``corpus``, saving a ``save_pretrained``
    folder ``out_dir/step<N>`` at every checkpoint step; ``bar`` (a tqdm bar, optional) advances one
    unit per step.

    Returns the training record, a dict: ``train_loss`` (list, one float per step),
    ``held_out_loss`` (``{str(step): nats/token}`` on the first ``eval_windows`` held-out windows),
    ``final_held_out_loss`` (the last step on all held-out windows), ``checkpoint_steps``,
    ``train_seconds``, ``checkpoint_seconds`` and ``train_tokens_per_second``.
    """
    run = _CausalRun(size, recipe, corpus)
    order = data_order(recipe, len(corpus.train), recipe.total_steps)
    checkpoints = set(recipe.checkpoint_steps())
    eval_subset = corpus.held_out[:recipe.eval_windows]
    record = {"train_loss": [], "held_out_loss": {}, "checkpoint_steps": sorted(checkpoints)}
    t_train = t_ckpt = 0.0

    def checkpoint(step: int) -> None:
        nonlocal t_ckpt
        t0 = time.perf_counter()
        # Every checkpoint is scored on the same windows, so loss against step is comparable;
        # the final step is also scored on the whole held-out part.
        record["held_out_loss"][str(step)] = run.held_out_loss(eval_subset)
        if step == recipe.total_steps:
            record["final_held_out_loss"] = run.held_out_loss(corpus.held_out)
        run.save(out_dir / f"step{step}")
        t_ckpt += time.perf_counter() - t0

    checkpoint(0)
    for step in range(recipe.total_steps):
        t0 = time.perf_counter()
        loss = run.step(step, corpus.train[order[step]])
        record["train_loss"].append(loss)
        t_train += time.perf_counter() - t0
        if bar is not None:
            bar.update(1)
            bar.set_postfix_str(f"loss {loss:.3f}")
        if step + 1 in checkpoints:
            checkpoint(step + 1)
    n_tokens = recipe.total_steps * recipe.tokens_per_step()
    record["train_seconds"] = t_train
    record["checkpoint_seconds"] = t_ckpt
    record["train_tokens_per_second"] = n_tokens / t_train if t_train else float("nan")
    return record


def _timed_steps(step) -> float:
    """Typical seconds of ``step(i)``, i = 1, 2, ..., after one untimed warm-up call ``step(0)`` (the
    first step of a model pays one-off allocations): the lower quartile of the step times over about
    :data:`TIMING_SECONDS` (3 to :data:`MAX_TIMED_STEPS` steps). A machine busy with other programs
    stalls some steps for seconds; the quartile measures the speed of the steps it leaves alone."""
    step(0)
    times = []
    start = time.perf_counter()
    while len(times) < 3 or (len(times) < MAX_TIMED_STEPS and time.perf_counter() - start < TIMING_SECONDS):
        t0 = time.perf_counter()
        step(len(times) + 1)
        times.append(time.perf_counter() - t0)
    return sorted(times)[len(times) // 4]


def time_causal_step(size: ModelSize, recipe: SuiteRecipe, corpus: Corpus, scratch: Path) -> dict:
    """Measure, before a build, what training the mini-pythia of ``size`` costs on this machine.

    Times training steps (:func:`_timed_steps`: about a second of them after a warm-up step), one
    checkpoint evaluation (the first ``eval_windows`` held-out windows) and one checkpoint save into the folder
    ``scratch`` (deleted afterwards). Nothing is kept: :func:`train_causal` starts again from its seed.
    Returns seconds as ``{"step": s, "eval": s, "save": s}``.
    """
    import shutil

    run = _CausalRun(size, recipe, corpus)
    order = data_order(recipe, len(corpus.train), MAX_TIMED_STEPS + 1)
    step = _timed_steps(lambda i: run.step(i, corpus.train[order[i]]))
    t1 = time.perf_counter()
    run.held_out_loss(corpus.held_out[:recipe.eval_windows])
    t2 = time.perf_counter()
    try:
        run.save(scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return {"step": step, "eval": t2 - t1, "save": time.perf_counter() - t2}


# ------------------------------------------------------------------------------------- mini-bert
def mask_for_training(windows: torch.Tensor, probability: float, mask_id: int, generator: torch.Generator,
                      corruption: str = "all-mask",
                      random_ids: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """mini-bert's corruption of ``windows`` (``int64 [B, T]`` token ids).

    Each position is chosen with ``probability`` (draws from ``generator``), and one random position of
    every row is chosen in any case, so every row has a target. ``corruption="all-mask"``: every chosen
    position becomes ``mask_id`` ("100/0/0"). ``"80/10/10"``: BERT's rule, one more uniform number per
    position picks the mask token (< 0.8), a token drawn uniformly from ``random_ids`` (< 0.9, the
    training vocabulary: a never-seen id has no trained input row) or the unchanged token.
    Returns ``(inputs, chosen)``: ``inputs`` int64 ``[B, T]`` and ``chosen`` bool ``[B, T]``, the positions
    whose original token is a target.
    """
    chosen = torch.rand(windows.shape, generator=generator) < probability
    rows = torch.arange(windows.shape[0])
    chosen[rows, torch.randint(windows.shape[1], (windows.shape[0],), generator=generator)] = True
    if corruption == "all-mask":
        return windows.masked_fill(chosen, mask_id), chosen
    if corruption != "80/10/10" or random_ids is None:
        raise ValueError(f"corruption must be 'all-mask', or '80/10/10' with random_ids; got {corruption!r}")
    action = torch.rand(windows.shape, generator=generator)
    random_tokens = random_ids[torch.randint(len(random_ids), windows.shape, generator=generator)]
    inputs = windows.clone()
    inputs[chosen & (action < 0.8)] = mask_id
    swap = chosen & (action >= 0.8) & (action < 0.9)
    inputs[swap] = random_tokens[swap]
    return inputs, chosen


class _BertRun:
    """mini-bert in training: the seeded model, its grouped vocabulary and its optimizer."""

    def __init__(self, size: ModelSize, recipe: SuiteRecipe, corpus: Corpus, mask_id: int):
        from transformers import BertForMaskedLM

        if recipe.bert_corruption not in ("all-mask", "80/10/10"):
            raise ValueError(f"unknown bert_corruption {recipe.bert_corruption!r}; the suite knows 'all-mask' and "
                             "'80/10/10'")
        seed_everything(recipe.seed)
        self.size, self.recipe, self.corpus, self.mask_id = size, recipe, corpus, mask_id
        self.model = BertForMaskedLM(bert_config(size, recipe.context))
        self.model.train()
        # The mask id is an input, never a target: it joins the compact input vocabulary.
        seen = torch.unique(torch.cat([corpus.seen_ids, torch.tensor([mask_id])]))
        self.decoder = self.model.cls.predictions.decoder
        self.groups = GroupedVocabulary(self.model.bert.embeddings.word_embeddings.weight, self.decoder.weight,
                                        seen, out_bias=self.decoder.bias)
        skip = ("bert.embeddings.word_embeddings", "cls.predictions.decoder", "cls.predictions.bias")
        self.params = [p for n, p in self.model.named_parameters() if not n.startswith(skip)]
        self.params += self.groups.parameters()
        self.opt = _make_optimizer(self.params, size.lr, recipe)

    def _masked_nll(self, windows: torch.Tensor, generator: torch.Generator, training: bool) -> torch.Tensor:
        inputs, chosen = mask_for_training(windows, self.recipe.mask_probability, self.mask_id, generator,
                                           self.recipe.bert_corruption, self.corpus.seen_ids)
        h = self.model.bert(inputs_embeds=self.groups.embed(inputs, training=training)).last_hidden_state
        return self.groups.nll(self.model.cls.predictions.transform(h[chosen]), windows[chosen])

    def step(self, step: int, windows: torch.Tensor, generator: torch.Generator) -> float:
        """One optimizer step (0-based ``step``) on ``windows [B, T]``; returns the masked-token loss."""
        lr = lr_at(step, self.size.lr, self.recipe, self.recipe.bert_steps)
        loss = self._masked_nll(windows, generator, True).mean()
        return _optimizer_step(self.opt, self.params, self.groups, self.recipe, loss, lr)

    @torch.no_grad()
    def held_out_masked_loss(self, windows: torch.Tensor) -> float:
        """Mean nats per masked token on ``windows [n, T]`` (a fixed seed chooses the positions)."""
        self.model.eval()
        return float(self._masked_nll(windows, torch.Generator().manual_seed(0), False).mean())

    def save(self, folder: Path, tokenizer) -> None:
        """Write the full-vocabulary model and ``tokenizer`` as one ``save_pretrained`` folder."""
        self.groups.write_full(self.model.bert.embeddings.word_embeddings.weight, self.decoder.weight,
                               out_biases=(self.decoder.bias, self.model.cls.predictions.bias))
        with quiet_transformers():
            self.model.save_pretrained(folder)
            tokenizer.save_pretrained(folder)


def train_bert(size: ModelSize, recipe: SuiteRecipe, corpus: Corpus, mask_id: int, out_dir: Path, tokenizer,
               bar=None) -> dict:
    """Train mini-bert of ``size`` under ``recipe`` (already :meth:`SuiteRecipe.for_bert`) on ``corpus``
    as a masked LM (corruption: :func:`mask_for_training`, mask token ``mask_id``), then save it and
    ``tokenizer`` into the folder ``out_dir``; ``bar`` (a tqdm bar, optional) advances one unit per step.

    Returns the training record, a dict: ``train_loss`` (one float per step), ``train_seconds`` and
    ``held_out_masked_loss`` (nats per masked token on all held-out windows).
    """
    run = _BertRun(size, recipe, corpus, mask_id)
    order = data_order(recipe, len(corpus.train), recipe.bert_steps)
    g = torch.Generator().manual_seed(recipe.seed + 1)
    record = {"train_loss": []}
    t0 = time.perf_counter()
    for step in range(recipe.bert_steps):
        loss = run.step(step, corpus.train[order[step], :-1], g)
        record["train_loss"].append(loss)
        if bar is not None:
            bar.update(1)
            bar.set_postfix_str(f"mlm loss {loss:.3f}")
    record["train_seconds"] = time.perf_counter() - t0
    record["held_out_masked_loss"] = run.held_out_masked_loss(corpus.held_out[:, :-1])
    run.save(out_dir, tokenizer)
    return record


def time_bert_step(size: ModelSize, recipe: SuiteRecipe, corpus: Corpus, mask_id: int) -> float:
    """Seconds of one mini-bert training step of ``size`` under ``recipe`` (already
    :meth:`SuiteRecipe.for_bert`) on this machine: typical over about a second of steps after a
    warm-up step (:func:`_timed_steps`). Nothing is kept."""
    run = _BertRun(size, recipe, corpus, mask_id)
    order = data_order(recipe, len(corpus.train), MAX_TIMED_STEPS + 1)
    g = torch.Generator().manual_seed(0)
    return _timed_steps(lambda i: run.step(i, corpus.train[order[i], :-1], g))
