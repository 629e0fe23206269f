"""One plotting style for the whole pack, and a helper that saves figures under build/figures/."""

from __future__ import annotations

import re
from pathlib import Path

import matplotlib

from .paths import figures_dir

_STYLE_SET = False

#: seaborn 0.13's ``set_theme(context="notebook", style="whitegrid", palette="colorblind")``, as the
#: matplotlib settings it makes, written out: importing seaborn costs about a second in every kernel and
#: every grading session, and these settings are all the pack uses of it. One difference: the default
#: colormap stays matplotlib's viridis (seaborn's "rocket" exists only once seaborn is imported; every
#: image the notebooks draw names its colormap or is RGB). The course repository's tests check this against seaborn.
SEABORN_THEME = {
    "axes.axisbelow": True, "axes.edgecolor": ".8", "axes.grid": True, "axes.labelcolor": ".15",
    "axes.labelsize": 12.0, "axes.linewidth": 1.25, "axes.titlesize": 12.0,
    "font.sans-serif": ["Arial", "DejaVu Sans", "Liberation Sans", "Bitstream Vera Sans", "sans-serif"],
    "font.size": 12.0, "grid.color": ".8", "grid.linewidth": 1.0, "legend.fontsize": 11.0,
    "legend.title_fontsize": 12.0, "lines.solid_capstyle": "round", "patch.edgecolor": "w",
    "patch.force_edgecolor": True, "text.color": ".15",
    "xtick.bottom": False, "xtick.color": ".15", "xtick.labelsize": 11.0, "xtick.major.size": 6.0,
    "xtick.major.width": 1.25, "xtick.minor.size": 4.0, "xtick.minor.width": 1.0,
    "ytick.color": ".15", "ytick.labelsize": 11.0, "ytick.left": False, "ytick.major.size": 6.0,
    "ytick.major.width": 1.25, "ytick.minor.size": 4.0, "ytick.minor.width": 1.0,
}
#: seaborn's "colorblind" palette, the colour cycle C0..C9
COLORBLIND = ("#0173b2", "#de8f05", "#029e73", "#d55e00", "#cc78bc", "#ca9161", "#fbafe4", "#949494", "#ece133",
              "#56b4e9")

#: the pack's own settings, on top of the theme
PACK_SETTINGS = {"figure.figsize": (6.4, 4.0), "figure.dpi": 110, "savefig.dpi": 150, "savefig.bbox": "tight",
                 "axes.titleweight": "bold"}


def set_style() -> None:
    """Apply the pack's theme (seaborn's whitegrid look and colorblind palette, without importing seaborn)
    and crisp inline figures (idempotent; call from setup cells)."""
    global _STYLE_SET
    from cycler import cycler

    matplotlib.rcParams.update(SEABORN_THEME)
    matplotlib.rcParams["axes.prop_cycle"] = cycler(color=[matplotlib.colors.to_rgb(c) for c in COLORBLIND])
    matplotlib.rcParams.update(PACK_SETTINGS)
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
