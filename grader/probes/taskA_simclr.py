"""Probes for Task A (SimCLR). Inputs only: the judge (grader/checks/taskA_simclr.py) compares.

Every input comes from ``gen``; the random functions get a generator seeded from ``gen`` as well, so
the judge checks their outputs' properties (shapes, ranges, statistics, reproducibility) rather than
exact values. The fixtures below (ramp images, tiny models, a scripted augmentation) solve nothing.
"""

from __future__ import annotations

import copy

import torch
import torchvision.transforms.v2  # noqa: F401  (loaded once here: the given cell imports it in every forked case)
from torch import nn

from grader.probes import attempt, probes, with_global_state

PROBES: dict = {}
probe = probes(PROBES)


def _seed(gen) -> int:
    return int(torch.randint(0, 2 ** 31 - 1, (1,), generator=gen))


def _child(gen) -> torch.Generator:
    """A fresh generator for a student's function, seeded from ``gen``."""
    return torch.Generator().manual_seed(_seed(gen))


def _ramps(n: int, h: int, w: int) -> torch.Tensor:
    """Channel 0 ramps left to right, channel 1 top to bottom, channel 2 is constant 0.5."""
    x = torch.zeros(n, 3, h, w)
    x[:, 0] = (torch.arange(w, dtype=torch.float32) / (w - 1)).view(1, 1, w)
    x[:, 1] = (torch.arange(h, dtype=torch.float32) / (h - 1)).view(1, h, 1)
    x[:, 2] = 0.5
    return x


def _profiles(out: torch.Tensor) -> dict:
    """Crops of ramp images, summed up (the evidence stays small): channel 0 averaged over the interior
    rows (a profile along x) and channel 1 over the interior columns (along y), each [N, size]."""
    return {"x": out[:, 0, 2:-2, :].mean(dim=1), "y": out[:, 1, :, 2:-2].mean(dim=2)}


def _repeated(gen, n: int, h: int, w: int) -> torch.Tensor:
    return torch.rand(1, 3, h, w, generator=gen).expand(n, -1, -1, -1).contiguous()


# ------------------------------------------------------------------------------ random_resized_crop_flip
# random_resized_crop_flip (extension): the test cell's 4 points, shared by the weights below
@probe("test_random_resized_crop_flip", "float [N, 3, size, size] for square and non-square images",
       "check_crop_shapes", kind="property")
def crop_shapes(ns, gen):
    out = []
    for n, h, w, size in [(3, 16, 16, 16), (2, 16, 16, 8), (2, 12, 20, 10)]:
        out.append(attempt(ns.random_resized_crop_flip, torch.rand(n, 3, h, w, generator=gen), size,
                           generator=_child(gen)))
    return out


@probe("test_random_resized_crop_flip", "scale=(1, 1), ratio=(1, 1): the image itself (flip_p=0) or its mirror image "
       "(flip_p=1)", "IMAGES", kind="property")
def crop_identity_and_mirror(ns, gen):
    x = torch.rand(6, 3, 8, 8, generator=gen)
    f = ns.random_resized_crop_flip
    return [f(x, 8, scale=(1, 1), ratio=(1, 1), flip_p=0.0, generator=_child(gen)),
            f(x, 8, scale=(1, 1), ratio=(1, 1), flip_p=1.0, generator=_child(gen))]


@probe("test_random_resized_crop_flip", "each image flipped left-right with probability flip_p", "check_crop_flip_rate")
def crop_flip_rate(ns, gen):
    x = torch.rand(300, 3, 3, 3, generator=gen)
    out = ns.random_resized_crop_flip(x, 3, scale=(1, 1), ratio=(1, 1), flip_p=0.5, generator=_child(gen))
    return {"x": x, "out": out}


@probe("test_random_resized_crop_flip", "bilinear crops with area ~ U(scale), aspect within ratio, placed uniformly "
       "inside the image", "check_crop_geometry", weight=2, main=True)
def crop_geometry(ns, gen):
    """Crops of ramp images: the judge reads each crop's size and position off the ramps."""
    out = ns.random_resized_crop_flip(_ramps(400, 32, 32), 16, scale=(0.1, 0.5), ratio=(0.5, 2.0), flip_p=0.0,
                                      generator=_child(gen))
    return _profiles(out)


@probe("test_random_resized_crop_flip", "log aspect ratio ~ U(log ratio)", "check_crop_log_aspect")
def crop_log_aspect(ns, gen):
    out = ns.random_resized_crop_flip(_ramps(600, 32, 32), 16, scale=(0.05, 0.25), ratio=(0.25, 4.0), flip_p=0.0,
                                      generator=_child(gen))
    return _profiles(out)


@probe("test_random_resized_crop_flip", "a box that does not fit inside the image is drawn again (up to 10 tries, "
       "then the whole image)", "check_crop_redraw")
def crop_redraw(ns, gen):
    """Large crops with wide aspect ratios: two thirds of the first draws do not fit inside the image."""
    out = ns.random_resized_crop_flip(_ramps(600, 32, 32), 16, scale=(0.6, 1.0), ratio=(0.5, 2.0), flip_p=0.0,
                                      generator=_child(gen))
    return _profiles(out)


@probe("test_random_resized_crop_flip", "a flip mirrors the crop left-right", "check_crop_flip_reverses")
def crop_flip_reverses(ns, gen):
    out = ns.random_resized_crop_flip(_ramps(12, 32, 32), 16, scale=(0.3, 0.6), flip_p=1.0, generator=_child(gen))
    return _profiles(out)


@probe("test_random_resized_crop_flip", "independent crop parameters for every image", "CROP_INDEPENDENT",
       kind="property")
def crop_independent(ns, gen):
    return ns.random_resized_crop_flip(_repeated(gen, 24, 16, 16), 8, flip_p=0.0, generator=_child(gen))


@probe("test_random_resized_crop_flip", "all random numbers drawn with `generator`", "check_reproducible", kind="rule",
       checks="generator")
def crop_generator(ns, gen):
    x = _repeated(gen, 8, 16, 16)
    s = _seed(gen)
    f = ns.random_resized_crop_flip
    return [f(x, 8, generator=torch.Generator().manual_seed(s)), f(x, 8, generator=torch.Generator().manual_seed(s)),
            f(x, 8, generator=torch.Generator().manual_seed(s + 1))]


@probe("test_random_resized_crop_flip", "all random numbers drawn with `generator`, never with Python's `random`: the "
       "global random states are left alone", "check_global_state_untouched", kind="rule", checks="global state")
def crop_global_state(ns, gen):
    return with_global_state(ns.random_resized_crop_flip, torch.rand(6, 3, 12, 12, generator=gen), 8,
                             generator=_child(gen))


@probe("test_random_resized_crop_flip", "a ValueError for anything but a floating-point [N, 3, H, W] tensor",
       "RAISES_VALUE_ERROR", kind="rule", checks="raises")
def crop_rejects(ns, gen):
    f = ns.random_resized_crop_flip
    return [attempt(f, torch.rand(3, 16, 16, generator=gen), 16),
            attempt(f, torch.rand(2, 1, 16, 16, generator=gen), 16),
            attempt(f, torch.randint(0, 255, (2, 3, 16, 16), generator=gen, dtype=torch.uint8), 16)]


# ------------------------------------------------------------------------------ colour_distort
# colour_distort (extension): the test cell's 4 points, shared by the weights below
@probe("test_colour_distort", "values clamped to [0, 1] (float [N, 3, H, W], the input's dtype)",
       "check_colour_dtype_and_range", kind="property")
def colour_dtype_and_range(ns, gen):
    x = torch.rand(16, 3, 6, 7, generator=gen)
    f = ns.colour_distort
    return [attempt(f, x, generator=_child(gen)),
            attempt(f, x.double(), generator=_child(gen)),
            attempt(f, x, jitter=(0.8, 0.8, 0.8, 0.5), jitter_p=1.0, generator=_child(gen))]


@probe("test_colour_distort", "no jitter and no grayscale (or zero strengths): the images", "IMAGES", kind="property")
def colour_identity(ns, gen):
    x = torch.rand(8, 3, 6, 6, generator=gen)
    f = ns.colour_distort
    return [f(x, jitter_p=0.0, gray_p=0.0, generator=_child(gen)),
            f(x, jitter=(0, 0, 0, 0), jitter_p=1.0, gray_p=0.0, generator=_child(gen))]


@probe("test_colour_distort", "grayscale g = 0.299 R + 0.587 G + 0.114 B in all three channels", "IMAGES", main=True)
def colour_grayscale(ns, gen):
    return ns.colour_distort(torch.rand(8, 3, 6, 6, generator=gen), jitter_p=0.0, gray_p=1.0, generator=_child(gen))


def _mid(gen, n=200):
    return 0.3 + 0.4 * torch.rand(n, 3, 3, 3, generator=gen)  # inside [0, 1] under every factor used


@probe("test_colour_distort", "brightness x <- b x, b ~ U(1 - beta, 1 + beta) per image", "BRIGHTNESS", main=True)
def colour_brightness(ns, gen):
    x = _mid(gen)
    return {"x": x, "out": ns.colour_distort(x, jitter=(0.4, 0, 0, 0), jitter_p=1.0, gray_p=0.0, generator=_child(gen))}


@probe("test_colour_distort", "contrast x <- c x + (1 - c) mean gray, c per image", "CONTRAST")
def colour_contrast(ns, gen):
    x = _mid(gen)
    return {"x": x, "out": ns.colour_distort(x, jitter=(0, 0.4, 0, 0), jitter_p=1.0, gray_p=0.0, generator=_child(gen))}


@probe("test_colour_distort", "saturation x <- s x + (1 - s) g, s per image", "SATURATION")
def colour_saturation(ns, gen):
    x = _mid(gen)
    return {"x": x, "out": ns.colour_distort(x, jitter=(0, 0, 0.4, 0), jitter_p=1.0, gray_p=0.0, generator=_child(gen))}


@probe("test_colour_distort", "jitter each image with probability jitter_p", "check_colour_jitter_rate")
def colour_jitter_rate(ns, gen):
    x = _mid(gen)
    return {"x": x, "out": ns.colour_distort(x, jitter=(0.4, 0, 0, 0), jitter_p=0.5, gray_p=0.0, generator=_child(gen))}


@probe("test_colour_distort", "grayscale each image with probability gray_p", "check_colour_gray_rate")
def colour_gray_rate(ns, gen):
    x = _mid(gen)
    return {"x": x, "out": ns.colour_distort(x, jitter_p=0.0, gray_p=0.3, generator=_child(gen))}


@probe("test_colour_distort", "a hue shift rotates colours around the gray axis (grays stay gray)", "check_colour_hue")
def colour_hue(ns, gen):
    x = 0.3 + 0.4 * torch.rand(64, 3, 4, 4, generator=gen)
    x[:, :, :2] = x[:, :1, :2]  # the top half of every image is gray
    return {"x": x, "out": ns.colour_distort(x, jitter=(0, 0, 0, 0.3), jitter_p=1.0, gray_p=0.0,
                                             generator=_child(gen))}


@probe("test_colour_distort", "independent factors for every image", "COLOUR_INDEPENDENT", kind="property")
def colour_independent(ns, gen):
    x = 0.2 + 0.6 * _repeated(gen, 32, 6, 6)
    f = ns.colour_distort
    return [f(x, jitter=(0, 0, 0, 0.3), jitter_p=1.0, gray_p=0.0, generator=_child(gen)),
            f(x, jitter_p=1.0, gray_p=0.0, generator=_child(gen))]


@probe("test_colour_distort", "all random numbers drawn with `generator`", "check_reproducible", kind="rule",
       checks="generator")
def colour_generator(ns, gen):
    x = _repeated(gen, 24, 6, 6)  # 24 images: two seeds leave all of them untouched with probability 0.16^48
    s = _seed(gen)
    f = ns.colour_distort
    return [f(x, generator=torch.Generator().manual_seed(s)), f(x, generator=torch.Generator().manual_seed(s)),
            f(x, generator=torch.Generator().manual_seed(s + 1))]


@probe("test_colour_distort", "all random numbers drawn with `generator`: the global random states are left alone",
       "check_global_state_untouched", kind="rule", checks="global state")
def colour_global_state(ns, gen):
    return with_global_state(ns.colour_distort, torch.rand(8, 3, 5, 5, generator=gen), jitter_p=0.5, gray_p=0.5,
                             generator=_child(gen))


# ------------------------------------------------------------------------------ augment_batch (given, extension)
# augment_batch (extension; given, built on the two functions above):
# the test cell's 2 points, shared by the weights below
@probe("test_augment_batch", "uint8 images give float32 [N, 3, size, size] views in [0, 1]", "check_augment_uint8",
       kind="property")
def augment_uint8(ns, gen):
    imgs = torch.randint(0, 256, (2, 3, 32, 32), generator=gen, dtype=torch.uint8)
    return [ns.augment_batch(imgs, _child(gen)), ns.augment_batch(imgs, _child(gen), size=24)]


@probe("test_augment_batch", "every copy of an image gets its own view", "AUGMENT_INDEPENDENT", kind="property")
def augment_independent(ns, gen):
    imgs = torch.randint(0, 256, (1, 3, 32, 32), generator=gen, dtype=torch.uint8).expand(16, -1, -1, -1)
    return ns.augment_batch(imgs.contiguous(), _child(gen), size=8)


@probe("test_augment_batch", "every augmentation off: the images scaled to [0, 1]", "IMAGES", kind="property")
def augment_all_off(ns, gen):
    imgs = torch.randint(0, 256, (4, 3, 16, 16), generator=gen, dtype=torch.uint8)
    return ns.augment_batch(imgs, _child(gen), size=16, scale=(1, 1), ratio=(1, 1), flip_p=0.0, jitter_p=0.0,
                            gray_p=0.0)


@probe("test_augment_batch", "all random numbers drawn with `generator` (through both functions): the same seed gives "
       "the same views, another seed others", "check_reproducible", kind="rule", checks="generator")
def augment_generator(ns, gen):
    imgs = torch.randint(0, 256, (8, 3, 16, 16), generator=gen, dtype=torch.uint8)
    s = _seed(gen)
    return [ns.augment_batch(imgs, torch.Generator().manual_seed(seed), size=8) for seed in (s, s, s + 1)]


@probe("test_augment_batch", "all random numbers drawn with `generator`: the global random states are left alone",
       "check_global_state_untouched", kind="rule", checks="global state")
def augment_global_state(ns, gen):
    imgs = torch.randint(0, 256, (6, 3, 16, 16), generator=gen, dtype=torch.uint8)
    return with_global_state(ns.augment_batch, imgs, _child(gen), size=8)


# ------------------------------------------------------------------------------ nt_xent_loss_loop, nt_xent_loss
_NT_SHAPES = [(1, 4, 0.5), (2, 3, 0.1), (5, 16, 0.5), (17, 8, 1.0), (24, 32, 0.2), (8, 32, 0.02)]


def _pairs(gen, dtype):
    for n, d, tau in _NT_SHAPES:
        z1 = torch.randn(n, d, generator=gen, dtype=torch.float64) * 3
        z2 = z1 + torch.randn(n, d, generator=gen, dtype=torch.float64)  # positives are similar
        yield z1.to(dtype), z2.to(dtype), tau


_LOOP_SHAPES = [(1, 4, 0.5), (2, 3, 0.1), (5, 16, 0.5), (9, 8, 1.0), (12, 32, 0.2), (6, 32, 0.02)]


def _loop_pairs(gen, dtype):
    for n, d, tau in _LOOP_SHAPES:
        z1 = torch.randn(n, d, generator=gen, dtype=torch.float64) * 3
        z2 = z1 + torch.randn(n, d, generator=gen, dtype=torch.float64)
        yield z1.to(dtype), z2.to(dtype), tau


# A dtype slip of NT-Xent costs a dtype rule's share only: each float64 probe is read twice, for its values
# (NT_XENT) and for its dtype and precision (NT_XENT_DTYPE).
# nt_xent_loss_loop: the test cell's 2 points, shared by the weights below
@probe("test_nt_xent_loss_loop", "mean over the 2N anchors of l_i, every k != i in the denominator (float64 in, 0-dim "
       "out)", "NT_XENT", weight=2, main=True)
@probe("test_nt_xent_loss_loop", "the input's dtype kept (float64, with its precision)", "NT_XENT_DTYPE", weight=0.25,
       kind="rule", checks="dtype")
def nt_xent_loop_float64(ns, gen):
    return [attempt(ns.nt_xent_loss_loop, z1, z2, tau) for z1, z2, tau in _loop_pairs(gen, torch.float64)]


@probe("test_nt_xent_loss_loop", "the input's dtype kept (float32)", "NT_XENT_DTYPE", weight=0.25, kind="rule",
       checks="dtype")
def nt_xent_loop_float32(ns, gen):
    return [attempt(ns.nt_xent_loss_loop, z1, z2, tau) for z1, z2, tau in _loop_pairs(gen, torch.float32)]


@probe("test_nt_xent_loss_loop", "torch operations: differentiable", "NT_XENT_SAME", kind="property")
def nt_xent_loop_gradient(ns, gen):
    z1 = torch.randn(5, 4, generator=gen, dtype=torch.float64, requires_grad=True)
    z2 = torch.randn(5, 4, generator=gen, dtype=torch.float64, requires_grad=True)
    ns.nt_xent_loss_loop(z1, z2, 0.3).backward()
    return [z1.grad, z2.grad]


# nt_xent_loss: the test cell's 3 points, shared by the weights below
@probe("test_nt_xent_loss", "mean NT-Xent over the 2N views (float64 in, 0-dim out)", "NT_XENT", weight=2, main=True)
@probe("test_nt_xent_loss", "the input's dtype kept (float64, with its precision)", "NT_XENT_DTYPE", weight=0.25,
       kind="rule", checks="dtype")
def nt_xent_float64(ns, gen):
    return [attempt(ns.nt_xent_loss, z1, z2, tau) for z1, z2, tau in _pairs(gen, torch.float64)]


@probe("test_nt_xent_loss", "the input's dtype kept (float32)", "NT_XENT_DTYPE", weight=0.25, kind="rule",
       checks="dtype")
def nt_xent_float32(ns, gen):
    return [attempt(ns.nt_xent_loss, z1, z2, tau) for z1, z2, tau in _pairs(gen, torch.float32)]


@probe("test_nt_xent_loss", "differentiable: the gradient a training step needs", "NT_XENT_SAME", kind="property")
def nt_xent_gradient(ns, gen):
    z1 = torch.randn(6, 5, generator=gen, dtype=torch.float64, requires_grad=True)
    z2 = torch.randn(6, 5, generator=gen, dtype=torch.float64, requires_grad=True)
    ns.nt_xent_loss(z1, z2, 0.3).backward()
    return [z1.grad, z2.grad]


# the input checks are given code in the answer cell: reported, worth nothing
@probe("test_nt_xent_loss", "a ValueError unless z1 and z2 are two [N, d] of one shape", "RAISES_VALUE_ERROR", weight=0,
       kind="given", checks="raises")
def nt_xent_rejects_shapes(ns, gen):
    f = ns.nt_xent_loss
    return [attempt(f, torch.randn(4, 8, generator=gen), torch.randn(5, 8, generator=gen), 0.5),
            attempt(f, torch.randn(4, 8, generator=gen), torch.randn(4, 6, generator=gen), 0.5),
            attempt(f, torch.randn(8, generator=gen), torch.randn(8, generator=gen), 0.5)]


@probe("test_nt_xent_loss", "a ValueError for a temperature that is not positive", "RAISES_VALUE_ERROR", weight=0,
       kind="given", checks="raises")
def nt_xent_rejects_temperature(ns, gen):
    z1, z2 = torch.randn(4, 8, generator=gen), torch.randn(4, 8, generator=gen)
    return [attempt(ns.nt_xent_loss, z1, z2, 0.0), attempt(ns.nt_xent_loss, z1, z2, -0.5)]


# ------------------------------------------------------------------------------ ProjectionHead
def _head_run(ns, gen, in_dim, hidden, out_dim, default_dims=False):
    """Build the student's head (seeded init), put known weights into its Linear layers (found by
    shape), run a batch through it in train mode and backpropagate. BatchNorm keeps its initial
    affine parameters (1 and 0); a bias before BatchNorm cancels out in train mode."""
    torch.manual_seed(_seed(gen))
    head = ns.ProjectionHead(in_dim) if default_dims else ns.ProjectionHead(in_dim, hidden, out_dim)
    w1 = torch.randn(hidden, in_dim, generator=gen) / in_dim ** 0.5
    w2 = torch.randn(out_dim, hidden, generator=gen) / hidden ** 0.5
    b2 = torch.randn(out_dim, generator=gen)
    with torch.no_grad():
        for p in head.parameters():
            for known in (w1, w2, b2):
                if tuple(p.shape) == tuple(known.shape):
                    p.copy_(known)
    head.train()
    h = (torch.randn(12, in_dim, generator=gen) * 2 + 1).requires_grad_(True)
    out = head(h)
    return head, h, out, (w1, w2, b2)


# ProjectionHead: the test cell's 2 points, shared by the weights below
@probe("test_projection_head", "output of Linear -> BatchNorm1d -> ReLU -> Linear (with known weights, train mode)",
       "HEAD", weight=2, function="ProjectionHead", main=True)
def head_values(ns, gen):
    _, _, out, _ = _head_run(ns, gen, 20, 48, 8)
    return out


@probe("test_projection_head", "gradients flow to the input and both Linear layers", "HEAD_LOOSE", kind="property",
       function="ProjectionHead")
def head_gradients(ns, gen):
    head, h, out, known = _head_run(ns, gen, 20, 48, 8)
    (out * torch.randn(out.shape, generator=gen)).sum().backward()
    grads = {tuple(p.shape): p.grad for p in head.parameters() if tuple(p.shape) in [tuple(k.shape) for k in known]}
    return [h.grad] + [grads.get(tuple(k.shape)) for k in known]


# the defaults are the given signature's
@probe("test_projection_head", "defaults hidden_dim=1024, out_dim=128", "HEAD", weight=0, kind="given",
       checks="arguments", function="ProjectionHead")
def head_defaults(ns, gen):
    _, _, out, _ = _head_run(ns, gen, 24, 1024, 128, default_dims=True)
    return out


# ------------------------------------------------------------------------------ simclr_train_step
class ScriptedViews:
    """A deterministic stand-in for the augmentation: the k-th call returns a fixed noisy copy."""

    def __init__(self, noise: list):
        self.noise, self.calls = noise, 0

    def __call__(self, images, generator=None, **kwargs):
        k = self.calls % len(self.noise)
        self.calls += 1
        return images.float() / 255 + self.noise[k]


class DrawingViews:
    """An augmentation that draws its noise from the generator it is called with (torch's global one when
    it gets none), as the given simclr_augment does."""

    def __init__(self):
        self.calls = 0

    def __call__(self, images, generator=None, **kwargs):
        self.calls += 1
        return images.float() / 255 + 0.1 * torch.randn(images.shape, generator=generator)


def _tiny_models(gen, side: int = 6):
    torch.manual_seed(_seed(gen))
    encoder = nn.Sequential(nn.Flatten(), nn.Linear(3 * side * side, 24), nn.BatchNorm1d(24), nn.ReLU())
    head = nn.Sequential(nn.Linear(24, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 8))
    opt = torch.optim.SGD([*encoder.parameters(), *head.parameters()], lr=0.2, momentum=0.9, weight_decay=1e-3)
    return encoder, head, opt


def _snapshot(encoder, head):
    return [p.detach().clone() for p in [*encoder.parameters(), *head.parameters()]]


# simclr_train_step: the test cell's 3 points, shared by the weights below
@probe("test_simclr_train_step", "augment called twice, once per view", "check_step_augment_calls", kind="property")
@probe("test_simclr_train_step", "loss and parameters after two steps (one batch of 2N, NT-Xent on the halves, one "
       "optimiser step)", "check_step_values", weight=3, main=True)
@probe("test_simclr_train_step", "BatchNorm sees both views in one forward pass", "check_step_batchnorm",
       kind="property")
def train_step_two_steps(ns, gen):
    images = torch.randint(0, 256, (10, 3, 6, 6), generator=gen, dtype=torch.uint8)
    encoder, head, opt = _tiny_models(gen)
    steps = []
    for _ in range(2):  # a forgotten zero_grad or a stale momentum shows in the second step
        views = ScriptedViews([0.1 * torch.randn(images.shape, generator=gen) for _ in range(2)])
        loss = ns.simclr_train_step(encoder, head, opt, images, temperature=0.3, augment=views)
        steps.append({"loss": loss, "params": _snapshot(encoder, head),
                      "running_mean": encoder[2].running_mean.clone(), "augment_calls": views.calls})
    return steps


@probe("test_simclr_train_step", "returns the loss detached, a 0-dim float32 tensor", "check_step_detached",
       weight=0.25, kind="rule", checks="return type")
def train_step_returns_detached(ns, gen):
    images = torch.randint(0, 256, (8, 3, 6, 6), generator=gen, dtype=torch.uint8)
    encoder, head, opt = _tiny_models(gen)
    views = ScriptedViews([0.1 * torch.randn(images.shape, generator=gen) for _ in range(2)])
    return ns.simclr_train_step(encoder, head, opt, images, temperature=0.5, augment=views)


@probe("test_simclr_train_step", "augment=None uses the given simclr_augment", "check_step_default_augment",
       weight=0.25, kind="rule", checks="arguments")
def train_step_default_augment(ns, gen):
    """augment=None: the step must fall back on the given simclr_augment, here a scripted stand-in (in the
    notebook's names and in utils.vision, for a student who calls vision.simclr_augment)."""
    images = torch.randint(0, 256, (8, 3, 6, 6), generator=gen, dtype=torch.uint8)
    encoder, head, opt = _tiny_models(gen)
    views = ScriptedViews([0.1 * torch.randn(images.shape, generator=gen) for _ in range(2)])
    from utils import vision

    names = object.__getattribute__(ns, "_names")
    original = vision.simclr_augment
    # every name bound to the given function (a student's alias `default_aug = simclr_augment` too)
    aliases = [k for k, v in list(names.items()) if v is original or k == "simclr_augment"]
    saved = {k: names.get(k) for k in aliases}
    step = names.get("simclr_train_step")
    saved_defaults = getattr(step, "__defaults__", None), getattr(step, "__kwdefaults__", None)
    for k in aliases:
        names[k] = views
    vision.simclr_augment = views
    try:   # ... and a default argument `augment=simclr_augment`
        if saved_defaults[0]:
            step.__defaults__ = tuple(views if d is original else d for d in saved_defaults[0])
        if saved_defaults[1]:
            step.__kwdefaults__ = {k: views if d is original else d for k, d in saved_defaults[1].items()}
    except (AttributeError, TypeError):
        pass
    try:
        loss = ns.simclr_train_step(encoder, head, opt, images, temperature=0.5, generator=_child(gen))
    finally:
        names.update(saved)
        vision.simclr_augment = original
        try:
            step.__defaults__, step.__kwdefaults__ = saved_defaults
        except (AttributeError, TypeError):
            pass
    return {"loss": loss, "params": _snapshot(encoder, head), "augment_calls": views.calls}


@probe("test_simclr_train_step", "with autocast_dtype=bfloat16: encoder and head under autocast, trains, float32 loss",
       "check_step_bf16", kind="property")
def train_step_bf16(ns, gen):
    images = torch.randint(0, 256, (8, 3, 6, 6), generator=gen, dtype=torch.uint8)
    encoder, head, opt = _tiny_models(gen)
    before = _snapshot(encoder, head)
    views = ScriptedViews([0.1 * torch.randn(images.shape, generator=gen) for _ in range(2)])
    dtypes: list[str] = []   # the dtype of the head's output: bfloat16 when it ran under autocast
    hook = head.register_forward_hook(lambda _m, _i, out: dtypes.append(str(getattr(out, "dtype", type(out).__name__))))
    try:
        loss = ns.simclr_train_step(encoder, head, opt, images, temperature=0.5, augment=views,
                                    autocast_dtype=torch.bfloat16)
    finally:
        hook.remove()
    return {"loss": loss, "changed": any(not torch.equal(a, b) for a, b in zip(before, _snapshot(encoder, head))),
            "head_dtypes": dtypes}


@probe("test_simclr_train_step", "augment called as augment(images, generator): the same seed gives the same step, "
       "another seed another", "check_step_generator", weight=0.25, kind="rule", checks="generator")
def train_step_generator(ns, gen):
    """Three steps from the same start, with generators seeded s, s and s + 1: the loss of the first two
    is the same, the third differs (the views come from the generator the step passes to augment)."""
    images = torch.randint(0, 256, (8, 3, 6, 6), generator=gen, dtype=torch.uint8)
    encoder, head, _ = _tiny_models(gen)
    s, losses = _seed(gen), []
    for seed in (s, s, s + 1):
        enc, hd = copy.deepcopy(encoder), copy.deepcopy(head)
        opt = torch.optim.SGD([*enc.parameters(), *hd.parameters()], lr=0.2, momentum=0.9)
        losses.append(ns.simclr_train_step(enc, hd, opt, images, temperature=0.5, augment=DrawingViews(),
                                           generator=torch.Generator().manual_seed(seed)))
    return losses


@probe("test_simclr_train_step", "augment called as augment(images, generator): the global random states are left "
       "alone", "check_global_state_untouched", weight=0.25, kind="rule", checks="global state")
def train_step_global_state(ns, gen):
    images = torch.randint(0, 256, (8, 3, 6, 6), generator=gen, dtype=torch.uint8)
    encoder, head, opt = _tiny_models(gen)
    return with_global_state(ns.simclr_train_step, encoder, head, opt, images, temperature=0.5,
                             augment=DrawingViews(), generator=_child(gen))


# ------------------------------------------------------------------------------ linear_probe_accuracy
def _blobs(gen, n, d, classes, spread):
    centres = torch.randn(classes, d, generator=gen) * 2
    labels = torch.randint(0, classes, (n,), generator=gen)
    return centres[labels] + spread * torch.randn(n, d, generator=gen), labels


def _correlated(gen, n):
    """Two classes told apart by x0 - x1 only: a shared noise hides them from a half-trained probe."""
    y = torch.randint(0, 2, (n,), generator=gen)
    noise = 3 * torch.randn(n, generator=gen)
    sign = 2 * y.float() - 1
    x = torch.stack([sign + noise, 0.1 * sign + noise + 0.2 * torch.randn(n, generator=gen)], dim=1)
    return torch.cat([x, torch.randn(n, 6, generator=gen)], dim=1), y


# linear_probe_accuracy: the test cell's 2 points, shared by the weights below
@probe("test_linear_probe_accuracy", "the test accuracy of the trained probe's logits on easy, hard and mislabelled "
       "test sets (a Python float)", "check_probe_accuracy", weight=2, main=True)
def probe_accuracy(ns, gen):
    """An easy, a correlated, a hard and a mislabelled test set: the accuracies spread from near 0 to near 1, so
    no constant is right for all four."""
    f, y = _blobs(gen, 900, 16, 4, 2.5)
    fc, yc = _correlated(gen, 800)
    fh, yh = _blobs(gen, 900, 8, 4, 5.0)
    fn = ns.linear_probe_accuracy
    return [fn(f[:600], y[:600], f[600:], y[600:], epochs=30, batch_size=1024),
            fn(fc[:500], yc[:500], fc[500:], yc[500:], epochs=40, lr=0.05, batch_size=250),
            fn(fh[:600], yh[:600], fh[600:], yh[600:], epochs=30, batch_size=1024),
            fn(f[:600], y[:600], f[600:], (y[600:] + 1) % 4, epochs=30, batch_size=1024)]


@probe("test_linear_probe_accuracy", "features standardised with the training mean and std", "check_probe_standardises")
def probe_standardises(ns, gen):
    f, y = _blobs(gen, 900, 16, 4, 2.5)
    scale = torch.logspace(-2, 3, 16)
    g = f * scale + 500
    fn = ns.linear_probe_accuracy
    return [fn(f[:600], y[:600], f[600:], y[600:], epochs=30, batch_size=1024),
            fn(g[:600], y[:600], g[600:], y[600:], epochs=30, batch_size=1024),
            fn(g[:600], y[:600], g[600:], (y[600:] + 1) % 4, epochs=30, batch_size=1024)]


@probe("test_linear_probe_accuracy", "the caller's tensors are left unchanged", "check_probe_inputs_unchanged",
       weight=0.25, kind="rule", checks="mutation")
def probe_inputs_unchanged(ns, gen):
    f, y = _blobs(gen, 300, 8, 3, 2.0)
    f = f * 5 + 3
    copy = f.clone()
    ns.linear_probe_accuracy(f[:200], y[:200], f[200:], y[200:], epochs=2)
    return [f, copy]


# the shape checks, the seeded shuffle and the training loop are given code: reported, worth nothing
@probe("test_linear_probe_accuracy", "two calls with the same seed give the same result", "check_probe_deterministic",
       weight=0, kind="given", checks="generator")
def probe_deterministic(ns, gen):
    """Four calls with seed=3 after 2 epochs of mini-batches of 32, scored on 1000 points: a shuffle that
    ignores the seed gave four equal accuracies in none of 40 trials (two calls of 10 epochs on 200 test
    points, the probe before, agreed in 9 of 40)."""
    f, y = _blobs(gen, 1400, 8, 3, 3.0)
    fn = ns.linear_probe_accuracy
    return [fn(f[:400], y[:400], f[400:], y[400:], epochs=2, batch_size=32, seed=3) for _ in range(4)]


@probe("test_linear_probe_accuracy", "the test set plays no part in training", "check_probe_test_set_unused", weight=0,
       kind="given")
def probe_test_set_unused(ns, gen):
    f, y = _blobs(gen, 600, 8, 4, 0.3)
    wrong = (y[400:] + 1) % 4
    fn = ns.linear_probe_accuracy
    return [fn(f[:400], y[:400], f[400:], y[400:], epochs=30, batch_size=1024),
            fn(f[:400], y[:400], f[400:], wrong, epochs=30, batch_size=1024)]


@probe("test_linear_probe_accuracy", "a ValueError for features and labels of inconsistent shapes",
       "RAISES_VALUE_ERROR", weight=0, kind="given", checks="raises")
def probe_rejects(ns, gen):
    f, y = _blobs(gen, 300, 8, 3, 2.0)
    fn = ns.linear_probe_accuracy
    return [attempt(fn, f[:200], y[:10], f[200:], y[200:], epochs=1),
            attempt(fn, f[:200], y[:200], f[200:, :5], y[200:], epochs=1),
            attempt(fn, f[:200], y[:200], f[200:], y[200:250], epochs=1)]


# ------------------------------------------------------------------------------ knn_accuracy
def _knn_data(gen):
    f, y = _blobs(gen, 420, 8, 5, 2.0)
    f = f.double() * (0.1 + 10 * torch.rand(420, 1, generator=gen, dtype=torch.float64))  # norms carry no class
    return f[:300], y[:300], f[300:], y[300:]


# knn_accuracy: the test cell's 2 points, shared by the weights below
@probe("test_knn_accuracy", "cosine kNN majority vote, ties to the smallest class id (a Python float)",
       "check_knn_values", weight=2, main=True)
def knn_values(ns, gen):
    tr, ytr, te, yte = _knn_data(gen)
    return [attempt(ns.knn_accuracy, tr, ytr, te, yte, k=k) for k in (1, 4, 10, 25, 300)]


@probe("test_knn_accuracy", "the result does not depend on batch_size", "check_knn_values")
def knn_chunked(ns, gen):
    tr, ytr, te, yte = _knn_data(gen)
    return [attempt(ns.knn_accuracy, tr, ytr, te, yte, k=k, batch_size=7) for k in (1, 10, 300)]


@probe("test_knn_accuracy", "a ValueError when k is not between 1 and N (given code)", "RAISES_VALUE_ERROR", weight=0,
       kind="given", checks="raises")
def knn_rejects_k(ns, gen):
    tr, ytr, te, yte = _knn_data(gen)
    return [attempt(ns.knn_accuracy, tr, ytr, te, yte, k=0), attempt(ns.knn_accuracy, tr, ytr, te, yte, k=301)]
