"""Where things live. Every other module asks here rather than guessing from the working directory,
so a notebook, a test and the grading kernel find the same folders from anywhere."""

from __future__ import annotations

import os
from pathlib import Path

#: The repository root (the folder holding README.md, data/, utils/).
REPO_ROOT = Path(__file__).resolve().parents[1]

#: Data shipped with the pack (texts, tokenizer) and the documented place for CIFAR-10.
DATA_DIR = REPO_ROOT / "data"


def build_dir() -> Path:
    """Folder for everything the pack generates (executed notebooks, figures, models, benchmarks).

    ``$LAS_BUILD_DIR`` overrides the default ``<repo>/build``. The folder is created on demand.
    """
    path = Path(os.environ.get("LAS_BUILD_DIR", REPO_ROOT / "build"))
    path.mkdir(parents=True, exist_ok=True)
    return path


def figures_dir() -> Path:
    """``build/figures/``, created on demand."""
    path = build_dir() / "figures"
    path.mkdir(parents=True, exist_ok=True)
    return path


def cache_dir(name: str) -> Path:
    """``build/cache/<name>/`` for trained models, checkpoints and results caches."""
    path = build_dir() / "cache" / name
    path.mkdir(parents=True, exist_ok=True)
    return path
