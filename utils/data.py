"""Data loading: CIFAR-10 for Task A and the text corpora shipped in data/ for Tasks 2 and B.

CIFAR-10 comes back as plain tensors (no Dataset classes), because Task A augments whole batches
on the device: ``images`` is ``uint8 [N, 3, 32, 32]``, ``labels`` is ``int64 [N]``.
"""

from __future__ import annotations

import os
import pickle
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from .paths import DATA_DIR, cache_dir

CIFAR10_CLASSES = (
    "airplane", "automobile", "bird", "cat", "deer",
    "dog", "frog", "horse", "ship", "truck",
)


@dataclass
class ImageSplit:
    """One split of an image data set.

    images: ``uint8 [N, 3, H, W]``; labels: ``int64 [N]``; source: a human-readable origin that
    every notebook prints; synthetic: True for the smoke-preset stand-in (never real CIFAR-10).
    """

    images: torch.Tensor
    labels: torch.Tensor
    classes: tuple[str, ...]
    source: str
    synthetic: bool = False

    def __len__(self) -> int:
        return len(self.labels)


class DataUnavailableError(RuntimeError):
    """Raised when a data set is neither on disk nor downloadable; the message says what to do."""


def _find_batches_dir(root: str | os.PathLike | None) -> Path | None:
    candidates = []
    for base in (root, os.environ.get("CIFAR10_DIR"), DATA_DIR, cache_dir("cifar10")):
        if base:
            base = Path(base).expanduser()
            candidates += [base, base / "cifar-10-batches-py"]
    for c in candidates:
        if (c / "data_batch_1").is_file() and (c / "test_batch").is_file():
            return c
    return None


def _read_batches(folder: Path, split: str) -> tuple[np.ndarray, np.ndarray]:
    names = [f"data_batch_{i}" for i in range(1, 6)] if split == "train" else ["test_batch"]
    xs, ys = [], []
    for name in names:
        path = folder / name
        if not path.is_file():
            raise DataUnavailableError(f"{path} is missing: the cifar-10-batches-py folder is incomplete")
        with open(path, "rb") as f:
            entry = pickle.load(f, encoding="latin1")
        # The official pickles load with str keys; copies written by Python 3 tools have bytes keys.
        entry = {k.decode() if isinstance(k, bytes) else k: v for k, v in entry.items()}
        xs.append(np.asarray(entry["data"], dtype=np.uint8).reshape(-1, 3, 32, 32))
        ys.append(np.asarray(entry.get("labels", entry.get("fine_labels")), dtype=np.int64))
    return np.concatenate(xs), np.concatenate(ys)


def _download_cifar10() -> Path:
    """torchvision's download into build/cache/cifar10; raises DataUnavailableError when offline."""
    from torchvision.datasets import CIFAR10

    root = cache_dir("cifar10")
    try:
        CIFAR10(root=str(root), train=True, download=True)
    except Exception as exc:  # URLError, socket errors, HTTP errors: all mean "not reachable".
        raise DataUnavailableError(
            "CIFAR-10 is not on disk and could not be downloaded "
            f"({exc.__class__.__name__}: {exc}).\n"
            "Fix one of:\n"
            "  * point $CIFAR10_DIR at a folder holding cifar-10-batches-py/ "
            "(data_batch_1..5, test_batch), or put that folder in data/;\n"
            "  * connect to the internet and rerun (torchvision downloads 170 MB once);\n"
            "  * use PRESET = 'smoke', which runs on a labelled synthetic stand-in."
        ) from exc
    return root / "cifar-10-batches-py"


def synthetic_cifar_like(n: int, *, seed: int = 0, image_size: int = 32) -> ImageSplit:
    """A CIFAR-shaped stand-in for the smoke preset: 10 classes of coloured, oriented stripes
    with noise, so that a small model can learn something from a few hundred images. NOT CIFAR-10.

    Returns an :class:`ImageSplit` with ``uint8 [n, 3, image_size, image_size]`` images.
    """
    # What defines a class (colour, stripe angle and frequency) is fixed, so train and test splits
    # drawn with different seeds share their classes; the seed only draws labels, phases and noise.
    classes = torch.Generator().manual_seed(20260101)
    palette = torch.rand(10, 3, generator=classes) * 0.6 + 0.2
    g = torch.Generator().manual_seed(seed)
    labels = torch.arange(n) % 10
    labels = labels[torch.randperm(n, generator=g)]
    yy, xx = torch.meshgrid(torch.arange(image_size), torch.arange(image_size), indexing="ij")
    angles = torch.arange(10) * (torch.pi / 10)
    freq = 2 * torch.pi / (4 + (torch.arange(10) % 3) * 2)
    phase = torch.rand(n, generator=g) * 2 * torch.pi
    a = angles[labels][:, None, None]
    wave = torch.sin(freq[labels][:, None, None] * (xx * torch.cos(a) + yy * torch.sin(a)) + phase[:, None, None])
    img = palette[labels][:, :, None, None] * (0.75 + 0.25 * wave[:, None])
    img = img + 0.08 * torch.randn(n, 3, image_size, image_size, generator=g)
    images = (img.clamp(0, 1) * 255).round().to(torch.uint8)
    return ImageSplit(
        images=images,
        labels=labels.to(torch.int64),
        classes=tuple(f"synthetic-{i}" for i in range(10)),
        source="SYNTHETIC stand-in (coloured stripes), NOT CIFAR-10",
        synthetic=True,
    )


def load_cifar10(
    split: str = "train",
    *,
    root: str | os.PathLike | None = None,
    download: bool = True,
    limit: int | None = None,
    allow_synthetic: bool = False,
    seed: int = 0,
) -> ImageSplit:
    """Load a CIFAR-10 split as tensors.

    Args:
        split: ``"train"`` (50,000 images) or ``"test"`` (10,000).
        root: a folder holding (or being) ``cifar-10-batches-py``; else ``$CIFAR10_DIR``, then
            ``data/``, then the download cache are searched.
        download: try torchvision's download when nothing is found on disk.
        limit: keep only the first ``limit`` images (the official order), for quick runs.
        allow_synthetic: when no real data can be had, return :func:`synthetic_cifar_like`
            instead of raising (the smoke preset only). A banner in the output says so.

    Returns:
        :class:`ImageSplit` with ``images uint8 [N, 3, 32, 32]`` and ``labels int64 [N]``.

    Raises:
        DataUnavailableError: nothing on disk, no download possible, and no synthetic fallback.
    """
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    folder = _find_batches_dir(root)
    if folder is None and download:
        try:
            folder = _download_cifar10()
        except DataUnavailableError:
            if not allow_synthetic:
                raise
    if folder is None:
        if not allow_synthetic:
            raise DataUnavailableError(
                "CIFAR-10 not found: set $CIFAR10_DIR to a folder with cifar-10-batches-py/, put "
                "that folder in data/, or allow the download."
            )
        n = limit or (5000 if split == "train" else 1000)
        data = synthetic_cifar_like(n, seed=seed + (0 if split == "train" else 1))
        banner(f"CIFAR-10 is not available offline: using a {data.source} ({n} {split} images). "
               "Numbers from this run say nothing about CIFAR-10.")
        return data
    x, y = _read_batches(folder, split)
    if limit is not None:
        x, y = x[:limit], y[:limit]
    return ImageSplit(
        images=torch.from_numpy(np.ascontiguousarray(x)),
        labels=torch.from_numpy(y),
        classes=CIFAR10_CLASSES,
        source=f"CIFAR-10 {split} from {folder}",
    )


def banner(message: str) -> None:
    """Print a message nobody can miss (used whenever a stand-in replaces the real thing)."""
    line = "!" * 78
    print(f"{line}\n!! {message}\n{line}", file=sys.stdout, flush=True)


# ----------------------------------------------------------------------------------------- text
TEXT_CORPORA = {
    "tinyshakespeare": DATA_DIR / "text" / "tinyshakespeare" / "input.txt",
    "wikitext-2-test": DATA_DIR / "text" / "wikitext-2-raw" / "wiki.test.raw",
}


def load_text(name: str) -> str:
    """Return a corpus shipped in data/text as one string (UTF-8). Names: see :data:`TEXT_CORPORA`."""
    if name not in TEXT_CORPORA:
        raise KeyError(f"unknown corpus {name!r}; the pack ships {sorted(TEXT_CORPORA)}")
    path = TEXT_CORPORA[name]
    if not path.is_file():
        raise DataUnavailableError(f"{path} is missing: the pack's data/ folder is incomplete (re-clone?)")
    return path.read_text(encoding="utf-8")


def split_text(text: str, held_out_fraction: float = 0.1) -> tuple[str, str]:
    """Split a corpus into (train, held-out) at a line boundary; the held-out part is the end."""
    cut = int(len(text) * (1 - held_out_fraction))
    cut = text.rfind("\n", 0, cut) + 1 or cut
    return text[:cut], text[cut:]


def wikitext_documents(text: str) -> list[str]:
    """Split raw WikiText into articles exactly as lm-evaluation-harness's ``wikitext`` task does
    (the ``EleutherAI/wikitext_document_level`` data set): a line whose text, with ``= =`` runs
    collapsed, reads ``= Title =`` starts a new article; lines are joined with ``"\n"``, so an
    article does not end in a newline (the last one keeps the file's final one), and blank text
    before the first heading is dropped."""
    docs, current = [], []
    for line in text.split("\n"):
        collapsed = line.replace("= = =", "===").replace("= =", "==").strip()
        if collapsed.startswith("= ") and collapsed.endswith(" ="):
            page = "\n".join(current)
            if page.strip():
                docs.append(page)
            current = []
        current.append(line)
    page = "\n".join(current)
    if page.strip():
        docs.append(page)
    return docs
