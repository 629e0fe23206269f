"""Task B (Pythia scaling): parameter counts of all ten Pythia sizes from their configs, power-law
fits on synthetic data, the held-out prediction against the textbook regression prediction interval, the
compute-optimal split against a numeric minimisation, the given counts and block loss of
utils.scaling, and the evaluation cross-checked against lm-evaluation-harness.

The student functions are taken from the solution notebook's answer cells (the same code the
nbgrader round trip grades), so these tests check the reference solution itself."""

from __future__ import annotations

import json
import math
import os
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
    from scipy import stats
    from scipy.optimize import curve_fit
    from tqdm.auto import tqdm
    from transformers import AutoModelForCausalLM, PretrainedConfig, PreTrainedModel

    from utils.scaling import PYTHIA_TOKENS_PER_STEP, context_length

    ns = {"math": math, "re": re, "np": np, "torch": torch, "F": F, "curve_fit": curve_fit, "stats": stats, "tqdm": tqdm,
          "AutoModelForCausalLM": AutoModelForCausalLM, "PretrainedConfig": PretrainedConfig,
          "PreTrainedModel": PreTrainedModel, "PYTHIA_TOKENS_PER_STEP": PYTHIA_TOKENS_PER_STEP,
          "context_length": context_length}
    from utils.notebook_cells import cell_role, grade_id, notebook_cells, run_cells

    return run_cells(NOTEBOOK, [grade_id(c) for c in notebook_cells(NOTEBOOK) if cell_role(c) == "answer"], ns)


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


def test_predict_held_out_is_the_regression_prediction_interval(solution):
    """The interval of predict_held_out is the OLS prediction interval of a new point in log-log space,
    exp(y0 -+ t sqrt(s^2 + [1, x0] Cov [1, x0]^T)), Cov from np.polyfit, s^2 = RSS / (n - 2), t Student's
    with n - 2 degrees of freedom; the prediction is the fit on the n_fit smallest models whatever the input order."""
    from scipy import stats

    rng = np.random.default_rng(3)
    N = np.geomspace(1e6, 1e10, 7)
    L = 1.8 + (1e8 / N) ** 0.3 * np.exp(rng.normal(0, 0.01, N.size))
    shuffled = rng.permutation(N.size)
    pred = solution["predict_held_out"](N[shuffled], L[shuffled], 5, level=0.8)
    (slope, intercept), cov = np.polyfit(np.log(N[:5]), np.log(L[:5]), 1, cov=True)
    s2 = np.sum((np.log(L[:5]) - intercept - slope * np.log(N[:5])) ** 2) / (5 - 2)
    x0 = np.log(N[5:])
    y0 = intercept + slope * x0
    sd = np.sqrt(s2 + cov[1, 1] + 2 * x0 * cov[0, 1] + x0 ** 2 * cov[0, 0])
    t = stats.t.ppf(0.9, 5 - 2)
    np.testing.assert_allclose(pred["N"], N[5:])
    np.testing.assert_allclose(pred["L_pred"], np.exp(y0), rtol=1e-9)
    np.testing.assert_allclose(pred["L_low"], np.exp(y0 - t * sd), rtol=1e-9)
    np.testing.assert_allclose(pred["L_high"], np.exp(y0 + t * sd), rtol=1e-9)
    assert (pred["L_pred"] < L[5:]).all(), "a pure law fitted on the small models undershoots a curved one"
    for n_fit in (2, 7):
        with pytest.raises(ValueError):
            solution["predict_held_out"](N, L, n_fit)


def test_three_fitted_models_give_the_t_multiplier_of_one_degree_of_freedom(solution):
    """Three points and two parameters leave one degree of freedom: the 0.95 multiplier is Student's
    t(0.975, 1) = tan(0.475 pi) = 12.71, not 2, on the prediction standard error (the new point's own scatter
    included). On the published data that interval holds the 6.9b and 12b values the three-model fit misses."""
    from utils.scaling import published_wikitext

    N = np.array([1e6, 3e6, 1e7, 3e7, 1e8])
    L = (8.8e13 / N) ** 0.076 * np.exp(np.array([0.01, -0.02, 0.01, 0.0, 0.0]))
    pred = solution["predict_held_out"](N, L, 3)
    (slope, intercept), cov = np.polyfit(np.log(N[:3]), np.log(L[:3]), 1, cov=True)
    s2 = np.sum((np.log(L[:3]) - intercept - slope * np.log(N[:3])) ** 2) / (3 - 2)
    x0 = np.log(N[3:])
    sd = np.sqrt(s2 + cov[1, 1] + 2 * x0 * cov[0, 1] + x0 ** 2 * cov[0, 0])
    multiplier = np.log(pred["L_high"] / pred["L_pred"]) / sd
    np.testing.assert_allclose(multiplier, math.tan(0.475 * math.pi), rtol=1e-6)
    assert round(math.tan(0.475 * math.pi), 2) == 12.71 and not np.allclose(multiplier, 2.0, rtol=0.5)

    final = published_wikitext(final_only=True)
    N_pub, L_pub = final["non_embedding_params"].to_numpy(float), final["bits_per_byte"].to_numpy(float)
    pub = solution["predict_held_out"](N_pub, L_pub, 3)
    assert final["model"].tolist()[3] == "pythia-6.9b"
    assert pub["L_low"][0] < L_pub[3] < pub["L_high"][0], "the published 6.9b loss lies inside the 0.95 interval"
    assert ((pub["L_low"] < L_pub[3:]) & (L_pub[3:] < pub["L_high"])).all()


@pytest.mark.parametrize("params", ["HOFFMANN", "BESIROGLU"])
def test_compute_optimal_matches_numeric_minimisation(solution, params):
    from scipy.optimize import minimize_scalar

    from utils import scaling

    fit = getattr(scaling, params)
    budgets = np.array([1e18, 1e21, 5.76e23, 1e25])
    N_opt, D_opt = solution["compute_optimal"](fit, budgets)
    for C, n, d in zip(budgets, N_opt, D_opt):
        res = minimize_scalar(lambda u: scaling.chinchilla_loss(fit, np.exp(u), C / (6 * np.exp(u))),
                              bounds=(5, 40), method="bounded", options={"xatol": 1e-10})
        assert n == pytest.approx(np.exp(res.x), rel=1e-5)
        assert 6 * n * d == pytest.approx(C, rel=1e-12)
    n, d = solution["compute_optimal"](fit, 5.76e23)
    assert isinstance(n, float) and isinstance(d, float)
    if params == "BESIROGLU":  # the refit's rule of thumb: about 20 tokens per parameter at Chinchilla's budget
        assert 15 < d / n < 30
    with pytest.raises(ValueError):
        solution["compute_optimal"](fit, 0.0)


def test_known_parameter_counts_match_published_and_manifest():
    from utils.scaling import known_parameter_counts, pythia_config

    counts = known_parameter_counts([f"EleutherAI/pythia-{size}" for size in PUBLISHED_NON_EMBEDDING])
    for size, count in PUBLISHED_NON_EMBEDDING.items():
        total, non_embedding = counts[f"EleutherAI/pythia-{size}"]
        rows = {"6.9b": 50432, "12b": 50688}.get(size, 50304)
        assert (total, non_embedding) == (count + 2 * rows * pythia_config(size).hidden_size, count)
    manifest = {"models": [{"name": "mini-pythia-1m", "total_params": 1000, "non_embedding_params": 10}]}
    assert known_parameter_counts(["mini-pythia-1m"], manifest) == {"mini-pythia-1m": (1000, 10)}


def test_block_loss_scores_disjoint_blocks_on_their_own():
    """block_loss = Hugging Face's own loss (labels = inputs) over the disjoint blocks of the stream
    [eot] doc1 [eot] doc2 ..., whatever the batch size; words and bytes of the original texts."""
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    from utils.lm import load_tokenizer
    from utils.scaling import block_loss

    torch.manual_seed(0)
    model = GPTNeoXForCausalLM(GPTNeoXConfig(vocab_size=50304, hidden_size=16, num_hidden_layers=1,
                                             num_attention_heads=2, intermediate_size=64,
                                             max_position_embeddings=12)).eval()
    tokenizer = load_tokenizer()
    docs = ["To be, or not to be, that is the question:", "Whether 'tis nobler in the mind to suffer", "Speak."]
    stream = []
    for d in docs:
        stream += [tokenizer.eos_token_id] + tokenizer(d, add_special_tokens=False)["input_ids"]
    nats, n = 0.0, 0
    with torch.no_grad():
        for i in range(0, len(stream), 12):
            block = torch.tensor([stream[i:i + 12]])
            if block.shape[1] > 1:
                nats += model(block, labels=block).loss.item() * (block.shape[1] - 1)
                n += block.shape[1] - 1
    originals = [d + " extra" for d in docs]
    for batch_size in (1, 2, 8):
        got = block_loss(model, tokenizer, docs, original_documents=originals, batch_size=batch_size)
        assert got["tokens"] == n and got["loglikelihood"] == pytest.approx(-nats, rel=1e-5)
        assert got["words"] == sum(len(re.split(r"\s+", t)) for t in originals)
        assert got["bytes"] == sum(len(t.encode("utf-8")) for t in originals)
        assert got["nll_per_token"] == pytest.approx(nats / n, rel=1e-5)
        text_nats = nats / n * (len(stream) - len(docs))  # the mean loss charged to every token of the text
        assert got["bits_per_byte"] == pytest.approx(text_nats / (got["bytes"] * math.log(2)), rel=1e-5)
        assert got["word_perplexity"] == pytest.approx(math.exp(text_nats / got["words"]), rel=1e-5)
    with pytest.raises(ValueError):
        block_loss(model, tokenizer, [""])


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


# -------------------------------------------------------- the smoke preset with the hub suite
def _smoke_pythia_selection() -> tuple[list[str], list[int]]:
    """(pythia_sizes, pythia_steps) of the smoke preset, from the notebook's preset table."""
    from utils.notebook_presets import TABLES

    smoke = TABLES["taskB_pythia_scaling"]["smoke"]
    return list(smoke["pythia_sizes"]), list(smoke["pythia_steps"])


@pytest.fixture(scope="module")
def fake_hub(tmp_path_factory):
    """A Hugging Face hub cache (``$HF_HUB_CACHE`` layout: models--EleutherAI--pythia-<size>/refs/step<N>
    -> snapshots/<commit>/) holding tiny random GPT-NeoX models under the names and revisions the smoke
    preset asks for, with the pack's tokenizer. With ``HF_HUB_OFFLINE=1`` utils.lm loads them as it
    would load the real checkpoints from the cache."""
    import hashlib

    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    from utils.lm import load_tokenizer

    sizes, steps = _smoke_pythia_selection()
    root = tmp_path_factory.mktemp("hf-hub")
    tokenizer = load_tokenizer()
    for k, size in enumerate(sizes):
        repo = root / f"models--EleutherAI--pythia-{size}"
        (repo / "refs").mkdir(parents=True)
        for j, step in enumerate(steps):
            torch.manual_seed(100 * k + j)
            hidden = 16 * (k + 1)  # a larger model for every size, as on the hub
            config = GPTNeoXConfig(vocab_size=50304, hidden_size=hidden, num_hidden_layers=1 + (k > 0),
                                   num_attention_heads=2, intermediate_size=4 * hidden, max_position_embeddings=128,
                                   rotary_pct=0.25, tie_word_embeddings=False, bos_token_id=0, eos_token_id=0)
            commit = hashlib.sha1(f"{size}@{step}".encode()).hexdigest()
            GPTNeoXForCausalLM(config).save_pretrained(repo / "snapshots" / commit)
            tokenizer.save_pretrained(repo / "snapshots" / commit)
            (repo / "refs" / f"step{step}").write_text(commit)
    return root


@pytest.mark.slow
def test_smoke_preset_with_the_hub_suite_runs_end_to_end(fake_hub, tmp_path, monkeypatch):
    """MODEL_SUITE = "hub" in the smoke preset: 3 sizes x 2 steps leave too few points past 1 % of
    training for the Chinchilla fit, which the notebook then skips with a note instead of crashing."""
    import papermill as pm

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(fake_hub))
    monkeypatch.setenv("LAS_BUILD_DIR", str(tmp_path / "build"))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    out = tmp_path / "taskB.ipynb"
    pm.execute_notebook(str(NOTEBOOK), str(out), parameters={"PRESET": "smoke", "MODEL_SUITE": "hub"},
                        cwd=str(NOTEBOOK.parent), kernel_name="python3", progress_bar=False)
    executed = json.loads(out.read_text(encoding="utf-8"))
    text = "".join("".join(o.get("text", "")) for c in executed["cells"] for o in c.get("outputs", []))
    assert not [o for c in executed["cells"] for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert "Model suite: hub" in text and "Models (Pythia (hub)): EleutherAI/pythia-" in text
    assert "Chinchilla fit skipped" in text


def _chinchilla_cell() -> str:
    cells = json.loads(NOTEBOOK.read_text(encoding="utf-8"))["cells"]
    (source,) = ["".join(c["source"]) for c in cells if c["cell_type"] == "code" and "scaling.fit_chinchilla(" in "".join(c["source"])]
    return source


@pytest.mark.parametrize("steps,fits", [([1000, 143000], False), ([2000, 143000], True), ([4000, 66000, 143000], True)])
def test_chinchilla_cell_fits_or_skips_with_a_note(solution, tmp_path, monkeypatch, capsys, steps, fits):
    """The notebook's loss-against-compute cell on results shaped like the smoke preset's with the hub
    suite (3 sizes): too few points past 1 % of training -> a printed note, never a traceback."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pandas as pd

    from utils import scaling
    from utils.plotting import save_figure

    monkeypatch.setenv("LAS_BUILD_DIR", str(tmp_path))
    models = ["EleutherAI/pythia-14m", "EleutherAI/pythia-31m", "EleutherAI/pythia-70m"]
    params = {m: p for m, p in zip(models, (14_067_712, 30_494_720, 70_426_624))}
    rows = [{"model": m, "step": s, "params": params[m], "non_embedding_params": params[m] // 4,
             "nll_per_token": 2.0 + 50 / params[m] ** 0.3 + 400 / (s * scaling.PYTHIA_TOKENS_PER_STEP) ** 0.3}
            for m in models for s in steps]
    seen = pd.DataFrame(rows)
    seen["D"] = solution["tokens_seen"](seen["step"].to_numpy(dtype=np.int64))
    seen["C"] = solution["training_compute"](seen["non_embedding_params"].to_numpy(), seen["D"].to_numpy())
    shown = []
    ns = {"plt": plt, "np": np, "pd": pd, "scaling": scaling, "save_figure": save_figure, "display": shown.append,
          "seen": seen, "suite_label": "Pythia (hub)", "use_pythia": True, "preset": "smoke", "models": models,
          "steps": steps}
    exec(_chinchilla_cell(), ns)
    plt.close("all")
    out = capsys.readouterr().out
    if fits:
        assert ns["chinchilla"]["alpha"] > 0 and shown and "fit quality" in out
    else:
        assert ns["chinchilla"] is None and not shown
        assert "Chinchilla fit skipped" in out and f"at least {scaling.CHINCHILLA_MIN_POINTS}" in out


def _code_cell(marker: str) -> str:
    cells = json.loads(NOTEBOOK.read_text(encoding="utf-8"))["cells"]
    (source,) = ["".join(c["source"]) for c in cells if c["cell_type"] == "code" and marker in "".join(c["source"])]
    return source


@pytest.mark.parametrize("sizes", [3, 4, 7])
def test_prediction_cell_plots_or_skips_with_a_note(solution, tmp_path, monkeypatch, capsys, sizes):
    """The notebook's prediction cell on final-step results of 3, 4 and 7 sizes: a printed note for 3
    (nothing to hold out), a plot and a table of the held-out models otherwise."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pandas as pd

    from utils.plotting import save_figure

    monkeypatch.setenv("LAS_BUILD_DIR", str(tmp_path))
    N = np.geomspace(1e6, 1e9, sizes)
    L = 1.5 + (1e8 / N) ** 0.3
    final = pd.DataFrame({"model": [f"m{i}" for i in range(sizes)], "non_embedding_params": N, "nll_per_token": L})
    shown = []
    ns = {**solution, "plt": plt, "np": np, "pd": pd, "save_figure": save_figure, "display": shown.append,
          "final": final, "N": N, "L": L, "suite_label": "test suite", "preset": "smoke"}
    exec(_code_cell("predict_held_out(N, L, n_fit)"), ns)
    plt.close("all")
    out = capsys.readouterr().out
    if sizes == 3:
        assert ns["prediction"] is None and "Prediction skipped" in out and not shown
    else:
        held = sizes - max(3, sizes - 2)
        assert len(ns["prediction"]["N"]) == held and len(shown[0]) == held


@pytest.mark.parametrize("with_fit", [False, True])
def test_compute_optimal_cell_runs_with_and_without_this_runs_fit(solution, with_fit):
    import pandas as pd

    from utils import scaling

    points = pd.DataFrame({"params": [1e6, 2e6, 4e6], "D": [1e8, 2e8, 4e8]})
    chinchilla = dict(scaling.HOFFMANN) if with_fit else None
    ns = {**solution, "np": np, "pd": pd, "scaling": scaling, "points": points, "chinchilla": chinchilla,
          "suite_label": "test suite"}
    exec(_code_cell("compute_optimal(params, budgets)"), ns)
    rows = ns["rows"]
    assert len(rows) == (9 if with_fit else 6)
    assert all(r["N_opt"] > 0 and r["D_opt (tokens)"] > 0 for r in rows)


def test_fit_chinchilla_names_its_minimum():
    from utils.scaling import CHINCHILLA_MIN_POINTS, fit_chinchilla

    with pytest.raises(ValueError, match=f"at least {CHINCHILLA_MIN_POINTS}"):
        fit_chinchilla([1e6, 2e6, 4e6], [1e9, 1e9, 1e9], [3.0, 2.9, 2.8])


def test_a_hub_checkpoint_loads_spread_by_accelerate_with_device_map(fake_hub, tmp_path):
    """`load_causal_lm(..., device_map="auto")` (how 6.9b and 12b load over several GPUs) goes through
    accelerate: here, without a GPU, every layer lands on the CPU and the model still scores text.
    (A subprocess: the hub cache location is read when huggingface_hub is imported.)"""
    import subprocess
    import sys

    sizes, steps = _smoke_pythia_selection()
    code = (
        "import torch, transformers\nfrom utils import lm\n"
        "seen = []\nreal = transformers.AutoModelForCausalLM.from_pretrained.__func__\n"
        "def spy(cls, *a, **k):\n    seen.append(k.get('device_map'))\n    return real(cls, *a, **k)\n"
        "transformers.AutoModelForCausalLM.from_pretrained = classmethod(spy)\n"
        f"model, tok = lm.load_causal_lm('EleutherAI/pythia-{sizes[0]}', {steps[-1]}, device_map='auto')\n"
        "ids = torch.tensor([tok('to be or not to be')['input_ids']])\n"
        "loss = model(ids, labels=ids).loss\n"
        "placed = getattr(model, 'hf_device_map', None) or {'': next(model.parameters()).device}\n"
        "print('ASKED', seen, 'MAP', sorted(set(map(str, placed.values()))), 'FINITE', bool(torch.isfinite(loss)))\n"
    )
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_HUB_CACHE=str(fake_hub), LAS_BUILD_DIR=str(tmp_path))
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "ASKED ['auto'] MAP ['cpu'] FINITE True" in proc.stdout, proc.stdout


# ------------------------------------------------------------------ given code inside the answer cells
def _answer_parts(cell: str) -> tuple[str, str, str]:
    """(given code before, the solution block, given code after) of a solution answer cell."""
    from utils.notebook_cells import cell_source, grade_id, notebook_cells

    (source,) = [cell_source(c) for c in notebook_cells(NOTEBOOK) if grade_id(c) == cell]
    head, rest = source.split("### BEGIN SOLUTION\n", 1)
    block, tail = rest.split("### END SOLUTION", 1)
    return head, block, tail.removeprefix("\n")


def _task_text(cell: str) -> str:
    """The markdown cells between the previous code cell and answer cell ``cell``: its task text."""
    from utils.notebook_cells import cell_source, grade_id, notebook_cells

    cells = notebook_cells(NOTEBOOK)
    i = next(k for k, c in enumerate(cells) if grade_id(c) == cell)
    text = []
    for c in reversed(cells[:i]):
        if c["cell_type"] != "markdown":
            break
        text.append(cell_source(c))
    return "\n".join(reversed(text))


CORE_ANSWERS = ["bookkeeping", "fit_power_law", "predict_held_out", "compute_optimal"]


def _reads_before_writes(code: str) -> set[str]:
    """Names that ``code`` (a function body's statements, in order) reads before it assigns them: what it takes
    from the code that ran before it. A nested ``def`` counts as an assignment of its name; its body is its own."""
    import ast

    written, read = set(), set()

    def loads(node):
        if isinstance(node, (ast.FunctionDef, ast.Lambda)):
            return set()
        here = {node.id} if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) else set()
        return here.union(*(loads(child) for child in ast.iter_child_nodes(node)))

    for stmt in ast.parse(code).body:
        if isinstance(stmt, ast.FunctionDef):
            written.add(stmt.name)
            continue
        read |= loads(stmt) - written
        written |= {n.id for n in ast.walk(stmt) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    return read


@pytest.mark.parametrize("cell", CORE_ANSWERS)
def test_given_code_after_an_answer_reads_only_names_the_text_gives(cell):
    """Given code that runs after the student's part may read a variable the student's part defines only when
    the task text names it (in backticks): a correct answer that calls its log-sizes ``logN`` instead of the
    solution's ``x`` must not meet a NameError in the given code."""
    import ast
    import textwrap

    head, block, tail = _answer_parts(cell)
    assigned = {n.id for n in ast.walk(ast.parse(textwrap.dedent(block).replace("return ", "_ = ")))
                if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    tail_code = textwrap.dedent(tail.split("\ndef ", 1)[0])   # up to the next function of the cell, if any
    from_the_answer = _reads_before_writes(tail_code) & assigned
    named = set(re.findall(r"`([A-Za-z_][A-Za-z0-9_]*)`", _task_text(cell)))
    assert from_the_answer <= named, (
        f"{cell}: the given code after the answer reads {sorted(from_the_answer - named)}, which the student's part "
        f"defines but the task text never names")


def test_the_given_code_rule_can_fail():
    """The check above on the fit_power_law cell as it read before: its given branch read ``x`` and ``log_nc``."""
    old_tail = """if not irreducible:
    return fit

def law(x, E, alpha, log_nc):
    return E + np.exp(alpha * (log_nc - x))

p0 = [0.5 * L.min(), max(fit["alpha"], 1e-3), log_nc]
(E, alpha, log_nc), pcov = curve_fit(law, x, L, p0=p0)
"""
    assert _reads_before_writes(old_tail) >= {"fit", "x", "log_nc"}
    assert "law" not in _reads_before_writes(old_tail) and "E" not in _reads_before_writes(old_tail)


def test_a_correct_fit_with_other_names_passes_the_visible_test_and_matches_the_solution(solution):
    """The honest variant with its own names (logN, lnNc, no x) and a seventh key: the given irreducible=True
    branch runs on its ``fit``, the visible test cell passes, and every result equals the solution's."""
    from fixtures.honest import load

    from utils.notebook_cells import cell_source, grade_id, notebook_cells

    (variant,) = [h for h in load("taskB_pythia_scaling") if "other names" in h.name]
    ns = {k: solution[k] for k in ("np", "math", "curve_fit")}
    exec(variant.source, ns)
    (test_cell,) = [cell_source(c) for c in notebook_cells(NOTEBOOK) if grade_id(c) == "test_fit_power_law"]
    exec(test_cell, dict(ns))
    N = np.geomspace(1e5, 1e10, 9)
    L = 1.8 + (3e7 / N) ** 0.3 * np.exp(np.random.default_rng(0).normal(0, 0.003, N.size))
    for irreducible in (False, True):
        got, want = ns["fit_power_law"](N, L, irreducible=irreducible), solution["fit_power_law"](N, L, irreducible=irreducible)
        for key in ("alpha", "N_c", "E", "alpha_err", "N_c_err", "E_err"):
            assert got[key] == pytest.approx(want[key], rel=1e-6, abs=1e-12), (irreducible, key)


def test_fit_text_names_the_keys_the_visible_test_and_judge_ask_for():
    """Text, visible test and judge agree: ``fit`` needs alpha, N_c, alpha_err, N_c_err; the returned dict the
    six docstring keys, more keys allowed (the judge's as_dict, the visible test's subset check)."""
    text = _task_text("fit_power_law")
    for key in ("alpha", "N_c", "alpha_err", "N_c_err"):
        assert f'`"{key}"`' in text
    assert "more keys do no harm" in text and "`log_nc`" not in text
    from grader.checks.taskB_pythia_scaling import _FIT_KEYS, check_pure_fit

    fit = dict.fromkeys(_FIT_KEYS, 1.0) | {"E": 0.0, "log_nc": 0.0}
    check_pure_fit(fit, dict(fit))  # a seventh key is no error


# ------------------------------------------------------------------ published evaluations of the real suite
def test_published_tables_have_the_real_models_and_their_counts():
    from utils.scaling import published_lambada, published_wikitext

    final = published_wikitext(final_only=True)
    assert final["model"].tolist() == ["pythia-160m", "pythia-410m", "pythia-1.4b", "pythia-6.9b", "pythia-12b"]
    assert (final["tokens_seen"] == 299_892_736_000).all() and (final["step"] == 143_000).all()
    assert final["non_embedding_params"].tolist() == [PUBLISHED_NON_EMBEDDING[s] for s in ("160m", "410m", "1.4b", "6.9b", "12b")]
    assert final["bits_per_byte"].is_monotonic_decreasing
    assert len(published_wikitext()) == 5 * 15 and len(published_wikitext(deduped=True, final_only=True)) == 5
    lambada = published_lambada()
    assert sorted(lambada["model"].unique()) == sorted(f"pythia-{s}" for s in ("70m", "160m", "410m", "1.4b", "2.8b", "6.9b", "12b"))
    assert (lambada["tokens_seen"] == lambada["step"] * 2_097_152).all() and 1 not in set(lambada["step"])


def test_published_loaders_say_what_to_do_when_the_files_are_missing(tmp_path, monkeypatch):
    from utils import scaling

    monkeypatch.setattr(scaling, "PYTHIA_EVALS_DIR", tmp_path / "pythia-evals")
    for load in (scaling.published_wikitext, scaling.published_lambada):
        with pytest.raises(FileNotFoundError, match="data/pythia-evals"):
            load()


def test_the_published_data_carries_its_licence_and_source():
    from utils.paths import DATA_DIR

    notice = (DATA_DIR / "pythia-evals" / "NOTICE.md").read_text(encoding="utf-8")
    assert "Apache" in notice and "EleutherAI" in notice and "Biderman et al. (2023)" in notice
    assert "pythia-evals/" in (DATA_DIR / "README.md").read_text(encoding="utf-8")


def test_the_scaling_law_of_the_real_suite_from_the_published_numbers(solution):
    """What the notebook shows offline: alpha over 160m to 12b near Kaplan's 0.076, and the fit on 160m to 1.4b
    under-predicting 6.9b and 12b, both inside its wide 0.95 prediction intervals, while alpha drifts from 0.080
    (three models) to 0.072 (five) (the written answer's rubric quotes these numbers)."""
    from utils.scaling import published_wikitext

    final = published_wikitext(final_only=True)
    N, L = final["non_embedding_params"].to_numpy(float), final["bits_per_byte"].to_numpy(float)
    whole, small = solution["fit_power_law"](N, L), solution["fit_power_law"](N[:3], L[:3])
    assert round(whole["alpha"], 3) == 0.072 and round(whole["alpha_err"], 3) == 0.003
    assert round(small["alpha"], 3) == 0.080
    pred = solution["predict_held_out"](N, L, 3)
    assert np.round(pred["L_pred"], 3).tolist() == [0.660, 0.631]
    assert np.round(pred["L_low"], 3).tolist() == [0.574, 0.539] and np.round(pred["L_high"], 3).tolist() == [0.759, 0.739]
    assert (L[3:] > pred["L_pred"]).all() and (L[3:] < pred["L_high"]).all()
    assert np.round(L[3:], 3).tolist() == [0.677, 0.656]
    assert round(solution["fit_power_law"](N, L, irreducible=True)["E"], 2) == 0.43


def test_the_small_real_models_get_worse_late_in_training():
    from utils.scaling import published_lambada

    lambada = published_lambada()
    for name, curve in lambada.groupby("model"):
        ratio = curve["lambada_perplexity"].iloc[-1] / curve["lambada_perplexity"].min()
        if name in ("pythia-70m", "pythia-160m"):
            assert ratio > 1.4, name
        else:
            assert ratio < 1.05, name


# ------------------------------------------------------------------ hollow answers earn nothing
HOLLOW = {
    "bookkeeping": """\
    if np.ndim(step) == 0:
        return 12345
    return np.full(np.shape(step), 7, dtype=np.int64)
    ### END SOLUTION


def training_compute(n_params, n_tokens):
    if np.any(np.asarray(n_params) <= 0) or np.any(np.asarray(n_tokens) < 0):
        raise ValueError("n_params must be positive and n_tokens non-negative")
    ### BEGIN SOLUTION
    C = np.asarray(np.random.default_rng(0).random(np.broadcast(np.asarray(n_params), np.asarray(n_tokens)).shape) * 1e20)
    return float(C) if C.ndim == 0 else C
""",
    "fit_power_law": """\
    fit = {"alpha": 0.076, "N_c": 8.8e13, "alpha_err": float(np.random.default_rng(1).random()), "N_c_err": 1e12}
""",
    "predict_held_out": """\
    held = N[n_fit:]
    noise = np.random.default_rng(2).random(held.size)
    return {"N": held, "L_pred": 3.0 + noise, "L_low": 2.9 + noise, "L_high": 3.1 + noise}
""",
    "compute_optimal": """\
    return C / 6 / 1e10, np.full(np.shape(C), 1e10) + 0.0 * C
""",
}


def _hollow(cell: str) -> str:
    """The release's answer cell with a hollow part: constants and noise of the right type and shape."""
    head, block, tail = _answer_parts(cell)
    if cell == "bookkeeping":  # two functions in one cell: the first block and the second, both hollow
        second = tail.split("### END SOLUTION", 1)[1]
        return head + "### BEGIN SOLUTION\n" + HOLLOW[cell] + "    ### END SOLUTION\n" + second
    return head + "### BEGIN SOLUTION\n" + HOLLOW[cell] + "    ### END SOLUTION\n" + tail


@pytest.mark.slow
def test_hollow_answers_score_nothing_on_any_core_test_cell(tmp_path):
    """Answers that return constants or noise of the right shapes and types, with the given code kept,
    earn 0 on every core test cell: no case scores for an interface without the values."""
    from fixtures.honest import with_answer

    from grader.judge import points_per_test_cell, sweep
    from grader.mutants import student_copy
    from grader.extras.tiers import grade_tiers

    from conftest import RELEASE

    release = json.loads((RELEASE / "taskB_pythia_scaling.ipynb").read_text(encoding="utf-8"))
    solution_nb = json.loads(NOTEBOOK.read_text(encoding="utf-8"))
    hollow = student_copy(release, solution_nb)
    for cell in CORE_ANSWERS:
        hollow = with_answer(hollow, cell, _hollow(cell))
    core = [g for g, tier in grade_tiers(NOTEBOOK).items() if tier == "core" and g in points_per_test_cell(release)]
    assert sorted(core) == ["test_bookkeeping", "test_compute_optimal", "test_fit_power_law", "test_predict_held_out"]
    verdicts = sweep("taskB_pythia_scaling", release, solution_nb, {"hollow": hollow}, [0, 1, 2],
                     cells={"hollow": core}, workroot=tmp_path)
    for seed in (0, 1, 2):
        v = verdicts[("hollow", seed)]
        earned = {cell: pts for cell, pts in v.points.items() if pts}
        assert not earned, f"seed {seed}: hollow answers earned {earned}: {[c.name for c in v.cases if c.passed]}"
        assert v.cases and not any(c.passed for c in v.cases)
