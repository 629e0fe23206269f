"""The thin helpers: presets, seeding, data loading, figures and the main job."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys

import numpy as np
import pytest
import torch

from roundtrip import REPO
from utils import data, presets
from utils.device import get_device, seed_everything


# ------------------------------------------------------------------------------------ presets
def test_nbgrader_execution_forces_smoke(monkeypatch):
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    assert presets.resolve_preset("gpu", verbose=False) == "smoke"


def test_auto_without_cuda_is_cpu(monkeypatch):
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    monkeypatch.delenv("LAS_PRESET", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert presets.resolve_preset("auto", verbose=False) == "cpu"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert presets.resolve_preset("auto", verbose=False) == "gpu"


def test_unknown_preset_is_a_clear_error(monkeypatch):
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    with pytest.raises(ValueError, match="PRESET must be"):
        presets.resolve_preset("turbo")


def test_preset_config_requires_matching_keys_and_falls_back_from_full_to_gpu():
    table = {"smoke": {"n": 1}, "cpu": {"n": 2}, "gpu": {"n": 3}}
    assert presets.preset_config("full", table).n == 3
    assert presets.preset_config("cpu", table).name == "cpu"
    with pytest.raises(ValueError, match="keys"):
        presets.preset_config("cpu", {"smoke": {"n": 1}, "cpu": {"m": 2}})


def test_seeding_is_deterministic():
    seed_everything(3)
    a = torch.randn(5), np.random.rand(3)
    seed_everything(3)
    b = torch.randn(5), np.random.rand(3)
    assert torch.equal(a[0], b[0]) and np.array_equal(a[1], b[1])


def test_device_can_be_forced(monkeypatch):
    monkeypatch.setenv("LAS_DEVICE", "cpu")
    assert get_device().type == "cpu"


# --------------------------------------------------------------------------------------- data
def _fake_batches(folder, n_per_batch=4):
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        entry = {"data": rng.integers(0, 256, (n_per_batch, 3072), dtype=np.uint8),
                 "labels": list(rng.integers(0, 10, n_per_batch))}
        with open(folder / name, "wb") as f:
            pickle.dump(entry, f)


def test_cifar_reads_a_standard_batches_folder_from_the_env_var(tmp_path, monkeypatch):
    _fake_batches(tmp_path / "cifar-10-batches-py")
    monkeypatch.setenv("CIFAR10_DIR", str(tmp_path))
    train = data.load_cifar10("train", download=False)
    test = data.load_cifar10("test", download=False, limit=3)
    assert train.images.shape == (20, 3, 32, 32) and train.images.dtype == torch.uint8
    assert train.labels.dtype == torch.int64 and len(test) == 3
    assert not train.synthetic and "CIFAR-10" in train.source


def test_cifar_missing_without_fallback_says_what_to_do(tmp_path, monkeypatch):
    monkeypatch.setenv("CIFAR10_DIR", str(tmp_path / "nowhere"))
    monkeypatch.setattr(data, "_find_batches_dir", lambda root: None)
    with pytest.raises(data.DataUnavailableError, match="CIFAR10_DIR"):
        data.load_cifar10("train", download=False)


def test_offline_download_failure_is_honest(monkeypatch):
    monkeypatch.setattr(data, "_find_batches_dir", lambda root: None)

    def no_network(*a, **k):
        raise OSError("network unreachable")

    import torchvision.datasets

    monkeypatch.setattr(torchvision.datasets, "CIFAR10", no_network)
    with pytest.raises(data.DataUnavailableError, match="could not be downloaded"):
        data.load_cifar10("train", download=True)


def test_synthetic_stand_in_is_labelled_loudly(monkeypatch, capsys):
    monkeypatch.setattr(data, "_find_batches_dir", lambda root: None)
    split = data.load_cifar10("train", download=False, allow_synthetic=True, limit=50)
    out = capsys.readouterr().out
    assert split.synthetic and "NOT CIFAR-10" in split.source and "SYNTHETIC" in out
    assert split.images.shape == (50, 3, 32, 32) and split.images.dtype == torch.uint8
    again = data.synthetic_cifar_like(50)
    assert torch.equal(split.images, again.images), "the stand-in must be deterministic"


def test_text_corpora_and_split():
    text = data.load_text("tinyshakespeare")
    assert len(text) == 1_115_394
    train, held_out = data.split_text(text, 0.1)
    assert train + held_out == text and 0.09 < len(held_out) / len(text) < 0.11
    docs = data.wikitext_documents(data.load_text("wikitext-2-test"))
    assert len(docs) > 50 and docs[0].strip().startswith("= Robert Boulter =")
    with pytest.raises(KeyError, match="ships"):
        data.load_text("the-pile")


def test_licence_notices_ship_with_the_data():
    for notice in ["text/wikitext-2-raw/NOTICE.md", "tokenizer/gpt-neox-20b/NOTICE.md", "text/tinyshakespeare/NOTICE.md"]:
        assert (REPO / "data" / notice).is_file(), notice
    assert "CC BY-SA" in (REPO / "data/text/wikitext-2-raw/NOTICE.md").read_text()


# ------------------------------------------------------------------------------ figures + main job
def test_save_figure_writes_under_build_figures(tmp_path, monkeypatch):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from utils.plotting import save_figure, set_style

    monkeypatch.setenv("LAS_BUILD_DIR", str(tmp_path))
    set_style()
    fig, ax = plt.subplots()
    ax.plot([0, 1])
    path = save_figure(fig, "unit_test")
    assert path == tmp_path / "figures" / "unit_test.png" and path.stat().st_size > 1000
    with pytest.raises(ValueError):
        save_figure(fig, "../escape")


def test_main_job_executes_a_notebook_into_build(tmp_path):
    env = dict(os.environ, LAS_BUILD_DIR=str(tmp_path))
    proc = subprocess.run([sys.executable, "-m", "utils.run_notebooks", "smoke", "--only", "task1"],
                          cwd=tmp_path, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    executed = tmp_path / "notebooks" / "smoke" / "task1_infonce.ipynb"
    nb = json.loads(executed.read_text())
    assert any(c.get("outputs") for c in nb["cells"] if c["cell_type"] == "code")
    assert (tmp_path / "figures" / "task1_infonce_bound.png").is_file()
    assert "Preset: smoke" in executed.read_text()


def test_synthetic_train_and_test_splits_share_their_classes():
    """A classifier fit on the stand-in's train split must work on its test split (class means agree)."""
    train, test = data.synthetic_cifar_like(500, seed=0), data.synthetic_cifar_like(500, seed=1)
    def class_means(split):
        x = split.images.float().mean(dim=(2, 3))
        return torch.stack([x[split.labels == c].mean(0) for c in range(10)])
    a, b = class_means(train), class_means(test)
    nearest = torch.cdist(b, a).argmin(dim=1)
    assert torch.equal(nearest, torch.arange(10)), "test classes do not match train classes"
