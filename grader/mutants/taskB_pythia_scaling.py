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
_TS_SCALAR = "return int(steps) * int(tokens_per_step)"
_TS_ARRAY = "return steps.astype(np.int64) * np.int64(tokens_per_step)"
_TS_NEG = """    if np.any(steps < 0):
        raise ValueError(f"step must be >= 0, got {step}")
"""
_TC_BODY = """    N, D = np.asarray(n_params, dtype=np.float64), np.asarray(n_tokens, dtype=np.float64)
    if np.any(N <= 0) or np.any(D < 0):
        raise ValueError("n_params must be positive and n_tokens non-negative")
    C = 6.0 * N * D"""
_TC_C = "C = 6.0 * N * D"
_TC_RET = "return float(C) if C.ndim == 0 else C"

# fit_power_law
_FP_LSTSQ = "(a, b), rss, *_ = np.linalg.lstsq(X, y, rcond=None)"
_FP_COV = "cov = residuals @ residuals / (len(x) - 2) * np.linalg.inv(X.T @ X)"
_FP_PARAMS = "alpha, log_nc = -b, -a / b"
_FP_ALPHA_ERR = '"alpha_err": float(np.sqrt(cov[1, 1])),'
_FP_NC_ERR = '"N_c_err": float(np.exp(log_nc) * np.sqrt(grad @ cov @ grad)), "E_err": 0.0}'
_FP_ERR = "err = np.sqrt(np.diag(pcov))"
_FP_FLAG = "if not irreducible:\n        return fit"
_FP_MIN = "if N.size < (4 if irreducible else 3):"
_FP_XY = "x, y = np.log(N), np.log(L)"

MUTANTS = [
    # ------------------------------------------------------------------ count_parameters
    Mutant(cell="count_parameters", name="N counts the embeddings (returns the total twice)",
           find=_CP_RET, replace="return int(total), int(total)"),
    Mutant(cell="count_parameters", name="subtracts only the input embedding (embed_in)",
           find=_CP_LOOP, replace="for module in (model.get_input_embeddings(),):"),
    Mutant(cell="count_parameters", name="subtracts only the unembedding (embed_out)",
           find=_CP_LOOP, replace="for module in (model.get_output_embeddings(),):"),
    Mutant(cell="count_parameters", name="a tied embedding matrix subtracted twice",
           find=_CP_KEY, replace="embedding_matrices[id(module)] = module.weight.numel()"),
    Mutant(cell="count_parameters", name="N = the transformer blocks only (forgets the final layer norm)",
           find=_CP_RET,
           replace="return int(total), int(sum(p.numel() for p in model.base_model.layers.parameters()))"),
    Mutant(cell="count_parameters", name="total from the state dict (a tied matrix counted twice)",
           find=_CP_TOTAL, replace="total = sum(p.numel() for p in model.state_dict().values())"),
    Mutant(cell="count_parameters", name="Kaplan's approximation 12 n_layer d^2 instead of the exact count",
           find=_CP_RET,
           replace="return int(total), int(12 * model.config.num_hidden_layers * model.config.hidden_size ** 2)"),
    Mutant(cell="count_parameters", name="no TypeError for a non-model (anything else treated as a model)",
           find=_CP_ELSE, replace="    else:\n        model = model_or_config\n"),
    # ------------------------------------------------------------------ evaluate_loss
    Mutant(cell="evaluate_loss", name="nll per token in bits instead of nats",
           find=_EL_NLL, replace='"nll_per_token": -loglik / n_tokens / math.log(2),'),
    Mutant(cell="evaluate_loss", name="bits per byte with ln (nats per byte)",
           find=_EL_BPB, replace='"bits_per_byte": -loglik / n_bytes,'),
    Mutant(cell="evaluate_loss", name="bits per byte multiplies by ln 2 instead of dividing",
           find=_EL_BPB, replace='"bits_per_byte": -loglik * math.log(2) / n_bytes,'),
    Mutant(cell="evaluate_loss", name="word perplexity divides by tokens instead of words",
           find=_EL_PPL, replace='"word_perplexity": math.exp(-loglik / n_tokens),'),
    Mutant(cell="evaluate_loss", name="no end-of-text context: the first token is never predicted",
           find=_EL_STREAM,
           replace="""        stream = ids
        n_tokens += max(len(ids) - 1, 0)
        for start in range(1, len(ids), max_length):
            stop = min(start + max_length, len(ids))
            windows.append((stream[max(0, stop - 1 - max_length):stop], stop - start))"""),
    Mutant(cell="evaluate_loss", name="overlapping windows (stride max_length // 2) score tokens twice",
           find=_EL_RANGE, replace="for start in range(0, len(ids), max(1, max_length // 2)):"),
    Mutant(cell="evaluate_loss", name="plain chunks: the last window sees only its own tokens",
           find=_EL_WINDOW, replace="windows.append((stream[start:stop + 1], stop - start))"),
    Mutant(cell="evaluate_loss", name="window one token too long (max_length + 1 inputs)",
           find=_EL_WINDOW, replace="windows.append((stream[max(0, stop - max_length - 1):stop + 1], stop - start))"),
    Mutant(cell="evaluate_loss", name="mean cross-entropy per chunk summed (reduction='mean')",
           find=_EL_CE, replace='loglik -= F.cross_entropy(logits.float(), targets[j:j + 1024]).item()'),
    Mutant(cell="evaluate_loss", name="words by str.split() (lm-eval counts re.split on whitespace)",
           find=_EL_WORDS, replace="n_words = sum(len(text.split()) for text in original_documents)"),
    Mutant(cell="evaluate_loss", name="bytes counted as characters",
           find=_EL_BYTES, replace="n_bytes = sum(len(text) for text in original_documents)"),
    Mutant(cell="evaluate_loss", name="words counted on the detokenised documents, not the originals",
           find=_EL_WORDS, replace='n_words = sum(len(re.split(r"\\s+", text)) for text in documents)'),
    Mutant(cell="evaluate_loss", name="context hard-coded to Pythia's 2048",
           find=_EL_MAXLEN, replace="max_length = int(max_length or 2048)"),
    # ------------------------------------------------------------------ tokens_seen
    Mutant(cell="bookkeeping", name="tokens seen off by one step (step + 1)",
           find=_TS_SCALAR, replace="return (int(steps) + 1) * int(tokens_per_step)"),
    Mutant(cell="bookkeeping", name="array path off by one step (step + 1)",
           find=_TS_ARRAY, replace="return (steps.astype(np.int64) + 1) * np.int64(tokens_per_step)"),
    Mutant(cell="bookkeeping", name="returns a NumPy integer for a scalar step",
           find=_TS_SCALAR, replace="return steps * tokens_per_step"),
    Mutant(cell="bookkeeping", name="array path ignores tokens_per_step (always Pythia's)",
           find=_TS_ARRAY, replace="return steps.astype(np.int64) * np.int64(PYTHIA_TOKENS_PER_STEP)"),
    Mutant(cell="bookkeeping", name="array path in int32 (overflows at Pythia scale)",
           find=_TS_ARRAY, replace="return steps.astype(np.int32) * np.int32(tokens_per_step)"),
    Mutant(cell="bookkeeping", name="accepts negative steps",
           find=_TS_NEG, replace=""),
    # ------------------------------------------------------------------ training_compute
    Mutant(cell="bookkeeping", name="C = 2 N D (forward pass only)",
           find=_TC_C, replace="C = 2.0 * N * D"),
    Mutant(cell="bookkeeping", name="C in PF-days (Kaplan's unit) instead of FLOPs",
           find=_TC_C, replace="C = 6.0 * N * D / 8.64e19"),
    Mutant(cell="bookkeeping", name="6 N D in int64 (overflows beyond 9.2e18)",
           find=_TC_BODY,
           replace="""    N, D = np.asarray(n_params), np.asarray(n_tokens)
    if np.any(N <= 0) or np.any(D < 0):
        raise ValueError("n_params must be positive and n_tokens non-negative")
    C = 6 * N * D"""),
    Mutant(cell="bookkeeping", name="N x D multiplied in int64, converted to float after (overflows)",
           find=_TC_C, replace="C = 6.0 * (np.asarray(n_params) * np.asarray(n_tokens)).astype(np.float64)"),
    Mutant(cell="bookkeeping", name="returns float32 arrays",
           find=_TC_RET, replace="return float(C) if C.ndim == 0 else C.astype(np.float32)"),
    # ------------------------------------------------------------------ fit_power_law
    Mutant(cell="fit_power_law", name="least squares in linear space (on L, not log L)",
           find=_FP_LSTSQ,
           replace=_FP_LSTSQ + "\n    (b, a), _ = curve_fit(lambda x, b, a: np.exp(a + b * x), x, L, p0=[b, a], maxfev=20000)"),
    Mutant(cell="fit_power_law", name="alpha with the wrong sign (the slope itself)",
           find=_FP_PARAMS, replace="alpha, log_nc = b, -a / b"),
    Mutant(cell="fit_power_law", name="log N_c = intercept (not divided by alpha)",
           find=_FP_PARAMS, replace="alpha, log_nc = -b, a"),
    Mutant(cell="fit_power_law", name="residual variance RSS / n instead of RSS / (n - 2)",
           find=_FP_COV, replace="cov = residuals @ residuals / len(x) * np.linalg.inv(X.T @ X)"),
    Mutant(cell="fit_power_law", name="covariance (X^T X)^-1 without the residual variance",
           find=_FP_COV, replace="cov = np.linalg.inv(X.T @ X)"),
    Mutant(cell="fit_power_law", name="alpha's error from the intercept's variance cov[0, 0]",
           find=_FP_ALPHA_ERR, replace='"alpha_err": float(np.sqrt(cov[0, 0])),'),
    Mutant(cell="fit_power_law", name="N_c error = error of log N_c (no delta-method factor N_c)",
           find=_FP_NC_ERR, replace='"N_c_err": float(np.sqrt(grad @ cov @ grad)), "E_err": 0.0}'),
    Mutant(cell="fit_power_law", name="irreducible fit: variances reported as standard errors",
           find=_FP_ERR, replace="err = np.diag(pcov)"),
    Mutant(cell="fit_power_law", name="irreducible flag ignored (always the pure power law)",
           find=_FP_FLAG, replace="if True:\n        return fit"),
    Mutant(cell="fit_power_law", name="accepts two points (s^2 divides by n - 2 = 0)",
           find=_FP_MIN, replace="if N.size < 2:"),
    Mutant(cell="fit_power_law", name="fits log10 instead of ln (N_c off by the base)",
           find=_FP_XY, replace="x, y = np.log10(N), np.log10(L)"),
]
