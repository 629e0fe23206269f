"""Presets: how much work a notebook does.

Every notebook has one parameters cell (tagged ``parameters``, so papermill can set it) with
``PRESET = "auto"``. The setup cell then calls::

    preset, cfg = notebook_config("taskA_simclr", PRESET)

which resolves ``PRESET`` (:func:`resolve_preset`) and picks that row of the notebook's table in
utils/notebook_presets.py (:func:`preset_config`).

Presets:

- ``smoke``: the shortest runs, on tiny or synthetic data (always labelled as such). Chosen
  automatically when ``NBGRADER_EXECUTION`` is set, so autograding runs the shortest version.
- ``cpu``: a 2-core laptop, on real data.
- ``gpu``: the lecture demo on one modern GPU.
- ``full``: the reference run (hours); only some notebooks define it.

The course repository's benchmark ``notebooks_cpu.py --preset NAME`` measures every notebook's seconds in a
preset.

``auto`` means: smoke under nbgrader, else ``$LAS_PRESET`` if set, else gpu when CUDA is
available, else cpu.

The notebooks' other switch, ``MODEL_SUITE`` (real hub models or the pack's miniature suite), is
resolved the same way by :func:`utils.lm.resolve_model_suite`; both honour :func:`autograding`.
"""

from __future__ import annotations

import os
from types import SimpleNamespace

import torch

PRESETS = ("smoke", "cpu", "gpu", "full")


def autograding() -> bool:
    """True when nbgrader executes the notebook (``NBGRADER_EXECUTION`` is set): then every
    notebook runs the smoke preset on the miniature model suite, whatever its parameters say."""
    return bool(os.environ.get("NBGRADER_EXECUTION"))


def resolve_preset(requested: str = "auto", *, verbose: bool = True) -> str:
    """Turn the parameters cell's ``PRESET`` into one of :data:`PRESETS` and (``verbose``) say why."""
    preset, why = _resolve(requested)
    if verbose:
        print(f"Preset: {preset} ({why})")
    return preset


def _why(requested: str) -> str:
    """Why ``requested`` resolves to its preset (:func:`resolve_preset`), in words."""
    return _resolve(requested)[1]


def _resolve(requested: str) -> tuple[str, str]:
    requested = (requested or "auto").strip().lower()
    if autograding():
        # Autograding must be quick and identical for every student, whatever they set.
        preset, why = "smoke", "NBGRADER_EXECUTION is set (autograding)"
    elif requested != "auto":
        if requested not in PRESETS:
            raise ValueError(f"PRESET must be 'auto' or one of {PRESETS}, got {requested!r}")
        preset, why = requested, "set in the parameters cell"
    elif os.environ.get("LAS_PRESET"):
        preset, why = os.environ["LAS_PRESET"].strip().lower(), "$LAS_PRESET"
        if preset not in PRESETS:
            raise ValueError(f"$LAS_PRESET must be one of {PRESETS}, got {preset!r}")
    elif torch.cuda.is_available():
        preset, why = "gpu", "auto: CUDA is available"
    else:
        preset, why = "cpu", "auto: no CUDA device"
    return preset, why


def preset_config(preset: str, table: dict[str, dict]) -> SimpleNamespace:
    """Pick ``table[preset]`` as an attribute namespace (``cfg.epochs`` rather than ``cfg["epochs"]``).

    A notebook that defines no ``full`` entry falls back to ``gpu`` for it. Every entry must
    have the same keys, so a preset cannot silently miss a setting.
    """
    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}; choose one of {PRESETS}")
    keys = {name: set(entry) for name, entry in table.items()}
    first = next(iter(keys.values()))
    for name, k in keys.items():
        if k != first:
            raise ValueError(f"preset {name!r} has keys {sorted(k ^ first)} that the others lack")
    if preset not in table:
        if preset == "full" and "gpu" in table:
            preset = "gpu"
        else:
            raise ValueError(f"this notebook defines no {preset!r} preset (it has {sorted(table)})")
    return SimpleNamespace(name=preset, **table[preset])


def notebook_config(notebook: str, requested: str = "auto") -> tuple[str, SimpleNamespace]:
    """``(preset, cfg)`` for a notebook's setup cell: the preset ``requested`` resolves to (printed, see
    :func:`resolve_preset`) and its settings in the notebook's table, ``utils/notebook_presets.py``'s
    ``TABLES[notebook]`` (``notebook``: the stem, e.g. ``"taskA_simclr"``), as :func:`preset_config` picks them."""
    from .notebook_presets import TABLES  # here: the tables load utils.scaling, which `import utils.presets` need not

    if notebook not in TABLES:
        raise ValueError(f"no preset table for {notebook!r} in utils/notebook_presets.py (it has {sorted(TABLES)})")
    preset = resolve_preset(requested, verbose=False)
    cfg = preset_config(preset, TABLES[notebook])
    # one line: the settings themselves (13 to 30 of them) are a print(cfg) away, not printed each run
    print(f"Preset: {preset} ({_why(requested)}; its {len(vars(cfg)) - 1} settings: print(cfg), "
          "or utils/notebook_presets.py)")
    return preset, cfg
