"""Hidden checks for taskB_pythia_scaling.ipynb: independent reference formulas on fresh random
inputs. Each ``check_*`` raises AssertionError with a message a student can act on."""

from __future__ import annotations

import math
import random
import re

import numpy as np
import torch

from ._common import assert_raises

_int, _float, _isinstance, _dict = int, float, isinstance, dict


def _tokenizer():
    from transformers import PreTrainedTokenizerFast

    from utils.paths import DATA_DIR

    return PreTrainedTokenizerFast(tokenizer_file=str(DATA_DIR / "tokenizer" / "gpt-neox-20b" / "tokenizer.json"),
                                   eos_token="<|endoftext|>")


def _neox_config(rng: random.Random, *, vocab: int = 50304, tie: bool | None = None, context: int = 2048,
                 initializer_range: float = 0.02):
    from transformers import GPTNeoXConfig

    heads = rng.choice([1, 2, 4])
    d = heads * rng.choice([4, 8, 12])
    return GPTNeoXConfig(vocab_size=vocab, hidden_size=d, num_hidden_layers=rng.randint(1, 3),
                         num_attention_heads=heads, intermediate_size=4 * d, rotary_pct=0.25,
                         max_position_embeddings=context,
                         tie_word_embeddings=rng.random() < 0.5 if tie is None else tie,
                         bos_token_id=0, eos_token_id=0, initializer_range=initializer_range)


def _expected_counts(cfg) -> tuple[int, int]:
    """Closed form for GPT-NeoX with a 4d MLP: per layer QKV 3d^2+3d, output d^2+d, MLP 8d^2+5d,
    two LayerNorms 4d; plus the final LayerNorm 2d. Embedding V*d, unembedding V*d unless tied."""
    d, n, v = cfg.hidden_size, cfg.num_hidden_layers, cfg.vocab_size
    non_embedding = n * (12 * d * d + 13 * d) + 2 * d
    return non_embedding + v * d * (1 if cfg.tie_word_embeddings else 2), non_embedding


def _assert_int_pair(result, what: str) -> None:
    if not _isinstance(result, tuple) or len(result) != 2:
        raise AssertionError(f"{what}: return a tuple (total, non_embedding), got {type(result).__name__}")
    for name, value in zip(("total", "non_embedding"), result):
        if type(value) is not _int:
            raise AssertionError(f"{what}: {name} must be a Python int, got {type(value).__name__}")


def check_count_parameters(count_parameters) -> None:
    from transformers import GPTNeoXForCausalLM

    rng = random.Random()
    for trial in range(4):
        cfg = _neox_config(rng, vocab=rng.choice([50304, 1000, 4096]), tie=bool(trial % 2))
        expected = _expected_counts(cfg)
        result = count_parameters(cfg)
        _assert_int_pair(result, "count_parameters(config)")
        if tuple(result) != expected:
            raise AssertionError(f"count_parameters(config) with d={cfg.hidden_size}, layers={cfg.num_hidden_layers}, "
                                 f"vocab={cfg.vocab_size}, tied={cfg.tie_word_embeddings}: got {result}, expected "
                                 f"{expected} (non-embedding excludes embedding and unembedding, a tied matrix once)")
        model = GPTNeoXForCausalLM(cfg)
        result = count_parameters(model)
        _assert_int_pair(result, "count_parameters(model)")
        if tuple(result) != expected:
            raise AssertionError(f"count_parameters(model) gives {result}, expected {expected}")
    # A Pythia size from its config: no weights may be allocated (meta device).
    from utils.scaling import published_non_embedding_params, pythia_config

    size = rng.choice(["160m", "410m", "1b"])
    total, non_embedding = count_parameters(pythia_config(size))
    if non_embedding != published_non_embedding_params(size):
        raise AssertionError(f"pythia-{size}: non-embedding {non_embedding:,}, published "
                             f"{published_non_embedding_params(size):,}")
    assert_raises((TypeError, ValueError), count_parameters, {"hidden_size": 8},
                  what="count_parameters on a dict (neither model nor config)")
    assert_raises((TypeError, ValueError), count_parameters, torch.nn.Linear(3, 3),
                  what="count_parameters on a module that is not a transformers model")


def _reference_loglik(model, tokenizer, documents, max_length: int) -> tuple[float, int]:
    """One window at a time, full logits: the definition, not the fast path."""
    total, n_tokens = 0.0, 0
    eos = tokenizer.eos_token_id
    with torch.no_grad():
        for doc in documents:
            ids = tokenizer(doc, add_special_tokens=False)["input_ids"]
            n_tokens += len(ids)
            for start in range(0, len(ids), max_length):
                stop = min(start + max_length, len(ids))
                context = ([eos] + ids)[:stop][-max_length:]  # tokens before each target, full window
                inputs = torch.tensor([context])
                logp = torch.log_softmax(model(inputs).logits[0].double(), dim=-1)
                targets = torch.tensor(ids[start:stop])
                k = stop - start
                total += logp[-k:].gather(1, targets[:, None]).sum().item()
    return total, n_tokens


_TEXT = ("First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.\n\n"
         "First Citizen:\nYou are all resolved rather to die than to famish?\n\nAll:\nResolved. resolved.\n\n"
         "First Citizen:\nFirst, you know Caius Marcius is chief enemy to the people.\n")


def check_evaluate_loss(evaluate_loss) -> None:
    from transformers import GPTNeoXForCausalLM

    rng = random.Random()
    tokenizer = _tokenizer()
    context = rng.randint(12, 24)
    torch.manual_seed(rng.randint(0, 10**6))
    # Weights 25x larger than GPT-NeoX's init: sharp attention, so every token of context changes the
    # predictions well beyond the tolerance (at the default 0.02 a window one token off often passed).
    model = GPTNeoXForCausalLM(_neox_config(rng, context=context, initializer_range=0.5)).eval()
    words = _TEXT.split(" ")
    documents = [" ".join(words[: rng.randint(30, 45)]), "Speak, speak.", " ".join(words[rng.randint(5, 10):])]
    rng.shuffle(documents)
    expected, n_tokens = _reference_loglik(model, tokenizer, documents, context)

    result = evaluate_loss(model, tokenizer, documents, batch_size=rng.choice([2, 3]), progress=False)
    if not _isinstance(result, _dict):
        raise AssertionError(f"evaluate_loss must return a dict, got {type(result).__name__}")
    keys = {"loglikelihood", "tokens", "words", "bytes", "nll_per_token", "bits_per_byte", "word_perplexity"}
    if set(result) < keys:
        raise AssertionError(f"evaluate_loss's dict lacks {sorted(keys - set(result))}")
    for key in ("tokens", "words", "bytes"):
        if type(result[key]) is not _int:
            raise AssertionError(f"result[{key!r}] must be a Python int, got {type(result[key]).__name__}")
    for key in ("loglikelihood", "nll_per_token", "bits_per_byte", "word_perplexity"):
        if type(result[key]) is not _float:
            raise AssertionError(f"result[{key!r}] must be a Python float, got {type(result[key]).__name__}")
    if result["tokens"] != n_tokens:
        raise AssertionError(f"tokens = {result['tokens']}, expected {n_tokens} (every token of every document, "
                             "the first one included, no special tokens added)")
    if not abs(result["loglikelihood"] - expected) <= 1e-4 * abs(expected):
        raise AssertionError(
            f"total log-likelihood {result['loglikelihood']:.6f}, expected {expected:.6f} with context {context}: "
            "each document starts after the end-of-text token; windows are disjoint in what they predict, "
            "and each one sees the max_length tokens before its targets")
    n_words = sum(len(re.split(r"\s+", d)) for d in documents)
    n_bytes = sum(len(d.encode("utf-8")) for d in documents)
    if (result["words"], result["bytes"]) != (n_words, n_bytes):
        raise AssertionError(f"words, bytes = {result['words']}, {result['bytes']}; expected {n_words}, {n_bytes}")
    derived = {"nll_per_token": -expected / n_tokens, "bits_per_byte": -expected / (n_bytes * math.log(2)),
               "word_perplexity": math.exp(-expected / n_words)}
    for key, value in derived.items():
        if not abs(result[key] - value) <= 1e-4 * abs(value):
            raise AssertionError(f"{key} = {result[key]!r}, expected {value!r}")

    # Word and byte counts come from the original texts when given. Non-ASCII text: bytes are UTF-8
    # bytes, not characters.
    originals = [d + " extra wörds — naïve here" for d in documents]
    again = evaluate_loss(model, tokenizer, documents, original_documents=originals, batch_size=1, progress=False)
    n_words = sum(len(re.split(r"\s+", d)) for d in originals)
    if again["words"] != n_words or again["bytes"] != sum(len(d.encode()) for d in originals):
        raise AssertionError("with original_documents, words and bytes must be counted on the original texts")
    if not abs(again["loglikelihood"] - expected) <= 1e-4 * abs(expected):
        raise AssertionError(f"batch_size=1 gives {again['loglikelihood']}, expected {expected}: the batch size "
                             "must not change the result (padding must not leak into scored positions)")
    # A shorter max_length than the model's.
    short = rng.randint(4, 8)
    expected_short, _ = _reference_loglik(model, tokenizer, documents[:1], short)
    got = evaluate_loss(model, tokenizer, documents[0], max_length=short, progress=False)["loglikelihood"]
    if not abs(got - expected_short) <= 1e-4 * abs(expected_short):
        raise AssertionError(f"max_length={short}: got {got}, expected {expected_short}")

    assert_raises(ValueError, evaluate_loss, model, tokenizer, [""], progress=False,
                  what="evaluate_loss on a text with zero tokens")
    assert_raises((TypeError, ValueError), evaluate_loss, torch.nn.Linear(4, 4), tokenizer, documents,
                  progress=False, what="evaluate_loss with a model that has no .config")


def check_bookkeeping(tokens_seen, training_compute) -> None:
    rng = np.random.default_rng()
    step = int(rng.integers(1, 143_001))
    got = tokens_seen(step)
    if type(got) is not _int or got != step * 2_097_152:
        raise AssertionError(f"tokens_seen({step}) = {got!r}, expected the int {step * 2_097_152} (Pythia default)")
    per_step = int(rng.integers(100, 5000))
    steps = rng.integers(0, 1000, size=7)
    got = np.asarray(tokens_seen(steps, per_step))
    if got.shape != (7,) or not np.array_equal(got, steps.astype(np.int64) * per_step):
        raise AssertionError(f"tokens_seen(array, {per_step}) = {got}, expected {steps * per_step}")
    # Pythia's checkpoints as an array: 143000 x 2**21 tokens overflows int32.
    pythia_steps = np.array([0, 1000, 143_000])
    got = np.asarray(tokens_seen(pythia_steps))
    want = pythia_steps.astype(np.int64) * 2_097_152
    if got.dtype != np.int64 or not np.array_equal(got, want):
        raise AssertionError(f"tokens_seen({pythia_steps.tolist()}) = {got} ({got.dtype}), expected {want} (int64: "
                             "Pythia's final checkpoint is about 3e11 tokens, beyond int32)")
    assert_raises(ValueError, tokens_seen, -1, what="tokens_seen with a negative step")

    n = float(rng.uniform(1e6, 1e10))
    d = float(rng.uniform(1e9, 3e11))
    got = training_compute(n, d)
    if type(got) is not _float or not abs(got - 6 * n * d) <= 1e-12 * 6 * n * d:
        raise AssertionError(f"training_compute({n}, {d}) = {got!r}, expected the float {6 * n * d!r}")
    big_n = np.array([11_327_027_200, 1_189_888], dtype=np.int64)
    big_d = np.array([299_892_736_000, 299_892_736_000], dtype=np.int64)
    got = np.asarray(training_compute(big_n, big_d))
    want = 6.0 * big_n.astype(np.float64) * big_d.astype(np.float64)
    if got.dtype != np.float64 or not np.allclose(got, want, rtol=1e-12):
        raise AssertionError(f"training_compute on int64 arrays (Pythia-12b at 300 B tokens) gave {got} "
                             f"({got.dtype}), expected {want}: 6 N D overflows int64, compute in float64")


def _expect_fit(result, what: str) -> dict:
    keys = {"alpha", "N_c", "E", "alpha_err", "N_c_err", "E_err"}
    if not _isinstance(result, _dict) or set(result) < keys:
        raise AssertionError(f"{what}: return a dict with keys {sorted(keys)}, got {result!r}")
    for k in keys:
        if type(result[k]) is not _float or not math.isfinite(result[k]):
            raise AssertionError(f"{what}: {k} must be a finite Python float, got {result[k]!r}")
    return result


def check_fit_power_law(fit_power_law) -> None:
    rng = np.random.default_rng()
    # Pure power law, multiplicative noise: compare with the closed-form regression.
    alpha, n_c = rng.uniform(0.05, 0.5), 10 ** rng.uniform(8, 14)
    N = np.logspace(rng.uniform(5, 6), rng.uniform(9, 10), int(rng.integers(6, 12)))
    L = (n_c / N) ** alpha * np.exp(rng.normal(0, 0.01, N.size))
    fit = _expect_fit(fit_power_law(N, L), "fit_power_law(N, L)")
    X = np.stack([np.ones_like(N), np.log(N)], 1)
    y = np.log(L)
    beta = np.linalg.solve(X.T @ X, X.T @ y)
    resid = y - X @ beta
    cov = resid @ resid / (N.size - 2) * np.linalg.inv(X.T @ X)
    a, b = beta
    ref_alpha, ref_nc = -b, math.exp(-a / b)
    grad = np.array([-1 / b, a / b**2])
    ref = {"alpha": ref_alpha, "N_c": ref_nc, "alpha_err": math.sqrt(cov[1, 1]),
           "N_c_err": ref_nc * math.sqrt(grad @ cov @ grad)}
    for k, v in ref.items():
        if not abs(fit[k] - v) <= 1e-6 * abs(v):
            raise AssertionError(f"pure power law: {k} = {fit[k]!r}, expected {v!r} (least squares of log L on "
                                 "log N; errors from s^2 (X^T X)^-1 with s^2 = RSS / (n - 2), N_c's by the delta method)")
    if fit["E"] != 0.0:
        raise AssertionError(f"pure power law: E must be 0.0, got {fit['E']!r}")
    if abs(fit["alpha"] - alpha) > 5 * fit["alpha_err"] + 1e-3:
        raise AssertionError(f"pure power law: alpha {fit['alpha']:.4f} is far from the true {alpha:.4f}")

    # With an irreducible term: recover known constants from nearly noiseless data.
    from scipy.optimize import curve_fit

    E, alpha = rng.uniform(1.0, 3.0), rng.uniform(0.2, 0.6)
    n_c = 10 ** rng.uniform(6, 9)
    N = np.logspace(5, 10, 12)
    clean = E + (n_c / N) ** alpha
    L = clean + rng.normal(0, 1e-3, N.size)
    fit = _expect_fit(fit_power_law(N, L, irreducible=True), "fit_power_law(N, L, irreducible=True)")
    if abs(fit["alpha"] - alpha) > 0.03 * alpha or abs(fit["E"] - E) > 0.01 * E:
        raise AssertionError(f"irreducible fit: alpha {fit['alpha']:.4f}, E {fit['E']:.4f}; true alpha {alpha:.4f}, "
                             f"E {E:.4f}")
    if abs(math.log(fit["N_c"] / n_c)) > 0.1 * math.log(n_c):
        raise AssertionError(f"irreducible fit: N_c {fit['N_c']:.4g}, true {n_c:.4g}")

    def law(x, e, al, lognc):
        return e + np.exp(al * (lognc - x))

    p, pcov = curve_fit(law, np.log(N), L, p0=[E, alpha, math.log(n_c)], maxfev=20000)
    err = np.sqrt(np.diag(pcov))
    for k, v in (("alpha_err", err[1]), ("E_err", err[0])):
        if not (0.33 * v <= fit[k] <= 3 * v):
            raise AssertionError(f"irreducible fit: {k} = {fit[k]:.3g}, expected about {v:.3g} (the covariance "
                                 "from scipy's curve_fit)")

    assert_raises(ValueError, fit_power_law, N[:5], L[:4], what="fit_power_law with N and L of different lengths")
    assert_raises(ValueError, fit_power_law, -N, L, what="fit_power_law with negative N")
    assert_raises(ValueError, fit_power_law, N[:2], L[:2], what="fit_power_law with two points")
