"""Probes for Task B (Pythia scaling). Inputs only: the judge (grader/checks/taskB_pythia_scaling.py)
compares with the solution's values from the same probes.

Every input comes from the seeded generator ``gen``: model shapes, weights, context lengths, the slices
of text scored, steps, sizes and synthetic scaling-law data. The models are tiny GPT-NeoX networks
built here, on the CPU, with no download.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from grader.probes import attempt, probes
from utils.scaling import PYTHIA_SIZES, pythia_config

PROBES: dict = {}
probe = probes(PROBES)


# ------------------------------------------------------------------------------ random draws from gen
def _int(gen, lo: int, hi: int) -> int:
    """An int in [lo, hi)."""
    return int(torch.randint(lo, hi, (1,), generator=gen))


def _choice(gen, seq):
    return seq[_int(gen, 0, len(seq))]


def _uniform(gen, lo: float, hi: float) -> float:
    return lo + (hi - lo) * float(torch.rand(1, dtype=torch.float64, generator=gen))


def _normal(gen, n: int) -> np.ndarray:
    return torch.randn(n, dtype=torch.float64, generator=gen).numpy()


# ------------------------------------------------------------------------------ tiny GPT-NeoX models
def _neox_config(gen, *, vocab: int = 50304, tie: bool = False, context: int = 2048, heads=(1, 2, 4),
                 head_dims=(4, 8, 12), rotary_pct: float = 0.25):
    from transformers import GPTNeoXConfig

    heads = _choice(gen, list(heads))
    d = heads * _choice(gen, list(head_dims))
    return GPTNeoXConfig(vocab_size=vocab, hidden_size=d, num_hidden_layers=_int(gen, 1, 4),
                         num_attention_heads=heads, intermediate_size=d * _choice(gen, [2, 3, 4]), rotary_pct=rotary_pct,
                         max_position_embeddings=context, tie_word_embeddings=tie, bos_token_id=0, eos_token_id=0)


def _model(config, gen=None, scale: float = 1.0):
    """A GPT-NeoX for ``config``; with ``gen``, every weight matrix is redrawn from ``gen`` with
    standard deviation ``scale`` (50x GPT-NeoX's init): sharp attention, so every token of context
    changes the predictions far beyond the judge's tolerance. LayerNorms stay 1 and biases 0."""
    from transformers import GPTNeoXForCausalLM

    model = GPTNeoXForCausalLM(config).eval()
    if gen is not None:
        with torch.no_grad():
            for p in model.parameters():
                if p.dim() >= 2:
                    p.copy_(torch.randn(p.shape, generator=gen) * scale)
    return model


def _load_tokenizer():
    from utils.lm import load_tokenizer

    return load_tokenizer()


try:  # loaded once, in the harness's parent: every forked case inherits it (0.3 s each otherwise)
    _TOKENIZER = _load_tokenizer()
except Exception:  # noqa: BLE001 - then each probe loads it, and says why if it cannot
    _TOKENIZER = None


def _tokenizer():
    return _TOKENIZER if _TOKENIZER is not None else _load_tokenizer()


_TEXT = ("First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.\n\n"
         "First Citizen:\nYou are all resolved rather to die than to famish?\n\nAll:\nResolved. resolved.\n\n"
         "First Citizen:\nFirst, you know Caius Marcius is chief enemy to the people.\n")


def _documents(gen) -> list[str]:
    """Three documents: a head of the text, a short one (a single window), a tail that ends in a
    newline; in an order drawn from ``gen``."""
    words = _TEXT.split(" ")
    docs = [" ".join(words[: _int(gen, 30, 46)]), _choice(gen, ["Speak, speak.", "All:\nResolved."]),
            " ".join(words[_int(gen, 5, 11):])]
    order = torch.randperm(3, generator=gen).tolist()
    return [docs[i] for i in order]


def _eval_setup(gen):
    context = _int(gen, 12, 25)
    # heads of 8 or 12 dimensions, all rotary: position and every context token matter (measured: a window one
    # token too long or too short moves the total by 3e-4 or more, relative, where the tolerance is 2e-5)
    config = _neox_config(gen, context=context, tie=bool(_int(gen, 0, 2)), heads=(2, 4), head_dims=(8, 12),
                          rotary_pct=1.0)
    model = _model(config, gen)
    return model, _tokenizer(), _documents(gen)


# ------------------------------------------------------------------------------ count_parameters
# count_parameters: the test cell's 2 points, shared by the weights below
@probe("test_count_parameters", "(total, non_embedding) from a config: embeddings and unembedding excluded, a tied "
       "matrix once (Python ints)", "check_counts", weight=3, main=True)
def count_config(ns, gen):
    out = []
    for trial in range(4):
        config = _neox_config(gen, vocab=_choice(gen, [50304, 1000, 4096]), tie=bool(trial % 2))
        out.append(attempt(ns.count_parameters, config))
    return out


@probe("test_count_parameters", "the same counts from a model", "check_counts", weight=2, main=True)
def count_model(ns, gen):
    out = []
    for tie in (False, True):
        model = _model(_neox_config(gen, vocab=_choice(gen, [1000, 4096, 50304]), tie=tie))
        out.append(attempt(ns.count_parameters, model))
    return out


@probe("test_count_parameters", "a configuration of Pythia's architecture in sizes of its own, up to billions of "
       "parameters (meta device, no weights)", "check_counts")
def count_pythia_config(ns, gen):
    """A configuration of Pythia's architecture (its shared fields, intermediate_size = 4 x width) with drawn
    sizes of up to about 3 B parameters and a width no Pythia model has: only the meta device makes it cheap,
    and no table of the published counts answers it."""
    widths = {pythia_config(size).hidden_size for size in PYTHIA_SIZES}
    config = pythia_config(_choice(gen, ["160m", "410m", "1b"]))
    while True:
        heads = _int(gen, 4, 25)
        width = heads * _choice(gen, [48, 80, 96, 112, 128])
        if width not in widths:
            break
    config.hidden_size, config.num_attention_heads, config.intermediate_size = width, heads, 4 * width
    config.num_hidden_layers = _int(gen, 2, 25)
    config.vocab_size = _choice(gen, [50304, 50432, 50688])
    return ns.count_parameters(config)


@probe("test_count_parameters", "a TypeError for anything that is neither a model nor a config",
       "RAISES_TYPE_OR_VALUE_ERROR", requires=("count_config", "count_model"), kind="rule", checks="raises")
def count_rejects_non_model(ns, gen):
    width = _int(gen, 2, 9)
    return [attempt(ns.count_parameters, {"hidden_size": width}), attempt(ns.count_parameters, torch.nn.Linear(width, 3))]


# ------------------------------------------------------------------------------ evaluate_loss
# evaluate_loss: the test cell's 4 points, shared by the weights below
@probe("test_evaluate_loss", "total log-likelihood and tokens: end-of-text before each document, disjoint windows of "
       "max_length targets, each fed the max_length tokens before its last target", "check_loglikelihood", weight=4,
       main=True)
def eval_windows(ns, gen):
    model, tokenizer, documents = _eval_setup(gen)
    return ns.evaluate_loss(model, tokenizer, documents, batch_size=_choice(gen, [2, 3]), progress=False)


@probe("test_evaluate_loss", "words (re.split on whitespace) and UTF-8 bytes; nll_per_token in nats, bits_per_byte "
       "and word_perplexity from the total", "check_counts_and_metrics", weight=2, main=True)
def eval_metrics(ns, gen):
    model, tokenizer, documents = _eval_setup(gen)
    return ns.evaluate_loss(model, tokenizer, documents, batch_size=_choice(gen, [2, 4]), progress=False)


@probe("test_evaluate_loss", "words and bytes counted on original_documents; the batch size does not change the result",
       "check_words_bytes_loglik", weight=2)
def eval_original_documents(ns, gen):
    model, tokenizer, documents = _eval_setup(gen)
    extra = _choice(gen, [" extra wörds — naïve here", " and  façade, über\tnaïve"])
    originals = [d + extra for d in documents]
    return ns.evaluate_loss(model, tokenizer, documents, original_documents=originals, batch_size=1, progress=False)


@probe("test_evaluate_loss", "a single string scored with a max_length shorter than the model's", "check_loglikelihood")
def eval_max_length(ns, gen):
    model, tokenizer, documents = _eval_setup(gen)
    longest = max(documents, key=len)
    return ns.evaluate_loss(model, tokenizer, longest, max_length=_int(gen, 4, 9), progress=False)


@probe("test_evaluate_loss", "a ValueError when there is nothing to score", "RAISES_VALUE_ERROR",
       requires=("eval_windows", "eval_metrics"), kind="rule", checks="raises")
def eval_rejects_empty(ns, gen):
    model, tokenizer, _ = _eval_setup(gen)
    return ns.evaluate_loss(model, tokenizer, [""], progress=False)


@probe("test_evaluate_loss", "a TypeError for a model without a .config", "RAISES_TYPE_OR_VALUE_ERROR",
       requires=("eval_windows", "eval_metrics"), kind="rule", checks="raises")
def eval_rejects_no_config(ns, gen):
    width = _int(gen, 2, 9)
    return ns.evaluate_loss(torch.nn.Linear(width, width), _tokenizer(), ["Speak, speak."], progress=False)


# ------------------------------------------------------------------------------ tokens_seen, training_compute
# tokens_seen and training_compute: the test cell's 2 points, shared by the weights below; the input checks
# are given code (weight 0, reported only)
@probe("test_bookkeeping", "tokens_seen(step) = step x tokens_per_step for a number", "check_exact_numbers",
       function="tokens_seen", main=True)
def tokens_seen_scalar(ns, gen):
    return [attempt(ns.tokens_seen, _int(gen, 1, 143_001)),
            attempt(ns.tokens_seen, _int(gen, 0, 5000), _int(gen, 100, 5000))]


def _step_arrays(gen) -> list:
    """Steps as arrays: small int64 steps with a drawn tokens_per_step, and Pythia-scale steps in int64 and in
    int32 (then step x 2,097,152 overflows int32 unless the answer widens to int64)."""
    per_step = _int(gen, 100, 5000)
    small = np.array([_int(gen, 0, 1000) for _ in range(7)], dtype=np.int64)
    pythia = np.array([0, _int(gen, 1, 1000) * 1000, 143_000], dtype=np.int64)
    late = np.array([_int(gen, 2000, 143_001) for _ in range(3)], dtype=np.int32)
    return [(small, per_step), (pythia, 2_097_152), (late, 2_097_152)]


@probe("test_bookkeeping", "tokens_seen on arrays of steps, int32 steps included: the exact token counts (143,000 x "
       "2,097,152 overflows int32)", "ARRAY_EXACT", weight=2, function="tokens_seen", main=True)
def tokens_seen_array(ns, gen):
    return [attempt(ns.tokens_seen, steps, per_step) for steps, per_step in _step_arrays(gen)]


@probe("test_bookkeeping", "tokens_seen on an array returns an int64 array", "INT64", weight=0.25, kind="rule",
       checks="dtype", function="tokens_seen")
def tokens_seen_dtype(ns, gen):
    return [attempt(ns.tokens_seen, steps, per_step) for steps, per_step in _step_arrays(gen)]


@probe("test_bookkeeping", "a ValueError for a negative step or a tokens_per_step that is not positive (given code)",
       "RAISES_VALUE_ERROR", weight=0, kind="given", checks="raises", function="tokens_seen")
def tokens_seen_rejects_negative(ns, gen):
    return [attempt(ns.tokens_seen, -_int(gen, 1, 1000)), attempt(ns.tokens_seen, _int(gen, 1, 1000), -_int(gen, 0, 3))]


@probe("test_bookkeeping", "training_compute(N, D) = 6 N D FLOPs for numbers", "check_close_numbers",
       function="training_compute", main=True)
def compute_scalar(ns, gen):
    return [attempt(ns.training_compute, _uniform(gen, 1e6, 1e10), _uniform(gen, 1e9, 3e11)) for _ in range(2)]


def _compute_arrays(gen) -> list:
    big_n = np.array([11_327_027_200, _int(gen, 1_000_000, 2_000_000)], dtype=np.int64)  # pythia-12b
    big_d = np.array([299_892_736_000, _int(gen, 1, 143_001) * 2_097_152], dtype=np.int64)
    n = np.exp(_uniform(gen, 13, 23) + _normal(gen, 3))[:, None]
    d = np.exp(_uniform(gen, 20, 26) + _normal(gen, 4))
    return [(big_n, big_d), (n, d)]


@probe("test_bookkeeping", "training_compute on arrays (broadcast): 6 N D without int64 overflow at pythia-12b",
       "ARRAY_VALUES", weight=2, function="training_compute", main=True)
def compute_array(ns, gen):
    return [attempt(ns.training_compute, n, d) for n, d in _compute_arrays(gen)]


@probe("test_bookkeeping", "training_compute on arrays returns a float64 array", "FLOAT64", weight=0.25, kind="rule",
       checks="dtype", function="training_compute")
def compute_dtype(ns, gen):
    return [attempt(ns.training_compute, n, d) for n, d in _compute_arrays(gen)]


# ------------------------------------------------------------------------------ fit_power_law
# fit_power_law: the test cell's 4 points, shared by the weights below; the irreducible=True branch and the
# input checks are given code (weight 0, reported only)
@probe("test_fit_power_law", "pure power law: alpha and N_c from the least squares of log L on log N, E = 0",
       "check_pure_fit", weight=2, main=True)
def fit_pure(ns, gen):
    alpha, log_nc = _uniform(gen, 0.05, 0.5), math.log(10) * _uniform(gen, 8, 14)
    N = np.logspace(_uniform(gen, 5, 6), _uniform(gen, 9, 10), _int(gen, 6, 12))
    L = np.exp(alpha * (log_nc - np.log(N)) + 0.01 * _normal(gen, N.size))
    return ns.fit_power_law(N, L)


@probe("test_fit_power_law", "pure power law: standard errors from s^2 (X^T X)^-1 with s^2 = RSS/(n-2), N_c's by the "
       "delta method", "check_pure_errors", weight=2)
def fit_pure_errors(ns, gen):
    alpha, log_nc = _uniform(gen, 0.05, 0.5), math.log(10) * _uniform(gen, 8, 14)
    N = np.exp(np.sort(math.log(10) * (5 + 5 * torch.rand(_int(gen, 5, 10), dtype=torch.float64, generator=gen).numpy())))
    L = np.exp(alpha * (log_nc - np.log(N)) + _uniform(gen, 0.005, 0.05) * _normal(gen, N.size))
    return ns.fit_power_law(list(N), list(L))


@probe("test_fit_power_law", "L = E + (N_c/N)^alpha by curve_fit on L started from your fit, standard errors from its "
       "covariance (given code)", "check_irreducible_fit", weight=0, kind="given")
def fit_irreducible(ns, gen):
    E, alpha = _uniform(gen, 1.0, 3.0), _uniform(gen, 0.2, 0.6)
    log_nc = math.log(10) * _uniform(gen, 6, 9)
    N = np.logspace(5, 10, 12)
    L = E + np.exp(alpha * (log_nc - np.log(N))) + 1e-3 * _normal(gen, N.size)
    return ns.fit_power_law(N, L, irreducible=True)


@probe("test_fit_power_law", "a ValueError for mismatched lengths, non-positive values, or fewer than 3 (4 with "
       "irreducible) points (given code)", "RAISES_VALUE_ERROR", weight=0, kind="given", checks="raises")
def fit_rejects_bad_input(ns, gen):
    N = np.logspace(5, 10, 6) * _uniform(gen, 0.5, 2.0)
    L = 3.0 * (N / N[0]) ** -0.1
    return [attempt(ns.fit_power_law, N[:5], L[:4]), attempt(ns.fit_power_law, -N, L),
            attempt(ns.fit_power_law, N, -L), attempt(ns.fit_power_law, N[:2], L[:2]),
            attempt(ns.fit_power_law, N[:3], L[:3], irreducible=True)]


# ------------------------------------------------------------------------------ predict_held_out
def _scaling_data(gen, n: int):
    """n sizes in a shuffled order and their losses: a power law, often with an irreducible term (the
    curvature a pure law fitted on small models misses), times log-normal scatter."""
    N = np.exp(math.log(10) * np.sort(_uniform(gen, 5, 6) + 4 * torch.rand(n, dtype=torch.float64,
                                                                             generator=gen).numpy()))
    E = _choice(gen, [0.0, _uniform(gen, 0.5, 1.5)])
    L = E + np.exp(_uniform(gen, 0.05, 0.4) * (math.log(10) * _uniform(gen, 11, 14) - np.log(N)))
    L = L * np.exp(_uniform(gen, 0.003, 0.03) * _normal(gen, n))
    order = torch.randperm(n, generator=gen).numpy()
    return N[order], L[order]


# predict_held_out: the test cell's 4 points, shared by the weights below
@probe("test_predict_held_out", "the held-out sizes in increasing N, predicted by the pure power law fitted (with "
       "fit_power_law) on the n_fit smallest models (float NumPy arrays)", "check_prediction", weight=2, main=True)
def predict_values(ns, gen):
    N, L = _scaling_data(gen, _int(gen, 6, 10))
    return ns.predict_held_out(N, L, _int(gen, 3, len(N) - 1))


@probe("test_predict_held_out", "the prediction interval L_pred exp(-+ t s), t = stats.t.ppf((1 + level) / 2, n_fit - "
       "2), s = alpha_err sqrt(S + S/n + (x0 - x_bar)^2), S = sum((x - x_bar)^2) over the fitted ln N", "check_band",
       weight=2)
def predict_band(ns, gen):
    N, L = _scaling_data(gen, _int(gen, 5, 10))
    return ns.predict_held_out(N, L, _int(gen, 3, len(N) - 1))


@probe("test_predict_held_out", "the band for another level (the data given as lists)", "check_band")
def predict_level(ns, gen):
    N, L = _scaling_data(gen, _int(gen, 5, 8))
    return ns.predict_held_out(list(N), list(L), _int(gen, 3, len(N)), level=_uniform(gen, 0.5, 0.99))


@probe("test_predict_held_out", "a ValueError when n_fit < 3 or nothing is held out (given code)", "RAISES_VALUE_ERROR",
       weight=0, kind="given", checks="raises")
def predict_rejects_bad_split(ns, gen):
    N, L = _scaling_data(gen, _int(gen, 5, 8))
    return [attempt(ns.predict_held_out, N, L, 2), attempt(ns.predict_held_out, N, L, len(N))]


# ------------------------------------------------------------------------------ compute_optimal
def _chinchilla_params(gen) -> dict:
    return {"E": _uniform(gen, 1.0, 2.0), "A": math.exp(_uniform(gen, 3, 9)), "B": math.exp(_uniform(gen, 3, 9)),
            "alpha": _uniform(gen, 0.2, 0.6), "beta": _uniform(gen, 0.2, 0.6)}


# compute_optimal: the test cell's 4 points, shared by the weights below
@probe("test_compute_optimal", "(N_opt, D_opt) as two numbers for a number: 6 N_opt D_opt = C and N_opt minimises "
       "L(N, C / (6 N)) (checked against a numeric minimisation)", "check_optimal_numbers", weight=2, main=True)
def optimal_scalar(ns, gen):
    """The inputs come back with the answers: the judge minimises L numerically on the same ones.
    Each answer is what the call returned, (N_opt, D_opt)."""
    params, out, budgets = _chinchilla_params(gen), [], []
    for _ in range(2):
        C = math.exp(math.log(10) * _uniform(gen, 15, 25))
        out.append(attempt(ns.compute_optimal, params, C))
        budgets.append(C)
    return {"params": params, "C": budgets, "answers": out}


# the same split for an array of budgets: the scalar case's formula, so the array form is a rule
@probe("test_compute_optimal", "two arrays for an array of budgets, each split optimal", "check_optimal_arrays",
       weight=0.25, kind="rule", checks="input form")
def optimal_array(ns, gen):
    params = _chinchilla_params(gen)
    C = np.exp(math.log(10) * (15 + 10 * torch.rand(_int(gen, 3, 7), dtype=torch.float64, generator=gen).numpy()))
    return {"params": params, "C": C, "answer": attempt(ns.compute_optimal, params, C)}


@probe("test_compute_optimal", "a ValueError for a budget that is not positive (given code)", "RAISES_VALUE_ERROR",
       weight=0, kind="given", checks="raises")
def optimal_rejects_bad_budget(ns, gen):
    params = _chinchilla_params(gen)
    return [attempt(ns.compute_optimal, params, 0.0),
            attempt(ns.compute_optimal, params, np.array([1e20, -_uniform(gen, 1, 1e20)]))]
