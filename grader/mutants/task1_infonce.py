"""Plausible wrong answers for Task 1 (InfoNCE); every one must lose points in the autograde."""

from grader.mutants import Mutant

_INFO_RET = "return (torch.logsumexp(scores, dim=1) - positive).mean()"
_INFO_POS = "positive = scores.gather(1, positive_index.view(-1, 1).to(scores.device)).squeeze(1)"
_NCE_NEG = "negatives = F.logsigmoid(-logits[:, 1:]).sum(dim=1)"
_COS_RET = 'return torch.einsum("bd,bkd->bk", a, c) / temperature'
_GMI_RET = "return -0.5 * dim * math.log(1 - rho ** 2)"
_BOUND_RET = "return math.log(num_negatives + 1) - mean_loss"
_NPAIR_RET = "return torch.logsumexp(torch.cat([zeros, diffs], dim=1), dim=1).mean()"

MUTANTS = [
    # ------------------------------------------------------------------ info_nce_loss
    Mutant(cell="info_nce_loss", name="sum over the batch instead of the mean",
           find=_INFO_RET, replace="return (torch.logsumexp(scores, dim=1) - positive).sum()"),
    Mutant(cell="info_nce_loss", name="positive always in column 0 (ignores positive_index)",
           find=_INFO_POS, replace="positive = scores[:, 0]"),
    Mutant(cell="info_nce_loss", name="wrong sign (log-likelihood instead of loss)",
           find=_INFO_RET, replace="return (positive - torch.logsumexp(scores, dim=1)).mean()"),
    Mutant(cell="info_nce_loss", name="naive log(sum(exp)) overflows",
           find=_INFO_RET, replace="return (torch.log(torch.exp(scores).sum(dim=1)) - positive).mean()"),
    Mutant(cell="info_nce_loss", name="denominator over the negatives only (slide erratum)",
           find=_INFO_RET, replace="return (torch.logsumexp(scores[:, 1:], dim=1) - positive).mean()"),
    Mutant(cell="info_nce_loss", name="returns float32 whatever the input dtype",
           find=_INFO_RET, replace="return (torch.logsumexp(scores, dim=1) - positive).float().mean()"),
    Mutant(cell="info_nce_loss", name="no check that scores are 2-D",
           find="if scores.dim() != 2:\n        raise ValueError(f\"scores must have shape [B, K+1], got {tuple(scores.shape)}\")\n    if isinstance",
           replace="if isinstance"),
    # ------------------------------------------------------------------ nce_loss
    Mutant(cell="nce_loss", name="no log K shift of the logits",
           find="logits = scores - math.log(k)", replace="logits = scores"),
    Mutant(cell="nce_loss", name="shift by log(K+1) instead of log K",
           find="logits = scores - math.log(k)", replace="logits = scores - math.log(k + 1)"),
    Mutant(cell="nce_loss", name="mean over the negatives instead of the sum",
           find=_NCE_NEG, replace="negatives = F.logsigmoid(-logits[:, 1:]).mean(dim=1)"),
    Mutant(cell="nce_loss", name="negatives labelled as data (wrong sign)",
           find=_NCE_NEG, replace="negatives = F.logsigmoid(logits[:, 1:]).sum(dim=1)"),
    Mutant(cell="nce_loss", name="log(1 - sigmoid) instead of logsigmoid(-x) (unstable)",
           find=_NCE_NEG, replace="negatives = torch.log(1 - torch.sigmoid(logits[:, 1:])).sum(dim=1)"),
    Mutant(cell="nce_loss", name="sum over the batch instead of the mean",
           find="return -(positive + negatives).mean()", replace="return -(positive + negatives).sum()"),
    Mutant(cell="nce_loss", name="K counted with the positive (off by one)",
           find="k = scores.shape[1] - 1", replace="k = scores.shape[1]"),
    # ------------------------------------------------------------------ cosine_scores
    Mutant(cell="cosine_scores", name="candidates not normalised",
           find="c = F.normalize(candidates, dim=-1)", replace="c = candidates"),
    Mutant(cell="cosine_scores", name="anchors not normalised",
           find="a = F.normalize(anchors, dim=-1)", replace="a = anchors"),
    Mutant(cell="cosine_scores", name="multiplies by the temperature",
           find=_COS_RET, replace='return torch.einsum("bd,bkd->bk", a, c) * temperature'),
    Mutant(cell="cosine_scores", name="normalises over the candidate axis",
           find="c = F.normalize(candidates, dim=-1)", replace="c = F.normalize(candidates, dim=1)"),
    Mutant(cell="cosine_scores", name="accepts a temperature of 0",
           find="if not temperature > 0:", replace="if temperature < 0:"),
    Mutant(cell="cosine_scores", name="no batch-size check",
           find="if candidates.shape[0] != anchors.shape[0] or candidates.shape[2]",
           replace="if candidates.shape[2]"),
    # ------------------------------------------------------------------ gaussian_mutual_information
    Mutant(cell="mi_functions", name="Gaussian MI without the factor 1/2",
           find=_GMI_RET, replace="return -dim * math.log(1 - rho ** 2)"),
    Mutant(cell="mi_functions", name="Gaussian MI of one coordinate only (forgets d)",
           find=_GMI_RET, replace="return -0.5 * math.log(1 - rho ** 2)"),
    Mutant(cell="mi_functions", name="Gaussian MI with |rho| instead of rho^2",
           find=_GMI_RET, replace="return -0.5 * dim * math.log(1 - abs(rho))"),
    Mutant(cell="mi_functions", name="Gaussian MI with the wrong sign",
           find=_GMI_RET, replace="return 0.5 * dim * math.log(1 - rho ** 2)"),
    Mutant(cell="mi_functions", name="Gaussian MI in bits instead of nats",
           find=_GMI_RET, replace="return -0.5 * dim * math.log2(1 - rho ** 2)"),
    # ------------------------------------------------------------------ infonce_mi_lower_bound
    Mutant(cell="mi_functions", name="bound with log K instead of log(K+1)",
           find=_BOUND_RET, replace="return math.log(num_negatives) - mean_loss"),
    Mutant(cell="mi_functions", name="bound with the wrong sign",
           find=_BOUND_RET, replace="return mean_loss - math.log(num_negatives + 1)"),
    Mutant(cell="mi_functions", name="bound plus the loss",
           find=_BOUND_RET, replace="return math.log(num_negatives + 1) + mean_loss"),
    Mutant(cell="mi_functions", name="bound in bits (log2)",
           find=_BOUND_RET, replace="return math.log2(num_negatives + 1) - mean_loss"),
    Mutant(cell="mi_functions", name="bound accepts per-sample losses (sums them)",
           find="mean_loss = torch.as_tensor(mean_loss)", replace="mean_loss = torch.as_tensor(mean_loss).sum()"),
    # ------------------------------------------------------------------ n_pair_loss
    Mutant(cell="n_pair_loss", name="drops the 1 inside the log",
           find=_NPAIR_RET, replace="return torch.logsumexp(diffs, dim=1).mean()"),
    Mutant(cell="n_pair_loss", name="s_0 - s_k instead of s_k - s_0",
           find="diffs = negative_scores - positive_scores[:, None]",
           replace="diffs = positive_scores[:, None] - negative_scores"),
    Mutant(cell="n_pair_loss", name="sum over the batch instead of the mean",
           find=_NPAIR_RET, replace="return torch.logsumexp(torch.cat([zeros, diffs], dim=1), dim=1).sum()"),
    Mutant(cell="n_pair_loss", name="sum of per-negative softplus (binomial loss)",
           find=_NPAIR_RET, replace="return F.softplus(diffs).sum(dim=1).mean()"),
    Mutant(cell="n_pair_loss", name="naive log(1 + sum exp) overflows",
           find=_NPAIR_RET, replace="return torch.log(1 + torch.exp(diffs).sum(dim=1)).mean()"),
    Mutant(cell="n_pair_loss", name="positive scores not broadcast over negatives",
           find="diffs = negative_scores - positive_scores[:, None]",
           replace="diffs = negative_scores - positive_scores.mean()"),
]
