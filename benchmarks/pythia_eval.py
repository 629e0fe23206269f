"""Benchmark Task B's evaluate_loss against lm-evaluation-harness's loglikelihood_rolling.

    python benchmarks/pythia_eval.py [--suite default|micro] [--docs 4] [--batch-size 4] [--model NAME]

Both score the same model (a miniature-suite checkpoint, or a hub model with --model when online),
the same WikiText-2 test articles (detokenised as lm-eval's wikitext task) with the same context
length, on the same machine, each in its own subprocess so peak memory is measured separately.
Also fits the miniature suite's L(N) exponent from its final checkpoints on held-out shakespeare.
Writes build/bench/pythia_eval.json and prints a summary.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import re
import resource
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
NOTEBOOK = REPO / "solutions" / "ex01" / "taskB_pythia_scaling.ipynb"


def solution_functions() -> dict:
    """The answer cells of the solution notebook, executed with the setup cell's imports."""
    import numpy as np
    import torch
    import torch.nn.functional as F  # noqa: N812
    from scipy.optimize import curve_fit
    from tqdm.auto import tqdm
    from transformers import AutoModelForCausalLM, PretrainedConfig, PreTrainedModel

    from utils.scaling import PYTHIA_TOKENS_PER_STEP, context_length

    ns = {"math": math, "re": re, "np": np, "torch": torch, "F": F, "curve_fit": curve_fit, "tqdm": tqdm,
          "AutoModelForCausalLM": AutoModelForCausalLM, "PretrainedConfig": PretrainedConfig,
          "PreTrainedModel": PreTrainedModel, "PYTHIA_TOKENS_PER_STEP": PYTHIA_TOKENS_PER_STEP,
          "context_length": context_length}
    for cell in json.loads(NOTEBOOK.read_text(encoding="utf-8"))["cells"]:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if meta.get("solution") and not meta.get("grade") and cell["cell_type"] == "code":
            exec("".join(cell["source"]), ns)
    return ns


def documents(n_docs: int) -> list[str]:
    from utils.data import load_text, wikitext_documents
    from utils.scaling import wikitext_detokenize

    return [wikitext_detokenize(d) for d in wikitext_documents(load_text("wikitext-2-test"))[:n_docs]]


def peak_memory_mb(device: str) -> float:
    import torch

    if device.startswith("cuda"):
        return torch.cuda.max_memory_allocated() / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # kB on Linux


def worker(which: str, folder: str, n_docs: int, max_length: int, batch_size: int, device: str) -> dict:
    """Score the documents once (after a short warm-up) and report time, tokens and memory."""
    import torch

    torch.manual_seed(0)
    docs = documents(n_docs)
    if which == "ours":
        from transformers import AutoModelForCausalLM, AutoTokenizer

        evaluate_loss = solution_functions()["evaluate_loss"]
        model = AutoModelForCausalLM.from_pretrained(folder).to(device).eval()
        tokenizer = AutoTokenizer.from_pretrained(folder)
        evaluate_loss(model, tokenizer, docs[0][:2000], max_length=max_length, progress=False)  # warm-up
        if device.startswith("cuda"):
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        start = time.perf_counter()
        result = evaluate_loss(model, tokenizer, docs, max_length=max_length, batch_size=batch_size, progress=False)
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        seconds = time.perf_counter() - start
        loglik, tokens = result["loglikelihood"], result["tokens"]
    else:
        from lm_eval.api.instance import Instance
        from lm_eval.models.huggingface import HFLM

        lm = HFLM(pretrained=folder, device=device, batch_size=batch_size, max_length=max_length)
        lm.loglikelihood_rolling([Instance("loglikelihood_rolling", {}, (docs[0][:2000],), 0)], disable_tqdm=True)
        if device.startswith("cuda"):
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        requests = [Instance("loglikelihood_rolling", {}, (d,), i) for i, d in enumerate(docs)]
        start = time.perf_counter()
        loglik = sum(lm.loglikelihood_rolling(requests, disable_tqdm=True))
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        seconds = time.perf_counter() - start
        tokens = sum(len(lm.tok_encode(d)) for d in docs)
    return {"loglikelihood": loglik, "tokens": tokens, "seconds": seconds, "tokens_per_second": tokens / seconds,
            "peak_memory_mb": peak_memory_mb(device)}


def run_worker(which: str, args, folder: str, max_length: int) -> dict:
    cmd = [sys.executable, __file__, "--worker", which, "--folder", folder, "--docs", str(args.docs),
           "--max-length", str(max_length), "--batch-size", str(args.batch_size), "--device", args.device]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    if proc.returncode != 0:
        raise RuntimeError(f"{which} worker failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def suite_exponent(suite: str, max_chars: int, device: str) -> dict:
    """alpha_N of the miniature suite: final checkpoints on held-out shakespeare, pure power law."""
    import numpy as np

    from utils.data import load_text, split_text
    from utils.lm import load_causal_lm, suite_manifest
    from utils.suite_recipes import SUITES

    fns = solution_functions()
    manifest, recipe = suite_manifest(suite), SUITES[suite]
    held_out = split_text(load_text(recipe.corpus), recipe.held_out_fraction)[1][:max_chars]
    N, L = [], []
    for entry in manifest["models"]:
        model, tokenizer = load_causal_lm(entry["name"], suite=suite)
        result = fns["evaluate_loss"](model.to(device), tokenizer, held_out, max_length=manifest["context"],
                                      progress=False)
        N.append(fns["count_parameters"](model)[1])
        L.append(result["nll_per_token"])
    fit = fns["fit_power_law"](np.array(N, float), np.array(L))
    return {"suite": suite, "held_out_chars": len(held_out), "non_embedding_params": N, "loss": L,
            "alpha_N": fit["alpha"], "alpha_N_err": fit["alpha_err"], "N_c": fit["N_c"]}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--suite", default=None, help="miniature suite (default: 'default' if built, else 'micro')")
    parser.add_argument("--model", default=None, help="benchmark this model folder or hub name instead")
    parser.add_argument("--docs", type=int, default=4, help="WikiText-2 test articles to score")
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--max-length", type=int, default=None, help="context (default: the suite's, or the model's)")
    parser.add_argument("--device", default=None)
    parser.add_argument("--worker", choices=["ours", "lmeval"], help=argparse.SUPPRESS)
    parser.add_argument("--folder", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.worker:
        print(json.dumps(worker(args.worker, args.folder, args.docs, args.max_length, args.batch_size, args.device)))
        return 0

    from utils.device import get_device
    from utils.lm import build_suite, suite_manifest
    from utils.suite_build import suite_dir
    from utils.paths import build_dir

    args.device = args.device or str(get_device())
    suite = args.suite or ("default" if (suite_dir("default") / "manifest.json").is_file() else "micro")
    manifest = suite_manifest(suite)
    if args.model:
        folder, max_length = args.model, args.max_length or 2048
    else:
        build_suite(suite, progress=False)
        largest = manifest["models"][-1]["name"]
        folder = str(suite_dir(suite) / largest / f"step{manifest['steps'][-1]}")
        max_length = args.max_length or manifest["context"]
    # lm-eval loads the tokenizer from the model folder: give the suite's folder one, once.
    if not (Path(folder) / "tokenizer.json").is_file() and Path(folder).is_dir():
        from utils.lm import load_tokenizer

        load_tokenizer().save_pretrained(folder)

    ours = run_worker("ours", args, folder, max_length)
    harness = run_worker("lmeval", args, folder, max_length)
    exponent = suite_exponent(suite, 40_000, args.device)
    report = {
        "model": folder, "device": args.device, "machine": platform.processor() or platform.machine(),
        "documents": args.docs, "tokens": ours["tokens"], "max_length": max_length, "batch_size": args.batch_size,
        "evaluate_loss": ours, "lm_eval": harness,
        "speedup": ours["tokens_per_second"] / harness["tokens_per_second"],
        "loglikelihood_relative_difference": abs(ours["loglikelihood"] - harness["loglikelihood"])
                                             / abs(harness["loglikelihood"]),
        "suite_exponent": exponent,
    }
    out = build_dir() / "bench" / "pythia_eval.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1))
    print(f"model {folder} on {args.device}, {ours['tokens']:,} tokens, context {max_length}, batch {args.batch_size}")
    print(f"  evaluate_loss: {ours['tokens_per_second']:10.0f} tokens/s, peak {ours['peak_memory_mb']:.0f} MB")
    print(f"  lm-eval      : {harness['tokens_per_second']:10.0f} tokens/s, peak {harness['peak_memory_mb']:.0f} MB")
    print(f"  speed-up {report['speedup']:.2f}x; log-likelihood relative difference "
          f"{report['loglikelihood_relative_difference']:.2e}")
    print(f"  miniature suite {suite!r}: alpha_N = {exponent['alpha_N']:.3f} ± {exponent['alpha_N_err']:.3f}")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
