"""Task A at scale: SimCLR trained with DistributedDataParallel on several processes (staff script).

One process per GPU (NCCL), or several CPU processes (gloo):

    torchrun --standalone --nproc_per_node 2 benchmarks/simclr_ddp.py --preset smoke      # seconds, synthetic data
    torchrun --standalone --nproc_per_node 2 benchmarks/simclr_ddp.py --preset cpu --cifar DIR
    torchrun --standalone --nproc_per_node 8 benchmarks/simclr_ddp.py --preset gpu --cifar DIR --sync-bn --resume

Several nodes: run the same command on every node (HOST = the first node's address, reachable
from all of them; any free port; the same --rdzv_id on every node):

    torchrun --nnodes 2 --nproc_per_node 8 --rdzv_backend c10d --rdzv_endpoint HOST:29500 \\
        --rdzv_id simclr-ddp benchmarks/simclr_ddp.py --preset gpu --cifar DIR --sync-bn --resume

(``python benchmarks/simclr_ddp.py ...`` without torchrun runs one process, no process group.)

What one step does, on every rank r of W:

1. the epoch's permutation of the training set depends only on (seed, epoch), so every rank
   draws the same global batch of ``batch_size`` images and takes its slice ``r`` of
   ``batch_size / W`` images (the global batch is fixed: W only splits it);
2. two augmented views of each local image (the notebook's ``augment_batch``, one random
   generator per rank), encoder + projection head in ONE forward pass of the DDP-wrapped model;
3. :func:`nt_xent_distributed`: the projections of all ranks are gathered with
   :func:`utils.distributed.all_gather_with_grad`; each rank scores its own ``2 B / W`` anchors
   against all ``2 B`` views (positive = the other view of the same image, 2B - 2 negatives,
   self-similarity masked); the gradient is exactly that of one process holding the whole batch
   (see the docstring of ``all_gather_with_grad``: the gather's backward sums over ranks, DDP
   averages, the factors W cancel);
4. DDP averages the parameter gradients; SGD with momentum, warm-up + cosine schedule.

BatchNorm: without ``--sync-bn`` every rank normalises with the statistics of its own ``2 B / W``
views (SimCLR's paper uses global BN: ``--sync-bn``, which ``torch.nn.SyncBatchNorm`` supports on
GPUs only; on the CPU the flag is ignored with a warning).

Checkpoints: rank 0 writes one per epoch to ``build/cache/simclr/simclr-ddp-<config hash>.pt``
(model, optimizer, scheduler, history and every rank's augmentation generator); ``--resume``
continues from it (rank 0 reads it and broadcasts it, so nodes need no shared file system). The
world size is not part of the config: a run may resume on another number of processes (the
augmentation streams are then re-seeded).

Data: ``--cifar DIR`` (a folder holding cifar-10-batches-py) or ``$CIFAR10_DIR``; ``smoke``
(or ``--synthetic``) uses the pack's SYNTHETIC CIFAR-shaped stand-in, announced in a banner.
The loss lives here and NOT in utils/: ``nt_xent_loss`` is a graded answer of the notebook.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from utils import distributed as du  # noqa: E402
from utils import vision  # noqa: E402
from utils.data import banner, load_cifar10, synthetic_cifar_like  # noqa: E402

# The notebook's presets (solutions/ex01/taskA_simclr.ipynb); batch_size is the GLOBAL batch.
PRESETS = {
    "smoke": dict(encoder="tiny_cnn", n_train=384, n_test=256, epochs=2, batch_size=64, lr=0.15,
                  temperature=0.5, autocast=None, channels_last=False, knn_k=20, knn_bank=384,
                  knn_queries=256, threads=1),
    "cpu": dict(encoder="small_cnn", n_train=20_000, n_test=10_000, epochs=8, batch_size=256, lr=0.3,
                temperature=0.5, autocast=None, channels_last=False, knn_k=20, knn_bank=5_000,
                knn_queries=1_000, threads=None),
    "gpu": dict(encoder="resnet18", n_train=50_000, n_test=10_000, epochs=50, batch_size=512, lr=0.12,
                temperature=0.5, autocast="bfloat16", channels_last=True, knn_k=20, knn_bank=10_000,
                knn_queries=2_000, threads=None),
}


# ------------------------------------------------------------------------------------- the loss
def nt_xent_distributed(z1: torch.Tensor, z2: torch.Tensor, temperature: float = 0.5, *,
                        anchors: str = "local") -> torch.Tensor:
    """NT-Xent over the views of ALL ranks, from this rank's projections.

    Args:
        z1, z2: float ``[B_local, d]``: this rank's projections of view 1 and view 2 (row i of z1
            and row i of z2 are the two views of local image i). Every rank passes the same shape.
        temperature: tau > 0; logits are cosine similarities divided by tau.
        anchors: ``"local"`` (default): score this rank's ``2 B_local`` views as anchors against
            all ``2 B = 2 W B_local`` gathered views (``[2 B_local, 2 B]`` logits), mean over the
            local anchors; ``"all"``: every rank scores all ``2 B`` anchors (``[2 B, 2 B]``), so
            every rank returns the global loss itself.

    Returns:
        0-dim float tensor: the mean over the chosen anchors of
        ``-log(exp(s(i, p(i)) / tau) / sum_{k != i} exp(s(i, k) / tau))``, with p(i) the other view
        of the same image and 2B - 2 negatives per anchor. With ``"local"`` the mean over ranks of
        the returned values is the global-batch loss (:func:`utils.distributed.all_reduce_mean`
        for logging). In one process both modes equal the single-batch NT-Xent of the notebook
        (``nt_xent_loss(z1, z2, tau)``).

    Gradients: either mode, combined with DDP's averaging, gives the parameter gradients of one
    process computing NT-Xent on the concatenated batch (each rank's ``z1.grad`` is W times
    the single-process gradient of its rows; DDP's 1 / W average cancels it).
    """
    if z1.dim() != 2 or z1.shape != z2.shape:
        raise ValueError(f"z1 and z2 must both be [B_local, d], got {tuple(z1.shape)} and {tuple(z2.shape)}")
    if not temperature > 0:
        raise ValueError(f"temperature must be positive, got {temperature}")
    if anchors not in ("local", "all"):
        raise ValueError(f"anchors must be 'local' or 'all', got {anchors!r}")
    b = z1.shape[0]
    rank = du.get_rank()
    local = F.normalize(torch.cat([z1, z2]), dim=1)           # [2b, d]: this rank's views
    views = du.all_gather_with_grad(local)                      # [W * 2b, d]: rank k's block at k * 2b
    n_views = views.shape[0]
    block = torch.arange(n_views, device=local.device)
    partner = block // (2 * b) * (2 * b) + (block % (2 * b) + b) % (2 * b)  # other view, same rank block
    if anchors == "local":
        rows = local
        index = rank * 2 * b + torch.arange(2 * b, device=local.device)   # the anchors' own columns
    else:
        rows, index = views, block
    logits = rows @ views.T / temperature                                   # [R, W * 2b]
    logits = logits.masked_fill(F.one_hot(index, n_views).bool(), float("-inf"))
    return F.cross_entropy(logits, partner[index])


# ------------------------------------------------------------------------------------ the model
class SimCLRModel(nn.Module):
    """Encoder + projection head as one module (one DDP wrapper, one forward per step):
    ``float [N, 3, H, W] -> [N, out_dim]``."""

    def __init__(self, encoder: nn.Module, head: nn.Module):
        super().__init__()
        self.encoder, self.head = encoder, head

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(x))


def notebook_parts() -> dict:
    """``augment_batch``, ``ProjectionHead`` and ``knn_accuracy`` of the model solution
    (TA-side: read from solutions/ex01/taskA_simclr.ipynb)."""
    from grader.checks.taskA_simclr import solution_namespace

    return solution_namespace()


def build_model(encoder_name: str, head_cls, device: torch.device, *, channels_last: bool = False,
                sync_bn: bool = False, seed: int = 0) -> SimCLRModel:
    """The notebook's encoder and projection head (hidden 2 x feature_dim, output 128), the same
    initial weights on every rank (DDP also broadcasts rank 0's on wrapping)."""
    torch.manual_seed(seed)
    encoder = vision.make_encoder(encoder_name, device=device, channels_last=channels_last)
    head = head_cls(encoder.feature_dim, 2 * encoder.feature_dim, 128).to(device)
    model = SimCLRModel(encoder, head)
    if sync_bn:
        model = nn.SyncBatchNorm.convert_sync_batchnorm(model)
    return model


def wrap_ddp(model: nn.Module, info: du.DistInfo) -> nn.Module:
    """DDP around ``model`` when there is a process group, else ``model`` itself."""
    if not info.distributed:
        return model
    from torch.nn.parallel import DistributedDataParallel as DDP

    ids = [info.device.index] if info.device.type == "cuda" else None
    return DDP(model, device_ids=ids)


def ddp_train_step(model: nn.Module, optimizer: torch.optim.Optimizer, images: torch.Tensor, *, augment,
                   generator: torch.Generator | None = None, temperature: float = 0.5,
                   autocast_dtype: torch.dtype | None = None, anchors: str = "local") -> torch.Tensor:
    """One SimCLR step on this rank's ``images`` (``uint8 or float [B_local, 3, H, W]``).

    ``augment(images, generator) -> float [B_local, 3, h, w]`` draws one view. Returns this rank's
    loss before the step (detached 0-dim float32; its mean over ranks is the global loss).
    """
    views = torch.cat([augment(images, generator), augment(images, generator)])
    with vision.autocast_context(views.device, autocast_dtype):
        z = model(views)
    z1, z2 = z.float().chunk(2)
    loss = nt_xent_distributed(z1, z2, temperature, anchors=anchors)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    return loss.detach()


def local_batch_indices(order: torch.Tensor, step: int, batch_size: int, rank: int, world: int) -> torch.Tensor:
    """Rank ``rank``'s slice of global batch ``step`` of the permutation ``order``:
    ``[batch_size / world]`` positions. Ranks' slices concatenated in rank order = the global batch."""
    if batch_size % world:
        raise ValueError(f"the global batch size {batch_size} must be divisible by the world size {world}")
    local = batch_size // world
    start = step * batch_size + rank * local
    return order[start:start + local]


def make_optimizer(model: nn.Module, lr: float) -> torch.optim.Optimizer:
    return torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9, weight_decay=5e-4)


# ----------------------------------------------------------------------------------------- data
def load_data(preset: str, cfg: dict, *, cifar: str | None, synthetic: bool, seed: int, verbose: bool):
    """(train ImageSplit, test ImageSplit). smoke without --cifar, or --synthetic: the synthetic
    stand-in (one draw split in two, as in the notebook), announced loudly."""
    if synthetic or (preset == "smoke" and not cifar):
        full = synthetic_cifar_like(cfg["n_train"] + cfg["n_test"], seed=seed)
        train, test = copy.copy(full), copy.copy(full)
        train.images, train.labels = full.images[:cfg["n_train"]], full.labels[:cfg["n_train"]]
        test.images, test.labels = full.images[cfg["n_train"]:], full.labels[cfg["n_train"]:]
        if verbose:
            banner(f"{full.source}: this run trains on SYNTHETIC images. Its losses and accuracies say "
                   "nothing about CIFAR-10 (pass --cifar DIR for real data).")
        return train, test
    train = load_cifar10("train", root=cifar, limit=cfg["n_train"])
    test = load_cifar10("test", root=cifar, limit=cfg["n_test"])
    return train, test


# ------------------------------------------------------------------------------------- training
def _gather_generator_states(generator: torch.Generator, info: du.DistInfo) -> list:
    state = generator.get_state()
    if not info.distributed:
        return [state]
    states = [None] * info.world_size
    dist.all_gather_object(states, state)
    return states


def _broadcast_state(state, info: du.DistInfo):
    if not info.distributed:
        return state
    box = [state]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def train(args, info: du.DistInfo) -> dict:
    cfg = dict(PRESETS[args.preset])
    for key in ("epochs", "batch_size", "lr", "n_train"):
        if getattr(args, key) is not None:
            cfg[key] = getattr(args, key)
    threads = args.threads or cfg["threads"]
    if threads:
        torch.set_num_threads(threads)
    main = info.is_main
    device = info.device
    sync_bn = bool(args.sync_bn)
    if sync_bn and device.type != "cuda":
        if main:
            banner("--sync-bn ignored: torch.nn.SyncBatchNorm runs on GPUs only; on the CPU every rank's "
                   "BatchNorm uses its own share of the batch.")
        sync_bn = False
    autocast_dtype = getattr(torch, cfg["autocast"]) if cfg["autocast"] and device.type == "cuda" else None
    channels_last = cfg["channels_last"] and device.type == "cuda"
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = True
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True

    parts = notebook_parts()
    train_set, test_set = load_data(args.preset, cfg, cifar=args.cifar, synthetic=args.synthetic,
                                    seed=args.seed, verbose=main)
    images = train_set.images.to(device)
    world, rank, batch = info.world_size, info.rank, cfg["batch_size"]
    steps_per_epoch = len(images) // batch
    if steps_per_epoch == 0:
        raise ValueError(f"global batch {batch} is larger than the {len(images)} training images")
    if batch % world:
        raise ValueError(f"the global batch size {batch} must be divisible by the world size {world}")

    config = dict(preset=args.preset, source=train_set.source, n=len(images), encoder=cfg["encoder"],
                  epochs=cfg["epochs"], batch_size=batch, temperature=cfg["temperature"], lr=cfg["lr"],
                  sync_bn=sync_bn, seed=args.seed, autocast=str(autocast_dtype))
    ckpt_path = vision.checkpoint_path("simclr-ddp", config)

    model = build_model(cfg["encoder"], parts["ProjectionHead"], device, channels_last=channels_last,
                        sync_bn=sync_bn, seed=args.seed)
    optimizer = make_optimizer(model, cfg["lr"])
    warmup = max(1, steps_per_epoch)  # one epoch of warm-up, as utils.vision.train_loop
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, vision.warmup_cosine(cfg["epochs"] * steps_per_epoch, warmup))
    generator = torch.Generator(device=device).manual_seed(args.seed * 1_000_003 + rank)
    history = {"loss": [], "epoch_loss": [], "epoch_seconds": [], "images_per_s": [], "resumed_from": None}
    start_epoch = 0

    if args.resume:
        state = vision.load_checkpoint(ckpt_path) if main else None
        if state is not None and state.get("config") != config:
            state = None
        state = _broadcast_state(state, info)
        if state is not None:
            model.load_state_dict(state["model"])
            optimizer.load_state_dict(state["optimizer"])
            scheduler.load_state_dict(state["scheduler"])
            history = state["history"]
            rngs = state.get("rng") or []
            if len(rngs) == world:
                generator.set_state(rngs[rank])
            elif main:
                print(f"checkpoint written by {len(rngs)} process(es), resuming on {world}: augmentation streams re-seeded")
            start_epoch = history["resumed_from"] = state["epoch"]
            if main:
                print(f"resumed from {ckpt_path} at epoch {start_epoch}/{cfg['epochs']}")
    ddp_model = wrap_ddp(model, info)

    crop = lambda x, g: parts["augment_batch"](x, g)  # noqa: E731
    if main:
        print(f"world {world} ({info.backend or 'no process group'}), device {device}, threads "
              f"{torch.get_num_threads()} | {cfg['encoder']}, global batch {batch} = {world} x {batch // world}, "
              f"{steps_per_epoch} steps/epoch, sync-BN {sync_bn}, autocast {autocast_dtype}")
        print(f"data: {train_set.source} ({len(images)} images)")
    max_steps = args.max_steps
    done_steps = 0
    model.train()
    for epoch in range(start_epoch, cfg["epochs"]):
        order = torch.randperm(len(images), generator=torch.Generator().manual_seed(args.seed * 100_003 + epoch))
        order = order.to(device)
        du.barrier()
        start, losses = time.perf_counter(), []
        steps = steps_per_epoch if max_steps is None else min(steps_per_epoch, max_steps - done_steps)
        for step in range(steps):
            idx = local_batch_indices(order, step, batch, rank, world)
            losses.append(ddp_train_step(ddp_model, optimizer, images[idx], augment=crop, generator=generator,
                                         temperature=cfg["temperature"], autocast_dtype=autocast_dtype))
            scheduler.step()
        done_steps += steps
        step_losses = du.all_reduce_mean(torch.stack(losses).float()).cpu().tolist() if losses else []
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        du.barrier()
        seconds = time.perf_counter() - start
        history["loss"] += step_losses
        history["epoch_loss"].append(sum(step_losses) / max(1, len(step_losses)))
        history["epoch_seconds"].append(seconds)
        history["images_per_s"].append(steps * batch / seconds)
        if not all(math.isfinite(v) for v in step_losses):
            raise FloatingPointError(f"non-finite loss in epoch {epoch + 1}")
        if main:
            print(f"epoch {epoch + 1}/{cfg['epochs']}: loss {history['epoch_loss'][-1]:.4f} | {seconds:.1f} s | "
                  f"{history['images_per_s'][-1]:,.0f} images/s", flush=True)
        partial = steps < steps_per_epoch
        rngs = _gather_generator_states(generator, info)
        if main and not args.no_checkpoint and not partial:
            vision.save_checkpoint(ckpt_path, config=config, epoch=epoch + 1, history=history,
                                   model=model.state_dict(), optimizer=optimizer.state_dict(),
                                   scheduler=scheduler.state_dict(), rng=rngs, world_size=world)
        if partial or (args.stop_after is not None and epoch + 1 - start_epoch >= args.stop_after):
            break

    summary = {"config": config, "world_size": world, "backend": info.backend, "device": str(device),
               "threads": torch.get_num_threads(), "synthetic": bool(train_set.synthetic), "data": train_set.source,
               "history": history, "checkpoint": None if args.no_checkpoint else str(ckpt_path)}
    if main and args.knn:
        model.eval()
        bank = vision.extract_features(model.encoder, images[:cfg["knn_bank"]], autocast_dtype=autocast_dtype)
        test_images = test_set.images[:cfg["knn_queries"]].to(device)
        queries = vision.extract_features(model.encoder, test_images, autocast_dtype=autocast_dtype)
        summary["knn"] = parts["knn_accuracy"](bank.to(device), train_set.labels[:cfg["knn_bank"]].to(device),
                                               queries.to(device), test_set.labels[:cfg["knn_queries"]],
                                               k=cfg["knn_k"])
        what = "SYNTHETIC stand-in" if train_set.synthetic else "CIFAR-10"
        print(f"kNN accuracy (k={cfg['knn_k']}, {what}): {100 * summary['knn']:.1f} %")
    return summary


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", choices=sorted(PRESETS), default="smoke")
    parser.add_argument("--cifar", default=os.environ.get("CIFAR10_DIR"), help="folder holding cifar-10-batches-py")
    parser.add_argument("--synthetic", action="store_true", help="train on the SYNTHETIC stand-in (any preset)")
    parser.add_argument("--sync-bn", action="store_true", help="SyncBatchNorm across ranks (GPUs only)")
    parser.add_argument("--resume", action="store_true", help="continue from this config's checkpoint")
    parser.add_argument("--no-checkpoint", action="store_true", help="write no checkpoint")
    parser.add_argument("--epochs", type=int)
    parser.add_argument("--batch-size", type=int, help="GLOBAL batch size (split across ranks)")
    parser.add_argument("--lr", type=float)
    parser.add_argument("--n-train", type=int)
    parser.add_argument("--max-steps", type=int, help="stop after this many steps (no checkpoint of a partial epoch)")
    parser.add_argument("--stop-after", type=int, metavar="EPOCHS",
                        help="leave after this many epochs of this run, as if pre-empted (to try --resume)")
    parser.add_argument("--threads", type=int, help="torch threads per process")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--knn", action="store_true", help="kNN accuracy of the encoder at the end (rank 0)")
    parser.add_argument("--out", help="write the summary JSON here (rank 0)")
    args = parser.parse_args(argv)

    info = du.init_from_env()
    try:
        summary = train(args, info)
        if info.is_main and args.out:
            out = Path(args.out)
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps(summary, indent=2, default=str) + "\n", encoding="utf-8")
            print(f"wrote {out}")
    finally:
        du.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
