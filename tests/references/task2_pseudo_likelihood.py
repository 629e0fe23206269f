"""Independent float64 references for Task 2 (pseudo-likelihood), used by tests/test_task2_pseudo_likelihood.py to check
the model solution itself (the judge's cases in grader/checks/task2_pseudo_likelihood.py compare with the
solution): tiny random transformers, one masked copy or one prefix per forward pass, and the cross-ratio
test of compatible conditionals for tables of full support."""

from __future__ import annotations

import copy

import torch


# ------------------------------------------------------------------------------ tiny models
def tiny_masked_lm(seed: int = 0, vocab_size: int = 37, hidden: int = 32, layers: int = 2):
    """A random BertForMaskedLM small enough to run a reference loop in float64 in milliseconds.

    ``initializer_range=0.5`` makes the conditionals far from uniform, so an implementation that
    forgets to mask, reads the wrong position or the wrong copy is off by whole nats.
    Returns ``(model, mask_token_id)``; the model is in eval mode, float32, on the CPU.
    """
    from transformers import BertConfig, BertForMaskedLM

    config = BertConfig(vocab_size=vocab_size, hidden_size=hidden, num_hidden_layers=layers,
                        num_attention_heads=2, intermediate_size=2 * hidden, max_position_embeddings=128,
                        initializer_range=0.5, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    with torch.random.fork_rng(devices=[]):  # leave the notebook's global random state alone
        torch.manual_seed(seed)
        return BertForMaskedLM(config).eval(), vocab_size - 1


def tiny_causal_lm(seed: int = 0, vocab_size: int = 41, hidden: int = 32, layers: int = 2):
    """A random GPTNeoXForCausalLM (Pythia's class), eval mode, float32, CPU."""
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    config = GPTNeoXConfig(vocab_size=vocab_size, hidden_size=hidden, num_hidden_layers=layers,
                           num_attention_heads=2, intermediate_size=2 * hidden, max_position_embeddings=128,
                           initializer_range=0.5, hidden_dropout=0.0, attention_dropout=0.0)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return GPTNeoXForCausalLM(config).eval()


def _device(model) -> torch.device:
    return next(model.parameters()).device


# ------------------------------------------------------------------------ reference formulas
@torch.no_grad()
def reference_conditionals(model, input_ids: torch.Tensor, mask_token_id: int, positions=None,
                           dtype=torch.float64) -> torch.Tensor:
    """log p(x_t = . | x_without_t) for each position, ONE masked copy per forward pass. [P, V] float64."""
    ids = input_ids.to(_device(model))
    positions = range(ids.numel()) if positions is None else [int(p) for p in positions]
    work = copy.deepcopy(model).to(dtype) if dtype != next(model.parameters()).dtype else model
    rows = []
    for t in positions:
        masked = ids.clone()
        masked[t] = mask_token_id
        logits = work(input_ids=masked.unsqueeze(0)).logits[0, t]
        rows.append(torch.log_softmax(logits.to(torch.float64), dim=-1).cpu())
    return torch.stack(rows)


@torch.no_grad()
def reference_causal_log_probs(model, input_ids: torch.Tensor, context_token_id=None,
                               dtype=torch.float64) -> torch.Tensor:
    """log p(x_t | x_<t) from one PREFIX per forward pass (the last logits of each), float64."""
    ids = input_ids.to(_device(model))
    if context_token_id is not None:
        ids = torch.cat([ids.new_tensor([context_token_id]), ids])
    work = copy.deepcopy(model).to(dtype) if dtype != next(model.parameters()).dtype else model
    out = []
    for t in range(1, ids.numel()):
        logits = work(input_ids=ids[:t].unsqueeze(0)).logits[0, -1]
        out.append(torch.log_softmax(logits.to(torch.float64), dim=-1)[ids[t]].cpu())
    return torch.stack(out)


def conditionals_of(joint: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """p(a|b) and p(b|a) of a joint table [A, B] whose marginals are positive."""
    return joint / joint.sum(0, keepdim=True), joint / joint.sum(1, keepdim=True)


def cross_ratio_compatible(p_a_given_b: torch.Tensor, p_b_given_a: torch.Tensor) -> bool:
    """Independent reference for FULL support: R = p(a|b) / p(b|a) must have rank one (all 2x2 minors 0)."""
    r = (p_a_given_b / p_b_given_a).double().log()
    centred = r - r.mean(0, keepdim=True) - r.mean(1, keepdim=True) + r.mean()
    return bool(centred.abs().max() < 1e-9)
