"""Plausible wrong answers for Task 2 (pseudo-likelihood); every one must lose points in the autograde."""

from grader.mutants import Mutant

# mlm_loss
_ML_NLL = "token_nll = -log_probs.gather(1, targets.long().view(-1, 1)).squeeze(1)  # [T]"
_ML_RET = "return torch.where(mask.bool(), token_nll, zero).sum(-1)"

# masked_copies
_MC_SET = "copies[torch.arange(len(positions), device=input_ids.device), positions] = mask_token_id"

# conditional_log_probs
_CL_APPEND = "rows.append(torch.log_softmax(at_mask.float(), dim=-1))"
_CL_READ = "at_mask = logits[torch.arange(len(chunk), device=model_device), chunk]  # [b, V]"
_CL_LOOP = """for start in range(0, len(positions), batch_size):
            chunk = positions[start:start + batch_size]"""

# pseudo_log_likelihood / pseudo_perplexity
_PLL_TABLE = "table = conditional_log_probs(model, input_ids, mask_token_id, positions, batch_size)  # [P, V]"
_PLL_RET = "return table[torch.arange(len(positions), device=table.device), input_ids[positions]].sum()"
_PLL_DEFAULT = """    if positions is None:
        positions = torch.arange(input_ids.numel())
"""
_PPPL_RET = "return math.exp(-float(pll) / num_tokens)"

# single_index_estimate
_SI_U = "u = scored[torch.randint(len(scored), (num_samples,), generator=generator)]  # [num_samples]"
_SI_PASS = "log_p = conditional_log_probs(model, input_ids, mask_token_id, u, batch_size=max(num_samples, 1))"
_SI_RET = "return -len(scored) * token_ll"

# causal_log_probs / perplexity
_CA_LOGITS = "logits = model(input_ids=ids.unsqueeze(0)).logits[0, :-1]  # position i predicts token i + 1"
_CA_LOGP = "log_p = torch.log_softmax(logits.float(), dim=-1)"
_CA_CTX = "ids = torch.cat([ids.new_tensor([context_token_id]), ids])"
_CA_NOGRAD = """    with torch.no_grad():
        logits = model"""
_PPL_RET = "return math.exp(-float(log_likelihood) / num_tokens)"

# conditionals_compatible
_CC_RET = "return bool(ok_a and ok_b)"
_CC_LOGRATIO = "log_ratio = pa[support].log() - pb[support].log()  # = u(a) + v(b) if compatible"
_CC_U = "u = (torch.linalg.pinv(design) @ log_ratio)[:n_a]"
_CC_OKA = "ok_a = torch.allclose(joint / joint.sum(0, keepdim=True), pa, atol=atol)"
_CC_NEG = """    if (pa < 0).any() or (pb < 0).any():
        raise ValueError("conditional probabilities must be non-negative")
"""
_CC_COLS = "if not torch.allclose(pa.sum(0), torch.ones(pa.shape[1], dtype=torch.float64), atol=1e-5):"

# bert_mask
_BM_SELECT = "selected = (torch.rand(ids.shape, generator=generator) < q).to(ids.device) & ~special"
_BM_ACTIONS = """masked[selected & (action < 0.8)] = mask_token_id
    swap = selected & (action >= 0.8) & (action < 0.9)"""
_BM_SWAP = "swap = selected & (action >= 0.8) & (action < 0.9)"
_BM_RANDOM = "random_tokens = torch.randint(vocab_size, ids.shape, generator=generator).to(ids.device)"
_BM_LABELS = "labels = torch.where(selected, ids, torch.full_like(ids, -100))"
_BM_CLONE = "masked = ids.clone()"
_BM_IDS = "ids = input_ids.long()"
_BM_CHECK = """    if not 0.0 <= q <= 1.0:
        raise ValueError(f"q must lie in [0, 1], got {q}")
"""
_BM_ACTION = "action = torch.rand(ids.shape, generator=generator).to(ids.device)"
_BM_DRAWS = """selected = (torch.rand(ids.shape, generator=generator) < q).to(ids.device) & ~special
    action = torch.rand(ids.shape, generator=generator).to(ids.device)
    random_tokens = torch.randint(vocab_size, ids.shape, generator=generator).to(ids.device)"""

MUTANTS = [
    # ------------------------------------------------------------------ mlm_loss
    Mutant(cell="mlm_loss", name="mean over the positions instead of the sum",
           find=_ML_RET, replace="return torch.where(mask.bool(), token_nll, zero).mean(-1)",
           visible=True, case="mlm_loss_one_mask"),
    Mutant(cell="mlm_loss", name="wrong sign (log-likelihood instead of the loss)",
           find=_ML_NLL, replace="token_nll = log_probs.gather(1, targets.long().view(-1, 1)).squeeze(1)  # [T]",
           visible=True, case="mlm_loss_one_mask"),
    Mutant(cell="mlm_loss", name="counts the unmasked positions",
           find=_ML_RET, replace="return torch.where(~mask.bool(), token_nll, zero).sum(-1)",
           visible=True, case="mlm_loss_one_mask"),
    Mutant(cell="mlm_loss", name="divides by the number of masked tokens (per-token mean, as HF reports)",
           find=_ML_RET, replace="return torch.where(mask.bool(), token_nll, zero).sum(-1) / mask.sum(-1).clamp(min=1)",
           visible=True, case="mlm_loss_one_mask"),
    Mutant(cell="mlm_loss", name="always returns float32",
           find=_ML_NLL, replace="token_nll = -log_probs.float().gather(1, targets.long().view(-1, 1)).squeeze(1)  # [T]",
           visible=True, case="mlm_loss_float64"),
    Mutant(cell="mlm_loss", name="multiplies by the mask (0 * -inf = nan at an unselected -inf)",
           find=_ML_RET, replace="return (token_nll * mask.to(token_nll.dtype)).sum(-1)",
           visible=True, case="mlm_loss_unselected_inf"),
    Mutant(cell="mlm_loss", name="sums over every axis (K masks give one number)",
           find=_ML_RET, replace="return torch.where(mask.bool(), token_nll, zero).sum()",
           visible=True, case="mlm_loss_many_masks"),
    # ------------------------------------------------------------------ masked_copies
    Mutant(cell="masked_copies", name="every copy masks all the positions",
           find=_MC_SET, replace="copies[:, positions] = mask_token_id",
           visible=True, case="masked_copies_values"),
    Mutant(cell="masked_copies", name="copy k masks position k instead of positions[k]",
           find=_MC_SET, replace="copies[torch.arange(len(positions), device=input_ids.device), "
                                 "torch.arange(len(positions), device=input_ids.device)] = mask_token_id",
           visible=True, case="masked_copies_values"),
    Mutant(cell="masked_copies", name="off by one: masks the position before",
           find=_MC_SET, replace="copies[torch.arange(len(positions), device=input_ids.device), positions - 1] = mask_token_id",
           visible=True, case="masked_copies_values"),
    Mutant(cell="masked_copies", name="returns [T, P] (transposed)",
           find="    return copies\n", replace="    return copies.T\n",
           visible=True, case="masked_copies_values"),
    Mutant(cell="masked_copies", name="positions sorted first (copies in the wrong order)",
           find=_MC_SET, replace="copies[torch.arange(len(positions), device=input_ids.device), positions.sort().values] = "
                                 "mask_token_id",
           visible=True, case="masked_copies_permutation"),
    Mutant(cell="masked_copies", name="masks the input itself too (input_ids.long() is no copy for int64)",
           find=_MC_SET, replace=_MC_SET + "\n    work = input_ids.long()\n    work[positions] = mask_token_id",
           visible=True, case="masked_copies_input_unchanged"),
    # ------------------------------------------------------------------ conditional_log_probs
    Mutant(cell="conditional_log_probs", name="raw logits instead of log-softmax",
           find=_CL_APPEND, replace="rows.append(at_mask.float())",
           visible=True, case="conditional_all_positions"),
    Mutant(cell="conditional_log_probs", name="reads position k of copy k instead of positions[k]",
           find=_CL_READ, replace="at_mask = logits[torch.arange(len(chunk), device=model_device), "
                                  "start + torch.arange(len(chunk), device=model_device)]  # [b, V]",
           visible=True, case="conditional_given_positions"),
    Mutant(cell="conditional_log_probs", name="log-softmax over the batch axis",
           find=_CL_APPEND, replace="rows.append(torch.log_softmax(at_mask.float(), dim=0))",
           visible=True, case="conditional_all_positions"),
    Mutant(cell="conditional_log_probs", name="one forward pass per masked copy (batch_size ignored)",
           find=_CL_LOOP, replace="for start in range(0, len(positions)):\n            chunk = positions[start:start + 1]",
           visible=True, case="conditional_batches"),
    Mutant(cell="conditional_log_probs", name="one pass per copy, the counting hooks cleared after the first",
           find=_CL_LOOP, replace="for start in range(0, len(positions)):\n            chunk = positions[start:start + 1]\n"
                                  "            if start:\n                model.get_input_embeddings()._forward_hooks.clear()",
           visible=True, case="conditional_batches"),
    Mutant(cell="conditional_log_probs", name="no torch.no_grad (returns a graph)",
           find="with torch.no_grad():", replace="if True:  # no torch.no_grad()",
           visible=True, case="conditional_no_grad"),
    Mutant(cell="conditional_log_probs", name="reads the [CLS] position of every copy",
           find=_CL_READ, replace="at_mask = logits[:, 0]  # [b, V]",
           visible=True, case="conditional_all_positions"),
    # ------------------------------------------------------------------ pseudo_log_likelihood
    Mutant(cell="pseudo_log_likelihood", name="one forward pass per token",
           find=_PLL_TABLE, replace="table = torch.cat([conditional_log_probs(model, input_ids, mask_token_id, p.view(1), 1) "
                                    "for p in positions])  # [P, V]",
           visible=True, case="pll_batches"),
    Mutant(cell="pseudo_log_likelihood", name="indexes the table rows by position (off when positions are given)",
           find=_PLL_RET, replace="return table[positions, input_ids[positions]].sum()",
           visible=True, case="pll_given_positions"),
    Mutant(cell="pseudo_log_likelihood", name="mean instead of the sum",
           find=_PLL_RET, replace="return table[torch.arange(len(positions), device=table.device), input_ids[positions]].mean()",
           visible=True, case="pll_all_positions"),
    Mutant(cell="pseudo_log_likelihood", name="returns the negative PLL",
           find=_PLL_RET, replace="return -table[torch.arange(len(positions), device=table.device), input_ids[positions]].sum()",
           visible=True, case="pll_all_positions"),
    Mutant(cell="pseudo_log_likelihood", name="ignores the positions argument",
           find=_PLL_DEFAULT, replace="    positions = torch.arange(input_ids.numel())\n",
           visible=True, case="pll_given_positions"),
    Mutant(cell="pseudo_log_likelihood", name="off by one: scores the next token",
           find=_PLL_RET, replace="return table[torch.arange(len(positions), device=table.device), "
                                  "input_ids[(positions + 1) % input_ids.numel()]].sum()",
           visible=True, case="pll_all_positions"),
    Mutant(cell="pseudo_log_likelihood", name="returns float64",
           find=_PLL_RET, replace="return table[torch.arange(len(positions), device=table.device), input_ids[positions]].double().sum()",
           visible=True, case="pll_all_positions"),
    # ------------------------------------------------------------------ pseudo_perplexity
    Mutant(cell="pseudo_log_likelihood", name="PPPL: exp of the sum instead of the mean",
           find=_PPPL_RET, replace="return math.exp(-float(pll))",
           visible=True, case="pppl_values"),
    Mutant(cell="pseudo_log_likelihood", name="PPPL: base 2",
           find=_PPPL_RET, replace="return 2 ** (-float(pll) / num_tokens)",
           visible=True, case="pppl_values"),
    Mutant(cell="pseudo_log_likelihood", name="PPPL: wrong sign",
           find=_PPPL_RET, replace="return math.exp(float(pll) / num_tokens)",
           visible=True, case="pppl_values"),
    Mutant(cell="pseudo_log_likelihood", name="PPPL: returns a tensor",
           find=_PPPL_RET, replace="return torch.exp(-torch.as_tensor(pll) / num_tokens)",
           visible=True, case="pppl_values"),
    Mutant(cell="pseudo_log_likelihood", name="PPPL: divides by T + 1 (counts [SEP])",
           find=_PPPL_RET, replace="return math.exp(-float(pll) / (num_tokens + 1))",
           visible=True, case="pppl_values"),
    Mutant(cell="pseudo_log_likelihood", name="PPPL: np.exp (a tensor PLL gives a tensor)",
           find=_PPPL_RET, replace="return np.exp(-pll / num_tokens)",
           visible=True, case="pppl_tensor"),
    # ------------------------------------------------------------------ single_index_estimate
    Mutant(cell="single_index_estimate", name="without the factor T",
           find=_SI_RET, replace="return -token_ll",
           visible=True, case="single_index_values"),
    Mutant(cell="single_index_estimate", name="biased index: never the last position",
           find=_SI_U, replace="u = scored[torch.randint(len(scored) - 1, (num_samples,), generator=generator)]",
           visible=True, case="single_index_uniform"),
    Mutant(cell="single_index_estimate", name="factor T = sequence length instead of the number of scored positions",
           find=_SI_RET, replace="return -input_ids.numel() * token_ll",
           visible=True, case="single_index_given_positions"),
    Mutant(cell="single_index_estimate", name="U drawn over all positions, ignoring positions",
           find=_SI_U, replace="u = torch.randint(input_ids.numel(), (num_samples,), generator=generator)",
           visible=True, case="single_index_given_positions"),
    Mutant(cell="single_index_estimate", name="default batch size: several forward passes",
           find=_SI_PASS, replace="log_p = conditional_log_probs(model, input_ids, mask_token_id, u)",
           visible=True, case="single_index_one_pass"),
    Mutant(cell="single_index_estimate", name="ignores the generator",
           find=_SI_U, replace="u = scored[torch.randint(len(scored), (num_samples,))]",
           visible=True, case="single_index_generator"),
    Mutant(cell="single_index_estimate", name="seeds its own generator (a fixed seed), ignores the given one",
           find=_SI_U, replace="u = scored[torch.randint(len(scored), (num_samples,), "
                               "generator=torch.Generator().manual_seed(0))]",
           visible=True, case="single_index_seeds_differ"),
    Mutant(cell="single_index_estimate", name="wrong sign",
           find=_SI_RET, replace="return len(scored) * token_ll",
           visible=True, case="single_index_values"),
    Mutant(cell="single_index_estimate", name="calls torch.manual_seed(0) inside (resets the global random state)",
           find=_SI_U, replace="torch.manual_seed(0)\n    " + _SI_U,
           visible=True, case="single_index_global_state"),
    # ------------------------------------------------------------------ causal_log_probs
    Mutant(cell="causal_log_probs", name="no shift: logits at the token's own position",
           find=_CA_LOGITS, replace="logits = model(input_ids=ids.unsqueeze(0)).logits[0, 1:]",
           visible=True, case="causal_no_context"),
    Mutant(cell="causal_log_probs", name="ignores context_token_id",
           find=_CA_CTX, replace="ids = ids",
           visible=True, case="causal_with_context"),
    Mutant(cell="causal_log_probs", name="softmax instead of log-softmax",
           find=_CA_LOGP, replace="log_p = torch.softmax(logits.float(), dim=-1)",
           visible=True, case="causal_no_context"),
    Mutant(cell="causal_log_probs", name="raw logits instead of log-softmax",
           find=_CA_LOGP, replace="log_p = logits.float()",
           visible=True, case="causal_no_context"),
    Mutant(cell="causal_log_probs", name="no torch.no_grad (returns a graph)",
           find=_CA_NOGRAD, replace="    if True:  # no torch.no_grad()\n        logits = model",
           visible=True, case="causal_no_grad"),
    Mutant(cell="causal_log_probs", name="one forward pass per prefix",
           find=_CA_LOGITS, replace="logits = torch.stack([model(input_ids=ids[:k].unsqueeze(0)).logits[0, -1] "
                                    "for k in range(1, ids.numel())])",
           visible=True, case="causal_one_pass"),
    Mutant(cell="causal_log_probs", name="context token appended instead of prepended",
           find=_CA_CTX, replace="ids = torch.cat([ids, ids.new_tensor([context_token_id])])",
           visible=True, case="causal_with_context"),
    # ------------------------------------------------------------------ perplexity
    Mutant(cell="causal_log_probs", name="PPL: divides by T + 1 (counts the context token)",
           find=_PPL_RET, replace="return math.exp(-float(log_likelihood) / (num_tokens + 1))",
           visible=True, case="perplexity_values"),
    Mutant(cell="causal_log_probs", name="PPL: exp of the sum instead of the mean",
           find=_PPL_RET, replace="return math.exp(-float(log_likelihood))",
           visible=True, case="perplexity_values"),
    Mutant(cell="causal_log_probs", name="PPL: base 2",
           find=_PPL_RET, replace="return 2 ** (-float(log_likelihood) / num_tokens)",
           visible=True, case="perplexity_values"),
    Mutant(cell="causal_log_probs", name="PPL: wrong sign",
           find=_PPL_RET, replace="return math.exp(float(log_likelihood) / num_tokens)",
           visible=True, case="perplexity_values"),
    Mutant(cell="causal_log_probs", name="PPL: np.exp (a tensor log-likelihood gives a tensor)",
           find=_PPL_RET, replace="return np.exp(-log_likelihood / num_tokens)",
           visible=True, case="perplexity_tensor"),
    # ------------------------------------------------------------------ conditionals_compatible
    Mutant(cell="conditionals_compatible", name="always True",
           find=_CC_RET, replace="return True",
           visible=True, case="incompatible_tables"),
    Mutant(cell="conditionals_compatible", name="checks p(b|a) only (always reproduced by construction)",
           find=_CC_RET, replace="return bool(ok_b)",
           visible=True, case="incompatible_tables"),
    Mutant(cell="conditionals_compatible", name="p(a) guessed from the marginal of p(a|b) instead of the ratio",
           find=_CC_U, replace="u = pa.mean(1).log()",
           visible=True, case="compatible_joints"),
    Mutant(cell="conditionals_compatible", name="fits the ratio instead of the log-ratio",
           find=_CC_LOGRATIO, replace="log_ratio = pa[support] / pb[support]",
           visible=True, case="compatible_joints"),
    Mutant(cell="conditionals_compatible", name="ignores atol (torch defaults, too tight for float32)",
           find=_CC_OKA, replace="ok_a = torch.allclose(joint / joint.sum(0, keepdim=True), pa)",
           visible=True, case="compatible_atol"),
    Mutant(cell="conditionals_compatible", name="checks the rows of p(a|b) instead of its columns",
           find=_CC_COLS, replace="if not torch.allclose(pa.sum(1), torch.ones(pa.shape[0], dtype=torch.float64), atol=1e-5):",
           visible=True, case="compatible_joints"),
    Mutant(cell="conditionals_compatible", name="no ValueError for negative entries",
           find=_CC_NEG, replace="",
           visible=True, case="compatible_rejects"),
    Mutant(cell="conditionals_compatible", name="no support mask: logs of the zero entries",
           find="support = pa > 0", replace="support = torch.ones_like(pa, dtype=torch.bool)",
           visible=True, case="compatible_zeros"),
    # ------------------------------------------------------------------ bert_mask
    Mutant(cell="bert_mask", name="80/10/10 swapped: 10 % [MASK], 80 % random",
           find=_BM_ACTIONS, replace="masked[selected & (action < 0.1)] = mask_token_id\n"
                                     "    swap = selected & (action >= 0.1) & (action < 0.9)",
           visible=True, case="bert_mask_replacements"),
    Mutant(cell="bert_mask", name="no unchanged 10 %: 80 % [MASK], 20 % random",
           find=_BM_SWAP, replace="swap = selected & (action >= 0.8)",
           visible=True, case="bert_mask_replacements"),
    Mutant(cell="bert_mask", name="special tokens can be selected",
           find=_BM_SELECT, replace="selected = (torch.rand(ids.shape, generator=generator) < q).to(ids.device)",
           visible=True, case="bert_mask_selection"),
    Mutant(cell="bert_mask", name="random replacements drawn from the batch's own tokens",
           find=_BM_RANDOM, replace="random_tokens = ids.flatten()[torch.randperm(ids.numel(), generator=generator)"
                                    ".to(ids.device)].view(ids.shape)",
           visible=True, case="bert_mask_replacements"),
    Mutant(cell="bert_mask", name="labels not -100 on unselected positions",
           find=_BM_LABELS, replace="labels = ids.clone()",
           visible=True, case="bert_mask_selection"),
    Mutant(cell="bert_mask", name="labels read from the masked input",
           find=_BM_LABELS, replace="labels = torch.where(selected, masked, torch.full_like(ids, -100))",
           visible=True, case="bert_mask_selection"),
    Mutant(cell="bert_mask", name="modifies input_ids in place",
           find=_BM_CLONE, replace="masked = ids",
           visible=True, case="bert_mask_input_unchanged"),
    Mutant(cell="bert_mask", name="selection ignores the generator",
           find=_BM_SELECT, replace="selected = (torch.rand(ids.shape) < q).to(ids.device) & ~special",
           visible=True, case="bert_mask_generator"),
    Mutant(cell="bert_mask", name="seeds its own generator (a fixed seed), ignores the given one",
           find=_BM_IDS, replace="generator = torch.Generator().manual_seed(0)\n    ids = input_ids.long()",
           visible=True, case="bert_mask_seeds_differ"),
    Mutant(cell="bert_mask", name="every draw from torch's global random state (no generator=)",
           find=_BM_DRAWS, replace="selected = (torch.rand(ids.shape) < q).to(ids.device) & ~special\n"
                                   "    action = torch.rand(ids.shape).to(ids.device)\n"
                                   "    random_tokens = torch.randint(vocab_size, ids.shape).to(ids.device)",
           visible=True, case="bert_mask_global_state"),
    Mutant(cell="bert_mask", name="q hard-coded to BERT's 0.15 (the argument ignored)",
           find=_BM_SELECT, replace="selected = (torch.rand(ids.shape, generator=generator) < 0.15).to(ids.device) & ~special",
           visible=True, case="bert_mask_q_edges"),
    Mutant(cell="bert_mask", name="draws of shape (len(ids), ids.shape[-1]): one sequence [T] breaks",
           find=_BM_DRAWS, replace=_BM_DRAWS.replace("ids.shape, generator", "(len(ids), ids.shape[-1]), generator"),
           visible=True, case="bert_mask_one_sequence"),
    Mutant(cell="bert_mask", name="no ValueError for q outside [0, 1]",
           find=_BM_CHECK, replace="",
           visible=True, case="bert_mask_rejects_q"),
    Mutant(cell="bert_mask", name="80/10/10 assigned in reading order (first 80 % of the selected [MASK], then random, "
                                  "then unchanged)",
           find=_BM_ACTION, replace="action = ((selected.flatten().cumsum(0) - 1).double() / max(int(selected.sum()), 1))"
                                    ".view(ids.shape).to(ids.device)",
           visible=True, case="bert_mask_replacements", edge=True),
    Mutant(cell="bert_mask", name="selection in reading order (the first q of the non-special tokens)",
           find=_BM_SELECT, replace="selected = ((~special).flatten().cumsum(0).view(ids.shape) <= q * int((~special).sum()))"
                                    ".to(ids.device) & ~special",
           visible=True, case="bert_mask_selection"),
    Mutant(cell="mlm_loss", name="always returns float64",
           find=_ML_NLL, replace="token_nll = -log_probs.double().gather(1, targets.long().view(-1, 1)).squeeze(1)  # [T]",
           case="mlm_loss_float64"),
]
