"""The judge's cases for Task B (Pythia scaling), compared outside the sandbox.

Each case is declared by its probe in grader/probes/taskB_pythia_scaling.py (where it says, in the words of the
task text, what it checks); this module holds the comparators it names; the solution's value from the same probe is
the expected one. The evaluation probes use a random GPT-NeoX with weights 50x larger than its init (sharp
attention), so a window one token off, a missing end-of-text token or a token scored twice moves the log-likelihood
far beyond the tolerance on every draw.
"""

from __future__ import annotations

import math

import numpy as np

from grader.compare import as_dict, as_real, describe, expect_raises
from grader.evidence import Raised
from grader.cases import declared_cases, function_tables
from grader.probes.taskB_pythia_scaling import PROBES

#: Totals from float32 logits agree to about 2e-7 (relative) between batchings, float64 sums and
#: full log-softmax (measured on the honest variants); the window mutants move them by 3e-4 or more.
LOGLIK_RTOL = 2e-5


# ------------------------------------------------------------------------------ helpers
def _close(value: float, expected: float, rtol: float, where: str, atol: float = 0.0) -> None:
    if not math.isfinite(value) and value != expected:
        raise AssertionError(f"{where} is {value} (not finite)")
    if not abs(value - expected) <= atol + rtol * abs(expected):
        off = abs(value - expected) / abs(expected) if expected else abs(value - expected)
        raise AssertionError(f"{where} is off by {off:.2g} (relative; tolerance {rtol:g})")


def _the_raise(got, where: str = "the call") -> None:
    if isinstance(got, Raised):
        raise AssertionError(f"{where} raised {got}")


# ------------------------------------------------------------------------------ count_parameters
def _int_pair(got, where: str) -> tuple[int, int]:
    _the_raise(got, where)
    if not isinstance(got, (tuple, list)) or len(got) != 2:
        raise AssertionError(f"{where}: return a tuple (total, non_embedding), but it {describe(got)}")
    for name, value in zip(("total", "non_embedding"), got):
        if type(value) is not int:
            raise AssertionError(f"{where}: {name} must be a Python int, but it {describe(value)}")
    return tuple(got)


def check_counts(got, ref) -> None:
    """(total, non_embedding) as Python ints, exactly the solution's; one pair or a list of pairs."""
    pairs = list(zip(got, ref)) if isinstance(ref, list) else [(got, ref)]
    if isinstance(ref, list) and (not isinstance(got, list) or len(got) != len(ref)):
        raise AssertionError(f"expected {len(ref)} results, but it {describe(got)}")
    for i, (g, r) in enumerate(pairs):
        where = f"call {i + 1}" if len(pairs) > 1 else "the call"
        pair = _int_pair(g, where)
        if pair[0] != r[0]:
            raise AssertionError(f"{where}: the total is off by {pair[0] - r[0]:+,}")
        if pair[1] != r[1]:
            raise AssertionError(f"{where}: the non-embedding count is off by {pair[1] - r[1]:+,} (Kaplan's N "
                                 "excludes the input embedding and the unembedding, a tied matrix once)")


# ------------------------------------------------------------------------------ evaluate_loss
_KEYS = ("loglikelihood", "tokens", "words", "bytes", "nll_per_token", "bits_per_byte", "word_perplexity")


def check_loglikelihood(got, ref) -> None:
    """The total log-likelihood (within 1e-4, relative) and the token count (exact)."""
    res = as_dict(got, _KEYS)
    tokens = as_real(res["tokens"], "tokens")
    if tokens != ref["tokens"]:
        raise AssertionError(f"tokens is off by {tokens - ref['tokens']:+g} (every token of every document, the "
                             "first one included, no special tokens added)")
    _close(as_real(res["loglikelihood"], "loglikelihood"), ref["loglikelihood"], LOGLIK_RTOL,
           "the total log-likelihood")


def check_counts_and_metrics(got, ref) -> None:
    """words and bytes exactly the solution's; the three metrics from the student's own total."""
    res = as_dict(got, _KEYS)
    ll, tokens = as_real(res["loglikelihood"], "loglikelihood"), as_real(res["tokens"], "tokens")
    words, n_bytes = as_real(res["words"], "words"), as_real(res["bytes"], "bytes")
    if words != ref["words"]:
        raise AssertionError(f"words is off by {words - ref['words']:+g} (len(re.split(r'\\s+', text)) per text)")
    if n_bytes != ref["bytes"]:
        raise AssertionError(f"bytes is off by {n_bytes - ref['bytes']:+g} (UTF-8 bytes of the texts)")
    if tokens <= 0 or ll >= 0:
        raise AssertionError("the log-likelihood must be negative and tokens positive")
    derived = {"nll_per_token": -ll / tokens, "bits_per_byte": -ll / (n_bytes * math.log(2))}
    for key, value in derived.items():
        _close(as_real(res[key], key), value, 1e-5, f"{key} (from your own total and counts)")
    ppl = as_real(res["word_perplexity"], "word_perplexity")  # compared in logs: exp(large) amplifies rounding
    _close(math.log(ppl) if ppl > 0 else -math.inf, -ll / words, 1e-5,
           "the log of word_perplexity (from your own total and counts)")


def check_words_bytes_loglik(got, ref) -> None:
    """Words and bytes of the original texts, and the same total log-likelihood at batch_size=1."""
    res = as_dict(got, _KEYS)
    words, n_bytes = as_real(res["words"], "words"), as_real(res["bytes"], "bytes")
    if (words, n_bytes) != (ref["words"], ref["bytes"]):
        raise AssertionError(f"words, bytes are off by {words - ref['words']:+g}, {n_bytes - ref['bytes']:+g} "
                             "(count them on original_documents, bytes in UTF-8)")
    _close(as_real(res["loglikelihood"], "loglikelihood"), ref["loglikelihood"], LOGLIK_RTOL,
           "the total log-likelihood at batch_size=1")


# ------------------------------------------------------------------------------ tokens_seen, training_compute
def check_exact_numbers(got, ref) -> None:
    """One number per call, exactly the solution's (step x tokens_per_step); any integer or float type."""
    for i, (g, r) in enumerate(zip(got, ref)):
        _the_raise(g, f"call {i + 1}")
        value = as_real(g, f"call {i + 1}")
        if value != r:
            raise AssertionError(f"call {i + 1}: off by {value - r:+,.0f} tokens")


def expect_array_values(rtol: float):
    """One array per call with the solution's shape and values (within ``rtol``), whatever its dtype."""
    def check(got, ref) -> None:
        if not isinstance(got, list) or len(got) != len(ref):
            raise AssertionError(f"expected {len(ref)} results, but it {describe(got)}")
        for i, (g, r) in enumerate(zip(got, ref)):
            where = f"call {i + 1}"
            _the_raise(g, where)
            if not isinstance(g, np.ndarray) or g.dtype.kind not in "iuf":
                raise AssertionError(f"{where}: expected a NumPy array of numbers, but it {describe(g)}")
            if g.shape != r.shape:
                raise AssertionError(f"{where}: shape {g.shape}, expected {r.shape}")
            a, e = g.astype(np.float64), r.astype(np.float64)
            bad = ~(np.abs(a - e) <= rtol * np.abs(e))
            if bad.any():
                raise AssertionError(f"{where}: {int(bad.sum())} of {bad.size} values are off")
    return check


def expect_dtype(dtype: str):
    """Every returned array has ``dtype`` (a property: it scores only next to the right values)."""
    def check(got, ref) -> None:
        if not isinstance(got, list):
            raise AssertionError(f"expected a list of results, but it {describe(got)}")
        for i, g in enumerate(got):
            _the_raise(g, f"call {i + 1}")
            if not isinstance(g, np.ndarray) or str(g.dtype) != dtype:
                raise AssertionError(f"call {i + 1}: expected a {dtype} array, but it {describe(g)}"
                                     + (f" of dtype {g.dtype}" if isinstance(g, np.ndarray) else ""))
    check.interface = "dtype"   # what this comparator checks (grader/cases.py RULE_CHECKS)
    return check


def check_close_numbers(got, ref) -> None:
    """One number per call, 6 N D within 1e-12 (relative)."""
    for i, (g, r) in enumerate(zip(got, ref)):
        where = f"call {i + 1}"
        _the_raise(g, where)
        _close(as_real(g, where), float(r), 1e-12, where)


# ------------------------------------------------------------------------------ fit_power_law
_FIT_KEYS = ("alpha", "N_c", "E", "alpha_err", "N_c_err", "E_err")


def _fit(got) -> dict:
    res = as_dict(got, _FIT_KEYS)
    out = {}
    for k in _FIT_KEYS:
        v = as_real(res[k], k)
        if not math.isfinite(v):
            raise AssertionError(f"{k} is {v} (not finite)")
        out[k] = v
    return out


def check_pure_fit(got, ref) -> None:
    """alpha and N_c of the least-squares line in log-log space; E = 0."""
    fit = _fit(got)
    for k in ("alpha", "N_c"):
        _close(fit[k], ref[k], 1e-5, k)
    if fit["E"] != 0.0:
        raise AssertionError("E must be 0 for the pure power law")


def check_pure_errors(got, ref) -> None:
    """alpha_err and N_c_err: s^2 (X^T X)^-1 with s^2 = RSS / (n - 2), N_c's by the delta method."""
    fit = _fit(got)
    for k in ("alpha", "alpha_err", "N_c_err"):
        _close(fit[k], ref[k], 1e-5, k)


def check_irreducible_fit(got, ref) -> None:
    fit = _fit(got)
    _close(fit["alpha"], ref["alpha"], 1e-3, "alpha")
    _close(fit["E"], ref["E"], 1e-4, "E")
    _close(math.log(fit["N_c"]) if fit["N_c"] > 0 else -math.inf, math.log(ref["N_c"]), 1e-3, "log N_c")
    for k in ("alpha_err", "E_err"):
        _close(fit[k], ref[k], 0.2, k)


# ------------------------------------------------------------------------------ predict_held_out
_PRED_KEYS = ("N", "L_pred", "L_low", "L_high")


def _float_arrays(got, ref) -> dict:
    got = as_dict(got, _PRED_KEYS)
    out = {}
    for k in _PRED_KEYS:
        g = got[k]
        if not isinstance(g, np.ndarray) or g.dtype.kind != "f":
            raise AssertionError(f"{k}: expected a float NumPy array, but it {describe(g)}")
        if g.shape != ref[k].shape:
            raise AssertionError(f"{k}: shape {g.shape}, expected {ref[k].shape} (one value per held-out model)")
        if not np.all(np.isfinite(g)):
            raise AssertionError(f"{k}: values that are not finite")
        out[k] = g.astype(np.float64)
    return out


def _all_close(a, e, rtol: float, where: str) -> None:
    bad = ~(np.abs(a - e) <= rtol * np.abs(e))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise AssertionError(f"{where}: {int(bad.sum())} of {bad.size} values are off (value {i + 1} by "
                             f"{abs(a[i] - e[i]) / abs(e[i]):.2g}, relative; tolerance {rtol:g})")


def _prediction_part(got: dict, ref: dict) -> None:
    _all_close(got["N"], ref["N"], 1e-12, "N (the held-out sizes, in increasing order)")
    _all_close(got["L_pred"], ref["L_pred"], 1e-5, "L_pred (the pure power law fitted on the n_fit smallest)")


def _band_part(got: dict, ref: dict) -> None:
    for key, sign in (("L_high", 1.0), ("L_low", -1.0)):
        width, expected = sign * np.log(got[key] / got["L_pred"]), sign * np.log(ref[key] / ref["L_pred"])
        _all_close(width, expected, 1e-4, f"the band's half-width ln({key} / L_pred)")


def check_prediction(got, ref) -> None:
    """The held-out sizes in increasing N and the prediction of the fit on the smallest models."""
    _prediction_part(_float_arrays(got, ref), ref)


def check_band(got, ref) -> None:
    """The prediction interval L_pred exp(-+ t s): Student's t with n_fit - 2 degrees of freedom,
    s = alpha_err sqrt(S + S / n + (x0 - x_bar)^2) with S = sum((x - x_bar)^2)."""
    got = _float_arrays(got, ref)
    _prediction_part(got, ref)
    _band_part(got, ref)


# ------------------------------------------------------------------------------ compute_optimal
def _numeric_optimum(params: dict, C: float) -> float:
    """argmin over N of L(N, C / (6 N)), found numerically (Brent on ln N): the closed form's check."""
    from scipy.optimize import minimize_scalar

    A, B, a, b = params["A"], params["B"], params["alpha"], params["beta"]
    half = math.log(C / 6)

    def excess(u):  # L - E at N = e^u, D = C / (6 N), scaled so that its minimum is of order 1
        return (A * math.exp(-a * u) + B * math.exp(-b * (half - u))) / (A * math.exp(-a * half / 2))

    res = minimize_scalar(excess, bounds=(-20.0, half + 20.0), method="bounded", options={"xatol": 1e-10})
    return math.exp(res.x)


def _split(n, d, params: dict, C: float, ref_n: float, where: str) -> None:
    n, d = as_real(n, f"{where}: N_opt"), as_real(d, f"{where}: D_opt")
    if not (n > 0 and d > 0):
        raise AssertionError(f"{where}: N_opt and D_opt must be positive, got {n:.3g} and {d:.3g}")
    _close(6 * n * d, C, 1e-9, f"{where}: 6 N_opt D_opt (must be the budget)")
    _close(n, _numeric_optimum(params, C), 1e-4, f"{where}: N_opt against a numeric minimisation of L")
    _close(n, ref_n, 1e-6, f"{where}: N_opt")


def check_optimal_numbers(got, ref) -> None:
    """(N_opt, D_opt) as numbers for a number: 6 N D = C, N_opt the numeric minimiser of L(N, C / 6N)."""
    _the_raise(got)
    if not isinstance(got, dict) or "answers" not in got:
        raise AssertionError(f"the probe got no answers: it {describe(got)}")
    for i, (answer, C, (ref_n, _)) in enumerate(zip(got["answers"], ref["C"], ref["answers"])):
        where = f"call {i + 1}"
        _the_raise(answer, where)
        if not isinstance(answer, (tuple, list)) or len(answer) != 2:
            raise AssertionError(f"{where}: return a pair (N_opt, D_opt), but it {describe(answer)}")
        n, d = answer
        _split(n, d, ref["params"], C, float(ref_n), where)


def check_optimal_arrays(got, ref) -> None:
    """(N_opt, D_opt) as arrays for an array of budgets, each the optimum of its budget."""
    _the_raise(got)
    answer = got.get("answer") if isinstance(got, dict) else got
    _the_raise(answer)
    if not isinstance(answer, (tuple, list)) or len(answer) != 2:
        raise AssertionError(f"return a pair (N_opt, D_opt), but it {describe(answer)}")
    C, (ref_n, _) = ref["C"], ref["answer"]
    for name, arr in zip(("N_opt", "D_opt"), answer):
        if not isinstance(arr, np.ndarray) or arr.dtype.kind != "f" or arr.shape != C.shape:
            raise AssertionError(f"{name}: expected a float array of shape {C.shape}, but it {describe(arr)}"
                                 + (f" of dtype {arr.dtype}, shape {arr.shape}" if isinstance(arr, np.ndarray) else ""))
    for i in range(C.size):
        _split(answer[0][i], answer[1][i], ref["params"], float(C[i]), float(ref_n[i]), f"budget {i + 1}")


# Comparators the probes name, besides those above.
RAISES_TYPE_OR_VALUE_ERROR = expect_raises("TypeError", "ValueError")
RAISES_VALUE_ERROR = expect_raises("ValueError")
ARRAY_EXACT = expect_array_values(0.0)
INT64 = expect_dtype("int64")
ARRAY_VALUES = expect_array_values(1e-12)
FLOAT64 = expect_dtype("float64")

# Each case is declared by its probe (grader/probes/taskB_pythia_scaling.py: @probe(cell, says, check, ...)), which
# names its comparator here: a case's weight is its share of its test cell's points.
CASES = declared_cases(PROBES, globals())

# What each function computes on ordinary inputs: the value cases that gate its other cases (grader/judge.py
# value_gates). Edge-case values (a Pythia configuration, a short max_length, another level) stand alone.
FUNCTIONS, MAIN = function_tables(CASES)
