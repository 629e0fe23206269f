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


def running_mean(values, window: int):
    """Trailing running mean of a 1-D sequence (length n -> n; the first entries average what exists so far)."""
    import numpy as np

    v = np.asarray(values, dtype=float)
    window = max(1, min(int(window), len(v)))
    c = np.cumsum(np.insert(v, 0, 0.0))
    counts = np.minimum(np.arange(1, len(v) + 1), window)
    return (c[1:] - c[np.arange(1, len(v) + 1) - counts]) / counts


def plot_bound_over_training(bounds: dict, true_mi: float, *, window: int = 20):
    """The InfoNCE bound log(K+1) - L of a critic over its training steps, one curve per K.

    ``bounds`` maps K (int) to the per-step bounds (a sequence of floats, nats); each curve is drawn
    raw (faint) and as a trailing running mean over ``window`` steps, with its ceiling log(K+1) dashed in
    the same colour; ``true_mi`` (nats) is the black line every curve must stay below in expectation.
    Returns the figure.
    """
    import math

    import matplotlib.pyplot as plt
    import numpy as np

    fig, ax = plt.subplots(figsize=(7.0, 4.4))
    colors = [f"C{j}" for j in range(10)]
    for i, (k, values) in enumerate(sorted(bounds.items())):
        steps = np.arange(1, len(values) + 1)
        color = colors[i % len(colors)]
        ax.plot(steps, values, color=color, alpha=0.25, lw=0.8)
        ax.plot(steps, running_mean(values, window), color=color, lw=2,
                label=f"$K = {k}$: bound (running mean over {window} steps)")
        ax.axhline(math.log(k + 1), color=color, ls="--", lw=1.2, label=f"$K = {k}$: ceiling $\\log(K+1)$ = {math.log(k + 1):.2f}")
    ax.axhline(true_mi, color="black", lw=2.5, label=f"true $I(X;Y)$ = {true_mi:.2f} nats")
    ax.set_xlabel("training step (count)")
    ax.set_ylabel(r"$\log(K+1) - \mathcal{L}_{\mathrm{InfoNCE}}$ (nats)")
    ax.set_title("A learned critic's InfoNCE bound during training")
    ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize=8)
    return fig
