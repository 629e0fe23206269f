"""One plotting style for the whole pack, and a helper that saves figures under build/figures/."""

from __future__ import annotations

import re
from pathlib import Path

import matplotlib

from .paths import figures_dir

_STYLE_SET = False


def set_style() -> None:
    """Apply the pack's seaborn theme and crisp inline figures (idempotent; call from setup cells)."""
    global _STYLE_SET
    import seaborn as sns

    sns.set_theme(context="notebook", style="whitegrid", palette="colorblind")
    matplotlib.rcParams.update(
        {
            "figure.figsize": (6.4, 4.0),
            "figure.dpi": 110,
            "savefig.dpi": 150,
            "savefig.bbox": "tight",
            "axes.titleweight": "bold",
        }
    )
    try:  # Crisp figures in Jupyter; harmless outside IPython.
        from IPython import get_ipython

        ip = get_ipython()
        if ip is not None:
            from matplotlib_inline.backend_inline import set_matplotlib_formats

            set_matplotlib_formats("retina")
    except Exception:
        pass
    _STYLE_SET = True


def save_figure(fig, name: str) -> Path:
    """Save ``fig`` as ``build/figures/<name>.png`` and return the path.

    ``name`` should say what the figure shows, e.g. ``"task1_infonce_bound"``.
    """
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
        raise ValueError(f"figure name {name!r}: use letters, digits, '_', '-' and '.' only")
    path = figures_dir() / f"{name}.png"
    fig.savefig(path)
    return path
