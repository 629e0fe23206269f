"""Plumbing for Task B (Pythia scaling laws): the Pythia architectures, published constants, the
published evaluations of the real suite (data/pythia-evals/), WikiText detokenisation as lm-evaluation-harness does it, a CSV results cache, a checkpoint
sweep, the Chinchilla-style parametric fit and hub-cache clean-up.

It also gives the notebook's core two stand-ins: parameter counts looked up in a published source
(:func:`known_parameter_counts`) and a simple held-out loss over disjoint blocks (:func:`block_loss`).
The ideas (fitting and extrapolating a power law, splitting a compute budget; in the extensions,
counting parameters and evaluating the loss the lm-evaluation-harness way) are the students' work in
the Task B notebook; this module only carries what surrounds them.
"""

from __future__ import annotations

import gc
import hashlib
import json
import math
import os
import re
import time
from pathlib import Path
from typing import Callable, Iterable

import numpy as np

from .paths import DATA_DIR, cache_dir

#: Tokens per optimiser step of every Pythia model: 1024 sequences x 2048 tokens.
PYTHIA_TOKENS_PER_STEP = 2_097_152
#: Pythia's last step (the ``main`` revision).
PYTHIA_FINAL_STEP = 143_000
#: The ten Pythia sizes, smallest first.
PYTHIA_SIZES = ("14m", "31m", "70m", "160m", "410m", "1b", "1.4b", "2.8b", "6.9b", "12b")
#: Sizes evaluated by default online (a GPU evaluates all of them in minutes; downloads dominate).
PYTHIA_DEFAULT_SIZES = ("14m", "31m", "70m", "160m", "410m", "1b", "1.4b")
#: Opt-in sizes (2.8b: 5.6 GB, 6.9b: 13.8 GB, 12b: 23.7 GB per fp16 checkpoint).
PYTHIA_OPT_IN_SIZES = ("2.8b", "6.9b", "12b")

#: Published constants, each from the paper named beside it.
#: Kaplan et al. 2020, "Scaling Laws for Neural Language Models" (arXiv:2001.08361), eqs. 1.1 and 1.2:
#: L(N) = (N_c / N)^alpha_N over non-embedding parameters, L(D) = (D_c / D)^alpha_D over tokens.
KAPLAN = {"alpha_N": 0.076, "N_c": 8.8e13, "alpha_D": 0.095, "D_c": 5.4e13}
#: Michaud et al. 2023, "The Quantization Model of Neural Scaling" (arXiv:2303.13506): Pythia (v0) on the
#: Pile, L proportional to N^-0.083.
MICHAUD_ALPHA = 0.083
#: Hoffmann et al. 2022, "Training Compute-Optimal Large Language Models" (arXiv:2203.15556), approach 3:
#: L(N, D) = E + A / N^alpha + B / D^beta.
HOFFMANN = {"E": 1.69, "A": 406.4, "B": 410.7, "alpha": 0.34, "beta": 0.28}
#: Besiroglu et al. 2024, "Chinchilla Scaling: A replication attempt" (arXiv:2404.10102): the same form refit.
BESIROGLU = {"E": 1.82, "A": 482.0, "B": 2085.4, "alpha": 0.348, "beta": 0.366}
#: WikiText-2 word perplexity, lm-evaluation-harness, Pythia v0 models at the final step.
PUBLISHED_WIKITEXT_WORD_PERPLEXITY = {"160m": 32.1, "410m": 22.5, "1.4b": 16.5, "6.9b": 12.30, "12b": 11.36}

_CONFIG_FILE = DATA_DIR / "pythia_configs.json"
#: Published evaluations of the real Pythia models by EleutherAI (their ``pythia`` repository, Apache-2.0):
#: see data/pythia-evals/README.md.
PYTHIA_EVALS_DIR = DATA_DIR / "pythia-evals"


# ------------------------------------------------------------------------------- architectures
def pythia_size(name: str) -> str:
    """``"EleutherAI/pythia-70m"``, ``"pythia-70m"`` or ``"70m"`` -> ``"70m"`` (checked)."""
    size = name.rsplit("/", 1)[-1].removeprefix("pythia-").removesuffix("-deduped")
    if size not in PYTHIA_SIZES:
        raise ValueError(f"unknown Pythia size {name!r}; choose one of {PYTHIA_SIZES}")
    return size


def pythia_config(name: str):
    """The ``GPTNeoXConfig`` of a Pythia model, from data/pythia_configs.json (no network).

    Matches the hub's config.json in every field that shapes a parameter.
    """
    from transformers import GPTNeoXConfig

    table = json.loads(_CONFIG_FILE.read_text(encoding="utf-8"))
    fields = dict(table["models"][f"pythia-{pythia_size(name)}"])
    fields.pop("non_embedding_params")
    return GPTNeoXConfig(**table["shared"], **fields, intermediate_size=4 * fields["hidden_size"])


def published_non_embedding_params(name: str) -> int:
    """The Pythia paper's non-embedding parameter count of a size (as stored in the config file)."""
    table = json.loads(_CONFIG_FILE.read_text(encoding="utf-8"))
    return int(table["models"][f"pythia-{pythia_size(name)}"]["non_embedding_params"])


def known_parameter_counts(models: Iterable[str], manifest: dict | None = None) -> dict[str, tuple[int, int]]:
    """``{name: (total, non_embedding)}`` looked up, not counted (no model is built).

    ``EleutherAI/pythia-<size>`` names: the non-embedding count of the Pythia paper (Biderman et al. 2023,
    arXiv:2304.01373; Kaplan's N), as in data/pythia_configs.json; the total adds Pythia's two untied
    ``vocab_size x hidden_size`` matrices (embedding and unembedding). Miniature-suite names: the
    ``total_params`` and ``non_embedding_params`` that the suite's ``manifest`` recorded at training.
    """
    recorded = {m["name"]: (int(m["total_params"]), int(m["non_embedding_params"]))
                for m in (manifest or {}).get("models", [])}
    table = json.loads(_CONFIG_FILE.read_text(encoding="utf-8"))["models"]
    counts = {}
    for name in models:
        if name in recorded:
            counts[name] = recorded[name]
            continue
        arch = table[f"pythia-{pythia_size(name)}"]
        core = int(arch["non_embedding_params"])
        counts[name] = (core + 2 * arch["vocab_size"] * arch["hidden_size"], core)
    return counts


def _published_table(file_name: str):
    """One CSV of data/pythia-evals/ as a DataFrame; a clear error when the pack's copy is missing."""
    import pandas as pd

    path = PYTHIA_EVALS_DIR / file_name
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} is missing. The published Pythia evaluations ship with the course pack in data/pythia-evals/ "
            "(data/README.md says what they are): unpack the pack again (ex01-student.zip, or ./pack.sh env in the "
            "course repository) or copy that folder back.")
    return pd.read_csv(path)


def published_wikitext(*, final_only: bool = False, deduped: bool = False):
    """WikiText evaluations of the real Pythia models as EleutherAI published them (lm-evaluation-harness,
    Pythia v0: 160m, 410m, 1.4b, 6.9b, 12b, 15 checkpoints each), not measured by this pack.

    Returns a DataFrame ``[rows, 6]``, sorted by size then tokens: ``model`` (``"pythia-160m"``, with
    ``-deduped`` for the models trained on the deduplicated Pile), ``tokens_seen`` (int), ``step`` (the
    checkpoint in Pythia's 2,097,152-token steps, ``tokens_seen / 2,097,152``), ``non_embedding_params``
    (int: the Pythia paper's N, the same architectures as the hub's v1 models), ``bits_per_byte`` (the
    held-out cross-entropy per UTF-8 byte, in bits) and ``word_perplexity``. ``final_only`` keeps each
    model's last checkpoint (all at 299,892,736,000 tokens).
    """
    table = _published_table("pythia_v0_wikitext_by_step.csv")
    table = table[table["model_v0"].str.endswith("-deduped") == deduped]
    out = table.rename(columns={"model_v0": "model", "wikitext_bits_per_byte": "bits_per_byte",
                                "wikitext_word_ppl": "word_perplexity"})
    out = out.assign(step=out["tokens_seen"] // PYTHIA_TOKENS_PER_STEP,
                     non_embedding_params=out["model"].map(published_non_embedding_params))
    if final_only:
        out = out[out["tokens_seen"] == out.groupby("model")["tokens_seen"].transform("max")]
    columns = ["model", "tokens_seen", "step", "non_embedding_params", "bits_per_byte", "word_perplexity"]
    return out.sort_values(["non_embedding_params", "tokens_seen"])[columns].reset_index(drop=True)


def published_lambada(*, shots: int = 0, deduped: bool = False):
    """LAMBADA (OpenAI) evaluations of the real Pythia v1 models as EleutherAI published them: 70m, 160m,
    410m, 1.4b, 2.8b, 6.9b and 12b (the standard 1b has no files) at up to 27 checkpoints, not measured by
    this pack. LAMBADA asks for the last word of a passage; its perplexity is over that one word.

    Returns a DataFrame ``[rows, 6]``, sorted by size then step: ``model``, ``step``, ``tokens_seen``
    (int), ``non_embedding_params`` (int), ``lambada_perplexity`` and ``lambada_accuracy``. ``shots``: 0 or
    5 examples in the prompt. Step 1 is dropped: the published files give it step 0's numbers.
    """
    table = _published_table("pythia_v1_lambada_by_step.csv")
    sizes = table["model"].str.removeprefix("pythia-").str.removesuffix("-deduped")
    table = table[(table["shots"] == shots) & sizes.isin(PYTHIA_SIZES) & (table["step"] != 1)
                  & (table["model"].str.endswith("-deduped") == deduped)]
    out = table.rename(columns={"lambada_openai_ppl": "lambada_perplexity", "lambada_openai_acc": "lambada_accuracy"})
    out = out.assign(non_embedding_params=out["model"].map(published_non_embedding_params))
    columns = ["model", "step", "tokens_seen", "non_embedding_params", "lambada_perplexity", "lambada_accuracy"]
    return out.sort_values(["non_embedding_params", "step"])[columns].reset_index(drop=True)


def context_length(config) -> int:
    """The context length lm-evaluation-harness uses for a model config (its first of
    ``n_positions``, ``max_position_embeddings``, ``n_ctx``; 2048 if none)."""
    for attr in ("n_positions", "max_position_embeddings", "n_ctx"):
        value = getattr(config, attr, None)
        if value:
            return int(value)
    return 2048


# ------------------------------------------------------------------------------------- text
def wikitext_detokenize(page: str) -> str:
    """Undo WikiText's tokenisation (`` @-@ ``, spaces before punctuation) exactly as
    lm-evaluation-harness's ``wikitext`` task does before scoring a page."""
    s = page.replace("s '", "s'")
    s = re.sub(r"/' [0-9]/", r"/'[0-9]/", s)
    s = s.replace(" @-@ ", "-").replace(" @,@ ", ",").replace(" @.@ ", ".")
    for p in (":", ";", ".", "!", "?", ","):
        s = s.replace(f" {p} ", f"{p} ")
    s = re.sub(r"\(\s*([^\)]*?)\s*\)", r"(\1)", s)
    s = re.sub(r"\[\s*([^\]]*?)\s*\]", r"[\1]", s)
    s = re.sub(r"{\s*([^}]*?)\s*}", r"{\1}", s)
    s = re.sub(r"\"\s*([^\"]*?)\s*\"", r'"\1"', s)
    s = re.sub(r"'\s*([^']*?)\s*'", r"'\1'", s)
    s = s.replace("= = = =", "====").replace("= = =", "===").replace("= =", "==")
    s = s.replace(" " + chr(176) + " ", chr(176))
    s = s.replace(" \n", "\n").replace("\n ", "\n")
    s = s.replace(" N ", " 1 ").replace(" 's", "'s")
    return s


def block_loss(model, tokenizer, documents, *, original_documents=None, max_length: int | None = None,
               batch_size: int = 8, progress: bool = False) -> dict:
    """Held-out loss the simple way (not lm-evaluation-harness's rolling windows).

    All documents are joined into one token stream, each preceded by the end-of-text token, and the
    stream is cut into disjoint blocks of ``max_length`` tokens (default: the model's context). Every
    block is scored on its own: its tokens 2..k are predicted from the ones before them inside the
    block, so the first token of each block is context only and a block never sees the previous one.

    ``documents`` (a string or a list of strings) are scored; words and UTF-8 bytes are counted on
    ``original_documents`` (default: the documents). Returns a dict of Python numbers with the keys
    of the results cache: ``loglikelihood`` (nats, summed over the predicted tokens), ``tokens``
    (how many were predicted), ``words``, ``bytes``, ``nll_per_token`` (their mean), and
    ``bits_per_byte`` and ``word_perplexity`` with that mean loss charged to every token of the text
    (the tokens that open a block are not predicted, so their loss is estimated by the mean).
    """
    import torch
    import torch.nn.functional as F
    from tqdm.auto import tqdm

    texts = [documents] if isinstance(documents, str) else list(documents)
    counted = texts if original_documents is None else (
        [original_documents] if isinstance(original_documents, str) else list(original_documents))
    stream: list[int] = []
    for text in texts:
        stream.append(tokenizer.eos_token_id)
        stream.extend(tokenizer(text, add_special_tokens=False)["input_ids"])
    text_tokens = len(stream) - len(texts)
    width = int(max_length or context_length(model.config))
    blocks = [stream[i:i + width] for i in range(0, len(stream), width)]
    blocks = [b for b in blocks if len(b) >= 2]
    if not blocks:
        raise ValueError("the documents give no token to predict")
    device = next(model.parameters()).device
    unembed = model.get_output_embeddings()
    nats, predicted = 0.0, 0
    model.eval()
    with torch.inference_mode():
        batches = [blocks[i:i + batch_size] for i in range(0, len(blocks), batch_size)]
        for group in tqdm(batches, desc="blocks", disable=not progress, leave=False):
            same_length = [b for b in group if len(b) == len(group[0])]
            for part in (same_length, [b for b in group if len(b) != len(group[0])]):
                if not part:
                    continue
                ids = torch.tensor(part, device=device)
                states = model.base_model(input_ids=ids).last_hidden_state
                for row in range(ids.shape[0]):  # one [k - 1, vocabulary] logit matrix at a time
                    logits = unembed(states[row, :-1]).float()  # on the head's device (device_map="auto")
                    nats += F.cross_entropy(logits, ids[row, 1:].to(logits.device), reduction="sum").item()
                    predicted += ids.shape[1] - 1
    n_words = sum(len(re.split(r"\s+", t)) for t in counted)
    n_bytes = sum(len(t.encode("utf-8")) for t in counted)
    text_nats = nats / predicted * text_tokens
    return {"loglikelihood": -nats, "tokens": predicted, "words": n_words, "bytes": n_bytes,
            "nll_per_token": nats / predicted, "bits_per_byte": text_nats / (n_bytes * math.log(2)),
            "word_perplexity": math.exp(text_nats / n_words)}


def text_id(name: str, documents: Iterable[str]) -> str:
    """A short, content-derived key for a list of documents, e.g. ``"wikitext-2-test-3f9a1c2b7d"``."""
    digest = hashlib.sha256("\x1e".join(documents).encode("utf-8")).hexdigest()[:10]
    return f"{name}-{digest}"


# ------------------------------------------------------------------------------ results cache
RESULT_COLUMNS = [
    "model", "step", "text_id", "params", "non_embedding_params", "loglikelihood", "tokens",
    "words", "bytes", "nll_per_token", "bits_per_byte", "word_perplexity", "seconds", "device",
]


def results_path(name: str = "results.csv") -> Path:
    """``build/cache/taskB/<name>``: one row per (model, step, text_id)."""
    return cache_dir("taskB") / name


def load_results(path: Path | None = None):
    """The results cache as a pandas DataFrame (empty, with the right columns, if absent)."""
    import pandas as pd

    path = Path(path or results_path())
    if not path.is_file():
        return pd.DataFrame(columns=RESULT_COLUMNS)
    return pd.read_csv(path)


def _append_result(row: dict, path: Path) -> None:
    import pandas as pd

    frame = pd.DataFrame([{k: row.get(k) for k in RESULT_COLUMNS}])
    frame.to_csv(path, mode="a", header=not path.is_file(), index=False)


def evaluate_checkpoints(
    evaluate_fn: Callable,
    count_fn: Callable | dict,
    load_fn: Callable,
    models: list[str],
    steps: Callable[[str], list[int]] | list[int],
    *,
    documents: list[str],
    original_documents: list[str] | None = None,
    text_key: str,
    cache: Path | None = None,
    recompute: bool = False,
    after_each: Callable[[str, int], None] | None = None,
    progress: bool = True,
    shard: tuple[int, int] | None = None,
    **evaluate_kwargs,
):
    """Evaluate every (model, step) on the documents, reusing cached rows.

    ``evaluate_fn(model, tokenizer, documents, original_documents=..., **evaluate_kwargs)`` scores
    a checkpoint (:func:`block_loss`, or the notebook's ``evaluate_loss``); ``count_fn`` gives
    ``(total, non_embedding)``: a dict by model name (:func:`known_parameter_counts`) or a function
    of the model (the notebook's ``count_parameters``);
    ``load_fn(name, step) -> (model, tokenizer)`` loads a checkpoint; ``steps`` is a list or a
    function of the model name; ``after_each(name, step)`` runs after a fresh evaluation (e.g.
    to delete the downloaded checkpoint). ``cache=None`` disables caching.

    ``shard=(rank, world)`` evaluates only this process's share of the (model, step) list
    (:func:`utils.distributed.shard`: every ``world``-th job from ``rank``), e.g. one GPU each under
    ``torchrun``. Each rank appends to its own file next to ``cache`` (:func:`rank_cache_path`), so
    no two processes write one file; rows already done by any rank or in ``cache`` are reused. After
    all ranks finish (a barrier), one process calls :func:`merge_rank_caches` to fold them into ``cache``.

    Returns a DataFrame with one row per (model, step) of this process, columns :data:`RESULT_COLUMNS`.
    """
    import pandas as pd
    import torch
    from tqdm.auto import tqdm
    from transformers.utils import logging as hf_logging

    sources = []
    if cache is not None:
        sources = [Path(cache)] + (sorted(Path(cache).parent.glob(f"{Path(cache).stem}.rank*{Path(cache).suffix}"))
                                   if shard is not None else [])
    frames = [f for f in (load_results(p) for p in sources) if len(f)]
    cached = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=RESULT_COLUMNS)
    cached = cached[cached["text_id"] == text_key] if len(cached) else cached
    done = {(r.model, int(r.step)): r._asdict() for r in cached.itertuples(index=False)}
    jobs = [(m, int(s)) for m in models for s in (steps(m) if callable(steps) else steps)]
    if shard is not None:
        from .distributed import shard as take_share

        rank, world = shard
        jobs = take_share(jobs, rank, world)
        if cache is not None:
            cache = rank_cache_path(cache, rank)
    rows = []
    bar = tqdm(jobs, desc="checkpoints", unit="ckpt", disable=not progress)
    for name, step in bar:
        bar.set_postfix_str(f"{name} step {step}")
        if not recompute and (name, step) in done:
            rows.append(done[(name, step)])
            continue
        hf_logging.disable_progress_bar()  # one bar per checkpoint load would bury the sweep's bar
        try:
            model, tokenizer = load_fn(name, step)
        finally:
            hf_logging.enable_progress_bar()
        total, non_embedding = count_fn[name] if isinstance(count_fn, dict) else count_fn(model)
        start = time.perf_counter()
        result = evaluate_fn(model, tokenizer, documents, original_documents=original_documents,
                             progress=False, **evaluate_kwargs)
        row = {"model": name, "step": step, "text_id": text_key, "params": int(total),
               "non_embedding_params": int(non_embedding), **result,
               "seconds": time.perf_counter() - start, "device": str(next(model.parameters()).device)}
        rows.append(row)
        if cache is not None:
            _append_result(row, Path(cache))
        del model
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        if after_each is not None:
            after_each(name, step)
    return pd.DataFrame(rows, columns=RESULT_COLUMNS)


def rank_cache_path(cache: Path, rank: int) -> Path:
    """``results.csv`` -> ``results.rank<rank>.csv``: the file one rank of a sharded sweep appends to."""
    cache = Path(cache)
    return cache.with_name(f"{cache.stem}.rank{rank}{cache.suffix}")


def merge_rank_caches(cache: Path | None = None):
    """Fold every ``<cache>.rank*.csv`` of a sharded sweep into ``cache`` and delete them.

    Rows are de-duplicated on (model, step, text_id), the newest winning, and sorted by
    (model, step); the merged file replaces ``cache`` atomically (write, then rename), so a reader
    never sees half a file. Call it from one process after every rank has finished. Returns the
    merged DataFrame."""
    import pandas as pd

    cache = Path(cache or results_path())
    parts = sorted(cache.parent.glob(f"{cache.stem}.rank*{cache.suffix}"))
    frames = [f for f in (load_results(p) for p in [cache, *parts]) if len(f)]
    if not frames:
        return pd.DataFrame(columns=RESULT_COLUMNS)
    merged = pd.concat(frames, ignore_index=True)
    merged = merged.drop_duplicates(subset=["model", "step", "text_id"], keep="last")
    merged = merged.sort_values(["model", "step"], kind="stable").reset_index(drop=True)
    partial = cache.with_name(f".{cache.name}.partial")
    merged.to_csv(partial, index=False)
    os.replace(partial, cache)
    for part in parts:
        part.unlink()
    return merged


def delete_hub_revision(repo_id: str, revision: str) -> int:
    """Delete one downloaded revision (e.g. ``"step1000"``) of a hub model from the local
    Hugging Face cache; returns the bytes freed (0 if it was not cached)."""
    from huggingface_hub import scan_cache_dir

    hashes = [rev.commit_hash
              for repo in scan_cache_dir().repos if repo.repo_id == repo_id
              for rev in repo.revisions if revision in rev.refs or rev.commit_hash == revision]
    if not hashes:
        return 0
    strategy = scan_cache_dir().delete_revisions(*hashes)
    strategy.execute()
    return int(strategy.expected_freed_size)


# ------------------------------------------------------------------------------ scaling fits
def lower_envelope(compute, loss) -> tuple[np.ndarray, np.ndarray]:
    """The best loss reached with at most a given compute: points sorted by compute with a
    running minimum of the loss. ``[n]`` arrays in, two ``[n]`` arrays out."""
    compute, loss = np.asarray(compute, float), np.asarray(loss, float)
    order = np.argsort(compute)
    return compute[order], np.minimum.accumulate(loss[order])


#: The fewest (N, D, L) points :func:`fit_chinchilla` accepts: its law has five constants.
CHINCHILLA_MIN_POINTS = 6


def chinchilla_loss(params: dict, N, D):
    """L(N, D) = E + A / N^alpha + B / D^beta."""
    N, D = np.asarray(N, float), np.asarray(D, float)
    return params["E"] + params["A"] / N ** params["alpha"] + params["B"] / D ** params["beta"]


def fit_chinchilla(N, D, L, *, huber_delta: float = 1e-3) -> dict:
    """Fit L(N, D) = E + A / N^alpha + B / D^beta as Hoffmann et al. (2022) do: Huber loss
    (delta 1e-3) on log L against log of the sum, written as a log-sum-exp of
    ``a - alpha log N``, ``b - beta log D``, ``e`` (A = e^a, B = e^b, E = e^e), minimised with
    BFGS (analytic gradient) from a grid of starting points. ``[n]`` arrays in; a dict of the five constants out
    (plus ``"objective"``). Raises ValueError for fewer than :data:`CHINCHILLA_MIN_POINTS` points
    (the notebook checks first and skips the fit with a note)."""
    from scipy.optimize import minimize
    from scipy.special import huber, softmax

    logN, logD, logL = (np.log(np.asarray(x, float)) for x in (N, D, L))
    if not (len(logN) == len(logD) == len(logL)) or len(logL) < CHINCHILLA_MIN_POINTS:
        raise ValueError(f"need at least {CHINCHILLA_MIN_POINTS} matching (N, D, L) points, "
                         f"got {len(logN)}, {len(logD)}, {len(logL)}")

    def objective(theta):
        """Huber loss of the log-space residuals and its gradient (analytic: the fit runs 72 times)."""
        a, b, e, alpha, beta = theta
        terms = np.stack([a - alpha * logN, b - beta * logD, np.full_like(logN, e)])
        top = terms.max(axis=0)
        residual = top + np.log(np.exp(terms - top).sum(axis=0)) - logL
        weights = softmax(terms, axis=0)  # d logsumexp / d term
        slope = np.clip(residual, -huber_delta, huber_delta)  # d huber / d residual
        grad = np.array([slope @ weights[0], slope @ weights[1], slope @ weights[2],
                         -slope @ (weights[0] * logN), -slope @ (weights[1] * logD)])
        return huber(huber_delta, residual).sum(), grad

    best = None
    for a0 in (2.0, 8.0):
        for b0 in (2.0, 8.0):
            for e0 in (-1.0, 0.5):
                for alpha0 in (0.2, 0.5):
                    for beta0 in (0.2, 0.5):
                        res = minimize(objective, [a0, b0, e0, alpha0, beta0], method="BFGS", jac=True)
                        if best is None or res.fun < best.fun:
                            best = res
    a, b, e, alpha, beta = best.x
    return {"E": math.exp(e), "A": math.exp(a), "B": math.exp(b), "alpha": float(alpha),
            "beta": float(beta), "objective": float(best.fun)}


# ------------------------------------------------------------------------------ checkpoints
def pick_steps(steps: Iterable[int], n: int) -> list[int]:
    """About ``n`` checkpoint steps spread evenly in log(step) over ``steps`` (step 0 dropped,
    the last step always kept), e.g. to sample the miniature suite like Pythia's list."""
    steps = sorted(s for s in set(int(s) for s in steps) if s > 0)
    if n >= len(steps):
        return steps
    targets = np.geomspace(steps[0], steps[-1], n)
    picked = {min(steps, key=lambda s: abs(math.log(s) - math.log(t))) for t in targets}
    return sorted(picked | {steps[-1]})


def suite_key(manifest: dict) -> str:
    """A cache key for a miniature suite build (its name and a hash of its models' records), so a
    rebuilt suite never reuses results of the old one."""
    digest = hashlib.sha256(json.dumps(manifest.get("models"), sort_keys=True).encode()).hexdigest()[:8]
    return f"mini-{manifest.get('suite', '?')}-{digest}"
