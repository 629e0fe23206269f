"""The judge's cases for Task A (SimCLR on CIFAR-10), compared outside the sandbox.

Each case is declared by its probe in grader/probes/taskA_simclr.py (where it says, in the words of the task text,
what it checks); this module holds the comparators it names. Deterministic functions (NT-Xent, the head, the
training step, kNN) are compared with the solution's value from the same probe; the random augmentations are judged
by properties of what they returned (shapes, ranges, per-image factors read back from the outputs, rates,
independence, reproducibility with a generator, other draws for another seed, global random states left alone), and
the linear probe by its accuracy against the solution's. Every requirement is written in the notebook above the
answer cell or in its docstring.

:func:`solution_namespace` loads the model solution's functions from the source notebook, for the
pack's own tests and benchmarks (TA side only).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from grader.compare import (SIGMAS, as_detached_scalar, as_items, as_tensor_like, describe, expect_dtype_kept,
                            expect_raises, expect_same, global_states_moved, within_binomial)
from grader.evidence import Raised
from grader.cases import declared_cases, function_tables
from grader.probes.taskA_simclr import PROBES
from utils.notebook_cells import run_cells

_SOLUTION = Path(__file__).resolve().parents[2] / "solutions" / "ex01" / "taskA_simclr.ipynb"
_FUNCTION_CELLS = ("random_resized_crop_flip", "colour_distort", "augment_batch", "nt_xent_loss_loop", "nt_xent_loss",
                   "projection_head", "simclr_train_step", "linear_probe_accuracy", "knn_accuracy")


def solution_namespace(notebook: Path = _SOLUTION) -> dict:
    """Execute the notebook's function-defining cells (not the training) and return their namespace:
    ``simclr_augment`` (given, utils/vision.py), ``augment_batch`` (the extension's batched version),
    ``nt_xent_loss_loop``, ``nt_xent_loss``, ``ProjectionHead``, ``simclr_train_step``, ... ."""
    from utils import vision   # torchvision: only when the reference is run

    ns = {"math": math, "torch": torch, "nn": nn, "F": F, "vision": vision, "np": np,
          "simclr_augment": vision.simclr_augment}
    return run_cells(notebook, _FUNCTION_CELLS, ns)


# =============================================================================== helpers
def _in_unit_range(x: torch.Tensor, where: str) -> None:
    lo, hi = float(x.min()), float(x.max())
    if lo < -1e-6 or hi > 1 + 1e-6:
        raise AssertionError(f"{where}: values range over [{lo:.3f}, {hi:.3f}], expected within [0, 1]")


def _pairwise_distinct(out: torch.Tensor, what: str) -> None:
    flat = out.detach().double().reshape(len(out), -1)
    dist = torch.cdist(flat, flat, compute_mode="donot_use_mm_for_euclid_dist")
    dist.fill_diagonal_(float("inf"))
    if float(dist.min()) < 1e-6:
        raise AssertionError(f"{what}: two copies of the same image came out identical; every image must get "
                             "its own random parameters (transforms.v2 on a batch draws ONE set for all images)")


def check_reproducible(got, ref) -> None:
    a, b, c = as_items(got, ref)
    a, b, c = (as_tensor_like(t, r, f"call {i + 1}") for i, (t, r) in enumerate(zip((a, b, c), ref)))
    if not torch.equal(a, b):
        raise AssertionError("two calls with equally seeded generators gave different results: draw every random "
                             "number with `generator`")
    if torch.equal(a, c):
        raise AssertionError("differently seeded generators gave the same result: draw every random number with "
                             "`generator`")


def _result_like(got, ref) -> None:
    if isinstance(got, Raised):
        raise AssertionError(f"the call raised {got}")
    as_tensor_like(got, ref, "the call")


def check_global_state_untouched(got, ref) -> None:
    """The call returned a tensor of the reference's shape and dtype and left the global random states of
    torch, NumPy and Python as they were: every random number came from the given generator."""
    moved = global_states_moved(got, ref, _result_like)
    if moved:
        raise AssertionError(f"the call drew from {' and '.join(moved)}; draw every random number with `generator`")


# =============================================================================== the crop
def _read_crop_geometry(prof: dict, h: int, w: int) -> dict:
    """From the profiles of crops of ramp images (channel 0 along x, 1 along y): width/height fraction,
    left/top edge. A bilinear crop of a linear ramp is linear in the output pixel index; only interior
    pixels count."""
    size = prof["x"].shape[-1]
    j = torch.arange(size, dtype=torch.float64)
    inner = slice(2, size - 2)
    rows = prof["x"].double()[:, inner]
    cols = prof["y"].double()[:, inner]
    jj = j[inner]
    geo = {}
    for key, vals, extent in (("x", rows, w), ("y", cols, h)):
        jm = jj.mean()
        slope = ((vals - vals.mean(1, keepdim=True)) * (jj - jm)).sum(1) / ((jj - jm) ** 2).sum()
        intercept = vals.mean(1) - slope * jm
        frac = slope * size * (extent - 1) / extent
        start = (intercept * (extent - 1) + 0.5) / extent - 0.5 * frac / size
        resid = (vals - (intercept[:, None] + slope[:, None] * jj)).abs().max()
        geo[key] = (frac, start, float(resid))
    return geo


def check_crop_shapes(got, ref) -> None:
    for i, (g, r) in enumerate(zip(as_items(got, ref), ref)):
        as_tensor_like(g, r, f"call {i + 1}")


def check_crop_flip_rate(got, ref) -> None:
    x, out = ref["x"], as_tensor_like(as_items(got, ref)[1], ref["out"], "crops")
    same_ = (out - x).abs().amax(dim=(1, 2, 3)) < 1e-5
    mirrored = (out - x.flip(-1)).abs().amax(dim=(1, 2, 3)) < 1e-5
    if not bool((same_ | mirrored).all()):
        raise AssertionError("with a whole-image crop every output must be the image or its mirror image")
    k = int((mirrored & ~same_).sum())
    if not within_binomial(k, len(x), 0.5):
        raise AssertionError(f"flip_p=0.5 flipped {k} of {len(x)} images: flip each image independently with "
                             "probability flip_p")


def _profiles_like(got, ref, what) -> dict:
    items = as_items(got, ref)
    return {k: as_tensor_like(g, ref[k], f"{what} ({k} profile)") for k, g in zip(ref, items)}


def _geometry(got, ref, what):
    geo = _read_crop_geometry(_profiles_like(got, ref, what), 32, 32)
    if max(geo["x"][2], geo["y"][2]) > 3e-3:
        raise AssertionError("a crop of a linear ramp is not linear: resample an axis-aligned crop bilinearly")
    return geo


def check_crop_geometry(got, ref) -> None:
    (fw, left, _), (fh, top, _) = _geometry(got, ref, "crops").values()
    area, aspect = fw * fh, fw / fh
    if float(area.min()) < 0.1 - 0.01 or float(area.max()) > 0.5 + 0.01:
        raise AssertionError(f"crop areas range over [{float(area.min()):.3f}, {float(area.max()):.3f}] of the "
                             "image, expected within scale=(0.1, 0.5)")
    if float(area.min()) > 0.13 or float(area.max()) < 0.47 or abs(float(area.mean()) - 0.3) > 0.03:
        raise AssertionError(f"crop areas (mean {float(area.mean()):.3f}) are not uniform over scale=(0.1, 0.5)")
    if float(aspect.min()) < 0.5 * 0.97 or float(aspect.max()) > 2.0 * 1.03:
        raise AssertionError(f"aspect ratios range over [{float(aspect.min()):.3f}, {float(aspect.max()):.3f}], "
                             "expected within ratio=(0.5, 2)")
    tol = 1.0 / 32
    if float(left.min()) < -tol or float((left + fw).max()) > 1 + tol or float(top.min()) < -tol \
            or float((top + fh).max()) > 1 + tol:
        raise AssertionError("some crops reach outside the image: place each crop where it fits inside")
    for start, frac in ((left, fw), (top, fh)):
        free = 1 - frac
        t = (start / free.clamp(min=1e-6))[free > 0.3]
        if float(t.std()) < 0.2 or abs(float(t.mean()) - 0.5) > 0.1:
            raise AssertionError("crop positions are not spread uniformly over the places where the crop fits")


def check_crop_log_aspect(got, ref) -> None:
    (fw, _, _), (fh, _, _) = _geometry(got, ref, "crops").values()
    log_aspect = (fw / fh).log()
    n = len(log_aspect)
    wide = int((log_aspect > 0).sum())
    se = math.log(16) / math.sqrt(12 * n)
    if not within_binomial(wide, n, 0.5) or abs(float(log_aspect.mean())) > SIGMAS * se:
        raise AssertionError(f"ratio=(1/4, 4): {wide} of {n} crops are wider than tall (mean log aspect ratio "
                             f"{float(log_aspect.mean()):.3f}); a log-uniform aspect ratio gives half and 0")
    if float(log_aspect.min()) < math.log(0.25) - 0.05 or float(log_aspect.max()) > math.log(4) + 0.05:
        raise AssertionError("aspect ratios outside ratio=(1/4, 4)")


# scale=(0.6, 1), ratio=(1/2, 2) on a square image: a draw fits with probability 0.337, so ten tries fail for 1.6 %
# of the images (the whole image then) and the mean area is 0.7325 (0.726 when drawing until one fits, 0.908 with
# one try, 0.73 when clipping); clipping instead makes two thirds of the crops span exactly one full side.
_REDRAW_MEAN_AREA, _REDRAW_TOLERANCE = 0.7325, 0.035


def check_crop_redraw(got, ref) -> None:
    (fw, left, _), (fh, top, _) = _geometry(got, ref, "crops").values()
    area, n = fw * fh, len(fw)
    one_side = int(((fw > 0.99) ^ (fh > 0.99)).sum())
    if one_side > 0.2 * n:
        raise AssertionError(f"scale=(0.6, 1), ratio=(1/2, 2): {one_side} of {n} crops span the full width or height "
                             "but not both: a box that does not fit inside the image must be drawn again, not clipped")
    tol = 1.0 / 32
    if float(left.min()) < -tol or float((left + fw).max()) > 1 + tol or float(top.min()) < -tol \
            or float((top + fh).max()) > 1 + tol:
        raise AssertionError("some crops reach outside the image: place each crop where it fits inside")
    if float(area.min()) < 0.6 - 0.03 or abs(float(area.mean()) - _REDRAW_MEAN_AREA) > _REDRAW_TOLERANCE:
        raise AssertionError(f"scale=(0.6, 1), ratio=(1/2, 2): crop areas from {float(area.min()):.3f}, mean "
                             f"{float(area.mean()):.3f}; drawing a box again when it does not fit (up to 10 tries, then "
                             f"the whole image) gives areas within the scale and a mean of {_REDRAW_MEAN_AREA}")


def check_crop_flip_reverses(got, ref) -> None:
    if float(_read_crop_geometry(_profiles_like(got, ref, "crops"), 32, 32)["x"][0].max()) >= 0:
        raise AssertionError("flip_p=1: crops of a left-to-right ramp must run right to left")


def expect_independent(what):
    def check(got, ref) -> None:
        pairs = list(zip(as_items(got, ref), ref)) if isinstance(ref, list) else [(got, ref)]
        for i, (g, r) in enumerate(pairs):
            _pairwise_distinct(as_tensor_like(g, r, f"call {i + 1}"), what)
    return check


# =============================================================================== the colours
_LUMA = (0.299, 0.587, 0.114)


def _luma(x: torch.Tensor) -> torch.Tensor:
    return _LUMA[0] * x[:, 0] + _LUMA[1] * x[:, 1] + _LUMA[2] * x[:, 2]


def _per_image_blend(out: torch.Tensor, x: torch.Tensor, anchor: torch.Tensor) -> tuple[torch.Tensor, float]:
    """Least-squares f per image with out - anchor = f (x - anchor); (f [N], the max residual)."""
    d_in, d_out = (x - anchor).double(), (out - anchor).double()
    f = (d_in * d_out).sum(dim=(1, 2, 3)) / (d_in * d_in).sum(dim=(1, 2, 3))
    return f, float((d_out - f.view(-1, 1, 1, 1) * d_in).abs().max())


def expect_blend_factor(kind: str):
    def check(got, ref) -> None:
        x, out = ref["x"].double(), as_tensor_like(as_items(got, ref)[1], ref["out"], "output").double()
        if kind == "brightness":
            anchor, rule = torch.zeros_like(x), "out = b x"
        elif kind == "contrast":
            anchor, rule = _luma(x).mean(dim=(1, 2)).view(-1, 1, 1, 1).expand_as(x), "out = c x + (1 - c) mean gray"
        else:
            anchor, rule = _luma(x).unsqueeze(1).expand_as(x), "out = s x + (1 - s) gray"
        f, resid = _per_image_blend(out, x, anchor)
        if resid > 1e-4:
            raise AssertionError(f"{kind} only: each output must follow {rule} with one factor per image")
        if float(f.min()) < 0.6 - 1e-3 or float(f.max()) > 1.4 + 1e-3:
            raise AssertionError(f"{kind} factors range over [{float(f.min()):.3f}, {float(f.max()):.3f}], "
                                 "expected within [0.6, 1.4]")
        if float(f.min()) > 0.65 or float(f.max()) < 1.35 or abs(float(f.mean()) - 1) > 0.06:
            raise AssertionError(f"{kind} factors (mean {float(f.mean()):.3f}) are not uniform on [0.6, 1.4] "
                                 "image by image")
    return check


def check_colour_dtype_and_range(got, ref) -> None:
    items = as_items(got, ref)
    for i, (g, r) in enumerate(zip(items, ref)):
        as_tensor_like(g, r, f"call {i + 1}")
    _in_unit_range(items[2], "strong jitter")


def check_colour_jitter_rate(got, ref) -> None:
    x, out = ref["x"], as_tensor_like(as_items(got, ref)[1], ref["out"], "output")
    k = int(((out - x).abs().amax(dim=(1, 2, 3)) > 1e-4).sum())
    if not within_binomial(k, len(x), 0.5):
        raise AssertionError(f"jitter_p=0.5 changed {k} of {len(x)} images: jitter each image with probability "
                             "jitter_p")


def check_colour_gray_rate(got, ref) -> None:
    x, out = ref["x"], as_tensor_like(as_items(got, ref)[1], ref["out"], "output")
    is_gray = ((out[:, 0] - out[:, 1]).abs().amax(dim=(1, 2)) < 1e-5) & \
              ((out[:, 1] - out[:, 2]).abs().amax(dim=(1, 2)) < 1e-5)
    untouched = (out - x).abs().amax(dim=(1, 2, 3)) < 1e-5
    k = int(is_gray.sum())
    if not bool((is_gray | untouched).all()) or not within_binomial(k, len(x), 0.3):
        raise AssertionError(f"gray_p=0.3 turned {k} of {len(x)} images gray (and must leave the others alone)")


def check_colour_hue(got, ref) -> None:
    x, out = ref["x"], as_tensor_like(as_items(got, ref)[1], ref["out"], "output")
    half = x.shape[2] // 2  # the top half of every image is gray
    if float((out[:, :, :half] - x[:, :, :half]).abs().max()) > 1e-4:
        raise AssertionError("a hue shift changed gray pixels: rotate the colours around the gray axis")
    moved = int(((out - x)[:, :, half:].abs().amax(dim=(1, 2, 3)) > 1e-3).sum())
    if moved < len(x) - 9:
        raise AssertionError(f"a hue shift in [-0.3, 0.3] changed the colours of only {moved} of {len(x)} images")


# =============================================================================== augment_batch
def check_augment_uint8(got, ref) -> None:
    items = as_items(got, ref)
    for i, (g, r) in enumerate(zip(items, ref)):
        _in_unit_range(as_tensor_like(g, r, f"call {i + 1}"), f"call {i + 1}")


# =============================================================================== the training step
def check_step_augment_calls(got, ref) -> None:
    for i, step in enumerate(as_items(got, ref)):
        if not isinstance(step, dict) or step.get("augment_calls") != 2:
            calls = step.get("augment_calls") if isinstance(step, dict) else "?"
            raise AssertionError(f"step {i + 1} called augment {calls} times, expected 2 (one call per view)")


def check_step_values(got, ref) -> None:
    for i, (g, r) in enumerate(zip(as_items(got, ref), ref)):
        if not isinstance(g, dict):
            raise AssertionError(f"step {i + 1}: it {describe(g)}")
        loss = as_detached_scalar(g.get("loss"), f"step {i + 1}")
        if abs(float(loss) - float(r["loss"])) > 1e-4 + 1e-4 * abs(float(r["loss"])):
            raise AssertionError(f"step {i + 1}: the loss is off by {abs(float(loss) - float(r['loss'])):.3g} "
                                 "(NT-Xent on the two halves of one batch of 2N)")
        expect_same(rtol=1e-4, atol=1e-5)(g.get("params"), r["params"], f"parameters after step {i + 1}")


def check_step_batchnorm(got, ref) -> None:
    for i, (g, r) in enumerate(zip(as_items(got, ref), ref)):
        if not isinstance(g, dict):
            raise AssertionError(f"step {i + 1}: it {describe(g)}")
        expect_same(rtol=1e-4, atol=1e-5)(g.get("running_mean"), r["running_mean"],
                                   f"BatchNorm running mean after step {i + 1}")


def check_step_detached(got, ref) -> None:
    as_detached_scalar(got, "the returned loss")


def check_step_default_augment(got, ref) -> None:
    if not isinstance(got, dict) or got.get("augment_calls") != 2:
        raise AssertionError("with augment=None the step must call the given simclr_augment (twice, once per view)")
    loss = as_detached_scalar(got.get("loss"), "the returned loss")
    if abs(float(loss) - float(ref["loss"])) > 1e-4 + 1e-4 * abs(float(ref["loss"])):
        raise AssertionError("with augment=None the loss is not that of two simclr_augment views")
    expect_same(rtol=1e-4, atol=1e-5)(got.get("params"), ref["params"], "parameters after the step")


def check_step_bf16(got, ref) -> None:
    loss, changed, head_dtypes = as_items(got, ref)
    as_detached_scalar(loss, "the loss under autocast_dtype=torch.bfloat16")
    if changed is not True:
        raise AssertionError("with autocast_dtype=torch.bfloat16 the step did not change the parameters")
    if head_dtypes != ["torch.bfloat16"]:
        raise AssertionError(f"with autocast_dtype=torch.bfloat16 the head's output came as {head_dtypes}, expected "
                             "one bfloat16 batch: run the encoder and head under torch.autocast")


def check_step_generator(got, ref) -> None:
    """Steps from the same start with generators seeded s, s, s + 1 (an augmentation that draws from the
    generator it gets): the same loss twice, then another."""
    a, b, c = (as_tensor_like(t, r, f"step {i + 1}") for i, (t, r) in enumerate(zip(as_items(got, ref), ref)))
    if not torch.equal(a, b):
        raise AssertionError("two steps from the same start with equally seeded generators gave different losses: "
                             "call augment(images, generator) with the given generator")
    if torch.equal(a, c):
        raise AssertionError("differently seeded generators gave the same loss: pass the given generator on, "
                             "augment(images, generator), not a generator of your own")


# =============================================================================== probe and kNN
def _accuracy(x, where: str) -> float:
    if type(x) is not float:
        raise AssertionError(f"{where}: expected a Python float, but it {describe(x)}")
    if not 0 <= x <= 1:
        raise AssertionError(f"{where}: {x} is not a fraction in [0, 1]")
    return x


#: How far a probe's accuracy may lie from the solution's: other standardisations (biased std, another epsilon,
#: float64) move a few borderline test points. Two-sided, so no constant passes test sets whose accuracies differ.
PROBE_TOLERANCE = 0.04


def check_probe_accuracy(got, ref) -> None:
    """Calls on an easy, a hard and a mislabelled test set: the accuracies of the solution's probe differ by far
    more than the tolerance, so a constant (1.0, or anything else) fails."""
    for i, (g, r) in enumerate(zip(as_items(got, ref), ref)):
        acc = _accuracy(g, f"call {i + 1}")
        if abs(acc - r) > PROBE_TOLERANCE:
            raise AssertionError(f"call {i + 1}: the accuracy is {abs(acc - r):.3f} away from that of the trained "
                                 "probe's logits on these test points")


def check_probe_deterministic(got, ref) -> None:
    accs = [_accuracy(g, f"call {i + 1}") for i, g in enumerate(as_items(got, ref))]
    if len(set(accs)) != 1:
        raise AssertionError(f"{len(accs)} calls with the same seed gave different accuracies")


def check_probe_standardises(got, ref) -> None:
    """Raw features, the same rescaled and shifted, and the rescaled ones against shifted test labels."""
    raw, scaled, mislabelled = as_items(got, ref)
    for acc, r, what in ((raw, ref[0], "raw features"), (mislabelled, ref[2], "rescaled features, shifted test labels")):
        if abs(_accuracy(acc, what) - r) > PROBE_TOLERANCE:
            raise AssertionError(f"{what}: the accuracy is {abs(acc - r):.3f} away from the trained probe's")
    acc = _accuracy(scaled, "rescaled features")
    if abs(acc - ref[1]) > PROBE_TOLERANCE:
        raise AssertionError(f"with features scaled by 1e-2..1e3 and shifted by 500 the accuracy is {abs(acc - ref[1]):.3f} "
                             "away from the trained probe's: standardise with the training features' mean and std")


def check_probe_test_set_unused(got, ref) -> None:
    honest, wrong = (_accuracy(g, f"call {i + 1}") for i, g in enumerate(as_items(got, ref)))
    if honest < ref[0] - 0.05:
        raise AssertionError(f"accuracy {honest:.3f} on well-separated classes")
    if wrong > 1 - honest + 0.05:
        raise AssertionError(f"accuracy {wrong:.3f} against deliberately wrong test labels: the test set must play "
                             "no part in training")


def check_probe_inputs_unchanged(got, ref) -> None:
    after, before = as_items(got, ref)
    if not isinstance(after, torch.Tensor) or not torch.equal(after, before):
        raise AssertionError("linear_probe_accuracy changed the caller's features")


def check_knn_values(got, ref) -> None:
    for i, (g, r) in enumerate(zip(as_items(got, ref), ref)):
        if isinstance(r, Raised):
            raise AssertionError("reference failed")
        acc = _accuracy(g, f"call {i + 1}")
        if abs(acc - r) > 1.01 / 120:
            raise AssertionError(f"call {i + 1}: the accuracy is off by {abs(acc - r):.4f}")


# =============================================================================== the cases

# What each comparator checks about the draws of a function that takes a generator
# (tests/test_judge_gates.py).
check_reproducible.draws = ("same seed", "other seed")
check_step_generator.draws = ("same seed", "other seed")
check_global_state_untouched.draws = ("global state",)
# What each comparator of an interface rule checks (grader/cases.py RULE_CHECKS; tests/test_points_for_ideas.py).
check_probe_inputs_unchanged.interface = "mutation"
check_step_detached.interface = "return type"

# NT-Xent's values within float32's precision (value cases); its dtype kept, with float64's precision (rules).
NT_XENT = expect_same(rtol=2e-4, atol=1e-4, dtype=False)
NT_XENT_DTYPE = expect_dtype_kept(rtol64=1e-7)


# Comparators the probes name, besides those above.
IMAGES = expect_same(rtol=0, atol=1e-5)
CROP_INDEPENDENT = expect_independent("random_resized_crop_flip")
RAISES_VALUE_ERROR = expect_raises("ValueError")
BRIGHTNESS = expect_blend_factor("brightness")
CONTRAST = expect_blend_factor("contrast")
SATURATION = expect_blend_factor("saturation")
COLOUR_INDEPENDENT = expect_independent("colour_distort")
AUGMENT_INDEPENDENT = expect_independent("augment_batch")
NT_XENT_SAME = expect_same(rtol=1e-6, atol=1e-9)
HEAD = expect_same(rtol=1e-4, atol=1e-4)
HEAD_LOOSE = expect_same(rtol=1e-3, atol=1e-4)

# Each case is declared by its probe (grader/probes/taskA_simclr.py: @probe(cell, says, check, ...)), which
# names its comparator here: a case's weight is its share of its test cell's points.
CASES = declared_cases(PROBES, globals())

# What each function computes on ordinary inputs: the value cases that gate its other cases (grader/judge.py
# value_gates). Shapes, identities (scale 1, no jitter, everything off), independence and generator use are
# properties and rules, gated here: an answer that returns noise, the resized image or its input earns nothing
# for them. Edge-case values (a box that must be drawn again, a flip, hue) stand alone. augment_batch is given
# code built on the two functions above: its cases are gated on their main values.
FUNCTIONS, MAIN = function_tables(CASES, borrows={"augment_batch": ("random_resized_crop_flip", "colour_distort")})
