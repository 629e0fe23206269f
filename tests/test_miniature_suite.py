"""The miniature Pythia suite (utils/suite_recipes.py, suite_training.py, suite_build.py) and the one loading
path (utils/lm.py)."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import math

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file

from conftest_lm import micro_suite  # noqa: F401  (session fixture; also usable by other files)
from utils import lm, suite_build
from utils.lm import HubUnavailableError, load_causal_lm, load_masked_lm, load_tokenizer, suite_manifest
from utils.suite_recipes import SUITES, ModelSize
from utils.suite_training import load_corpus

VOCAB_ROWS = 50304


@pytest.fixture(scope="module")
def manifest(micro_suite):  # noqa: F811
    return json.loads((micro_suite / "manifest.json").read_text())


@pytest.fixture(scope="module")
def corpus():
    return load_corpus(SUITES["micro"])


# ------------------------------------------------------------------------------------ tokenizer
def test_tokenizer_is_pythias():
    tok = load_tokenizer()
    assert len(tok) == 50277
    assert tok.eos_token_id == 0 and tok.convert_ids_to_tokens(0) == "<|endoftext|>"
    assert tok.pad_token is None, "Pythia's tokenizer has no pad token"
    ids = tok("Hello world")["input_ids"]
    assert ids == [12092, 1533], f"no BOS must be added and the BPE must be GPT-NeoX's, got {ids}"
    masked = load_tokenizer(with_mask_token=True)
    assert masked.mask_token == "<|mask|>" and masked.mask_token_id == 50277 < VOCAB_ROWS
    assert 50277 in masked("a <|mask|> b")["input_ids"]


# ---------------------------------------------------------------------------------- suite layout
def test_micro_suite_layout_and_manifest(micro_suite, manifest):  # noqa: F811
    recipe = SUITES["micro"]
    steps = manifest["steps"]
    assert steps[0] == 0 and steps[-1] == recipe.total_steps
    log_part = [s for s in steps if 0 < s <= recipe.log_steps_until]
    assert log_part == [2**k for k in range(len(log_part))], f"log-spaced part wrong: {steps}"
    even_part = [s for s in steps if s > recipe.log_steps_until]
    assert all(b - a == recipe.checkpoint_every for a, b in zip(even_part, even_part[1:]))
    assert manifest["tokens_per_step"] == recipe.batch_size * recipe.context
    assert len(manifest["models"]) == len(recipe.sizes)
    for entry in manifest["models"]:
        for step in steps:
            folder = micro_suite / entry["name"] / f"step{step}"
            assert (folder / "config.json").is_file() and (folder / "model.safetensors").is_file()
    assert (micro_suite / "mini-bert" / "config.json").is_file()


def test_parameter_counts_and_pythia_architecture(manifest):
    counts = []
    for entry in manifest["models"]:
        model, _ = load_causal_lm(entry["name"], 0, suite="micro")
        cfg = model.config
        assert type(model).__name__ == "GPTNeoXForCausalLM"
        assert cfg.vocab_size == VOCAB_ROWS and cfg.rope_parameters["partial_rotary_factor"] == 0.25
        assert cfg.use_parallel_residual is True and cfg.tie_word_embeddings is False
        total = sum(p.numel() for p in model.parameters())
        embedding = model.get_input_embeddings().weight.numel() + model.get_output_embeddings().weight.numel()
        assert entry["total_params"] == total
        assert entry["non_embedding_params"] == total - embedding
        assert not model.training and next(model.parameters()).dtype == torch.float32
        counts.append(total - embedding)
    assert counts == sorted(counts) and len(set(counts)) == len(counts)


# ----------------------------------------------------------------------------------- round trip
def test_from_pretrained_round_trips_bit_for_bit(micro_suite, manifest, tmp_path):  # noqa: F811
    name = manifest["models"][-1]["name"]
    step = manifest["steps"][-2]
    model, _ = load_causal_lm(name, step, suite="micro")
    stored = load_file(micro_suite / name / f"step{step}" / "model.safetensors")
    state = model.state_dict()
    # Every stored tensor comes back exactly (names may be remapped by transformers: match by values).
    assert sum(t.numel() for t in stored.values()) == sum(p.numel() for p in model.parameters())
    for key, tensor in stored.items():
        same = state.get(key)
        if same is None:  # a renamed key (e.g. embed_out -> lm_head): find it by shape and value
            same = next((t for t in state.values() if t.shape == tensor.shape and torch.equal(t, tensor)), None)
        assert same is not None and torch.equal(same, tensor), key
    model.save_pretrained(tmp_path / "again")
    again = type(model).from_pretrained(tmp_path / "again")
    for key, value in state.items():
        assert torch.equal(value, again.state_dict()[key]), key


def test_recorded_losses_are_those_of_the_full_vocabulary_model(manifest, corpus):
    """The grouped-vocabulary training computes exactly the full 50,304-way softmax loss."""
    recipe = SUITES["micro"]
    entry = manifest["models"][1]
    for step in manifest["steps"][:1] + manifest["steps"][-1:]:  # every step scores the first eval_windows
        model, _ = load_causal_lm(entry["name"], step, suite="micro")
        windows = corpus.held_out[:recipe.eval_windows]
        with torch.no_grad():
            logits = model(input_ids=windows[:, :-1]).logits
        assert logits.shape[-1] == VOCAB_ROWS
        loss = F.cross_entropy(logits.reshape(-1, VOCAB_ROWS), windows[:, 1:].reshape(-1))
        assert float(loss) == pytest.approx(entry["training"]["held_out_loss"][str(step)], abs=1e-4)
    # step 0 is an untrained model: close to the uniform distribution over the full vocabulary.
    assert entry["training"]["held_out_loss"]["0"] == pytest.approx(math.log(VOCAB_ROWS), abs=0.2)


def test_larger_micro_models_reach_lower_loss(manifest):
    tail = 16
    train = [sum(m["training"]["train_loss"][-tail:]) / tail for m in manifest["models"]]
    held = [m["training"]["final_held_out_loss"] for m in manifest["models"]]
    assert all(a > b for a, b in zip(train, train[1:])), f"training loss not falling with size: {train}"
    assert all(a > b for a, b in zip(held, held[1:])), f"held-out loss not falling with size: {held}"
    assert held[-1] < math.log(VOCAB_ROWS) - 2, "the largest micro model learned almost nothing"


def test_mini_bert_predicts_masked_tokens(manifest, corpus):
    model, tok = load_masked_lm("mini-bert", suite="micro")
    assert type(model).__name__ == "BertForMaskedLM" and model.config.vocab_size == VOCAB_ROWS
    assert tok.mask_token_id == manifest["bert"]["mask_token_id"] == 50277
    windows = corpus.held_out[:8, :-1]
    g = torch.Generator().manual_seed(5)
    chosen = torch.rand(windows.shape, generator=g) < 0.15
    inputs = windows.masked_fill(chosen, tok.mask_token_id)
    with torch.no_grad():
        logits = model(input_ids=inputs).logits
    loss = F.cross_entropy(logits[chosen], windows[chosen])
    assert float(loss) < math.log(VOCAB_ROWS) - 2, f"mini-bert is not clearly better than chance: {float(loss)}"


# ------------------------------------------------------------------------------------ bad input
def test_unknown_local_names_and_steps_are_refused(manifest):
    with pytest.raises(ValueError, match="has no model"):
        load_causal_lm("mini-pythia-999m", suite="micro")
    with pytest.raises(ValueError, match="no checkpoint at step 3"):
        load_causal_lm(manifest["models"][0]["name"], 3, suite="micro")
    with pytest.raises(ValueError, match="float16"):
        load_causal_lm(manifest["models"][0]["name"], dtype=torch.float16, suite="micro")


# ------------------------------------------------------------------------------------ offline hub
def test_hub_name_offline_raises_clear_error(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert lm.hub_available() is False
    with pytest.raises(HubUnavailableError, match=r"mini-pythia-<size>.*MODEL_SUITE = 'mini'") as info:
        load_causal_lm("EleutherAI/pythia-70m", step=7)  # step7 is no Pythia revision: never cached
    assert "EleutherAI/pythia-70m could not be downloaded (HF_HUB_OFFLINE is set)" in str(info.value)
    assert isinstance(info.value, RuntimeError)
    with pytest.raises(HubUnavailableError, match="mini-bert"):
        load_masked_lm("bert-base-uncased-not-cached-anywhere")


def test_hub_unreachable_without_offline_flag_fails_fast(monkeypatch):
    # A closed local port stands for "no network", also on a CI machine that has one.
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    assert lm.hub_available(timeout=1.0) is False
    with pytest.raises(HubUnavailableError, match="no connection to huggingface.co.*mini-pythia-<size>"):
        load_causal_lm("EleutherAI/pythia-70m", step=7)


# --------------------------------------------------------------------------- caching, determinism
def test_cache_is_keyed_on_the_recipe_and_builds_are_deterministic(monkeypatch, tmp_path):
    tiny = dataclasses.replace(
        SUITES["micro"], sizes=(ModelSize(8, 1, 1, 5e-3),), total_steps=4, log_steps_until=2,
        checkpoint_every=2, bert=ModelSize(8, 1, 1, 5e-3), bert_steps=2, eval_windows=2,
    )
    monkeypatch.setenv("LAS_BUILD_DIR", str(tmp_path))
    monkeypatch.setitem(SUITES, "tiny", tiny)
    with contextlib.redirect_stdout(io.StringIO()) as said:
        folder = suite_build.build("tiny", progress=False)
    assert said.getvalue().startswith("First use of the miniature model suite 'tiny': training 1 mini-pythia model ")
    name = suite_manifest("tiny", build=False)["models"][0]["name"]
    weights = folder / name / "step4" / "model.safetensors"
    first = load_file(weights)
    stamp = weights.stat().st_mtime_ns
    with contextlib.redirect_stdout(io.StringIO()) as said:
        assert suite_build.build("tiny", progress=False) == folder
    assert said.getvalue() == "", "a cached suite loads silently"
    assert weights.stat().st_mtime_ns == stamp, "an unchanged recipe must not retrain"
    suite_build.build("tiny", force=True, progress=False)
    second = load_file(weights)
    assert all(torch.equal(first[k], second[k]) for k in first), "seeded builds must be bit-identical"
    bert_stamp = (folder / "mini-bert" / "model.safetensors").stat().st_mtime_ns
    monkeypatch.setitem(SUITES, "tiny", dataclasses.replace(tiny, sizes=(ModelSize(8, 1, 1, 1e-3),)))
    with contextlib.redirect_stdout(io.StringIO()) as said:
        suite_build.build("tiny", progress=False)
    assert said.getvalue().startswith("Rebuilding part of the miniature model suite 'tiny': training 1 mini-pythia "
                                      "model (4 training steps and 4 checkpoints each) on")
    third = load_file(weights)
    assert not all(torch.equal(first[k], third[k]) for k in first), "a changed recipe must retrain"
    assert (folder / "mini-bert" / "model.safetensors").stat().st_mtime_ns == bert_stamp
    causal_stamp = weights.stat().st_mtime_ns
    monkeypatch.setitem(SUITES, "tiny", dataclasses.replace(SUITES["tiny"], bert_steps=3, bert_context=16,
                                                            mask_probability=0.4))
    suite_build.build("tiny", progress=False)
    assert weights.stat().st_mtime_ns == causal_stamp, "tuning mini-bert must not retrain the causal models"
    assert (folder / "mini-bert" / "model.safetensors").stat().st_mtime_ns != bert_stamp
    bert = suite_manifest("tiny", build=False)["bert"]
    assert (bert["context"], bert["steps"], bert["mask_probability"]) == (16, 3, 0.4)
    assert bert["tokens_per_step"] == tiny.tokens_per_step()


def test_a_built_suite_loads_from_a_read_only_cache(micro_suite, monkeypatch):
    """The grading sandbox mounts build/cache read-only: no lock file can be written there, and a
    built suite must still load; a missing one must say how to build it."""
    import builtins
    import errno

    def read_only_open(path, mode="r", *args, **kwargs):
        if any(c in mode for c in "wax+"):
            raise OSError(errno.EROFS, "Read-only file system", str(path))
        return builtins.open(path, mode, *args, **kwargs)

    monkeypatch.setattr(suite_build, "open", read_only_open, raising=False)
    assert suite_build.build("micro", progress=False) == micro_suite
    monkeypatch.setattr(suite_build.os, "access", lambda path, mode: False)
    monkeypatch.setattr(suite_build, "_is_cached", lambda *a, **k: False)
    with pytest.raises(RuntimeError, match="python -m utils.suite_build build micro"):
        suite_build.build("micro", progress=False)


# ------------------------------------------------------------------------------- mini-bert's corruption
def test_mini_bert_corruption_masks_every_chosen_position_and_is_not_80_10_10():
    from utils.suite_training import mask_for_training

    windows = torch.randint(0, 1000, (64, 32), generator=torch.Generator().manual_seed(0))
    inputs, chosen = mask_for_training(windows, 0.4, 50277, torch.Generator().manual_seed(1))
    assert chosen.dtype == torch.bool and chosen.shape == inputs.shape == windows.shape
    assert (inputs[chosen] == 50277).all(), "every chosen position must become the mask token (100/0/0)"
    assert torch.equal(inputs[~chosen], windows[~chosen]), "positions not chosen stay as they are"
    assert chosen.any(dim=1).all(), "every row needs at least one target"
    assert 0.35 < chosen.float().mean().item() < 0.45
    none = mask_for_training(windows, 0.0, 50277, torch.Generator().manual_seed(2))[1]
    assert (none.sum(dim=1) == 1).all(), "with probability 0 exactly one position per row is still chosen"


# ------------------------------------------------------------------------------------ the cpu suite
def test_the_cpu_presets_use_the_small_suite_and_it_has_what_the_notebooks_need():
    from utils.notebook_presets import TABLES
    from utils.suite_recipes import model_entries

    small, default = SUITES["small"], SUITES["default"]
    assert len(small.sizes) >= 4, "Task B fits E + (N_c/N)^alpha, which needs at least 4 sizes"
    assert len(small.checkpoint_steps()) >= 10, "Task B's cpu preset plots 10 checkpoints"
    assert len(small.sizes) * small.total_steps < len(default.sizes) * default.total_steps
    assert small.bert.d_model < default.bert.d_model and small.bert.n_layers <= default.bert.n_layers
    shapes = [(e["d_model"], e["n_layers"]) for e in model_entries(small)]
    assert (small.bert.d_model, small.bert.n_layers) in shapes, "Task 2 compares mini-bert with its causal twin"
    assert TABLES["task2_pseudo_likelihood"]["cpu"]["suite"] == "small"
    assert TABLES["taskB_pythia_scaling"]["cpu"]["mini_suite"] == "small"


# ---------------------------------------------------------------------------- first use explains itself
FIRST_USE = "First use of the miniature model suite 'micro'"


class _StopBuild(Exception):
    """Raised by a stand-in training function to end a build once the ordering is checked."""


def _cells(notebook: str, grade_ids: tuple[str, ...]) -> list[str]:
    """Sources of the notebook's parameters cell and of the cells with ``grade_ids``, in notebook order."""
    from conftest import SOLUTIONS

    cells = json.loads((SOLUTIONS / notebook).read_text(encoding="utf-8"))["cells"]
    keep = [c for c in cells if "parameters" in c.get("metadata", {}).get("tags", [])
            or c.get("metadata", {}).get("nbgrader", {}).get("grade_id") in grade_ids]
    assert len(keep) == 1 + len(grade_ids), notebook
    return ["".join(c["source"]) for c in keep]


def _run_first_use(notebook, grade_ids, monkeypatch, tmp_path):
    """Run the notebook's parameters, setup and model cells in the smoke preset against an empty
    cache, recording what had been printed when the build timed its first step and when it started
    training its first model, where the build is stopped (seconds; the whole build is covered by the
    micro_suite fixture and the caching test). Returns (recorded outputs, whole output, namespace)."""
    import contextlib
    import io

    from utils import suite_training

    monkeypatch.setenv("LAS_BUILD_DIR", str(tmp_path))
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    out = io.StringIO()
    seen = {}
    real_probe = suite_training.time_causal_step

    def probe(*args, **kwargs):
        seen.setdefault("first timed step", out.getvalue())
        return real_probe(*args, **kwargs)

    def train(*args, **kwargs):
        seen.setdefault("first training step", out.getvalue())
        raise _StopBuild

    monkeypatch.setattr(suite_training, "time_causal_step", probe)
    monkeypatch.setattr(suite_training, "train_causal", train)
    params, *cells = _cells(notebook, grade_ids)
    ns = {}
    with contextlib.redirect_stdout(out):
        exec(compile(params, "<parameters>", "exec"), ns)
        ns["PRESET"], ns["MODEL_SUITE"] = "smoke", "mini"
        with pytest.raises(_StopBuild):
            for i, source in enumerate(cells):
                exec(compile(source, f"<{notebook} {grade_ids[i]}>", "exec"), ns)
    return seen, out.getvalue(), ns


def _assert_explains_itself(seen: dict, tmp_path) -> None:
    before_probe, before_training = seen["first timed step"], seen["first training step"]
    assert FIRST_USE in before_probe, f"nothing said before the first timed step:\n{before_probe}"
    assert "3 mini-pythia models" in before_probe and "mini-bert" in before_probe
    assert "This happens once" in before_probe and str(tmp_path / "cache" / "model_zoo" / "micro") in before_probe
    assert " MB on disk" in before_probe or " GB on disk" in before_probe
    assert "Estimated time on this machine" in before_training, f"no estimate before training:\n{before_training}"


@pytest.mark.slow
def test_task2_first_use_says_what_it_builds_before_training(monkeypatch, tmp_path):
    seen, output, _ = _run_first_use("task2_pseudo_likelihood.ipynb", ("setup", "models"), monkeypatch, tmp_path)
    _assert_explains_itself(seen, tmp_path)
    assert output.index("Preset: smoke") < output.index(FIRST_USE) and output.count(FIRST_USE) == 1


@pytest.mark.slow
def test_taskB_first_use_says_what_it_builds_before_training(monkeypatch, tmp_path):
    seen, output, _ = _run_first_use("taskB_pythia_scaling.ipynb", ("setup", "data_setup"), monkeypatch, tmp_path)
    _assert_explains_itself(seen, tmp_path)
    assert output.index("Preset: smoke") < output.index(FIRST_USE) and output.count(FIRST_USE) == 1
