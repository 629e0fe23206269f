"""Plumbing for running Task A and Task B on several processes with ``torch.distributed``.

Nothing here computes a loss or evaluates a model: it starts and stops the process group that
``torchrun`` describes, gathers embeddings across processes with correct gradients, splits a list
of jobs (e.g. checkpoints) across processes and merges what each process wrote.

    info = init_from_env()                       # under torchrun: joins the process group
    z_all = all_gather_with_grad(z_local)        # [B_local, D] -> [world * B_local, D]
    mine = shard(jobs, info.rank, info.world_size)
    ...
    cleanup()

Without ``torchrun`` (no ``RANK``/``WORLD_SIZE`` in the environment) everything degrades to one
process: :func:`init_from_env` starts no process group, :func:`all_gather_with_grad` returns its
input, :func:`shard` returns every item.

Backends: ``"nccl"`` when CUDA is available (one GPU per process, ``cuda:LOCAL_RANK``), else
``"gloo"`` on the CPU. Note that ``torch.nn.SyncBatchNorm`` only runs on GPUs; on the CPU each
process's BatchNorm uses the statistics of its own share of the batch.
"""

from __future__ import annotations

import datetime
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import torch
import torch.distributed as dist

__all__ = [
    "DistInfo", "init_from_env", "cleanup", "is_distributed", "get_rank", "get_world_size",
    "get_local_rank", "is_main_process", "barrier", "all_gather_with_grad", "all_reduce_mean",
    "shard", "shard_indices", "rank_results_path", "write_results", "read_results", "merge_results",
]


# ------------------------------------------------------------------------------- process group
@dataclass(frozen=True)
class DistInfo:
    """Where this process stands: ``rank`` in ``[0, world_size)``, ``local_rank`` on its node,
    the ``device`` it should compute on, the ``backend`` of the process group (None without one)."""

    rank: int
    world_size: int
    local_rank: int
    device: torch.device
    backend: str | None

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.backend is not None


def is_distributed() -> bool:
    """True when a default process group exists (this process was started by torchrun and
    :func:`init_from_env` ran)."""
    return dist.is_available() and dist.is_initialized()


def get_rank() -> int:
    """This process's global rank (0 without a process group)."""
    return dist.get_rank() if is_distributed() else 0


def get_world_size() -> int:
    """The number of processes (1 without a process group)."""
    return dist.get_world_size() if is_distributed() else 1


def get_local_rank() -> int:
    """This process's rank on its node: ``$LOCAL_RANK`` as torchrun sets it, else 0."""
    return int(os.environ.get("LOCAL_RANK", 0))


def is_main_process() -> bool:
    """True on rank 0 (and in a single process): the one that prints, saves and merges."""
    return get_rank() == 0


def barrier() -> None:
    """``dist.barrier()`` with a process group; nothing without one."""
    if is_distributed():
        dist.barrier()


def init_from_env(backend: str | None = None, *, device: str | torch.device | None = None,
                  timeout_s: float = 1800.0) -> DistInfo:
    """Join the process group that torchrun describes in the environment.

    Reads ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK`` (and ``MASTER_ADDR``/``MASTER_PORT`` through
    ``init_method="env://"``). ``backend`` defaults to ``"nccl"`` when CUDA is available (then
    this process computes on ``cuda:LOCAL_RANK``, made the current device) and ``"gloo"`` otherwise
    (on the CPU). ``device`` overrides the device (e.g. ``"cpu"`` on a GPU machine, which then
    also picks gloo). Calling it again when the group exists only returns the info.

    Without ``RANK`` and ``WORLD_SIZE`` in the environment (a plain ``python script.py``) no
    process group is started: rank 0 of 1 on the best available device.
    """
    local_rank = get_local_rank()
    if device is not None:
        device = torch.device(device)
    if backend is None:
        wants_cuda = device.type == "cuda" if device is not None else torch.cuda.is_available()
        backend = "nccl" if wants_cuda else "gloo"
    if device is None:
        device = torch.device("cuda", local_rank) if backend == "nccl" else torch.device("cpu")
    if device.type == "cuda":
        if device.index is None:
            device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)

    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        return DistInfo(rank=0, world_size=1, local_rank=local_rank, device=device, backend=None)
    if not is_distributed():
        kwargs: dict[str, Any] = {}
        if backend == "nccl":
            kwargs["device_id"] = device  # binds the communicator to this GPU (no guessing which device a rank owns)
        dist.init_process_group(backend=backend, init_method="env://",
                                timeout=datetime.timedelta(seconds=timeout_s), **kwargs)
    return DistInfo(rank=dist.get_rank(), world_size=dist.get_world_size(), local_rank=local_rank,
                    device=device, backend=dist.get_backend())


def cleanup() -> None:
    """Leave the process group (if any). Call it once at the end of every rank's script."""
    if is_distributed():
        dist.destroy_process_group()


# ------------------------------------------------------------------------------------- gather
class _AllGatherWithGrad(torch.autograd.Function):
    """Forward: all-gather along dim 0. Backward: each rank gets the gradient of its own slice
    summed over all ranks (a reduce-scatter with SUM)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, group) -> torch.Tensor:
        ctx.group = group
        world = dist.get_world_size(group)
        x = x.contiguous()
        if dist.get_backend(group) == "nccl":
            out = x.new_empty((world * x.shape[0], *x.shape[1:]))
            dist.all_gather_into_tensor(out, x, group=group)
            return out
        parts = [torch.empty_like(x) for _ in range(world)]
        dist.all_gather(parts, x, group=group)
        return torch.cat(parts)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        group = ctx.group
        world, rank = dist.get_world_size(group), dist.get_rank(group)
        grad = grad.contiguous()
        if dist.get_backend(group) == "nccl":
            out = grad.new_empty((grad.shape[0] // world, *grad.shape[1:]))
            dist.reduce_scatter_tensor(out, grad, op=dist.ReduceOp.SUM, group=group)
            return out, None
        # gloo has no reduce-scatter: sum the whole gradient, keep this rank's rows.
        total = grad.clone()
        dist.all_reduce(total, op=dist.ReduceOp.SUM, group=group)
        return total.chunk(world)[rank].contiguous(), None


def all_gather_with_grad(x: torch.Tensor, group=None) -> torch.Tensor:
    """Concatenate every rank's ``x`` along dim 0, keeping the autograd graph.

    Args:
        x: ``[B_local, ...]`` on this rank's device; every rank must pass the same shape and dtype.
        group: a process group (default: the world).

    Returns:
        ``[world * B_local, ...]``: rank 0's rows first, then rank 1's, ...; this rank's rows are
        ``out[rank * B_local:(rank + 1) * B_local]``. Without a process group (or with one
        process) ``x`` itself is returned.

    Gradient: the backward pass sends each rank the gradient of *its own* slice *summed over all
    ranks*: ``x.grad = sum_k dL_k / d x_rank``, where ``L_k`` is the loss computed on rank k
    (a reduce-scatter; on gloo an all-reduce of the full gradient, then this rank's rows).

    Why that is the right scaling with DDP: let every rank compute the loss ``L`` averaged over the
    *global* batch (the same number on every rank, e.g. NT-Xent on the gathered embeddings). One
    process holding the whole batch would get ``dL/dtheta = sum_r (dL/dz_r) (dz_r/dtheta)``, a
    *sum* of one term per rank, but each rank can only back-propagate its own term through its
    encoder. The backward above gives rank r ``z_r.grad = W * dL/dz_r`` (W = world size: the same
    gradient from each of the W identical losses), so its parameter gradient is
    ``W * (dL/dz_r)(dz_r/dtheta)``; DDP averages parameter gradients over ranks, ``1/W * sum_r``,
    and the factors cancel: ``dL/dtheta`` exactly, as in one process. The same holds when rank r
    computes only the loss terms of its own anchors, averaged over its ``2 B_local`` anchors
    (cheaper: ``[2 B_local, 2 B]`` similarities instead of ``[2 B, 2 B]``): then ``sum_k L_k = W L``
    and again ``z_r.grad = W dL/dz_r``. So: **with DDP, the local embeddings' gradients are W times
    the single-process ones, by design; do not divide the loss by W or multiply it by W.**

    A plain ``dist.all_gather`` has no backward: the gathered rows are constants, so the rows of
    the other ranks contribute nothing to this rank's gradient (and a copy of the local rows put
    back into the gathered tensor recovers only this rank's own loss term: with DDP's average the
    parameter gradient comes out W times too small).
    """
    if not is_distributed():
        return x
    if dist.get_world_size(group) == 1:
        return x
    return _AllGatherWithGrad.apply(x, group)


@torch.no_grad()
def all_reduce_mean(x: torch.Tensor | float) -> torch.Tensor:
    """The mean over ranks of a tensor (or number), for logging, without gradient; ``x`` itself
    (as a tensor) in a single process."""
    x = torch.as_tensor(x).detach().clone()
    if not is_distributed() or get_world_size() == 1:
        return x
    if dist.get_backend() == "nccl" and x.device.type != "cuda":
        x = x.cuda()
    dist.all_reduce(x, op=dist.ReduceOp.SUM)
    return x / get_world_size()


# -------------------------------------------------------------------------- splitting the work
def _resolve(rank: int | None, world: int | None) -> tuple[int, int]:
    rank = get_rank() if rank is None else int(rank)
    world = get_world_size() if world is None else int(world)
    if world < 1 or not 0 <= rank < world:
        raise ValueError(f"need 0 <= rank < world, got rank={rank}, world={world}")
    return rank, world


def shard_indices(n: int, rank: int | None = None, world: int | None = None) -> list[int]:
    """The positions in ``range(n)`` that ``rank`` of ``world`` handles: ``rank, rank + world, ...``
    (strided, so that a list sorted by cost, e.g. checkpoints smallest model first, gives every
    rank a similar mix). Every position goes to exactly one rank; ranks get ``n // world`` or
    ``n // world + 1`` of them. ``rank``/``world`` default to the process group's."""
    rank, world = _resolve(rank, world)
    return list(range(rank, n, world))


def shard(items: Sequence | Iterable, rank: int | None = None, world: int | None = None) -> list:
    """This rank's share of ``items`` (a list of length N -> a list of about N / world items),
    deterministically: ``list(items)[rank::world]``, the same on every machine and run.

    To restore the single-process order after :func:`merge_results`, carry the position along:
    ``for index, item in shard(list(enumerate(items)), rank, world): ...`` and write it into each
    row (``merge_results(..., sort_by="index")``).
    """
    items = list(items)
    return [items[i] for i in shard_indices(len(items), rank, world)]


# ---------------------------------------------------------------------------- per-rank results
def rank_results_path(folder: str | os.PathLike, rank: int | None = None, *, prefix: str = "results",
                      suffix: str = ".json") -> Path:
    """``<folder>/<prefix>.rank<rank>.json``: where one rank writes its rows."""
    rank = get_rank() if rank is None else int(rank)
    return Path(folder) / f"{prefix}.rank{rank:05d}{suffix}"


def _json_default(value):
    if isinstance(value, torch.Tensor):
        return value.item() if value.numel() == 1 else value.tolist()
    if hasattr(value, "item"):  # NumPy scalars
        return value.item()
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, (Path, torch.device, torch.dtype)):
        return str(value)
    raise TypeError(f"cannot write {type(value).__name__} to JSON")


def _plain(value):
    """Tensors and NumPy scalars -> Python numbers (or lists); anything else unchanged."""
    if isinstance(value, torch.Tensor) or (hasattr(value, "item") and hasattr(value, "dtype")):
        return _json_default(value)
    return value


def write_results(rows: Iterable[dict], path: str | os.PathLike) -> Path:
    """Write a list of dict rows to ``path`` atomically: a temporary file in the same folder,
    then ``os.replace``, so a reader never sees half a file and a crashed rank leaves none.

    ``.json``: a JSON list (numbers, strings, tensors and NumPy scalars as numbers; NaN is
    written as ``NaN``); ``.csv``: pandas ``to_csv`` without the index. Returns the path.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = [{k: _plain(v) for k, v in dict(r).items()} for r in rows]
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        if path.suffix == ".csv":
            import pandas as pd

            pd.DataFrame(rows).to_csv(tmp, index=False)
        else:
            tmp.write_text(json.dumps(rows, default=_json_default, indent=1) + "\n", encoding="utf-8")
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    return path


def read_results(path: str | os.PathLike) -> list[dict]:
    """The rows :func:`write_results` wrote (``.json`` or ``.csv``)."""
    path = Path(path)
    if path.suffix == ".csv":
        import pandas as pd

        frame = pd.read_csv(path)
        return [{k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in r.items()}
                for r in frame.to_dict(orient="records")]
    return json.loads(path.read_text(encoding="utf-8"))


def merge_results(paths: Iterable[str | os.PathLike], *, sort_by: str | Sequence[str] | Callable | None = None,
                  as_frame: bool = False, missing: str = "raise"):
    """Concatenate the rows of several per-rank result files (written by :func:`write_results`).

    Args:
        paths: the files, e.g. ``[rank_results_path(folder, r) for r in range(world)]``.
        sort_by: a column name, a sequence of them, or a key function of a row; rows are sorted
            stably by it (e.g. ``"index"`` to get the single-process order back). None keeps the
            order of ``paths``, then of the rows in each file.
        as_frame: return a pandas DataFrame (columns in first-seen order) instead of a list.
        missing: ``"raise"`` (default: a missing file means a rank did not finish) or ``"skip"``.

    Returns:
        ``list[dict]`` with one entry per row of all files, or a DataFrame with ``as_frame``.
    """
    if missing not in ("raise", "skip"):
        raise ValueError(f"missing must be 'raise' or 'skip', got {missing!r}")
    rows: list[dict] = []
    absent = []
    for path in paths:
        path = Path(path)
        if not path.is_file():
            absent.append(str(path))
            continue
        rows.extend(read_results(path))
    if absent and missing == "raise":
        raise FileNotFoundError(f"no results from {len(absent)} file(s): {absent} (did every rank finish?)")
    if sort_by is not None:
        if callable(sort_by):
            key = sort_by
        else:
            cols = (sort_by,) if isinstance(sort_by, str) else tuple(sort_by)
            key = lambda row: tuple(row[c] for c in cols)  # noqa: E731
        rows = sorted(rows, key=key)
    if as_frame:
        import pandas as pd

        columns: dict[str, None] = {}
        for row in rows:
            columns.update(dict.fromkeys(row))
        return pd.DataFrame(rows, columns=list(columns))
    return rows
