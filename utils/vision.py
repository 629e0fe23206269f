"""Plumbing for Task A (SimCLR on CIFAR-10): the setup cell's device and data, encoders, feature
extraction, the training loop with checkpoint/resume, alignment/uniformity, t-SNE, the results file and
the task's plots.

Students implement the ideas in the notebook (NT-Xent, projection head, one training step, linear
probe, kNN; the fast batched augmentation in the extension); everything here only moves tensors
around them. The core's augmentation is given here: :func:`simclr_augment`, torchvision applied
image by image (simple and slow; the notebook's extension makes it fast). (The
supervised baseline's training step is given in the notebook itself, after the students' own
``simclr_train_step``.)

Writes to ``build/cache/simclr/`` (checkpoints, results) never fail a notebook: the grading
sandbox mounts ``build/cache`` read-only, so an unwritable cache is reported in one printed line
and the run goes on without saving.

Conventions: images are ``uint8 [N, 3, H, W]`` (as :func:`utils.data.load_cifar10` returns them)
or ``float [N, 3, H, W]`` in ``[0, 1]``; every encoder built here takes ``float`` images in
``[0, 1]`` and normalises them itself, so augmentations never need to know the channel statistics.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import time
from contextlib import nullcontext, suppress
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from torch import nn
import torch.nn.functional as F

from .data import banner, load_cifar10, synthetic_cifar_like
from .device import get_device
from .paths import DATA_DIR, REPO_ROOT, cache_dir

CIFAR10_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR10_STD = (0.2470, 0.2435, 0.2616)


# ------------------------------------------------------------------------------------- encoders
class Normalize(nn.Module):
    """``float [N, 3, H, W]`` in [0, 1] -> standardised with fixed per-channel mean and std."""

    def __init__(self, mean=CIFAR10_MEAN, std=CIFAR10_STD):
        super().__init__()
        self.register_buffer("mean", torch.tensor(mean).view(1, -1, 1, 1))
        self.register_buffer("std", torch.tensor(std).view(1, -1, 1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x - self.mean.to(x.dtype)) / self.std.to(x.dtype)


def _conv_bn_relu(c_in: int, c_out: int, stride: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False), nn.BatchNorm2d(c_out), nn.ReLU(inplace=True)
    )


def small_cnn(widths: tuple[int, ...] = (32, 64, 128, 256)) -> nn.Sequential:
    """A four-layer CNN for the CPU presets: ``[N, 3, H, W] -> [N, widths[-1]]``.

    A 3x3 stride-1 convolution, then one stride-2 3x3 convolution per further width, each with
    BatchNorm and ReLU, and global average pooling. About 0.4 M parameters with the defaults;
    one 32x32 image costs about 15 M multiply-adds (ResNet-18 with the CIFAR stem: 560 M).
    """
    layers = [Normalize(), _conv_bn_relu(3, widths[0], 1)]
    layers += [_conv_bn_relu(a, b, 2) for a, b in zip(widths[:-1], widths[1:])]
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten()]
    net = nn.Sequential(*layers)
    net.feature_dim = widths[-1]
    return net


def resnet18_cifar() -> nn.Sequential:
    """torchvision's ResNet-18 with the CIFAR stem: ``[N, 3, 32, 32] -> [N, 512]``.

    The stem is a 3x3 stride-1 convolution without max-pooling (the ImageNet stem, 7x7 stride 2
    plus max-pool, shrinks a 32x32 image to 8x8 before the first block and costs 5 to 15 points
    of accuracy); the classifier is removed.
    """
    from torchvision.models import resnet18

    net = resnet18(weights=None)
    net.conv1 = nn.Conv2d(3, 64, kernel_size=3, stride=1, padding=1, bias=False)
    net.maxpool = nn.Identity()
    net.fc = nn.Identity()
    model = nn.Sequential(Normalize(), net)
    model.feature_dim = 512
    return model


ENCODERS = {
    "tiny_cnn": lambda: small_cnn((16, 32, 64, 128)),  # the smoke preset's encoder
    "small_cnn": small_cnn,                              # cpu preset
    "resnet18": resnet18_cifar,                          # gpu and full presets
}


def make_encoder(name: str, *, device: torch.device | str = "cpu", channels_last: bool = False) -> nn.Module:
    """Build one of :data:`ENCODERS` on ``device`` (optionally in channels-last memory format,
    which lets tensor-core convolutions skip layout conversions on a GPU)."""
    if name not in ENCODERS:
        raise ValueError(f"unknown encoder {name!r}; choose one of {sorted(ENCODERS)}")
    model = ENCODERS[name]().to(device)
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
    return model


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def autocast_context(device: torch.device, dtype: torch.dtype | None):
    """``torch.autocast`` for ``device`` when ``dtype`` is given, else a no-op context."""
    if dtype is None:
        return nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)


def training_device(cfg) -> tuple[torch.device, torch.dtype | None]:
    """``(device, autocast_dtype)`` for Task A's preset ``cfg`` (its ``name``, ``threads`` and ``autocast``):
    the best device (:func:`utils.device.get_device`), ``cfg.threads`` CPU threads when set, and on CUDA
    cuDNN autotuning (fixed input shapes) and TF32 matmuls; ``autocast_dtype`` is ``cfg.autocast`` as a
    torch dtype on CUDA, else None. Warns in a banner when a GPU preset runs without CUDA."""
    device = get_device()
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    if cfg.name in ("gpu", "full") and device.type != "cuda":
        banner(f"The {cfg.name} preset is meant for a CUDA GPU but runs on {device}: expect hours.")
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = True  # fixed input shapes: let cuDNN pick the fastest kernels
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    return device, (getattr(torch, cfg.autocast) if cfg.autocast and device.type == "cuda" else None)


def simclr_datasets(cfg, seed: int):
    """``(train_set, test_set)`` (:class:`utils.data.ImageSplit`, ``cfg.n_train`` and ``cfg.n_test``
    images) for Task A's preset ``cfg``: CIFAR-10 (:func:`utils.data.load_cifar10`), or in the smoke
    preset a synthetic stand-in, said in its one loud line. Synthetic on purpose: autograding must not depend on
    a 170 MB download. One draw of ``seed`` split in two, so that train and test share the classes'
    colours and stripe angles. Prints one line naming both splits."""
    if cfg.name == "smoke":
        both = synthetic_cifar_like(cfg.n_train + cfg.n_test, seed=seed)
        train_set = dataclasses.replace(both, images=both.images[:cfg.n_train], labels=both.labels[:cfg.n_train])
        test_set = dataclasses.replace(both, images=both.images[cfg.n_train:], labels=both.labels[cfg.n_train:])
        # the setup cell's one data line is the banner here (the setup cell prints at most 3 lines)
        print(f"!! Data: {train_set.source} ({len(train_set)} train, {len(test_set)} test images), the smoke "
              "preset's stand-in: accuracies below say nothing about CIFAR-10 !!")
        return train_set, test_set
    train_set = load_cifar10("train", limit=cfg.n_train)
    test_set = load_cifar10("test", limit=cfg.n_test)
    print(f"Data: {train_set.source} ({len(train_set)} images); {test_set.source} ({len(test_set)} images)")
    return train_set, test_set


def on_device(device: torch.device, *splits) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``(images, labels)`` of each split on ``device``, images kept ``uint8`` (150 MB for the whole of
    CIFAR-10): batches are then sliced and augmented there, so no data-loader worker starves the GPU."""
    return [(split.images.to(device), split.labels.to(device)) for split in splits]


def to_float_images(images: torch.Tensor) -> torch.Tensor:
    """``uint8 [N, 3, H, W]`` -> ``float32`` in [0, 1]; float input is returned as float32."""
    if images.dtype == torch.uint8:
        return images.float().div_(255)
    return images.float()


# ------------------------------------------------------------------------- the given augmentation
SIMCLR_JITTER = (0.4, 0.4, 0.4, 0.1)  # brightness, contrast, saturation, hue (dkobak/simclr-cifar10)


def simclr_pipeline(size: int = 32, *, crop: bool = True, colour: bool = True, scale=(0.2, 1.0)):
    """torchvision.transforms.v2 pipeline for ONE image ``float [3, H, W] -> float [3, size, size]``.

    ``crop``: random resized crop (area fraction in ``scale``) + horizontal flip with p = 0.5; without
    it the whole image is resized to ``size`` (a no-op when the side already is ``size``).
    ``colour``: colour jitter :data:`SIMCLR_JITTER` with p = 0.8, then grayscale with p = 0.2.
    """
    from torchvision.transforms import v2

    steps = []
    if crop:
        steps.append(v2.RandomResizedCrop(size, scale=scale, antialias=True))
        steps.append(v2.RandomHorizontalFlip(p=0.5))
    else:
        steps.append(v2.Resize([size, size], antialias=True))
    if colour:
        steps.append(v2.RandomApply([v2.ColorJitter(*SIMCLR_JITTER)], p=0.8))
        steps.append(v2.RandomGrayscale(p=0.2))
    return v2.Compose(steps)


def kornia_pipeline(size: int = 32, *, crop: bool = True, colour: bool = True, scale=(0.2, 1.0)):
    """The same augmentation as :func:`simclr_pipeline`, batched with kornia: ``float [N, 3, H, W] ->
    float [N, 3, size, size]`` with every image's own random draws, on the images' device. ``None``
    when kornia is not installed (it is in requirements.txt)."""
    try:
        import kornia.augmentation as K
    except ImportError:
        return None
    steps = []
    if crop:
        # "resample" crops the whole batch in one warp; kornia's default "slice" crops image by image in
        # Python (25,000 views/s against 2,000,000 on one H100, 2026-11-27: the course repository's benchmark
        # simclr.py on CUDA, its kornia_ops).
        steps += [K.RandomResizedCrop((size, size), scale=scale, cropping_mode="resample"),
                  K.RandomHorizontalFlip(p=0.5)]
    else:
        steps.append(K.Resize((size, size), antialias=True))
    if colour:
        steps += [K.ColorJitter(*SIMCLR_JITTER, p=0.8), K.RandomGrayscale(p=0.2)]
    return nn.Sequential(*steps)


def simclr_augment(images: torch.Tensor, generator: torch.Generator | None = None, *, size: int = 32,
                   crop: bool = True, colour: bool = True, scale=(0.2, 1.0),
                   batched: bool | None = None) -> torch.Tensor:
    """One SimCLR view of every image (given code).

    ``images``: ``uint8`` or ``float [N, 3, H, W]`` on any device -> ``float32 [N, 3, size, size]`` in
    [0, 1] on the same device. Every image gets its own crop, flip and colours (a v2 transform called
    on a whole batch would draw one set for all). Called on its own on the CPU, each image goes through
    :func:`simclr_pipeline` on its own (about 1,400 views per second on one core: the course repository's
    benchmark simclr.py, given_per_image_views_per_s); on a GPU, inside
    :func:`train_loop` on any device (``batched=None``), or with ``batched=True``, the whole batch goes
    through :func:`kornia_pipeline` at once (per-image work would leave a GPU waiting on the CPU). Inside
    :func:`train_loop`, the batched path augments many upcoming batches in one call (:class:`BatchPlan`):
    kornia's cost per call hardly depends on the batch at 32x32, so a call per 512 images would leave
    the GPU waiting on kornia's launches. The random numbers come from one seed drawn from ``generator``
    (torch's global generator when None) per call, or per chunk of batches in a training loop: the same
    generator state on the same device gives the same views.
    """
    if images.dim() != 4 or images.shape[1] != 3:
        raise ValueError(f"images must be [N, 3, H, W], got {tuple(images.shape)}")
    plan = _ACTIVE_PLAN[0]
    planned = plan is not None and plan.serves(images)   # a batch train_loop just handed over
    use_kornia = (images.is_cuda or planned) if batched is None else batched
    batched_pipeline = kornia_pipeline(size, crop=crop, colour=colour, scale=scale) if use_kornia else None
    if batched_pipeline is not None:
        if planned:
            return plan.views(images, generator, batched_pipeline, (size, crop, colour, tuple(scale)))
        return _kornia_views(batched_pipeline, images, _draw_seed(generator))
    seed = _draw_seed(generator)
    pipeline = simclr_pipeline(size, crop=crop, colour=colour, scale=scale)
    on_cpu = to_float_images(images.detach().cpu())
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one 32x32 image is too small to share: extra threads only wait
    try:
        with torch.random.fork_rng(devices=[]):  # torchvision draws from the global generator
            torch.manual_seed(seed)
            views = [pipeline(picture) for picture in on_cpu.unbind(0)]
    finally:
        torch.set_num_threads(threads)
    return torch.stack(views).clamp_(0, 1).to(images.device, non_blocking=True)


def _draw_seed(generator: torch.Generator | None) -> int:
    source = generator.device if generator is not None else "cpu"
    return int(torch.randint(0, 2 ** 62, (), generator=generator, device=source))


def _kornia_views(pipeline: nn.Module, images: torch.Tensor, seed: int) -> torch.Tensor:
    """``pipeline`` (kornia, which draws from the global generators) on ``images`` with ``seed``, the global
    random states left as they were."""
    with torch.random.fork_rng(devices=[images.device] if images.is_cuda else []):
        torch.manual_seed(seed)
        return pipeline(to_float_images(images)).float().clamp_(0, 1)


#: The plan of the training loop now running (one element, so that it can be set from train_loop).
_ACTIVE_PLAN: list = [None]

#: Images per kornia call when a training loop augments ahead (two views each): 16,384 views of 32x32
#: in float32 are 200 MB of GPU memory, and enough to hide kornia's per-call overhead.
PLAN_CHUNK_IMAGES = 8192


class BatchPlan:
    """The batches :func:`train_loop` hands to its step function, known in advance, so that the batched
    path of :func:`simclr_augment` augments ``chunk_images`` images at a time (two views of each) instead
    of one batch per call. Only a call with the very tensor the loop just handed over is served from the
    plan, and only the first two calls per batch (the two views); anything else is augmented as usual.
    A chunk never crosses an epoch's end (the loop saves the generator's state there), so a resumed run
    draws the same views. The views of every image are independent draws of the same pipeline: chunking
    changes when the random numbers are drawn, not their distribution (the course repository tests this)."""

    def __init__(self, images: torch.Tensor, order: torch.Tensor, batch_size: int, steps: int,
                 chunk_images: int = PLAN_CHUNK_IMAGES):
        self.images, self.order, self.batch_size, self.steps = images, order, batch_size, steps
        self.chunk_steps = max(1, chunk_images // batch_size)
        self.step, self.batch, self.calls = -1, None, {}
        self.chunks: dict = {}  # settings -> (first step, views [calls, steps in chunk, B, 3, s, s])

    def hand_over(self, step: int, batch: torch.Tensor) -> None:
        self.step, self.batch, self.calls = step, batch, {}

    def serves(self, images: torch.Tensor) -> bool:
        return images is self.batch

    def views(self, images: torch.Tensor, generator, pipeline: nn.Module, settings: tuple) -> torch.Tensor:
        call = self.calls.get(settings, 0)
        if call >= 2:  # more than two views of one batch: not planned
            return _kornia_views(pipeline, images, _draw_seed(generator))
        self.calls[settings] = call + 1
        first, views = self.chunks.get(settings, (None, None))
        if first is None or not first <= self.step < first + views.shape[1]:
            first = self.step
            last = min(self.steps, first + self.chunk_steps)
            idx = self.order[first * self.batch_size:last * self.batch_size]
            chunk = self.images[idx]
            out = _kornia_views(pipeline, torch.cat([chunk, chunk]), _draw_seed(generator))
            views = out.reshape(2, last - first, self.batch_size, *out.shape[1:])
            self.chunks[settings] = (first, views)
        return views[call, self.step - first]


# --------------------------------------------------------------------------- feature extraction
@torch.no_grad()
def extract_features(
    encoder: nn.Module,
    images: torch.Tensor,
    *,
    batch_size: int = 512,
    device: torch.device | str | None = None,
    autocast_dtype: torch.dtype | None = None,
    progress: bool = False,
) -> torch.Tensor:
    """Frozen-encoder features of un-augmented images: ``[N, 3, H, W] -> float32 [N, D]`` on the CPU.

    The encoder runs in eval mode (BatchNorm uses its running statistics) and is put back into
    the mode it was in. On the CPU it runs as a copy with each BatchNorm folded into the convolution
    before it (:func:`folded_for_inference`): the same features up to float rounding, without BatchNorm's work.
    """
    from tqdm.auto import tqdm

    device = torch.device(device) if device is not None else next(encoder.parameters()).device
    was_training = encoder.training
    encoder.eval()
    try:
        net = folded_for_inference(encoder) if device.type == "cpu" else encoder
        out = []
        starts = range(0, len(images), batch_size)
        for start in tqdm(starts, desc="features", leave=False, disable=not progress):
            batch = to_float_images(images[start:start + batch_size].to(device, non_blocking=True))
            with autocast_context(device, autocast_dtype):
                out.append(net(batch).float().cpu())
    finally:
        encoder.train(was_training)
    return torch.cat(out)


def folded_for_inference(encoder: nn.Module) -> nn.Module:
    """A copy of the eval-mode ``encoder`` in which every BatchNorm that follows a convolution is folded
    into that convolution's weights (torch.fx), or ``encoder`` itself when it cannot be traced (a
    compiled or data-dependent module). The same function ``[N, 3, H, W] -> [N, D]``; on a CPU the
    BatchNorm passes over full-resolution activations cost as much as the convolutions."""
    from torch.fx.experimental.optimization import fuse

    try:
        return fuse(encoder)
    except Exception:  # untraceable: run it as it is
        return encoder


# ----------------------------------------------------------------------- alignment / uniformity
def alignment(z1: torch.Tensor, z2: torch.Tensor, alpha: float = 2.0) -> float:
    """Wang and Isola (2020): mean ``||z1_i - z2_i||^alpha`` over positive pairs of L2-normalised
    rows. ``z1, z2: [N, D]``; 0 is perfect alignment, about 2 means unrelated pairs."""
    z1, z2 = F.normalize(z1.double(), dim=1), F.normalize(z2.double(), dim=1)
    return float((z1 - z2).norm(dim=1).pow(alpha).mean())


def uniformity(z: torch.Tensor, t: float = 2.0) -> float:
    """Wang and Isola (2020): ``log mean exp(-t ||z_i - z_j||^2)`` over pairs i < j of L2-normalised
    rows of ``z: [N, D]``. 0 means collapsed; lower is more uniform (about -3.9 at best in 128-d)."""
    z = F.normalize(z.double(), dim=1)
    sq = torch.pdist(z).pow(2)
    return float(torch.logsumexp(-t * sq, dim=0) - math.log(len(sq)))


# --------------------------------------------------------------------------- training plumbing
def config_tag(config: dict) -> str:
    """A short stable hash of a JSON-able config, used to name checkpoints (a changed config
    never resumes from a stale checkpoint)."""
    blob = json.dumps(config, sort_keys=True, default=str).encode()
    return hashlib.sha1(blob).hexdigest()[:10]


def _simclr_cache() -> Path:
    """``build/cache/simclr/``, created when possible; on a read-only cache (the grading sandbox)
    the folder's path all the same, so that reading still works and writing fails softly."""
    try:
        return cache_dir("simclr")
    except OSError:
        return Path(os.environ.get("LAS_BUILD_DIR", REPO_ROOT / "build")) / "cache" / "simclr"


def _not_written(what: str, path: Path, exc: OSError, then: str = "") -> None:
    """The one line printed instead of a traceback when the cache cannot be written."""
    reason = exc.strerror or exc.__class__.__name__
    print(f"{what} not saved: {path} is not writable ({reason}){'; ' + then if then else ''}.")


def checkpoint_path(name: str, config: dict) -> Path:
    """``build/cache/simclr/<name>-<hash of config>.pt`` (the folder may be read-only)."""
    return _simclr_cache() / f"{name}-{config_tag(config)}.pt"


def warmup_cosine(total_steps: int, warmup_steps: int) -> Callable[[int], float]:
    """Learning-rate multiplier: linear warm-up to 1, then cosine decay to 0 at ``total_steps``."""

    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        progress = (step - warmup_steps) / max(1, total_steps - warmup_steps)
        return 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))

    return factor


def save_checkpoint(path: Path, **state) -> None:
    """Write ``state`` atomically (to a temporary file, then rename), so an interrupted save
    never leaves a corrupt checkpoint behind. Raises OSError when the folder is not writable
    (:func:`train_loop` then carries on without checkpoints)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    try:
        with open(tmp, "wb") as f:  # opened here: an unwritable folder raises OSError, not torch's RuntimeError
            torch.save(state, f)
        tmp.replace(path)
    except BaseException:
        with suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise


def load_checkpoint(path: Path, map_location="cpu") -> dict | None:
    """The dict :func:`save_checkpoint` wrote, or None when there is no file."""
    path = Path(path)
    if not path.is_file():
        return None
    return torch.load(path, map_location=map_location, weights_only=False)


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.1f} min"


class _Forecast:
    """Says, once, after the first few steps of a training run, how long its remaining steps will take at
    the speed just measured (the very first step is left out: cuDNN autotuning, allocation, compilation)."""

    def __init__(self, desc: str, total_steps: int, batch_size: int, device: torch.device):
        self.desc, self.total, self.batch_size, self.device = desc, total_steps, batch_size, device
        self.done, self.t1 = 0, None
        # Steps measured before the forecast: at least one chunk of planned views (BatchPlan) in the window.
        self.at = max(3, total_steps // 50, PLAN_CHUNK_IMAGES // batch_size)

    def step_done(self) -> None:
        self.done += 1
        if self.at + 1 >= self.total:  # too short a run to be worth a forecast
            return
        if self.done == 1 or self.done == self.at + 1:
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
            now = time.perf_counter()
            if self.done == 1:
                self.t1 = now
                return
            per_step = (now - self.t1) / self.at
            from tqdm.auto import tqdm

            tqdm.write(f"{self.desc}: about {_duration(per_step * self.total)} for {self.total:,} steps of "
                       f"{self.batch_size} images ({self.batch_size / per_step:,.0f} images/s, measured on steps "
                       f"2 to {self.at + 1} of this run; evaluation not included)")


def train_loop(
    step_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    modules: dict[str, nn.Module],
    optimizer: torch.optim.Optimizer,
    images: torch.Tensor,
    *,
    epochs: int,
    batch_size: int,
    labels: torch.Tensor | None = None,
    warmup_epochs: float = 1.0,
    seed: int = 0,
    checkpoint: Path | None = None,
    config: dict | None = None,
    eval_fn: Callable[[], dict] | None = None,
    eval_every: int = 1,
    rng: torch.Generator | None = None,
    desc: str = "train",
) -> dict:
    """A minimal epoch loop with warm-up + cosine learning rate, progress bar and resume.

    ``step_fn(batch_images, batch_labels)`` does one optimisation step and returns the loss (a
    0-dim tensor or float; ``batch_labels`` is None without ``labels``). ``images`` (``uint8 [N,
    3, H, W]``) should already live on the training device: batches are sliced there, so no data
    loader is needed. Every epoch the modules, optimizer, scheduler and history are saved to
    ``checkpoint`` (with the state of ``rng``, the augmentations' generator, so a resumed run draws
    the same views as an uninterrupted one); a rerun with the same ``config`` picks up after the
    last finished epoch (and skips training entirely when all epochs are done). When the
    checkpoint cannot be written (a read-only cache), one line says so and training goes on
    without checkpoints.

    Returns the history: ``{"loss": [per step], "epoch_loss": [...], "epoch_seconds": [...],
    "eval": [{"epoch": e, ...eval_fn()...}], "resumed_from": epoch or None}``.
    """
    from tqdm.auto import tqdm

    steps_per_epoch = len(images) // batch_size
    if steps_per_epoch == 0:
        raise ValueError(f"batch_size {batch_size} is larger than the {len(images)} training images")
    schedule = warmup_cosine(epochs * steps_per_epoch, max(1, int(warmup_epochs * steps_per_epoch)))
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
    history = {"loss": [], "epoch_loss": [], "epoch_seconds": [], "eval": [], "resumed_from": None}
    start_epoch = 0
    if checkpoint is not None:
        state = load_checkpoint(checkpoint)
        if state is not None and state.get("config") == config:
            for name, module in modules.items():
                module.load_state_dict(state["modules"][name])
            optimizer.load_state_dict(state["optimizer"])
            scheduler.load_state_dict(state["scheduler"])
            history = state["history"]
            if rng is not None and state.get("rng") is not None:
                rng.set_state(state["rng"])
            start_epoch = history["resumed_from"] = state["epoch"]
            done = "all epochs done, training skipped" if start_epoch >= epochs else "resuming"
            print(f"Loaded checkpoint {checkpoint} (epoch {start_epoch}/{epochs}): {done}")
    device = images.device
    for module in modules.values():
        module.train()
    bar = tqdm(range(start_epoch, epochs), desc=desc, unit="epoch", initial=start_epoch, total=epochs)
    forecast = _Forecast(desc, (epochs - start_epoch) * steps_per_epoch, batch_size, device)
    for epoch in bar:
        # The order depends only on (seed, epoch), so a resumed run sees the same batches.
        order = torch.randperm(len(images), generator=torch.Generator().manual_seed(seed * 100_003 + epoch))
        order = order.to(device)
        start, losses = time.perf_counter(), []
        plan = _ACTIVE_PLAN[0] = BatchPlan(images, order, batch_size, steps_per_epoch)
        try:
            for step in range(steps_per_epoch):
                idx = order[step * batch_size:(step + 1) * batch_size]
                batch = images[idx]
                plan.hand_over(step, batch)
                loss = step_fn(batch, None if labels is None else labels[idx])
                scheduler.step()
                losses.append(loss.detach() if torch.is_tensor(loss) else torch.tensor(float(loss)))
                forecast.step_done()
        finally:
            _ACTIVE_PLAN[0] = None
        step_losses = torch.stack(losses).float().cpu().tolist()  # one device sync per epoch
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        history["epoch_seconds"].append(time.perf_counter() - start)
        history["loss"] += step_losses
        history["epoch_loss"].append(float(np.mean(step_losses)))
        if not all(math.isfinite(v) for v in step_losses):
            raise FloatingPointError(f"non-finite loss in epoch {epoch + 1}: lower the learning rate?")
        postfix = {"loss": f"{history['epoch_loss'][-1]:.3f}"}
        if eval_fn is not None and ((epoch + 1) % eval_every == 0 or epoch + 1 == epochs):
            result = eval_fn()
            history["eval"].append({"epoch": epoch + 1, **result})
            postfix.update({k: f"{v:.3f}" for k, v in result.items()})
            for module in modules.values():
                module.train()
        bar.set_postfix(postfix)
        if checkpoint is not None:
            try:
                save_checkpoint(
                    checkpoint, config=config, epoch=epoch + 1, history=history,
                    modules={n: m.state_dict() for n, m in modules.items()},
                    optimizer=optimizer.state_dict(), scheduler=scheduler.state_dict(),
                    rng=None if rng is None else rng.get_state(),
                )
            except OSError as exc:  # read-only cache (the grading sandbox): train on, unsaved
                _not_written("Checkpoint", Path(checkpoint), exc, "training goes on without checkpoints")
                checkpoint = None
    for module in modules.values():
        module.eval()
    return history


# ---------------------------------------------------------------------------------- evaluation
def tsne_2d(features: torch.Tensor, *, seed: int = 0, perplexity: float = 30.0, max_iter: int = 1000) -> np.ndarray:
    """t-SNE of ``[N, D]`` features (L2-normalised, PCA to 50 dimensions first) -> ``[N, 2]``.
    ``max_iter`` (at least 250) trades quality for time."""
    from sklearn.decomposition import PCA
    from sklearn.manifold import TSNE
    from threadpoolctl import threadpool_limits

    x = F.normalize(features.float(), dim=1).numpy()
    if x.shape[1] > 50 and x.shape[0] > 50:
        x = PCA(n_components=50, random_state=seed).fit_transform(x)
    perplexity = min(perplexity, max(2.0, (len(x) - 1) / 3))
    # A few hundred points gain nothing from OpenMP threads, and lose a lot on a busy machine.
    limits = threadpool_limits(limits=1) if len(x) < 1000 else nullcontext()
    with limits:
        return TSNE(n_components=2, perplexity=perplexity, init="pca", random_state=seed,
                    max_iter=max(250, max_iter)).fit_transform(x)


def save_results(name: str, results: dict) -> Path | None:
    """Write a notebook's headline numbers to ``build/cache/simclr/<name>.json`` (read by the
    benchmark) and return the path. When the cache is read-only (the grading sandbox) or otherwise
    unwritable, print one line saying so and return None: never raises OSError."""
    text = json.dumps(results, indent=2, default=float) + "\n"
    path = _simclr_cache() / f"{name}.json"
    tmp = path.with_suffix(".tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(path)
    except OSError as exc:
        with suppress(OSError):
            tmp.unlink(missing_ok=True)
        _not_written("Results", path, exc)
        return None
    return path


# ------------------------------------------------------------------- the shipped trained encoder
#: The cpu preset's SimCLR encoder and head, trained once by the course (data/README.md says how):
#: a student whose training step had a bug loads it after the fix instead of retraining for minutes.
PRETRAINED_SIMCLR = DATA_DIR / "simclr_cpu_checkpoint.pt"


def export_pretrained_simclr(train_checkpoint: Path, out: Path = PRETRAINED_SIMCLR, **record) -> Path:
    """Write the encoder and head of a finished :func:`train_loop` checkpoint (the notebook's SimCLR run) to
    ``out``: float weights as float16 (half the size; the linear probe on 5,000 / 2,000 CIFAR-10 images gave 61.1 %
    with float16 and float32 weights alike),
    the training history (for the notebook's plots) and ``record`` (how it was made: command, preset, seed,
    data, date, the accuracy it reached). No optimiser state: the file only has to be loaded, not resumed."""
    state = load_checkpoint(train_checkpoint)
    if state is None:
        raise FileNotFoundError(f"no training checkpoint at {train_checkpoint}")
    half = {name: {k: v.half() if v.is_floating_point() else v for k, v in state["modules"][name].items()}
            for name in ("encoder", "head")}
    history = {k: state["history"][k] for k in ("loss", "epoch_loss", "epoch_seconds", "eval")}
    record = {"epochs": state["epoch"], "training_config": state["config"], **record}
    out = Path(out)
    save_checkpoint(out, **half, history=history, record=record)
    return out


def _load_by_position(module: nn.Module, state: dict) -> None:
    """``module.load_state_dict(state)``; when the names differ (a student's own layout of the same layers),
    the tensors in order, provided their number and shapes agree. Raises RuntimeError otherwise."""
    try:
        module.load_state_dict(state, strict=True)
        return
    except RuntimeError:
        mine = module.state_dict()
        if [v.shape for v in mine.values()] != [v.shape for v in state.values()]:
            raise
        module.load_state_dict(dict(zip(mine, state.values())), strict=True)


def load_pretrained_simclr(encoder: nn.Module, head: nn.Module, path: Path = PRETRAINED_SIMCLR) -> dict:
    """Load the shipped SimCLR encoder (strictly: the cpu preset's encoder) and projection head into
    ``encoder`` and ``head`` (both then in eval mode), print loudly that nothing was trained, and return the
    training history of the run that made it, shaped like :func:`train_loop`'s (``resumed_from`` = its
    epochs) with ``record`` added. When the head's layers do not match, the encoder is still loaded and one
    line says that the head stays as built."""
    state = load_checkpoint(path)
    if state is None:
        raise FileNotFoundError(f"{path} is missing: set LOAD_PRETRAINED = False and train (data/README.md)")
    encoder.load_state_dict(state["encoder"], strict=True)
    record = state["record"]
    try:
        _load_by_position(head, state["head"])
        head_note = "and projection head"
    except RuntimeError as exc:
        head_note = (f"only (its projection head does not fit your ProjectionHead: {str(exc).splitlines()[0]}; "
                     "the head stays untrained, so alignment and uniformity of 'SimCLR' mean little)")
    encoder.eval(), head.eval()
    probe = record.get("linear_probe")
    print(f"LOADED, NOT TRAINED: the SimCLR encoder {head_note} from {path.name}, trained by the course "
          f"({record.get('preset')} preset, {record['epochs']} epochs, seed {record.get('seed')}, {record.get('date')}"
          + (f"; linear probe {100 * probe:.1f} %" if probe is not None else "") + "). Your simclr_train_step "
          "did not train this encoder; set LOAD_PRETRAINED = False to train your own.")
    return {**state["history"], "resumed_from": record["epochs"], "record": record}


# ------------------------------------------------------------------------------------- plotting
def plot_training(history: dict, *, title: str = "SimCLR training"):
    """Loss per step (left) and the kNN accuracy measured during training (right)."""
    import matplotlib.pyplot as plt

    fig, (ax_loss, ax_knn) = plt.subplots(1, 2, figsize=(11, 3.8))
    loss = np.asarray(history["loss"])
    ax_loss.plot(np.arange(1, len(loss) + 1), loss, lw=0.6, alpha=0.5, label="per step")
    window = max(1, len(loss) // 50)
    if window > 1:
        smooth = np.convolve(loss, np.ones(window) / window, mode="valid")
        ax_loss.plot(np.arange(window, len(loss) + 1), smooth, lw=1.8, label=f"mean of {window} steps")
    ax_loss.set(xlabel="optimisation step", ylabel="NT-Xent loss (nats)", title=title)
    ax_loss.legend()
    evals = [e for e in history["eval"] if "knn" in e]
    if evals:
        ax_knn.plot([e["epoch"] for e in evals], [100 * e["knn"] for e in evals], "o-")
    ax_knn.set(xlabel="epoch", ylabel="kNN accuracy (%)", title="kNN accuracy during training")
    fig.tight_layout()
    return fig


def show_views(images: torch.Tensor, views: list[torch.Tensor], *, title: str = "augmented views"):
    """Grid: one row per image, the original then its augmented views (``float [N, 3, h, w]``)."""
    import matplotlib.pyplot as plt

    n, cols = len(images), 1 + len(views)
    fig, axes = plt.subplots(n, cols, figsize=(1.3 * cols, 1.3 * n), squeeze=False)
    for i in range(n):
        for j, img in enumerate([to_float_images(images)] + [v.float() for v in views]):
            axes[i, j].imshow(img[i].detach().cpu().clamp(0, 1).permute(1, 2, 0).numpy())
            axes[i, j].set_xticks([]), axes[i, j].set_yticks([])
    axes[0, 0].set_title("original", fontsize=8)
    for j in range(1, cols):
        axes[0, j].set_title(f"view {j}", fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    return fig
