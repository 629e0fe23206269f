"""Benchmark: build the default miniature Pythia suite and measure what it shows.

    python benchmarks/model_zoo.py            # build (or reuse the cached suite) and evaluate
    python benchmarks/model_zoo.py --force    # retrain everything, timing a cold build

Writes build/bench/model_zoo.json: the build time (this run's wall clock and the per-model
training seconds recorded when each model was trained), the machine's load while it ran (the 2
cores are shared, so timings are upper bounds), tokens/s per model, each model's parameter
counts and its held-out loss at every checkpoint, re-measured here through from_pretrained and the
full 50,304-way softmax (first ``eval_windows`` held-out windows for intermediate steps, the whole
held-out part at the final step), the fitted log-log slope of final loss against non-embedding
parameters, and mini-bert's held-out masked loss and pseudo-perplexity.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import time

import numpy as np
import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from utils.lm import build_suite, load_causal_lm, load_masked_lm, suite_manifest
from utils.suite_recipes import SUITES
from utils.suite_training import load_corpus
from utils.paths import build_dir

VOCAB_ROWS = 50304


@torch.no_grad()
def held_out_loss(model, windows: torch.Tensor, batch: int = 16) -> float:
    """Mean nats/token of ``windows [n, T+1]`` (inputs ``[:, :-1]``, targets ``[:, 1:]``), full vocabulary."""
    total, count = 0.0, 0
    for i in range(0, len(windows), batch):
        w = windows[i:i + batch]
        logits = model(input_ids=w[:, :-1]).logits.float()
        total += float(F.cross_entropy(logits.reshape(-1, logits.shape[-1]), w[:, 1:].reshape(-1), reduction="sum"))
        count += w[:, 1:].numel()
    return total / count


@torch.no_grad()
def pseudo_log_likelihood(model, ids: torch.Tensor, mask_id: int) -> torch.Tensor:
    """Per-token pseudo-log-likelihood of one sequence ``int64 [T]``: each position masked in turn
    (Salazar et al. 2020). Returns ``[T]`` log-probabilities in nats."""
    t = len(ids)
    batch = ids.repeat(t, 1)
    batch[torch.arange(t), torch.arange(t)] = mask_id
    logits = model(input_ids=batch).logits[torch.arange(t), torch.arange(t)]
    return torch.log_softmax(logits.float(), dim=-1)[torch.arange(t), ids]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--force", action="store_true", help="retrain the whole suite (cold build)")
    parser.add_argument("--suite", default="default", choices=sorted(SUITES))
    args = parser.parse_args()

    load_before = os.getloadavg()
    t0 = time.perf_counter()
    build_suite(args.suite, force=args.force)
    build_wall = time.perf_counter() - t0
    load_after_build = os.getloadavg()
    manifest = suite_manifest(args.suite, build=False)
    recipe = SUITES[args.suite]
    corpus = load_corpus(recipe)
    steps = manifest["steps"]

    models = []
    bar = tqdm(total=len(manifest["models"]) * len(steps), desc="held-out loss per checkpoint")
    for entry in manifest["models"]:
        losses, gaps = {}, []
        for step in steps:
            # Same windows at every step (comparable across steps, as in the training record) ...
            model, _ = load_causal_lm(entry["name"], step, suite=args.suite)
            losses[step] = held_out_loss(model, corpus.held_out[:recipe.eval_windows])
            gaps.append(abs(losses[step] - entry["training"]["held_out_loss"][str(step)]))
            bar.update(1)
        # ... and the final checkpoint on the whole held-out part.
        final_full = held_out_loss(model, corpus.held_out)
        gaps.append(abs(final_full - entry["training"]["final_held_out_loss"]))
        t = entry["training"]
        models.append({
            "name": entry["name"],
            "d_model": entry["d_model"],
            "n_layers": entry["n_layers"],
            "total_params": entry["total_params"],
            "non_embedding_params": entry["non_embedding_params"],
            "peak_lr": entry["lr"],
            "held_out_loss": {str(s): v for s, v in losses.items()},
            "final_held_out_loss": final_full,
            "max_gap_to_training_record": max(gaps),
            "train_seconds": t["train_seconds"],
            "checkpoint_seconds": t["checkpoint_seconds"],
            "train_tokens_per_second": t["train_tokens_per_second"],
        })
    bar.close()

    final = [m["final_held_out_loss"] for m in models]
    n_nonemb = [m["non_embedding_params"] for m in models]
    strictly_falling = all(a > b for a, b in zip(final, final[1:]))
    slope, intercept = np.polyfit(np.log(n_nonemb), np.log(final), 1)

    bert_model, bert_tok = load_masked_lm("mini-bert", suite=args.suite)
    mask_id = bert_tok.mask_token_id
    pll_windows = corpus.held_out[:16, :32]
    pll = torch.cat([pseudo_log_likelihood(bert_model, w, mask_id) for w in pll_windows])
    largest, _ = load_causal_lm(models[-1]["name"], suite=args.suite)
    with torch.no_grad():  # the largest causal model on the same tokens (its first token has no context)
        logits = largest(input_ids=pll_windows).logits[:, :-1]
        causal_nll = F.cross_entropy(logits.reshape(-1, VOCAB_ROWS), pll_windows[:, 1:].reshape(-1))
    # A unigram model of the training part (add-0.01 smoothing) on the same targets: a masked model that
    # does no better has learned word frequencies, not context.
    counts = torch.bincount(corpus.train[:, 1:].reshape(-1), minlength=VOCAB_ROWS).double() + 0.01
    unigram_nll = -(counts / counts.sum()).log()[pll_windows.reshape(-1)].mean()
    bert = {
        "total_params": manifest["bert"]["total_params"],
        "mask_token_id": mask_id,
        "held_out_masked_loss": manifest["bert"]["training"]["held_out_masked_loss"],
        "train_seconds": manifest["bert"]["training"]["train_seconds"],
        "pseudo_perplexity_16x32_held_out_tokens": math.exp(-float(pll.mean())),
        "largest_causal_perplexity_same_tokens": math.exp(float(causal_nll)),
        "unigram_perplexity_same_tokens": math.exp(float(unigram_nll)),
        "uniform_perplexity": VOCAB_ROWS,
    }

    recorded_build = sum(m["train_seconds"] + m["checkpoint_seconds"] for m in models) + bert["train_seconds"]
    result = {
        "suite": args.suite,
        "machine": {
            "cpu_count": os.cpu_count(),
            "torch_threads_at_build": manifest.get("torch_threads"),
            "platform": platform.platform(),
            "load_average_before": load_before,
            "load_average_after_build": load_after_build,
            "load_average_end": os.getloadavg(),
            "note": ("load average above 1.5 before the build: the machine was shared with other jobs, so the "
                     "timings are upper bounds for an idle machine" if load_before[0] > 1.5 else
                     "machine about idle before the build"),
        },
        "build_wall_seconds_this_run": build_wall,
        "build_was_cached": build_wall < 0.1 * recorded_build,
        "build_seconds_recorded_training_and_checkpoints": recorded_build,
        "tokens_per_step": manifest["tokens_per_step"],
        "steps": steps,
        "train_tokens_per_model": manifest["tokens_per_step"] * manifest["total_steps"],
        "data": manifest["data"],
        "models": models,
        "held_out_loss_windows": (f"held_out_loss: the first {recipe.eval_windows} held-out windows "
                                  f"({recipe.eval_windows * recipe.context} targets) at every step; "
                                  f"final_held_out_loss: all {len(corpus.held_out)} windows of the last step"),
        "final_loss_strictly_falls_with_size": strictly_falling,
        "loglog_slope_loss_vs_non_embedding_params": slope,
        "loglog_fit": f"final held-out loss = {math.exp(intercept):.3f} * N_nonemb^{slope:.4f}",
        "bert": bert,
    }
    out = build_dir() / "bench" / "model_zoo.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1))

    print(f"build: {build_wall:.0f} s this run (recorded training + checkpoints {recorded_build:.0f} s), "
          f"load average {load_before[0]:.1f} -> {load_after_build[0]:.1f} on {os.cpu_count()} cores")
    print(f"{'model':<20}{'non-emb params':>15}{'total':>12}{'tok/s':>8}  held-out loss (nats/token) at steps")
    print(f"{'':<52}" + " ".join(f"{s:>6}" for s in steps))
    for m in models:
        row = " ".join(f"{m['held_out_loss'][str(s)]:6.3f}" for s in steps)
        print(f"{m['name']:<20}{m['non_embedding_params']:>15,}{m['total_params']:>12,}"
              f"{m['train_tokens_per_second']:>8.0f}  {row}")
    print(f"(every step: the first {recipe.eval_windows} held-out windows; final loss below: all "
          f"{len(corpus.held_out)} windows)")
    print("final held-out loss: " + ", ".join(f"{m['name']} {m['final_held_out_loss']:.3f}" for m in models))
    print(f"final loss strictly falls with size: {strictly_falling}; log-log slope {slope:.4f} "
          f"(Kaplan's alpha_N = 0.076 at far larger scale); max gap to training record "
          f"{max(m['max_gap_to_training_record'] for m in models):.1e}")
    print(f"mini-bert: masked loss {bert['held_out_masked_loss']:.3f}, pseudo-perplexity "
          f"{bert['pseudo_perplexity_16x32_held_out_tokens']:.1f} (largest mini-pythia perplexity "
          f"{bert['largest_causal_perplexity_same_tokens']:.1f}, unigram {bert['unigram_perplexity_same_tokens']:.1f}, "
          f"uniform {VOCAB_ROWS})")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
