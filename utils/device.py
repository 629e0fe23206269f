"""Device selection and seeding."""

from __future__ import annotations

import os
import random

import numpy as np
import torch


def get_device(prefer: str | None = None) -> torch.device:
    """Return the best available device: ``cuda``, then Apple ``mps``, then ``cpu``.

    ``prefer`` (or ``$LAS_DEVICE``) forces one, e.g. ``"cpu"`` to reproduce a CI run on a GPU laptop.
    """
    prefer = prefer or os.environ.get("LAS_DEVICE")
    if prefer:
        return torch.device(prefer)
    if torch.cuda.is_available():
        return torch.device("cuda")
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def seed_everything(seed: int) -> torch.Generator:
    """Seed Python, NumPy and PyTorch (all devices) and return a CPU ``torch.Generator`` seeded
    the same way, for code that wants its own stream of random numbers.

    Seeded runs give the same numbers on the same machine; GPU kernels may still differ in the
    last bits between machines.
    """
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(seed)
    return torch.Generator().manual_seed(seed)


def describe_device(device: torch.device) -> str:
    """One line naming the device and the thread count, printed by every setup cell."""
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        return f"cuda ({name})"
    if device.type == "mps":
        return "mps (Apple GPU)"
    return f"cpu ({torch.get_num_threads()} threads)"
