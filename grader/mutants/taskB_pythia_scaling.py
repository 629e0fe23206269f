"""Plausible wrong answers for Task B (Pythia scaling); every one must lose points in the autograde."""

from grader.mutants import Mutant

# count_parameters
_CP_LOOP = "for module in (model.get_input_embeddings(), model.get_output_embeddings()):"
_CP_KEY = "embedding_matrices[id(module.weight)] = module.weight.numel()"
_CP_TOTAL = "total = sum(p.numel() for p in model.parameters())"
_CP_RET = "return int(total), int(total - sum(embedding_matrices.values()))"
_CP_ELSE = """    else:
        raise TypeError("count_parameters expects a transformers PreTrainedModel or PretrainedConfig, "
                        f"got {type(model_or_config).__name__}")
"""

# evaluate_loss
_EL_STREAM = """        stream = [prefix] + ids
        n_tokens += len(ids)
        for start in range(0, len(ids), max_length):
            stop = min(start + max_length, len(ids))
            windows.append((stream[max(0, stop - max_length):stop + 1], stop - start))"""
_EL_RANGE = "for start in range(0, len(ids), max_length):"
_EL_WINDOW = "windows.append((stream[max(0, stop - max_length):stop + 1], stop - start))"
_EL_CE = 'loglik -= F.cross_entropy(logits.float(), targets[j:j + 1024], reduction="sum").item()'
_EL_NLL = '"nll_per_token": -loglik / n_tokens,'
_EL_BPB = '"bits_per_byte": -loglik / (n_bytes * math.log(2)),'
_EL_PPL = '"word_perplexity": math.exp(-loglik / n_words),'
_EL_WORDS = 'n_words = sum(len(re.split(r"\\s+", text)) for text in original_documents)'
_EL_BYTES = 'n_bytes = sum(len(text.encode("utf-8")) for text in original_documents)'
_EL_MAXLEN = "max_length = int(max_length or context_length(model.config))"

# tokens_seen / training_compute
_TS_SCALAR = "return int(step) * int(tokens_per_step)"
_TS_ARRAY = "return np.asarray(step, dtype=np.int64) * np.int64(tokens_per_step)"
_TC_C = "C = 6.0 * np.asarray(n_params, dtype=np.float64) * np.asarray(n_tokens, dtype=np.float64)"
_TC_RET = "return float(C) if C.ndim == 0 else C"

# fit_power_law
_FP_LSTSQ = "(a, b), *_ = np.linalg.lstsq(X, y, rcond=None)"
_FP_COV = "cov = residuals @ residuals / (len(x) - 2) * np.linalg.inv(X.T @ X)"
_FP_PARAMS = "log_nc, grad = -a / b, np.array([-1 / b, a / b**2])"
_FP_ALPHA = '"alpha": float(-b),'
_FP_ALPHA_ERR = '"alpha_err": float(np.sqrt(cov[1, 1])),'
_FP_NC_ERR = '"N_c_err": float(np.exp(log_nc) * np.sqrt(grad @ cov @ grad))}'
_FP_XY = "x, y = np.log(N), np.log(L)"

# predict_held_out
_PH_FIT = "fit = fit_power_law(N[:n_fit], L[:n_fit])"
_PH_X = "x, x0, t = np.log(N[:n_fit]), np.log(N[n_fit:]), stats.t.ppf((1 + level) / 2, n_fit - 2)"
_PH_S = "s = fit[\"alpha_err\"] * np.sqrt(np.sum((x - x.mean()) ** 2) * (1 + 1 / n_fit) + (x0 - x.mean()) ** 2)"
_PH_PRED = "L_pred = (fit[\"N_c\"] / N[n_fit:]) ** fit[\"alpha\"]"
_PH_RET = ('return {"N": N[n_fit:], "L_pred": L_pred, "L_low": L_pred * np.exp(-t * s), '
           '"L_high": L_pred * np.exp(t * s)}')

# compute_optimal
_CO_G = "G = (a * params[\"A\"] / (b * params[\"B\"])) ** (1 / (a + b))"
_CO_N = "N_opt = G * (C / 6) ** (b / (a + b))"
_CO_RET = "return N_opt, C / (6 * N_opt)"

MUTANTS = [
    # ------------------------------------------------------------------ count_parameters
    Mutant(cell="count_parameters", name="N counts the embeddings (returns the total twice)",
           find=_CP_RET, replace="return int(total), int(total)",
           visible=True, case="count_config, count_model, count_pythia_config"),
    Mutant(cell="count_parameters", name="subtracts only the input embedding (embed_in)",
           find=_CP_LOOP, replace="for module in (model.get_input_embeddings(),):",
           visible=True, case="count_config, count_model, count_pythia_config"),
    Mutant(cell="count_parameters", name="subtracts only the unembedding (embed_out)",
           find=_CP_LOOP, replace="for module in (model.get_output_embeddings(),):",
           visible=True, case="count_config, count_model, count_pythia_config"),
    Mutant(cell="count_parameters", name="a tied embedding matrix subtracted twice",
           find=_CP_KEY, replace="embedding_matrices[id(module)] = module.weight.numel()",
           visible=True, case="count_config, count_model"),
    Mutant(cell="count_parameters", name="N = the transformer blocks only (forgets the final layer norm)",
           find=_CP_RET,
           replace="return int(total), int(sum(p.numel() for p in model.base_model.layers.parameters()))",
           visible=True, case="count_config, count_model, count_pythia_config"),
    Mutant(cell="count_parameters", name="total from the state dict (a tied matrix counted twice)",
           find=_CP_TOTAL, replace="total = sum(p.numel() for p in model.state_dict().values())",
           visible=True, case="count_config, count_model"),
    Mutant(cell="count_parameters", name="Kaplan's approximation 12 n_layer d^2 instead of the exact count",
           find=_CP_RET,
           replace="return int(total), int(12 * model.config.num_hidden_layers * model.config.hidden_size ** 2)",
           visible=True, case="count_config, count_model, count_pythia_config"),
    Mutant(cell="count_parameters", name="no TypeError for a non-model (anything else treated as a model)",
           find=_CP_ELSE, replace="    else:\n        model = model_or_config\n",
           visible=True, case="count_rejects_non_model"),
    # ------------------------------------------------------------------ evaluate_loss
    Mutant(cell="evaluate_loss", name="nll per token in bits instead of nats",
           find=_EL_NLL, replace='"nll_per_token": -loglik / n_tokens / math.log(2),',
           visible=True, case="eval_metrics"),
    Mutant(cell="evaluate_loss", name="bits per byte with ln (nats per byte)",
           find=_EL_BPB, replace='"bits_per_byte": -loglik / n_bytes,',
           visible=True, case="eval_metrics"),
    Mutant(cell="evaluate_loss", name="bits per byte multiplies by ln 2 instead of dividing",
           find=_EL_BPB, replace='"bits_per_byte": -loglik * math.log(2) / n_bytes,',
           visible=True, case="eval_metrics"),
    Mutant(cell="evaluate_loss", name="word perplexity divides by tokens instead of words",
           find=_EL_PPL, replace='"word_perplexity": math.exp(-loglik / n_tokens),',
           visible=True, case="eval_metrics"),
    Mutant(cell="evaluate_loss", name="no end-of-text context: the first token is never predicted",
           find=_EL_STREAM,
           replace="""        stream = ids
        n_tokens += max(len(ids) - 1, 0)
        for start in range(1, len(ids), max_length):
            stop = min(start + max_length, len(ids))
            windows.append((stream[max(0, stop - 1 - max_length):stop], stop - start))""",
           visible=True, case="eval_windows"),
    Mutant(cell="evaluate_loss", name="overlapping windows (stride max_length // 2) score tokens twice",
           find=_EL_RANGE, replace="for start in range(0, len(ids), max(1, max_length // 2)):",
           visible=True, case="eval_windows"),
    Mutant(cell="evaluate_loss", name="plain chunks: the last window sees only its own tokens",
           find=_EL_WINDOW, replace="windows.append((stream[start:stop + 1], stop - start))",
           visible=True, case="eval_windows"),
    Mutant(cell="evaluate_loss", name="window one token too long (max_length + 1 inputs)",
           find=_EL_WINDOW, replace="windows.append((stream[max(0, stop - max_length - 1):stop + 1], stop - start))",
           visible=True, case="eval_windows"),
    Mutant(cell="evaluate_loss", name="mean cross-entropy per chunk summed (reduction='mean')",
           find=_EL_CE, replace='loglik -= F.cross_entropy(logits.float(), targets[j:j + 1024]).item()',
           visible=True, case="eval_windows"),
    Mutant(cell="evaluate_loss", name="words by str.split() (lm-eval counts re.split on whitespace)",
           find=_EL_WORDS, replace="n_words = sum(len(text.split()) for text in original_documents)",
           visible=True, case="eval_metrics"),
    Mutant(cell="evaluate_loss", name="bytes counted as characters",
           find=_EL_BYTES, replace="n_bytes = sum(len(text) for text in original_documents)",
           visible=True, case="eval_original_documents"),
    Mutant(cell="evaluate_loss", name="words counted on the detokenised documents, not the originals",
           find=_EL_WORDS, replace='n_words = sum(len(re.split(r"\\s+", text)) for text in documents)',
           visible=True, case="eval_original_documents"),
    Mutant(cell="evaluate_loss", name="context hard-coded to Pythia's 2048",
           find=_EL_MAXLEN, replace="max_length = int(max_length or 2048)",
           visible=True, case="eval_windows"),
    Mutant(cell="evaluate_loss", name="the max_length argument ignored (always the model's context)",
           find=_EL_MAXLEN, replace="max_length = int(context_length(model.config))",
           visible=True, case="eval_max_length"),
    Mutant(cell="evaluate_loss", name="no ValueError when there is nothing to score",
           find="""    if n_tokens == 0:
        raise ValueError("the documents contain no tokens: nothing to score")
""", replace="",
           visible=True, case="eval_rejects_empty"),
    Mutant(cell="evaluate_loss", name="no TypeError for a model without a .config",
           find="""    if getattr(model, "config", None) is None:
        raise TypeError(f"evaluate_loss needs a transformers model with a .config, got {type(model).__name__}")
""", replace="",
           visible=True, case="eval_rejects_no_config"),
    # ------------------------------------------------------------------ tokens_seen
    Mutant(cell="bookkeeping", name="tokens seen off by one step (step + 1)",
           find=_TS_SCALAR, replace="return (int(step) + 1) * int(tokens_per_step)",
           visible=True, case="tokens_seen_scalar"),
    Mutant(cell="bookkeeping", name="a number: tokens_per_step ignored (always Pythia's)",
           find=_TS_SCALAR, replace="return int(step) * PYTHIA_TOKENS_PER_STEP",
           visible=True, case="tokens_seen_scalar"),
    Mutant(cell="bookkeeping", name="array path off by one step (step + 1)",
           find=_TS_ARRAY, replace="return (np.asarray(step, dtype=np.int64) + 1) * np.int64(tokens_per_step)",
           visible=True, case="tokens_seen_array"),
    Mutant(cell="bookkeeping", name="array path ignores tokens_per_step (always Pythia's)",
           find=_TS_ARRAY, replace="return np.asarray(step, dtype=np.int64) * np.int64(PYTHIA_TOKENS_PER_STEP)",
           visible=True, case="tokens_seen_array"),
    Mutant(cell="bookkeeping", name="array path keeps the steps' dtype (int32 steps overflow)",
           find=_TS_ARRAY, replace="return np.asarray(step) * tokens_per_step",
           visible=True, case="tokens_seen_array"),
    Mutant(cell="bookkeeping", name="array path in int32 (overflows at Pythia scale)",
           find=_TS_ARRAY, replace="return np.asarray(step, dtype=np.int32) * np.int32(tokens_per_step)",
           visible=True, case="tokens_seen_array"),
    Mutant(cell="bookkeeping", name="array path in float64 (right values, not an int64 array)",
           find=_TS_ARRAY, replace="return np.asarray(step, dtype=np.float64) * float(tokens_per_step)",
           visible=True, case="tokens_seen_dtype"),
    # ------------------------------------------------------------------ training_compute
    Mutant(cell="bookkeeping", name="C = 2 N D (forward pass only)",
           find=_TC_C, replace="C = 2.0 * np.asarray(n_params, dtype=np.float64) * np.asarray(n_tokens, dtype=np.float64)",
           visible=True, case="compute_scalar, compute_array"),
    Mutant(cell="bookkeeping", name="C in PF-days (Kaplan's unit) instead of FLOPs",
           find=_TC_C, replace="C = 6.0 * np.asarray(n_params, dtype=np.float64) * np.asarray(n_tokens, dtype=np.float64) / 8.64e19",
           visible=True, case="compute_scalar, compute_array"),
    Mutant(cell="bookkeeping", name="6 N D in int64 (overflows beyond 9.2e18)",
           find=_TC_C, replace="C = 6 * np.asarray(n_params) * np.asarray(n_tokens)",
           visible=True, case="compute_array"),
    Mutant(cell="bookkeeping", name="N x D multiplied in int64, converted to float after (overflows)",
           find=_TC_C, replace="C = 6.0 * (np.asarray(n_params) * np.asarray(n_tokens)).astype(np.float64)",
           visible=True, case="compute_array"),
    Mutant(cell="bookkeeping", name="returns float32 arrays",
           find=_TC_RET, replace="return float(C) if C.ndim == 0 else C.astype(np.float32)",
           visible=True, case="compute_array, compute_dtype"),
    # ------------------------------------------------------------------ fit_power_law
    Mutant(cell="fit_power_law", name="least squares in linear space (on L, not log L)",
           find=_FP_LSTSQ,
           replace=_FP_LSTSQ + "\n    (b, a), _ = curve_fit(lambda x, b, a: np.exp(a + b * x), x, L, p0=[b, a], maxfev=20000)",
           visible=True, case="fit_pure, fit_pure_errors"),
    Mutant(cell="fit_power_law", name="alpha with the wrong sign (the slope itself)",
           find=_FP_ALPHA, replace='"alpha": float(b),',
           visible=True, case="fit_pure, fit_pure_errors"),
    Mutant(cell="fit_power_law", name="log N_c = intercept (not divided by alpha)",
           find=_FP_PARAMS, replace="log_nc, grad = a, np.array([-1 / b, a / b**2])",
           visible=True, case="fit_pure, fit_pure_errors"),
    Mutant(cell="fit_power_law", name="residual variance RSS / n instead of RSS / (n - 2)",
           find=_FP_COV, replace="cov = residuals @ residuals / len(x) * np.linalg.inv(X.T @ X)",
           visible=True, case="fit_pure_errors"),
    Mutant(cell="fit_power_law", name="covariance (X^T X)^-1 without the residual variance",
           find=_FP_COV, replace="cov = np.linalg.inv(X.T @ X)",
           visible=True, case="fit_pure_errors"),
    Mutant(cell="fit_power_law", name="alpha's error from the intercept's variance cov[0, 0]",
           find=_FP_ALPHA_ERR, replace='"alpha_err": float(np.sqrt(cov[0, 0])),',
           visible=True, case="fit_pure_errors"),
    Mutant(cell="fit_power_law", name="N_c error = error of log N_c (no delta-method factor N_c)",
           find=_FP_NC_ERR, replace='"N_c_err": float(np.sqrt(grad @ cov @ grad))}',
           visible=True, case="fit_pure_errors"),
    Mutant(cell="fit_power_law", name="fits log10 instead of ln (N_c off by the base)",
           find=_FP_XY, replace="x, y = np.log10(N), np.log10(L)",
           visible=True, case="fit_pure, fit_pure_errors"),
    # ------------------------------------------------------------------ predict_held_out
    Mutant(cell="predict_held_out", name="fits every model, the held-out ones included",
           find=_PH_FIT, replace="fit = fit_power_law(N, L)",
           visible=True, case="predict_values"),
    Mutant(cell="predict_held_out", name="fits the n_fit largest models, not the smallest",
           find=_PH_FIT, replace="fit = fit_power_law(N[-n_fit:], L[-n_fit:])",
           visible=True, case="predict_values"),
    Mutant(cell="predict_held_out", name="multiplier 2 instead of Student's t quantile",
           find=_PH_X, replace="x, x0, t = np.log(N[:n_fit]), np.log(N[n_fit:]), 2.0",
           visible=True, case="predict_band, predict_level"),
    Mutant(cell="predict_held_out", name="t with n_fit - 1 degrees of freedom, not n_fit - 2",
           find=_PH_X, replace="x, x0, t = np.log(N[:n_fit]), np.log(N[n_fit:]), stats.t.ppf((1 + level) / 2, n_fit - 1)",
           visible=True, case="predict_band, predict_level"),
    Mutant(cell="predict_held_out", name="one-sided quantile t.ppf(level), not t.ppf((1 + level) / 2)",
           find=_PH_X, replace="x, x0, t = np.log(N[:n_fit]), np.log(N[n_fit:]), stats.t.ppf(level, n_fit - 2)",
           visible=True, case="predict_band, predict_level"),
    Mutant(cell="predict_held_out", name="level ignored (always 0.95)",
           find=_PH_X, replace="x, x0, t = np.log(N[:n_fit]), np.log(N[n_fit:]), stats.t.ppf(0.975, n_fit - 2)",
           visible=True, case="predict_level", edge=True),
    Mutant(cell="predict_held_out", name="confidence band of the line: without the new model's own scatter",
           find=_PH_S, replace='s = fit["alpha_err"] * np.sqrt(np.mean((x - x.mean()) ** 2) + (x0 - x.mean()) ** 2)',
           visible=True, case="predict_band"),
    Mutant(cell="predict_held_out", name="without the line's height term S / n",
           find=_PH_S, replace='s = fit["alpha_err"] * np.sqrt(np.sum((x - x.mean()) ** 2) + (x0 - x.mean()) ** 2)',
           visible=True, case="predict_band"),
    Mutant(cell="predict_held_out", name="the variance of ln N in place of the sum S",
           find=_PH_S, replace='s = fit["alpha_err"] * np.sqrt(np.var(x) * (1 + 1 / n_fit) + (x0 - x.mean()) ** 2)',
           visible=True, case="predict_band"),
    Mutant(cell="predict_held_out", name="interval centred on the mean ln N of all models, not the fitted ones",
           find=_PH_S,
           replace='s = fit["alpha_err"] * np.sqrt(np.sum((x - x.mean()) ** 2) * (1 + 1 / n_fit) + (x0 - np.log(N).mean()) ** 2)',
           visible=True, case="predict_band"),
    Mutant(cell="predict_held_out", name="interval additive in L (L_pred -+ t s) instead of multiplicative",
           find=_PH_RET, replace='return {"N": N[n_fit:], "L_pred": L_pred, "L_low": L_pred - t * s, "L_high": L_pred + t * s}',
           visible=True, case="predict_band"),
    Mutant(cell="predict_held_out", name="interval from N_c's relative error instead of alpha's",
           find=_PH_S,
           replace='s = fit["N_c_err"] / fit["N_c"] * np.sqrt(np.sum((x - x.mean()) ** 2) * (1 + 1 / n_fit) + (x0 - x.mean()) ** 2)',
           visible=True, case="predict_band"),
    Mutant(cell="predict_held_out", name="prediction without the exponent's sign (N / N_c)^alpha",
           find=_PH_PRED, replace='L_pred = (N[n_fit:] / fit["N_c"]) ** fit["alpha"]',
           visible=True, case="predict_values"),
    # ------------------------------------------------------------------ compute_optimal
    Mutant(cell="compute_optimal", name="exponents swapped: N_opt grows as C^(alpha / (alpha + beta))",
           find=_CO_N, replace="N_opt = G * (C / 6) ** (a / (a + b))",
           visible=True, case="optimal_scalar, optimal_array"),
    Mutant(cell="compute_optimal", name="forgets the 6: N_opt from C instead of C / 6",
           find=_CO_N, replace="N_opt = G * C ** (b / (a + b))",
           visible=True, case="optimal_scalar, optimal_array"),
    Mutant(cell="compute_optimal", name="G without the power 1 / (alpha + beta)",
           find=_CO_G, replace='G = a * params["A"] / (b * params["B"])',
           visible=True, case="optimal_scalar, optimal_array"),
    Mutant(cell="compute_optimal", name="G's ratio upside down (beta B / alpha A)",
           find=_CO_G, replace='G = (b * params["B"] / (a * params["A"])) ** (1 / (a + b))',
           visible=True, case="optimal_scalar, optimal_array"),
    Mutant(cell="compute_optimal", name="G without the exponents (A / B)",
           find=_CO_G, replace='G = (params["A"] / params["B"]) ** (1 / (a + b))',
           visible=True, case="optimal_scalar, optimal_array"),
    Mutant(cell="compute_optimal", name="D_opt = C / N_opt (forgets the 6)",
           find=_CO_RET, replace="return N_opt, C / N_opt",
           visible=True, case="optimal_scalar, optimal_array"),
    Mutant(cell="compute_optimal", name="returns (D_opt, N_opt)",
           find=_CO_RET, replace="return C / (6 * N_opt), N_opt",
           visible=True, case="optimal_scalar, optimal_array"),
    Mutant(cell="compute_optimal", name="D_opt = G (C / 6)^(alpha / (alpha + beta)) (G instead of 1 / G)",
           find=_CO_RET, replace="return N_opt, G * (C / 6) ** (a / (a + b))",
           visible=True, case="optimal_scalar, optimal_array"),
]
