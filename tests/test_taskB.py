"""Task B (Pythia scaling): parameter counts of all ten Pythia sizes from their configs, power-law
fits on synthetic data, and the evaluation cross-checked against lm-evaluation-harness.

The student functions are taken from the solution notebook's answer cells (the same code the
nbgrader round trip grades), so these tests check the reference solution itself."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest
import torch

from conftest import SOLUTIONS

NOTEBOOK = SOLUTIONS / "taskB_pythia_scaling.ipynb"

#: Non-embedding parameters published for Pythia (Biderman et al. 2023, Table 1), typed in here
#: independently of data/pythia_configs.json.
PUBLISHED_NON_EMBEDDING = {
    "14m": 1_189_888, "31m": 4_739_072, "70m": 18_915_328, "160m": 85_056_000, "410m": 302_311_424,
    "1b": 805_736_448, "1.4b": 1_208_602_624, "2.8b": 2_517_652_480, "6.9b": 6_444_163_072,
    "12b": 11_327_027_200,
}


@pytest.fixture(scope="module")
def solution():
    """The notebook's answer cells executed in a namespace with the setup cell's imports."""
    import torch.nn.functional as F  # noqa: N812
    from scipy.optimize import curve_fit
    from tqdm.auto import tqdm
    from transformers import AutoModelForCausalLM, PretrainedConfig, PreTrainedModel

    from utils.scaling import PYTHIA_TOKENS_PER_STEP, context_length

    ns = {"math": math, "re": re, "np": np, "torch": torch, "F": F, "curve_fit": curve_fit, "tqdm": tqdm,
          "AutoModelForCausalLM": AutoModelForCausalLM, "PretrainedConfig": PretrainedConfig,
          "PreTrainedModel": PreTrainedModel, "PYTHIA_TOKENS_PER_STEP": PYTHIA_TOKENS_PER_STEP,
          "context_length": context_length}
    cells = json.loads(NOTEBOOK.read_text(encoding="utf-8"))["cells"]
    for cell in cells:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if meta.get("solution") and not meta.get("grade") and cell["cell_type"] == "code":
            exec("".join(cell["source"]), ns)
    return ns


@pytest.mark.parametrize("size", list(PUBLISHED_NON_EMBEDDING))
def test_parameter_counts_match_published_pythia(solution, size):
    from utils.scaling import pythia_config

    total, non_embedding = solution["count_parameters"](pythia_config(size))
    assert non_embedding == PUBLISHED_NON_EMBEDDING[size]
    rows = {"6.9b": 50432, "12b": 50688}.get(size, 50304)
    assert total == non_embedding + 2 * rows * pythia_config(size).hidden_size


def test_pythia_configs_file_matches_published_counts():
    from utils.scaling import published_non_embedding_params

    for size, count in PUBLISHED_NON_EMBEDDING.items():
        assert published_non_embedding_params(size) == count


@pytest.mark.parametrize("alpha,n_c", [(0.076, 8.8e13), (0.34, 1e9), (0.5, 3e6)])
def test_power_law_fit_recovers_known_exponents(solution, alpha, n_c):
    rng = np.random.default_rng(0)
    N = np.geomspace(1e5, 1e10, 10)
    L = (n_c / N) ** alpha * np.exp(rng.normal(0, 0.002, N.size))
    fit = solution["fit_power_law"](N, L)
    assert abs(fit["alpha"] - alpha) < 4 * fit["alpha_err"] + 1e-4
    assert abs(math.log(fit["N_c"] / n_c)) < 4 * fit["N_c_err"] / fit["N_c"] + 1e-3
    assert fit["E"] == 0.0


@pytest.mark.parametrize("E,alpha,n_c", [(1.69, 0.34, 1e8), (2.5, 0.2, 1e7)])
def test_irreducible_fit_recovers_known_constants(solution, E, alpha, n_c):
    rng = np.random.default_rng(1)
    N = np.geomspace(1e5, 1e10, 12)
    L = E + (n_c / N) ** alpha + rng.normal(0, 5e-4, N.size)
    fit = solution["fit_power_law"](N, L, irreducible=True)
    assert abs(fit["alpha"] - alpha) < 4 * fit["alpha_err"] + 1e-3
    assert abs(fit["E"] - E) < 4 * fit["E_err"] + 1e-3
    assert fit["alpha_err"] > 0 and fit["E_err"] > 0


def test_chinchilla_fit_recovers_hoffmann_constants():
    from utils.scaling import HOFFMANN, chinchilla_loss, fit_chinchilla

    N = np.repeat(np.geomspace(1e7, 1e10, 6), 6)
    D = np.tile(np.geomspace(1e9, 3e11, 6), 6)
    fit = fit_chinchilla(N, D, chinchilla_loss(HOFFMANN, N, D))
    for key in ("E", "alpha", "beta"):
        assert fit[key] == pytest.approx(HOFFMANN[key], rel=0.02), key


def test_wikitext_helpers_match_lm_eval():
    """Document splitting and detokenisation agree with lm-eval's wikitext task."""
    from lm_eval.tasks.wikitext.preprocess_wikitext import wikitext_detokenizer

    from utils.data import load_text, wikitext_documents
    from utils.scaling import wikitext_detokenize

    text = load_text("wikitext-2-test")
    docs = wikitext_documents(text)
    assert len(docs) == 62 and docs[0].startswith(" = Robert Boulter = ")
    assert sum(len(d) for d in docs) + len(docs) - 1 + len(" \n") == len(text)  # only "\n" joints and the leading blank line
    for doc in docs[:10]:
        assert wikitext_detokenize(doc) == wikitext_detokenizer({"page": doc})


@pytest.fixture(scope="module")
def tiny_model_folder(tmp_path_factory):
    """A tiny random GPT-NeoX saved with save_pretrained, with the pack's tokenizer (context 48)."""
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    from utils.lm import load_tokenizer

    torch.manual_seed(0)
    config = GPTNeoXConfig(vocab_size=50304, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                           intermediate_size=128, max_position_embeddings=48, rotary_pct=0.25,
                           tie_word_embeddings=False, bos_token_id=0, eos_token_id=0)
    model = GPTNeoXForCausalLM(config)
    with torch.no_grad():  # larger weights than the init, so the log-likelihoods are far from uniform
        for p in model.parameters():
            p.mul_(5.0)
    folder = tmp_path_factory.mktemp("tiny-neox")
    model.save_pretrained(folder)
    load_tokenizer().save_pretrained(folder)
    return folder


def test_evaluate_loss_matches_lm_eval_loglikelihood_rolling(solution, tiny_model_folder):
    from lm_eval.api.instance import Instance
    from lm_eval.models.huggingface import HFLM
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from utils.data import load_text, wikitext_documents
    from utils.scaling import wikitext_detokenize

    raw = [doc[:1500] for doc in wikitext_documents(load_text("wikitext-2-test"))[:3]]
    docs = [wikitext_detokenize(d) for d in raw] + ["A short one.", "x" * 300]

    harness = HFLM(pretrained=str(tiny_model_folder), device="cpu", batch_size=4)
    requests = [Instance(request_type="loglikelihood_rolling", doc={}, arguments=(d,), idx=i)
                for i, d in enumerate(docs)]
    reference = sum(harness.loglikelihood_rolling(requests, disable_tqdm=True))

    model = AutoModelForCausalLM.from_pretrained(tiny_model_folder).eval()
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_folder)
    result = solution["evaluate_loss"](model, tokenizer, docs, original_documents=raw + docs[-2:],
                                       batch_size=3, progress=False)
    assert result["loglikelihood"] == pytest.approx(reference, rel=1e-4)
    assert result["tokens"] > 3 * 48  # several windows per document were needed
    words = sum(len(re.split(r"\s+", d)) for d in raw + docs[-2:])
    assert result["word_perplexity"] == pytest.approx(math.exp(-reference / words), rel=1e-4)


def test_evaluate_loss_rejects_bad_input(solution, tiny_model_folder):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(tiny_model_folder).eval()
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_folder)
    with pytest.raises(ValueError, match="no tokens"):
        solution["evaluate_loss"](model, tokenizer, "", progress=False)
    with pytest.raises(TypeError, match="config"):
        solution["evaluate_loss"](torch.nn.Linear(2, 2), tokenizer, "text", progress=False)


def test_pick_steps_and_envelope():
    from utils.scaling import lower_envelope, pick_steps

    assert pick_steps([0, 1, 2, 4, 8, 16, 32, 48], 4)[-1] == 48
    assert 0 not in pick_steps(range(0, 100), 5)
    c, l = lower_envelope([3, 1, 2], [1.0, 3.0, 2.0])
    assert c.tolist() == [1, 2, 3] and l.tolist() == [3.0, 2.0, 1.0]


# ------------------------------------------------------------------- the judge's probes
# Mutants and honest variants are judged over 20 seeds in tests/test_judge.py; here, that the probes
# of grader/probes/taskB_pythia_scaling.py draw every input from their generator, and that the sharp
# evaluation model separates a window one token off from the right one by far more than the tolerance.
class _Names:
    def __init__(self, names):
        self.__dict__.update(names)


@pytest.mark.parametrize("name", ["eval_windows", "eval_original_documents", "eval_max_length", "fit_pure",
                                  "fit_irreducible", "count_config", "tokens_seen_array", "compute_array"])
def test_probes_draw_their_inputs_from_the_generator(solution, name):
    from grader.probes.taskB_pythia_scaling import PROBES

    def run(seed):
        return repr(PROBES[name].fn(_Names(solution), torch.Generator().manual_seed(seed)))

    assert run(3) == run(3), "the same seed must give the same inputs"
    assert len({run(seed) for seed in (3, 4, 5)}) > 1, "the inputs must change with the seed"


def test_sharp_probe_model_separates_a_window_one_token_off(solution):
    """A window fed max_length + 1 tokens (a mutant) moves the total far beyond the judge's tolerance."""
    from grader.checks.taskB_pythia_scaling import LOGLIK_RTOL
    from grader.mutants import answer_cells, load
    from grader.probes.taskB_pythia_scaling import PROBES

    cell = answer_cells(json.loads(NOTEBOOK.read_text(encoding="utf-8")))["evaluate_loss"]
    mutant = next(m for m in load("taskB_pythia_scaling") if m.name.startswith("window one token too long"))
    wrong = dict(solution)
    exec(cell.replace(mutant.find, mutant.replace, 1), wrong)
    for seed in range(5):
        ref = PROBES["eval_windows"].fn(_Names(solution), torch.Generator().manual_seed(seed))["loglikelihood"]
        got = PROBES["eval_windows"].fn(_Names(wrong), torch.Generator().manual_seed(seed))["loglikelihood"]
        assert abs(got - ref) > 10 * LOGLIK_RTOL * abs(ref), f"seed {seed}: the model is not sharp enough"
