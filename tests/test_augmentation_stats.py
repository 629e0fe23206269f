"""Task A's augmentations draw what torchvision's per-image SimCLR recipe draws (CPU, about a minute).

Compared with torchvision's own ``RandomResizedCrop`` parameters (``make_params``, 20,000 draws, the
reference) and the recipe's rates (flip 0.5, colour jitter 0.8, grayscale 0.2):

* the given ``utils.vision.simclr_augment`` on the CPU (torchvision v2, one image at a time);
* its batched path, kornia (``batched=True``; what a GPU runs), called once per batch;
* the same kornia path inside ``vision.train_loop``, where it augments many batches in one call
  (``BatchPlan``): the chunking must not change the distribution, and the served views must be views of
  the very images of the batch;
* the extension's ``augment_batch`` (model solution).

Each is measured from its outputs, 20,000 draws per statistic: crops of ramp images (channel 0 runs
left to right, channel 1 top to bottom) give each crop's box and flip; images of random colours with
the crop switched off give the grayscale rate (all channels equal) and the jitter rate (an image that
is not gray and not the input). Tolerances, stated once in ``TOLERANCE``: crop area's mean within
0.02 and its 10/50/90 % quantiles within 0.03 (torchvision rounds boxes to whole pixels, the batched
crops do not: 0.550 against 0.538); the mean and standard deviation of the log aspect ratio within
0.02; the mean intersection over union of the two views' boxes of one image within 0.015; rates
within 5 binomial standard errors. The crop sampler that clipped oversize boxes to the image
instead of drawing them again (mean area 0.593, mean overlap 0.534) fails the area and the overlap
(``test_a_clipping_sampler_fails``), so the tolerances can fail.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from grader.checks.taskA_simclr import _read_crop_geometry, solution_namespace
from grader.probes.taskA_simclr import _profiles, _ramps
from utils import vision

N = 20_000
SCALE, RATIO = (0.2, 1.0), (3 / 4, 4 / 3)
RATES = {"flip": 0.5, "jitter": 0.8, "gray": 0.2}  # the recipe's probabilities
TOLERANCE = {"area_mean": 0.02, "area_quantiles": 0.03, "log_aspect": 0.02, "overlap": 0.015, "sigmas": 5.0}


# ------------------------------------------------------------------------------------ measuring
def boxes(views: torch.Tensor) -> dict:
    """Each crop's box (fractions of the image: width, height, left, top) and flip, read off the views of
    ramp images."""
    geo = _read_crop_geometry(_profiles(views.float()), 32, 32)
    (fw, left, resid_x), (fh, top, resid_y) = geo["x"], geo["y"]
    assert max(resid_x, resid_y) < 3e-3, "the views of a ramp are not ramps: not an axis-aligned crop"
    flipped = fw < 0
    left = torch.where(flipped, left + fw, left)  # a flipped crop's profile starts at its right edge
    return {"w": fw.abs(), "h": fh, "left": left, "top": top, "flipped": flipped}


def torchvision_boxes(n: int, seed: int) -> dict:
    """``n`` draws of torchvision's RandomResizedCrop parameters for a 32x32 image (the reference)."""
    from torchvision.transforms import v2

    crop = v2.RandomResizedCrop(32, scale=SCALE, ratio=RATIO)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        params = [crop.make_params([torch.zeros(3, 32, 32)]) for _ in range(n)]
    as_fraction = lambda key: torch.tensor([p[key] for p in params], dtype=torch.float64) / 32  # noqa: E731
    return {"w": as_fraction("width"), "h": as_fraction("height"), "left": as_fraction("left"),
            "top": as_fraction("top"), "flipped": torch.rand(n, generator=torch.Generator().manual_seed(seed)) < 0.5}


def crop_stats(first: dict, second: dict) -> dict:
    """Area and aspect statistics of ``first``; mean intersection over union of the two views' boxes."""
    area = first["w"] * first["h"]
    log_aspect = (first["w"] / first["h"]).log()
    inter_w = (torch.minimum(first["left"] + first["w"], second["left"] + second["w"])
               - torch.maximum(first["left"], second["left"])).clamp(min=0)
    inter_h = (torch.minimum(first["top"] + first["h"], second["top"] + second["h"])
               - torch.maximum(first["top"], second["top"])).clamp(min=0)
    inter = inter_w * inter_h
    union = area + second["w"] * second["h"] - inter
    return {"area_mean": float(area.mean()),
            "area_quantiles": [float(q) for q in torch.quantile(area.double(), torch.tensor([0.1, 0.5, 0.9]).double())],
            "log_aspect_mean": float(log_aspect.mean()), "log_aspect_std": float(log_aspect.std()),
            "overlap": float((inter / union).mean()), "flip": float(first["flipped"].double().mean()),
            "n": len(area)}


def colour_rates(images: torch.Tensor, views: torch.Tensor) -> dict:
    """Grayscale rate and, among the views that are not gray, the rate of jittered ones."""
    gray = (views - views[:, :1]).abs().amax(dim=(1, 2, 3)) < 1e-4
    changed = (views - images).abs().amax(dim=(1, 2, 3)) > 1e-4
    return {"gray": float(gray.double().mean()), "jitter": float(changed[~gray].double().mean()),
            "n_gray": len(gray), "n_jitter": int((~gray).sum())}


def colourful(n: int) -> torch.Tensor:
    """``n`` 8x8 images of random, saturated colours in [0.2, 0.8] (none is gray)."""
    return 0.2 + 0.6 * torch.rand(n, 3, 8, 8, generator=torch.Generator().manual_seed(5))


# ------------------------------------------------------------------------------------ the pipelines
def _two_views(augment) -> tuple[dict, dict]:
    ramps = _ramps(N, 32, 32)
    return (boxes(augment(ramps, torch.Generator().manual_seed(1))),
            boxes(augment(ramps, torch.Generator().manual_seed(2))))


def _planned_views(*, crop: bool, colour: bool, images: torch.Tensor, size: int = 32) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Both views of every image as ``vision.train_loop`` serves them to a step function from its plan
    (kornia on chunks of many batches), with the images of each batch."""
    seen = []
    gen = torch.Generator().manual_seed(3)

    def step(batch, _labels):
        first = vision.simclr_augment(batch, gen, size=size, crop=crop, colour=colour, batched=True)
        second = vision.simclr_augment(batch, gen, size=size, crop=crop, colour=colour, batched=True)
        seen.append((batch, first, second))
        return torch.zeros(())

    dummy = torch.nn.Linear(1, 1)
    vision.train_loop(step, {"dummy": dummy}, torch.optim.SGD(dummy.parameters(), lr=0.0), images, epochs=1,
                      batch_size=500, desc="planned views")
    return tuple(torch.cat(parts) for parts in zip(*seen))


@pytest.fixture(scope="module")
def ns():
    return solution_namespace()


@pytest.fixture(scope="module")
def reference():
    return crop_stats(torchvision_boxes(N, 0), torchvision_boxes(N, 1))


def _given_cpu(x, g, **kw):
    return vision.simclr_augment(x, g, **kw)


def _kornia(x, g, **kw):
    return vision.simclr_augment(x, g, batched=True, **kw)


def _batched_solution(ns):
    def augment(x, g, crop=True, colour=True, size=32):
        off = {} if crop else dict(scale=(1, 1), ratio=(1, 1), flip_p=0.0)
        rates = {} if colour else dict(jitter_p=0.0, gray_p=0.0)
        return ns["augment_batch"](x, g, size=size, **off, **rates)
    return augment


PIPELINES = ["given per image (CPU)", "given batched (kornia)", "given batched in train_loop (kornia, chunked)",
             "augment_batch (extension)"]


def _pipeline_crop_stats(name, ns):
    if name == "given batched in train_loop (kornia, chunked)":
        _, first, second = _planned_views(crop=True, colour=False, images=_ramps(N, 32, 32))
        return crop_stats(boxes(first), boxes(second))
    augment = {"given per image (CPU)": _given_cpu, "given batched (kornia)": _kornia,
               "augment_batch (extension)": _batched_solution(ns)}[name]
    return crop_stats(*_two_views(lambda x, g: augment(x, g, colour=False)))


def _pipeline_colour_rates(name, ns):
    images = colourful(N)
    if name == "given batched in train_loop (kornia, chunked)":
        batches, first, _ = _planned_views(crop=False, colour=True, images=images, size=8)
        return colour_rates(batches, first)
    augment = {"given per image (CPU)": _given_cpu, "given batched (kornia)": _kornia,
               "augment_batch (extension)": _batched_solution(ns)}[name]
    return colour_rates(images, augment(images, torch.Generator().manual_seed(4), size=8, crop=False))


# ------------------------------------------------------------------------------------ the checks
def assert_crops_match(got: dict, ref: dict, what: str) -> None:
    tol = TOLERANCE
    assert abs(got["area_mean"] - ref["area_mean"]) <= tol["area_mean"], (
        f"{what}: mean crop area {got['area_mean']:.4f}, torchvision {ref['area_mean']:.4f}")
    for q, g, r in zip((10, 50, 90), got["area_quantiles"], ref["area_quantiles"]):
        assert abs(g - r) <= tol["area_quantiles"], f"{what}: {q} % quantile of the crop area {g:.4f}, torchvision {r:.4f}"
    assert abs(got["log_aspect_mean"] - ref["log_aspect_mean"]) <= tol["log_aspect"], (
        f"{what}: mean log aspect ratio {got['log_aspect_mean']:.4f}, torchvision {ref['log_aspect_mean']:.4f}")
    assert abs(got["log_aspect_std"] - ref["log_aspect_std"]) <= tol["log_aspect"], (
        f"{what}: spread of the log aspect ratio {got['log_aspect_std']:.4f}, torchvision {ref['log_aspect_std']:.4f}")
    assert abs(got["overlap"] - ref["overlap"]) <= tol["overlap"], (
        f"{what}: mean overlap (IoU) of two views {got['overlap']:.4f}, torchvision {ref['overlap']:.4f}")
    assert_rate(got["flip"], RATES["flip"], got["n"], f"{what}: flip rate")


def assert_rate(rate: float, p: float, n: int, what: str) -> None:
    se = math.sqrt(p * (1 - p) / n)
    assert abs(rate - p) <= TOLERANCE["sigmas"] * se, f"{what} {rate:.4f}, expected {p} within {TOLERANCE['sigmas']:.0f} x {se:.4f}"


pytestmark = pytest.mark.filterwarnings("ignore:Detected call of:UserWarning")


@pytest.mark.parametrize("name", PIPELINES)
def test_crops_match_torchvision(name, ns, reference):
    got = _pipeline_crop_stats(name, ns)
    print(f"{name}: {got} | torchvision: {reference}")
    assert_crops_match(got, reference, name)


@pytest.mark.parametrize("name", PIPELINES)
def test_colour_rates_match_the_recipe(name, ns):
    got = _pipeline_colour_rates(name, ns)
    print(f"{name}: {got}")
    assert_rate(got["gray"], RATES["gray"], got["n_gray"], f"{name}: grayscale rate")
    assert_rate(got["jitter"], RATES["jitter"], got["n_jitter"], f"{name}: jitter rate (views that are not gray)")


def test_planned_views_are_views_of_the_batch():
    """With both switches off the batched path returns the images themselves: every served view is of
    the batch the loop handed over, in order, and the two views of a batch come from one chunk."""
    images = torch.randint(0, 256, (2_000, 3, 32, 32), generator=torch.Generator().manual_seed(6), dtype=torch.uint8)
    batches, first, second = _planned_views(crop=False, colour=False, images=images)
    assert len(batches) == 2_000
    assert torch.allclose(first, batches.float() / 255, atol=1e-6) and torch.allclose(second, first)


def test_planned_views_are_reproducible_and_independent():
    images = _ramps(2_000, 32, 32)
    one = _planned_views(crop=True, colour=False, images=images)
    again = _planned_views(crop=True, colour=False, images=images)
    assert torch.equal(one[1], again[1]) and torch.equal(one[2], again[2]), "the same generator, the same views"
    assert not torch.equal(one[1], one[2]), "the two views of a batch must be different draws"


def _clipping_crop_flip(images, generator=None, size=32, *, scale=SCALE, ratio=RATIO):
    """The extension's former crop sampler: an oversize box clipped to the image instead of drawn again."""
    n = len(images)
    u = torch.rand(n, 5, generator=generator)
    area = scale[0] + (scale[1] - scale[0]) * u[:, 0]
    aspect = torch.exp(math.log(ratio[0]) + (math.log(ratio[1]) - math.log(ratio[0])) * u[:, 1])
    w, h = (area * aspect).sqrt().clamp(max=1), (area / aspect).sqrt().clamp(max=1)
    theta = torch.zeros(n, 2, 3)
    theta[:, 0, 0] = torch.where(u[:, 4] < 0.5, -w, w)
    theta[:, 0, 2] = (w / 2 + u[:, 2] * (1 - w)) * 2 - 1
    theta[:, 1, 1] = h
    theta[:, 1, 2] = (h / 2 + u[:, 3] * (1 - h)) * 2 - 1
    grid = F.affine_grid(theta, [n, 3, size, size], align_corners=False)
    return F.grid_sample(images, grid, mode="bilinear", padding_mode="border", align_corners=False)


def test_a_clipping_sampler_fails(reference):
    got = crop_stats(*_two_views(_clipping_crop_flip))
    print(f"clipping sampler: {got} | torchvision: {reference}")
    with pytest.raises(AssertionError, match="mean crop area"):
        assert_crops_match(got, reference, "clipping sampler")
    assert abs(got["overlap"] - reference["overlap"]) > TOLERANCE["overlap"], (got["overlap"], reference["overlap"])
