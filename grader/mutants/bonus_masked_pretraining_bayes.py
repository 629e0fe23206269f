"""Plausible wrong answers for the bonus (masked pre-training and the marginal likelihood of PPCA);
every one must lose points in the autograde."""

from grader.mutants import Mutant

# ppca_log_marginal
_LM_S = "S = W @ W.T + sigma2 * torch.eye(D, dtype=W.dtype, device=W.device)\n    L = torch.linalg.cholesky(S)"
_LM_WHITE = "white = torch.linalg.solve_triangular(L, diff.T, upper=False)"
_LM_LOGDET = "log_det = 2 * torch.log(torch.diagonal(L)).sum()"
_LM_LOGP = "logp = -0.5 * (D * math.log(2 * math.pi) + log_det + mahalanobis)"
_LM_RET = "return logp.reshape(x.shape[:-1])"
_LM_MU = """    if mu.shape != (D,):
        raise ValueError(f"mu should be ({D},) to match W {tuple(W.shape)}, got {tuple(mu.shape)}")
"""

# gaussian_conditional
_GC_MEAN = "cond_mean = mu[M] + (x[..., R] - mu[R]) @ gain"
_GC_COV = "cond_cov = S_MM - S_RM.T @ gain"
_GC_BLOCKS = "S_RR, S_RM = S[R[:, None], R], S[R[:, None], M]"
_GC_GAIN = "gain = torch.cholesky_solve(S_RM, L)"
_GC_M = "M = torch.tensor(M_list, device=S.device)"
_GC_RET = "return cond_mean, 0.5 * (cond_cov + cond_cov.T)"
_GC_REPEAT = """    if len(set(M_list)) != len(M_list):
        raise ValueError(f"masked_idx has repeated indices: {M_list}")
"""

_GC_SHAPES = """    if mu.dim() != 1 or S.shape != (D, D):
        raise ValueError(f"expected mu (D,) and S (D, D), got {tuple(mu.shape)} and {tuple(S.shape)}")
    if x.dim() not in (1, 2) or x.shape[-1] != D:
        raise ValueError(f"x should be ({D},) or (N, {D}), got {tuple(x.shape)}")
"""

# masked_score
_MS_MASK = "M = torch.randperm(D, generator=generator)[:m].to(W.device)"
_MS_APPEND = "samples.append(logp.mean(-1).mean())"
_MS_LOGP = "logp = -0.5 * (torch.log(2 * math.pi * var) + (x_M - mean) ** 2 / var)  # (..., m)"
_MS_VAR = "var = torch.diagonal(cov)"
_MS_RET = "return samples.mean(), samples.detach().std() / math.sqrt(n_masks)"
_MS_RANGE = "if not 1 <= m <= D:"

# masked_pretraining_objective
_MO_SIZES = "for m in range(1, D + 1)))"
_MO_RET = "return torch.stack(estimates).sum(), torch.stack(ses).pow(2).sum().sqrt()"
_MO_D = "D = W.shape[0]\n    estimates, ses"
_MO_CALL = "masked_score(x, W, mu, sigma2, m, n_masks, generator)"
_MS_D = "D = W.shape[0]\n    if not 1 <= m <= D:"

MUTANTS = [
    # ------------------------------------------------------------------ ppca_log_marginal
    Mutant(cell="ppca_log_marginal", name="elementwise Normal: diagonal covariance, correlations ignored",
           find=_LM_S,
           replace="S = torch.diag(torch.diagonal(W @ W.T) + sigma2)\n    L = torch.linalg.cholesky(S)",
           visible=True, case="lm_batch"),
    Mutant(cell="ppca_log_marginal", name="the talk's snippet: a 1-D Normal with the covariance as its scale",
           find=_LM_RET, replace="return torch.distributions.Normal(mu, S).log_prob(x).sum(-1)",
           visible=True, case="lm_batch"),
    Mutant(cell="ppca_log_marginal", name="log det S = sum log diag L (missing factor 2)",
           find=_LM_LOGDET, replace="log_det = torch.log(torch.diagonal(L)).sum()",
           visible=True, case="lm_batch"),
    Mutant(cell="ppca_log_marginal", name="normalising constant log 2 pi once instead of D times",
           find=_LM_LOGP, replace="logp = -0.5 * (math.log(2 * math.pi) + log_det + mahalanobis)",
           visible=True, case="lm_batch"),
    Mutant(cell="ppca_log_marginal", name="missing the factor 1/2",
           find=_LM_LOGP, replace="logp = -(D * math.log(2 * math.pi) + log_det + mahalanobis)",
           visible=True, case="lm_batch"),
    Mutant(cell="ppca_log_marginal", name="sigma2 read as a standard deviation (sigma2^2 I)",
           find=_LM_S,
           replace="S = W @ W.T + sigma2 ** 2 * torch.eye(D, dtype=W.dtype, device=W.device)\n"
                   "    L = torch.linalg.cholesky(S)",
           visible=True, case="lm_batch"),
    Mutant(cell="ppca_log_marginal", name="whitening with L^T instead of L",
           find=_LM_WHITE, replace="white = torch.linalg.solve_triangular(L.T, diff.T, upper=True)",
           visible=True, case="lm_batch"),
    Mutant(cell="ppca_log_marginal", name="sums the batch into one number",
           find=_LM_RET, replace="return logp.sum()",
           visible=True, case="lm_batch"),
    Mutant(cell="ppca_log_marginal", name="no check of mu's shape",
           find=_LM_MU, replace="",
           visible=True, case="lm_rejects_shapes"),
    Mutant(cell="ppca_log_marginal", name="sigma2 turned into a Python float (no gradient reaches it)",
           find=_LM_S, replace=_LM_S.replace("sigma2 * torch.eye", "float(sigma2) * torch.eye"),
           visible=True, case="lm_gradient"),
    Mutant(cell="ppca_log_marginal", name="a single x gives shape (1,), not a 0-d tensor",
           find=_LM_RET, replace="return logp", visible=True, case="lm_single", edge=True),
    # ------------------------------------------------------------------ gaussian_conditional
    Mutant(cell="gaussian_conditional", name="the slide's '+' Schur complement",
           find=_GC_COV, replace="cond_cov = S_MM + S_RM.T @ gain",
           visible=True, case="gc_values"),
    Mutant(cell="gaussian_conditional", name="transposed cross block: S_MR where S_RM belongs",
           find=_GC_BLOCKS, replace="S_RR, S_RM = S[R[:, None], R], S[M[:, None], R]",
           visible=True, case="gc_values"),
    Mutant(cell="gaussian_conditional", name="mean forgets to centre x_R (no - mu_R)",
           find=_GC_MEAN, replace="cond_mean = mu[M] + x[..., R] @ gain",
           visible=True, case="gc_values"),
    Mutant(cell="gaussian_conditional", name="mean forgets mu_M",
           find=_GC_MEAN, replace="cond_mean = (x[..., R] - mu[R]) @ gain",
           visible=True, case="gc_values"),
    Mutant(cell="gaussian_conditional", name="marginal covariance S_MM (conditioning ignored)",
           find=_GC_RET, replace="return cond_mean, S_MM",
           visible=True, case="gc_values"),
    Mutant(cell="gaussian_conditional", name="regression gain without S_RR^-1",
           find=_GC_GAIN, replace="gain = S_RM",
           visible=True, case="gc_values"),
    Mutant(cell="gaussian_conditional", name="masked indices sorted (output order != masked_idx)",
           find=_GC_M, replace="M = torch.tensor(sorted(M_list), device=S.device)",
           visible=True, case="gc_order"),
    Mutant(cell="gaussian_conditional", name="repeated masked indices accepted",
           find=_GC_REPEAT, replace="",
           visible=True, case="gc_rejects_indices"),
    Mutant(cell="gaussian_conditional", name="x indexed as a batch (x[:, R]): a single x (D,) fails",
           find=_GC_MEAN, replace="cond_mean = mu[M] + (x[:, R] - mu[R]) @ gain", visible=True, case="gc_single"),
    Mutant(cell="gaussian_conditional", name="everything masked: only the marginal variances (a diagonal covariance)",
           find="return mu[M].expand(*x.shape[:-1], len(M)), S_MM",
           replace="return mu[M].expand(*x.shape[:-1], len(M)), torch.diag(torch.diagonal(S_MM))", visible=True,
           case="gc_all_masked"),
    Mutant(cell="gaussian_conditional", name="no check of the shapes of mu, S and x",
           find=_GC_SHAPES, replace="", visible=True, case="gc_rejects_shapes"),
    # ------------------------------------------------------------------ masked_score
    Mutant(cell="masked_score", name="forgets the 1/m (sum over masked coordinates)",
           find=_MS_APPEND, replace="samples.append(logp.sum(-1).mean())",
           visible=True, case="ms_estimate, ms_full_mask"),
    Mutant(cell="masked_score", name="masks sampled with replacement (randint)",
           find=_MS_MASK, replace="M = torch.randint(0, D, (m,), generator=generator).to(W.device)",
           visible=True, case="ms_estimate"),
    Mutant(cell="masked_score", name="masks with replacement, duplicates dropped",
           find=_MS_MASK, replace="M = torch.randint(0, D, (m,), generator=generator).unique().to(W.device)",
           visible=True, case="ms_estimate"),
    Mutant(cell="masked_score", name="ignores the generator (global RNG)",
           find=_MS_MASK, replace="M = torch.randperm(D)[:m].to(W.device)",
           visible=True, case="ms_global_state"),
    Mutant(cell="masked_score", name="seeds its own generator (a fixed seed), ignores the given one",
           find=_MS_D, replace="generator = torch.Generator().manual_seed(0)\n    " + _MS_D,
           visible=True, case="ms_generator"),
    Mutant(cell="masked_score", name="standard error = standard deviation (no 1/sqrt(n))",
           find=_MS_RET, replace="return samples.mean(), samples.detach().std()",
           visible=True, case="ms_standard_error"),
    Mutant(cell="masked_score", name="standard error = std / n",
           find=_MS_RET, replace="return samples.mean(), samples.detach().std() / n_masks",
           visible=True, case="ms_standard_error"),
    Mutant(cell="masked_score", name="joint conditional log p(x_M | x_R) / m instead of per-coordinate terms",
           find=_MS_LOGP + "\n        " + _MS_APPEND,
           replace="logp = torch.distributions.MultivariateNormal(mean, cov).log_prob(x_M)\n"
                   "        samples.append((logp / m).mean())",
           visible=True, case="ms_estimate"),
    Mutant(cell="masked_score", name="standard deviation used as the variance",
           find=_MS_VAR, replace="var = torch.diagonal(cov).sqrt()",
           visible=True, case="ms_estimate"),
    Mutant(cell="masked_score", name="mask of m + 1 coordinates (off by one)",
           find="[:m]", replace="[:m + 1]",
           visible=True, case="ms_estimate"),
    Mutant(cell="masked_score", name="no upper bound check on m",
           find=_MS_RANGE, replace="if m < 1:",
           visible=True, case="ms_rejects_m"),
    Mutant(cell="masked_score", name="a batch's rows summed instead of averaged",
           find=_MS_APPEND, replace="samples.append(logp.mean(-1).sum())", visible=True, case="ms_batch"),
    Mutant(cell="masked_score", name="the per-mask values detached (no gradient)",
           find="samples = torch.stack(samples)", replace="samples = torch.stack(samples).detach()", visible=True,
           case="ms_gradient"),
    # ------------------------------------------------------------------ masked_pretraining_objective
    Mutant(cell="masked_pretraining_objective", name="mask sizes m = 0..D-1",
           find=_MO_SIZES, replace="for m in range(D)))",
           visible=True, case="mo_estimate"),
    Mutant(cell="masked_pretraining_objective", name="mask sizes m = 1..D-1 (forgets m = D)",
           find=_MO_SIZES, replace="for m in range(1, D)))",
           visible=True, case="mo_estimate"),
    Mutant(cell="masked_pretraining_objective", name="average over m instead of the sum",
           find=_MO_RET, replace="return torch.stack(estimates).mean(), torch.stack(ses).pow(2).sum().sqrt()",
           visible=True, case="mo_estimate"),
    Mutant(cell="masked_pretraining_objective", name="fixed 15 % mask ratio: D * S(x; m0)",
           find=_MO_SIZES, replace="for m in [max(1, round(0.15 * D))] * D))",
           visible=True, case="mo_estimate"),
    Mutant(cell="masked_pretraining_objective", name="standard errors added linearly",
           find=_MO_RET, replace="return torch.stack(estimates).sum(), torch.stack(ses).sum()",
           visible=True, case="mo_standard_error"),
    Mutant(cell="masked_pretraining_objective", name="standard error = mean of the per-m errors",
           find=_MO_RET, replace="return torch.stack(estimates).sum(), torch.stack(ses).mean()",
           visible=True, case="mo_standard_error"),
    Mutant(cell="masked_pretraining_objective", name="returns the variance, not the standard error",
           find=_MO_RET, replace="return torch.stack(estimates).sum(), torch.stack(ses).pow(2).sum()",
           visible=True, case="mo_standard_error"),
    Mutant(cell="masked_pretraining_objective", name="D from W.shape[1] (the latent size K)",
           find=_MO_D, replace="D = W.shape[1]\n    estimates, ses",
           visible=True, case="mo_estimate"),
    Mutant(cell="masked_pretraining_objective", name="seeds its own generator (a fixed seed), ignores the given one",
           find=_MO_D, replace="D = W.shape[0]\n    generator = torch.Generator().manual_seed(0)\n    estimates, ses",
           visible=True, case="mo_generator"),
    Mutant(cell="masked_pretraining_objective",
           name="generator not passed on: masked_score draws from the global state",
           find=_MO_CALL, replace="masked_score(x, W, mu, sigma2, m, n_masks)",
           visible=True, case="mo_global_state"),
]
