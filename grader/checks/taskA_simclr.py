"""Hidden-test reference checks for Task A (SimCLR on CIFAR-10). Imported inside hidden test cells only.

Every check draws fresh random inputs, tests type, shape and dtype, and compares values against
formulas written independently of the model solution (explicit float64 loops for NT-Xent,
scikit-learn for the probe and kNN, geometric read-outs of ramp images for the crop).

:func:`solution_namespace` loads the model solution's functions from the source notebook, for the
pack's own tests and benchmarks (TA side only).
"""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import numpy as np
import torch
from torch import nn

from ._common import as_float_list, assert_close, assert_raises, assert_tensor

_SOLUTION = Path(__file__).resolve().parents[2] / "solutions" / "ex01" / "taskA_simclr.ipynb"
_FUNCTION_CELLS = ("random_resized_crop_flip", "colour_distort", "augment_batch", "nt_xent_loss",
                   "projection_head", "simclr_train_step", "linear_probe_accuracy", "knn_accuracy")


def solution_namespace(notebook: Path = _SOLUTION) -> dict:
    """Execute the notebook's function-defining cells (not the training) and return their namespace:
    ``augment_batch``, ``nt_xent_loss``, ``ProjectionHead``, ``simclr_train_step``, ... ."""
    import torch.nn.functional as F

    from utils import vision

    cells = json.loads(Path(notebook).read_text(encoding="utf-8"))["cells"]
    ns = {"math": math, "torch": torch, "nn": nn, "F": F, "vision": vision, "np": np}
    found = set()
    for cell in cells:
        grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        if grade_id in _FUNCTION_CELLS:
            exec(compile("".join(cell["source"]), f"<{notebook.name}:{grade_id}>", "exec"), ns)
            found.add(grade_id)
    missing = set(_FUNCTION_CELLS) - found
    if missing:
        raise RuntimeError(f"{notebook} lacks the cells {sorted(missing)}")
    return ns


def _binomial_ok(count: int, n: int, p: float, sigmas: float = 5.0) -> bool:
    sd = math.sqrt(n * p * (1 - p))
    return abs(count - n * p) <= sigmas * sd + 1


def _pairwise_distinct(out: torch.Tensor, what: str) -> None:
    flat = out.detach().double().reshape(len(out), -1)
    # Exact differences: the matmul shortcut of cdist leaves about 1e-5 between identical rows.
    dist = torch.cdist(flat, flat, compute_mode="donot_use_mm_for_euclid_dist")
    dist.fill_diagonal_(float("inf"))
    if float(dist.min()) < 1e-6:
        i, j = divmod(int(dist.argmin()), len(out))
        raise AssertionError(
            f"{what}: images {i} and {j} of a batch of identical images came out identical. Every image "
            "must get its own random parameters (transforms.v2 on a batch draws ONE set for all images)."
        )


# ------------------------------------------------------------------------------------- the crop
def _ramp_images(n: int, h: int, w: int) -> torch.Tensor:
    """Channel 0 ramps left to right, channel 1 top to bottom, channel 2 is constant 0.5."""
    x = torch.zeros(n, 3, h, w)
    x[:, 0] = (torch.arange(w, dtype=torch.float32) / (w - 1)).view(1, 1, w)
    x[:, 1] = (torch.arange(h, dtype=torch.float32) / (h - 1)).view(1, h, 1)
    x[:, 2] = 0.5
    return x


def _read_crop_geometry(out: torch.Tensor, h: int, w: int) -> dict:
    """From crops of ramp images: crop width/height and left/top edge as fractions of the image.

    A bilinear crop of a linear ramp is linear: value a + b j at output column j, where the slope b
    gives the crop width and a its left edge. Only interior pixels are fitted (the edges may touch
    the padding)."""
    size = out.shape[-1]
    j = torch.arange(size, dtype=torch.float64)
    inner = slice(2, size - 2)
    rows = out[:, 0].double()[:, inner, inner].mean(dim=1)      # [N, size-4] values along x
    cols = out[:, 1].double()[:, inner, inner].mean(dim=2)      # [N, size-4] values along y
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


def check_random_resized_crop_flip(fn) -> None:
    g = torch.Generator().manual_seed(31)
    # Types and shapes, square and non-square inputs.
    for (n, h, w, size) in [(4, 32, 32, 32), (3, 32, 32, 16), (2, 24, 40, 20)]:
        out = fn(torch.rand(n, 3, h, w, generator=g), size)
        assert_tensor(out, shape=(n, 3, size, size), dtype=torch.float32, name=f"crop of [{n}, 3, {h}, {w}] to {size}")
    x64 = torch.rand(2, 3, 16, 16, generator=g, dtype=torch.float64)
    assert_tensor(fn(x64, 8), shape=(2, 3, 8, 8), dtype=torch.float64, name="crop of float64 images")
    for bad, what in [(torch.rand(3, 32, 32), "a 3-D tensor"), (torch.rand(2, 1, 32, 32), "1-channel images"),
                      (torch.randint(0, 255, (2, 3, 32, 32), dtype=torch.uint8), "uint8 images")]:
        assert_raises(ValueError, fn, bad, 32, what=f"random_resized_crop_flip on {what}")

    # Whole image, with and without flips.
    x = torch.rand(400, 3, 8, 8, generator=g)
    assert_close(fn(x, 8, scale=(1, 1), ratio=(1, 1), flip_p=0.0), x, atol=1e-5, rtol=0,
                 name="scale=(1, 1), ratio=(1, 1), flip_p=0 (the identity)")
    assert_close(fn(x, 8, scale=(1, 1), ratio=(1, 1), flip_p=1.0), x.flip(-1), atol=1e-5, rtol=0,
                 name="flip_p=1 (every image mirrored)")
    out = fn(x, 8, scale=(1, 1), ratio=(1, 1), flip_p=0.5).double()
    same = (out - x).abs().amax(dim=(1, 2, 3)) < 1e-5
    mirrored = (out - x.flip(-1)).abs().amax(dim=(1, 2, 3)) < 1e-5
    if not bool((same | mirrored).all()):
        raise AssertionError("with a whole-image crop every output must be the image or its mirror image")
    flipped = int(mirrored.sum())
    if not _binomial_ok(flipped, 400, 0.5):
        raise AssertionError(f"flip_p=0.5 flipped {flipped} of 400 images: flip each image independently with probability flip_p")

    # Geometry: area fraction ~ U(scale), aspect ~ log-U(ratio), crop inside the image, independent per image.
    n, h, w = 400, 32, 32
    out = fn(_ramp_images(n, h, w), 32, scale=(0.1, 0.5), ratio=(0.5, 2.0), flip_p=0.0,
             generator=torch.Generator().manual_seed(5))
    assert_tensor(out, shape=(n, 3, 32, 32), dtype=torch.float32, name="crops of ramp images")
    geo = _read_crop_geometry(out, h, w)
    (fw, left, rx), (fh, top, ry) = geo["x"], geo["y"]
    if max(rx, ry) > 2e-3:
        raise AssertionError("a crop of a linear ramp is not linear: resample the crop bilinearly (no rotation, no shear)")
    area, aspect = fw * fh, fw / fh
    if float(area.min()) < 0.1 - 0.01 or float(area.max()) > 0.5 + 0.01:
        raise AssertionError(f"crop areas range over [{float(area.min()):.3f}, {float(area.max()):.3f}] of the image, "
                             "expected within scale=(0.1, 0.5)")
    if float(area.min()) > 0.13 or float(area.max()) < 0.47 or abs(float(area.mean()) - 0.3) > 0.03:
        raise AssertionError(f"crop areas (mean {float(area.mean()):.3f}, range [{float(area.min()):.3f}, "
                             f"{float(area.max()):.3f}]) are not uniform over scale=(0.1, 0.5)")
    if float(aspect.min()) < 0.5 * 0.97 or float(aspect.max()) > 2.0 * 1.03:
        raise AssertionError(f"aspect ratios range over [{float(aspect.min()):.3f}, {float(aspect.max()):.3f}], expected within (0.5, 2)")
    log_aspect = aspect.log()
    if float(aspect.min()) > 0.6 or float(aspect.max()) < 1.7 or abs(float(log_aspect.mean())) > 0.12:
        raise AssertionError("aspect ratios are not log-uniform over ratio=(0.5, 2) "
                             f"(mean log-ratio {float(log_aspect.mean()):.3f}, expected about 0)")
    tol = 1.0 / 32
    if float(left.min()) < -tol or float((left + fw).max()) > 1 + tol or float(top.min()) < -tol or float((top + fh).max()) > 1 + tol:
        raise AssertionError("some crops reach outside the image: place each crop uniformly where it fits inside")
    free = 1 - fw
    t = (left / free.clamp(min=1e-6))[free > 0.3]
    if float(t.std()) < 0.2 or abs(float(t.mean()) - 0.5) > 0.1:
        raise AssertionError("crop positions are not spread uniformly over the image (same position for every image?)")
    if float(area.std()) < 1e-3:
        raise AssertionError("every image got the same crop: draw the crop parameters per image")
    # Log-uniform aspect: over ratio=(1/4, 4) half the crops are wider than tall and the mean log-ratio is 0
    # (a uniform draw makes 80 % of them wide, mean log-ratio about 0.57).
    n = 1000
    geo = _read_crop_geometry(fn(_ramp_images(n, 32, 32), 32, scale=(0.05, 0.25), ratio=(0.25, 4.0), flip_p=0.0,
                                 generator=torch.Generator().manual_seed(6)), 32, 32)
    log_aspect = (geo["x"][0] / geo["y"][0]).log()
    wide = int((log_aspect > 0).sum())
    se = math.log(16) / math.sqrt(12 * n)
    if not _binomial_ok(wide, n, 0.5) or abs(float(log_aspect.mean())) > 5 * se:
        raise AssertionError(f"ratio=(1/4, 4): {wide} of {n} crops are wider than tall and the mean log aspect ratio is "
                             f"{float(log_aspect.mean()):.3f}; a log-uniform aspect ratio gives half and 0 "
                             "(sample log(ratio) uniformly, not the ratio itself)")

    # Flipping reverses the ramp.
    out = fn(_ramp_images(16, 32, 32), 32, scale=(0.3, 0.6), flip_p=1.0)
    if float(_read_crop_geometry(out, 32, 32)["x"][0].max()) >= 0:
        raise AssertionError("flip_p=1: the crops of a left-to-right ramp must run right to left")

    # Identical images get different crops; a generator makes the result reproducible.
    same_img = torch.rand(1, 3, 32, 32, generator=g).expand(24, -1, -1, -1).contiguous()
    _pairwise_distinct(fn(same_img, 32, flip_p=0.0), "random_resized_crop_flip")
    a = fn(same_img, 32, generator=torch.Generator().manual_seed(7))
    b = fn(same_img, 32, generator=torch.Generator().manual_seed(7))
    c = fn(same_img, 32, generator=torch.Generator().manual_seed(8))
    assert_close(a, b, atol=0, rtol=0, name="two calls with equally seeded generators")
    if torch.equal(a, c):
        raise AssertionError("differently seeded generators gave the same crops: draw all random numbers with `generator`")


# ---------------------------------------------------------------------------------- the colours
_LUMA = (0.299, 0.587, 0.114)


def _luma(x: torch.Tensor) -> torch.Tensor:
    return _LUMA[0] * x[:, 0] + _LUMA[1] * x[:, 1] + _LUMA[2] * x[:, 2]


def _per_image_blend(out: torch.Tensor, x: torch.Tensor, anchor: torch.Tensor) -> tuple[torch.Tensor, float]:
    """Least-squares f per image with out - anchor = f (x - anchor); returns f [N] and the max residual."""
    d_in, d_out = (x - anchor).double(), (out - anchor).double()
    f = (d_in * d_out).sum(dim=(1, 2, 3)) / (d_in * d_in).sum(dim=(1, 2, 3))
    resid = (d_out - f.view(-1, 1, 1, 1) * d_in).abs().max()
    return f, float(resid)


def _check_factor_spread(f: torch.Tensor, strength: float, what: str) -> None:
    lo, hi = 1 - strength, 1 + strength
    if float(f.min()) < lo - 1e-3 or float(f.max()) > hi + 1e-3:
        raise AssertionError(f"{what} factors range over [{float(f.min()):.3f}, {float(f.max()):.3f}], expected within [{lo}, {hi}]")
    if float(f.min()) > lo + 0.05 or float(f.max()) < hi - 0.05 or abs(float(f.mean()) - 1) > 0.05:
        raise AssertionError(f"{what} factors (mean {float(f.mean()):.3f}) are not uniform on [{lo}, {hi}] per image")


def check_colour_distort(fn) -> None:
    g = torch.Generator().manual_seed(41)
    x = torch.rand(6, 3, 10, 12, generator=g)
    assert_tensor(fn(x), shape=(6, 3, 10, 12), dtype=torch.float32, name="colour_distort(images)")
    out64 = fn(x.double())
    assert_tensor(out64, shape=(6, 3, 10, 12), dtype=torch.float64, name="colour_distort(float64 images)")
    vals = as_float_list(fn(torch.rand(64, 3, 8, 8, generator=g), jitter=(0.8, 0.8, 0.8, 0.5)))
    if min(vals) < 0 or max(vals) > 1:
        raise AssertionError(f"values must stay in [0, 1], got [{min(vals):.3f}, {max(vals):.3f}]")
    for bad, what in [(torch.rand(3, 8, 8), "a 3-D tensor"), (torch.rand(2, 1, 8, 8), "1-channel images"),
                      (torch.randint(0, 255, (2, 3, 8, 8), dtype=torch.uint8), "uint8 images")]:
        assert_raises(ValueError, fn, bad, what=f"colour_distort on {what}")

    x = torch.rand(8, 3, 8, 8, generator=g)
    assert_close(fn(x, jitter_p=0.0, gray_p=0.0), x, atol=1e-5, rtol=0, name="jitter_p=0, gray_p=0 (the identity)")
    assert_close(fn(x, jitter=(0, 0, 0, 0), jitter_p=1.0, gray_p=0.0), x, atol=1e-5, rtol=0,
                 name="jitter=(0, 0, 0, 0) (factors 1, hue shift 0: the identity)")
    gray = fn(x, jitter_p=0.0, gray_p=1.0)
    assert_close(gray, _luma(x).unsqueeze(1).expand_as(x), atol=1e-5, rtol=0,
                 name="gray_p=1: 0.299 R + 0.587 G + 0.114 B in every channel")

    n = 400
    x = 0.3 + 0.4 * torch.rand(n, 3, 6, 6, generator=g)  # stays inside [0, 1] under every factor below
    # Brightness: out = b x.
    out = fn(x, jitter=(0.4, 0, 0, 0), jitter_p=1.0, gray_p=0.0)
    b, resid = _per_image_blend(out, x, torch.zeros_like(x))
    if resid > 1e-4:
        raise AssertionError("brightness only: each output must be the image times one factor per image")
    _check_factor_spread(b, 0.4, "brightness")
    # Contrast: blend with the mean of the grayscale image.
    out = fn(x, jitter=(0, 0.4, 0, 0), jitter_p=1.0, gray_p=0.0)
    mean_gray = _luma(x).mean(dim=(1, 2)).view(-1, 1, 1, 1).expand_as(x)
    c, resid = _per_image_blend(out, x, mean_gray)
    if resid > 1e-4:
        raise AssertionError("contrast only: out = c x + (1 - c) mean(grayscale(x)), one c per image")
    _check_factor_spread(c, 0.4, "contrast")
    # Saturation: blend with the grayscale image, pixel by pixel.
    out = fn(x, jitter=(0, 0, 0.4, 0), jitter_p=1.0, gray_p=0.0)
    s, resid = _per_image_blend(out, x, _luma(x).unsqueeze(1).expand_as(x))
    if resid > 1e-4:
        raise AssertionError("saturation only: out = s x + (1 - s) grayscale(x), one s per image")
    _check_factor_spread(s, 0.4, "saturation")
    # Jitter probability.
    out = fn(x, jitter=(0.4, 0, 0, 0), jitter_p=0.5, gray_p=0.0)
    changed = int(((out - x).abs().amax(dim=(1, 2, 3)) > 1e-4).sum())
    if not _binomial_ok(changed, n, 0.5):
        raise AssertionError(f"jitter_p=0.5 changed {changed} of {n} images: jitter each image with probability jitter_p")
    # Grayscale probability.
    out = fn(x, jitter_p=0.0, gray_p=0.3)
    is_gray = ((out[:, 0] - out[:, 1]).abs().amax(dim=(1, 2)) < 1e-6) & ((out[:, 1] - out[:, 2]).abs().amax(dim=(1, 2)) < 1e-6)
    untouched = (out - x).abs().amax(dim=(1, 2, 3)) < 1e-5
    if not bool((is_gray | untouched).all()) or not _binomial_ok(int(is_gray.sum()), n, 0.3):
        raise AssertionError(f"gray_p=0.3 turned {int(is_gray.sum())} of {n} images gray (and must leave the others alone)")

    # Hue: grays stay gray, colours move, by a different amount for every image.
    x = 0.2 + 0.6 * torch.rand(64, 3, 6, 6, generator=g)
    x[:, :, :3] = x[:, :1, :3]  # top half of every image is gray
    out = fn(x, jitter=(0, 0, 0, 0.3), jitter_p=1.0, gray_p=0.0)
    assert_close(out[:, :, :3], x[:, :, :3], atol=1e-4, rtol=0, name="hue shift of gray pixels (must stay unchanged)")
    moved = int(((out - x)[:, :, 3:].abs().amax(dim=(1, 2, 3)) > 1e-3).sum())
    if moved < 55:
        raise AssertionError(f"hue shift in [-0.3, 0.3] changed only {moved} of 64 images")
    same = x[:1].expand(64, -1, -1, -1).contiguous()
    _pairwise_distinct(fn(same, jitter=(0, 0, 0, 0.3), jitter_p=1.0, gray_p=0.0), "hue shift")
    _pairwise_distinct(fn(same, jitter_p=1.0, gray_p=0.0), "colour jitter")

    a = fn(same, generator=torch.Generator().manual_seed(3))
    b2 = fn(same, generator=torch.Generator().manual_seed(3))
    assert_close(a, b2, atol=0, rtol=0, name="two calls with equally seeded generators")
    if torch.equal(a, fn(same, generator=torch.Generator().manual_seed(4))):
        raise AssertionError("differently seeded generators gave the same colours: draw all random numbers with `generator`")


def check_augment_batch(augment_batch) -> None:
    g = torch.Generator().manual_seed(51)
    imgs = torch.randint(0, 256, (1, 3, 32, 32), generator=g, dtype=torch.uint8).expand(48, -1, -1, -1).contiguous()
    out = augment_batch(imgs, torch.Generator().manual_seed(0))
    assert_tensor(out, shape=(48, 3, 32, 32), dtype=torch.float32, name="augment_batch(uint8 images)")
    vals = as_float_list(out)
    if min(vals) < 0 or max(vals) > 1:
        raise AssertionError("augmented views must lie in [0, 1]")
    _pairwise_distinct(out, "augment_batch")
    assert_tensor(augment_batch(imgs[:4], size=24), shape=(4, 3, 24, 24), dtype=torch.float32, name="augment_batch(size=24)")
    off = augment_batch(imgs[:4], scale=(1, 1), ratio=(1, 1), flip_p=0.0, jitter_p=0.0, gray_p=0.0)
    assert_close(off, imgs[:4].float() / 255, atol=1e-5, rtol=0, name="augment_batch with every augmentation off")


# ------------------------------------------------------------------------------------- NT-Xent
def _ref_nt_xent(z1: np.ndarray, z2: np.ndarray, tau: float) -> float:
    """Explicit float64 loops: mean over the 2N views of -log(exp(s_ip / tau) / sum_{k != i} exp(s_ik / tau))."""
    z = np.concatenate([z1, z2]).astype(np.float64)
    n2 = len(z)
    unit = [row / math.sqrt(float(row @ row)) for row in z]
    total = 0.0
    for i in range(n2):
        partner = (i + n2 // 2) % n2
        logits = [float(unit[i] @ unit[k]) / tau for k in range(n2) if k != i]
        m = max(logits)
        lse = m + math.log(sum(math.exp(v - m) for v in logits))
        total += lse - float(unit[i] @ unit[partner]) / tau
    return total / n2


def _ref_nt_xent_torch(z1: torch.Tensor, z2: torch.Tensor, tau: float) -> torch.Tensor:
    """The same formula with torch ops row by row (for gradients)."""
    z = torch.cat([z1, z2])
    z = z / z.norm(dim=1, keepdim=True)
    n2 = len(z)
    losses = []
    for i in range(n2):
        others = torch.cat([z[:i], z[i + 1:]])
        lse = torch.logsumexp(others @ z[i] / tau, dim=0)
        losses.append(lse - z[i] @ z[(i + n2 // 2) % n2] / tau)
    return torch.stack(losses).mean()


def check_nt_xent_loss(fn) -> None:
    g = torch.Generator().manual_seed(61)
    for n, d, tau in [(1, 4, 0.5), (2, 3, 0.1), (5, 16, 0.5), (17, 8, 1.0), (40, 64, 0.2), (8, 32, 0.01)]:
        z1 = torch.randn(n, d, generator=g, dtype=torch.float64) * 3
        z2 = z1 + torch.randn(n, d, generator=g, dtype=torch.float64)  # positives are similar
        ref = _ref_nt_xent(z1.numpy(), z2.numpy(), tau)
        got = fn(z1, z2, tau)
        assert_tensor(got, shape=(), dtype=torch.float64, name=f"nt_xent_loss(float64 [{n}, {d}])")
        assert_close(got, ref, atol=1e-6, rtol=1e-9, name=f"NT-Xent, N={n}, d={d}, tau={tau} (float64)")
        got32 = fn(z1.float(), z2.float(), tau)
        assert_tensor(got32, shape=(), dtype=torch.float32, name=f"nt_xent_loss(float32 [{n}, {d}])")
        assert_close(got32, ref, atol=1e-4, rtol=1e-5, name=f"NT-Xent, N={n}, d={d}, tau={tau} (float32)")
    # Gradients agree with the reference's.
    z1 = torch.randn(6, 5, generator=g, dtype=torch.float64, requires_grad=True)
    z2 = torch.randn(6, 5, generator=g, dtype=torch.float64, requires_grad=True)
    fn(z1, z2, 0.3).backward()
    got_grads = [z1.grad.clone(), z2.grad.clone()]
    z1.grad = z2.grad = None
    _ref_nt_xent_torch(z1, z2, 0.3).backward()
    assert_close(got_grads[0], z1.grad, atol=1e-8, rtol=1e-6, name="gradient with respect to z1")
    assert_close(got_grads[1], z2.grad, atol=1e-8, rtol=1e-6, name="gradient with respect to z2")
    # Bad input.
    assert_raises(ValueError, fn, torch.randn(4, 8), torch.randn(5, 8), 0.5, what="nt_xent_loss with [4, 8] and [5, 8]")
    assert_raises(ValueError, fn, torch.randn(8), torch.randn(8), 0.5, what="nt_xent_loss with 1-D inputs")
    assert_raises(ValueError, fn, torch.randn(4, 8), torch.randn(4, 8), 0.0, what="nt_xent_loss with temperature 0")


# --------------------------------------------------------------------------------------- head
def check_projection_head(cls) -> None:
    torch.manual_seed(71)
    head = cls(20, 40, 8)
    if not isinstance(head, nn.Module):
        raise AssertionError("ProjectionHead must be an nn.Module")
    calls, outputs = [], []

    def record(module, _inputs, output):  # returns None: the output passes through unchanged
        calls.append(module)
        outputs.append(output.detach().clone())

    hooks = [m.register_forward_hook(record)
             for m in head.modules() if isinstance(m, (nn.Linear, nn.BatchNorm1d, nn.ReLU))]
    h = torch.randn(16, 20, requires_grad=True)
    out = head(h)
    for hook in hooks:
        hook.remove()
    assert_tensor(out, shape=(16, 8), dtype=torch.float32, name="ProjectionHead(20, 40, 8)(h [16, 20])")
    kinds = [type(m).__name__ for m in calls]
    if kinds != ["Linear", "BatchNorm1d", "ReLU", "Linear"]:
        raise AssertionError(f"the head applies {kinds}, expected Linear -> BatchNorm1d -> ReLU -> Linear")
    lin1, bn, _, lin2 = calls
    assert_close(out, outputs[-1], atol=0, rtol=0,
                 name="the head's output (must be the last Linear's output: no normalisation or activation after it)")
    if (lin1.in_features, lin1.out_features, bn.num_features, lin2.in_features, lin2.out_features) != (20, 40, 40, 40, 8):
        raise AssertionError("layer sizes must be in_dim -> hidden_dim -> out_dim (20 -> 40 -> 8 here)")
    out.pow(2).sum().backward()
    for name, p in head.named_parameters():
        if p.grad is None or float(p.grad.abs().sum()) == 0:
            raise AssertionError(f"parameter {name} gets no gradient")
    default = cls(512)
    default.eval()
    assert_tensor(default(torch.randn(1, 512)), shape=(1, 128), dtype=torch.float32, name="ProjectionHead(512)(one row, eval)")
    widths = [m.out_features for m in default.modules() if isinstance(m, nn.Linear)]
    if widths != [1024, 128]:
        raise AssertionError(f"defaults must be hidden_dim=1024, out_dim=128, got Linear widths {widths}")


# --------------------------------------------------------------------------------- train step
class _ScriptedViews:
    """A deterministic 'augmentation': view k of the images is a fixed function of them."""

    def __init__(self, seed: int):
        self.calls = 0
        self.seed = seed

    def view(self, images: torch.Tensor, k: int) -> torch.Tensor:
        g = torch.Generator().manual_seed(self.seed * 10 + k)
        return images.float() / 255 + 0.1 * torch.randn(images.shape, generator=g)

    def __call__(self, images, generator=None, **kwargs):
        k = self.calls % 2
        self.calls += 1
        return self.view(images, k)


def _tiny_models(seed: int):
    torch.manual_seed(seed)
    encoder = nn.Sequential(nn.Flatten(), nn.Linear(3 * 6 * 6, 24), nn.BatchNorm1d(24), nn.ReLU())
    head = nn.Sequential(nn.Linear(24, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 8))
    return encoder, head


def _sgd(encoder, head):
    return torch.optim.SGD([*encoder.parameters(), *head.parameters()], lr=0.2, momentum=0.9, weight_decay=1e-3)


def check_simclr_train_step(step) -> None:
    images = torch.randint(0, 256, (12, 3, 6, 6), generator=torch.Generator().manual_seed(81), dtype=torch.uint8)
    tau = 0.3
    encoder, head = _tiny_models(82)
    ref_encoder, ref_head = copy.deepcopy(encoder), copy.deepcopy(head)
    opt, ref_opt = _sgd(encoder, head), _sgd(ref_encoder, ref_head)
    for module in (encoder, head, ref_encoder, ref_head):
        module.train()
    for it in range(2):  # two steps: a forgotten zero_grad or a stale momentum shows in the second
        views = _ScriptedViews(seed=it)
        loss = step(encoder, head, opt, images, temperature=tau, augment=views)
        if views.calls != 2:
            raise AssertionError(f"simclr_train_step called augment {views.calls} times, expected 2 (one per view)")
        assert_tensor(loss, shape=(), dtype=torch.float32, name="simclr_train_step(...)")
        if loss.requires_grad:
            raise AssertionError("return the loss detached (loss.detach())")
        ref_views = _ScriptedViews(seed=it)
        both = torch.cat([ref_views.view(images, 0), ref_views.view(images, 1)])
        z = ref_head(ref_encoder(both))
        ref_loss = _ref_nt_xent_torch(z[:12].double(), z[12:].double(), tau)
        ref_opt.zero_grad()
        ref_loss.backward()
        ref_opt.step()
        assert_close(loss, float(ref_loss.detach()), atol=1e-4, rtol=1e-4,
                     name=f"loss of step {it + 1} (both views through encoder and head as ONE batch of 2N, NT-Xent on the halves)")
        for (name, p), p_ref in zip([*encoder.named_parameters(), *head.named_parameters()],
                                    [*ref_encoder.parameters(), *ref_head.parameters()]):
            assert_close(p, p_ref, atol=1e-5, rtol=1e-4, name=f"parameter {name} after step {it + 1}")
        bn, ref_bn = encoder[2], ref_encoder[2]
        assert_close(bn.running_mean, ref_bn.running_mean, atol=1e-5, rtol=1e-4,
                     name="BatchNorm running mean (one forward pass over both views)")
    # Mixed precision: runs, returns a float32 loss, and trains.
    encoder, head = _tiny_models(83)
    before = [p.detach().clone() for p in encoder.parameters()]
    loss = step(encoder, head, _sgd(encoder, head), images, temperature=tau, augment=_ScriptedViews(0),
                autocast_dtype=torch.bfloat16)
    assert_tensor(loss, shape=(), dtype=torch.float32, name="simclr_train_step(..., autocast_dtype=torch.bfloat16)")
    if not math.isfinite(float(loss)) or all(torch.equal(a, b) for a, b in zip(before, encoder.parameters())):
        raise AssertionError("with autocast_dtype=torch.bfloat16 the step must still train (finite loss, changed weights)")


# ------------------------------------------------------------------------------- probe and kNN
def _blobs(n: int, d: int, classes: int, spread: float, seed: int):
    g = torch.Generator().manual_seed(seed)
    centres = torch.randn(classes, d, generator=g) * 2
    labels = torch.randint(0, classes, (n,), generator=g)
    feats = centres[labels] + spread * torch.randn(n, d, generator=g)
    return feats, labels


def check_linear_probe_accuracy(fn) -> None:
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    feats, labels = _blobs(1200, 16, 4, 2.5, seed=91)
    tr, te = slice(0, 800), slice(800, 1200)
    scaler = StandardScaler().fit(feats[tr].numpy())
    sk = LogisticRegression(max_iter=5000).fit(scaler.transform(feats[tr].numpy()), labels[tr].numpy())
    sk_acc = float((sk.predict(scaler.transform(feats[te].numpy())) == labels[te].numpy()).mean())
    train_copy = feats[tr].clone()
    acc = fn(feats[tr], labels[tr], feats[te], labels[te], epochs=60, batch_size=1024)
    if type(acc) is not float:
        raise AssertionError(f"linear_probe_accuracy must return a Python float, got {type(acc).__name__}")
    if not 0 <= acc <= 1:
        raise AssertionError(f"accuracy {acc} is not a fraction in [0, 1]")
    if acc < sk_acc - 0.05:
        raise AssertionError(f"probe accuracy {acc:.3f} is well below logistic regression's {sk_acc:.3f} on the same features")
    if not torch.equal(feats[tr], train_copy):
        raise AssertionError("linear_probe_accuracy changed the caller's features in place")
    if fn(feats[tr], labels[tr], feats[te], labels[te], epochs=60, batch_size=1024) != acc:
        raise AssertionError("two calls with the same seed gave different accuracies: seed the shuffling")
    # Standardisation: huge offsets and scales must not matter.
    scale = torch.logspace(-2, 3, 16)
    acc_scaled = fn(feats[tr] * scale + 500, labels[tr], feats[te] * scale + 500, labels[te], epochs=60, batch_size=1024)
    if acc_scaled < sk_acc - 0.05:
        raise AssertionError(f"with features scaled by 1e-2..1e3 and shifted by 500 the probe gets {acc_scaled:.3f} "
                             f"(logistic regression {sk_acc:.3f}): standardise with the training features' mean and std")
    # The test labels must not leak into training.
    easy, y = _blobs(600, 8, 4, 0.3, seed=92)
    wrong = (y[400:] + 1) % 4
    honest = fn(easy[:400], y[:400], easy[400:], y[400:], epochs=60, batch_size=1024)
    leak = fn(easy[:400], y[:400], easy[400:], wrong, epochs=60, batch_size=1024)
    if honest < 0.9:
        raise AssertionError(f"accuracy {honest:.3f} on four well-separated Gaussian classes (expected above 0.9)")
    if leak > 1 - honest + 0.05:
        raise AssertionError(f"accuracy {leak:.3f} against deliberately wrong test labels: the probe must be trained "
                             "on the training set only")
    assert_raises(ValueError, fn, feats[tr], labels[:10], feats[te], labels[te], what="600 features but 10 labels")
    assert_raises(ValueError, fn, feats[tr], labels[tr], feats[te, :5], labels[te], what="train d=16, test d=5")


def check_knn_accuracy(fn) -> None:
    from sklearn.neighbors import KNeighborsClassifier

    feats, labels = _blobs(420, 8, 5, 2.0, seed=101)
    feats = feats.double()
    tr, te = slice(0, 300), slice(300, 420)
    for k in (1, 4, 10, 25, 300):
        sk = KNeighborsClassifier(n_neighbors=k, metric="cosine", algorithm="brute").fit(feats[tr].numpy(), labels[tr].numpy())
        expected = float((sk.predict(feats[te].numpy()) == labels[te].numpy()).mean())
        got = fn(feats[tr], labels[tr], feats[te], labels[te], k=k)
        if type(got) is not float:
            raise AssertionError(f"knn_accuracy must return a Python float, got {type(got).__name__}")
        if abs(got - expected) > 1 / 120 + 1e-9:
            raise AssertionError(f"k={k}: accuracy {got:.4f}, expected {expected:.4f} (cosine similarity, majority vote, "
                                 "ties to the smallest class id)")
        chunked = fn(feats[tr], labels[tr], feats[te], labels[te], k=k, batch_size=7)
        if chunked != got:
            raise AssertionError(f"k={k}: batch_size=7 gives {chunked}, the default gives {got}: chunks must not change the result")
    rescaled = fn(feats[tr] * torch.rand(300, 1, dtype=torch.float64).add(0.1) * 100, labels[tr], feats[te], labels[te], k=10)
    if rescaled != fn(feats[tr], labels[tr], feats[te], labels[te], k=10):
        raise AssertionError("rescaling training features changed the result: use cosine similarity")
    assert_raises(ValueError, fn, feats[tr], labels[tr], feats[te], labels[te], k=0, what="k=0")
    assert_raises(ValueError, fn, feats[tr], labels[tr], feats[te], labels[te], k=301, what="k larger than the training set")
