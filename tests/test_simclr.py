"""Task A (SimCLR): the grader's reference checks accept the notebook's solution and reject the
typical wrong answers (above all, augmentation parameters shared by the whole batch); the plumbing
in utils/vision.py does what it says (CIFAR stem, alignment/uniformity, resume); the benchmark's
functions run.

Fast (tiny models, no notebook execution, no CIFAR-10); the nbgrader round trip of the notebook is
in test_notebooks.py.
"""

from __future__ import annotations

import math
import sys

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from grader.checks import taskA_simclr as checks
from utils import vision


@pytest.fixture(scope="module")
def ns():
    """The notebook's answer cells (solutions included) and the given augment_batch."""
    return checks.solution_namespace()


def _fails(check, *args, match: str | None = None):
    with pytest.raises(AssertionError, match=match):
        check(*args)


# --------------------------------------------------------------------- the solution passes
@pytest.mark.parametrize("check,name", [
    (checks.check_random_resized_crop_flip, "random_resized_crop_flip"),
    (checks.check_colour_distort, "colour_distort"),
    (checks.check_augment_batch, "augment_batch"),
    (checks.check_nt_xent_loss, "nt_xent_loss"),
    (checks.check_projection_head, "ProjectionHead"),
    (checks.check_simclr_train_step, "simclr_train_step"),
    (checks.check_linear_probe_accuracy, "linear_probe_accuracy"),
    (checks.check_knn_accuracy, "knn_accuracy"),
])
def test_solution_passes_its_check(ns, check, name):
    check(ns[name])


# ------------------------------------------------------------- wrong answers are rejected
def _shared_params_crop(images, size=32, *, scale=(0.2, 1.0), ratio=(3 / 4, 4 / 3), flip_p=0.5, generator=None):
    """One crop for the whole batch: what transforms.v2 does on a batch tensor."""
    from torchvision.transforms import v2

    if images.dim() != 4 or images.shape[1] != 3 or not images.is_floating_point():
        raise ValueError("bad input")
    out = v2.RandomResizedCrop(size, scale=scale, ratio=ratio, antialias=False)(images)
    return out.flip(-1) if torch.rand(1, generator=generator).item() < flip_p else out


def test_crop_check_rejects_one_crop_for_the_whole_batch():
    _fails(checks.check_random_resized_crop_flip, _shared_params_crop)


def test_colour_check_rejects_one_factor_for_the_whole_batch(ns):
    def shared(images, *, jitter=(0.4, 0.4, 0.4, 0.1), jitter_p=0.8, gray_p=0.2, generator=None):
        # Every image gets the draws of the same seed: one set of factors for the whole batch.
        seed = int(torch.randint(0, 2**31, (1,), generator=generator))
        return torch.cat([ns["colour_distort"](img[None], jitter=jitter, jitter_p=jitter_p, gray_p=gray_p,
                                               generator=torch.Generator().manual_seed(seed)) for img in images])

    _fails(checks.check_colour_distort, shared)


def test_augment_check_rejects_transforms_v2_on_a_batch():
    from torchvision.transforms import v2

    pipeline = v2.Compose([v2.RandomResizedCrop(32, scale=(0.2, 1.0)), v2.RandomHorizontalFlip(),
                           v2.RandomApply([v2.ColorJitter(0.4, 0.4, 0.4, 0.1)], p=0.8), v2.RandomGrayscale(0.2)])

    def v2_batch(images, generator=None, *, size=32, **kwargs):
        return v2.functional.to_dtype(pipeline(images), torch.float32, scale=True)

    _fails(checks.check_augment_batch, v2_batch, match="identical")


def test_crop_check_rejects_crops_uniform_in_side_length(ns):
    def side_uniform(images, size=32, *, scale=(0.2, 1.0), ratio=(3 / 4, 4 / 3), flip_p=0.5, generator=None):
        # sqrt of the scale range drawn uniformly: areas then follow the wrong distribution.
        lo, hi = math.sqrt(scale[0]), math.sqrt(scale[1])
        return ns["random_resized_crop_flip"](images, size, scale=(lo, hi), ratio=ratio, flip_p=flip_p, generator=generator)

    _fails(checks.check_random_resized_crop_flip, side_uniform)


def _nt_xent_unmasked(z1, z2, temperature=0.5):
    if z1.dim() != 2 or z1.shape != z2.shape or not temperature > 0:
        raise ValueError("bad input")
    z = F.normalize(torch.cat([z1, z2]), dim=1)
    n = len(z1)
    return F.cross_entropy(z @ z.T / temperature, torch.cat([torch.arange(n, 2 * n), torch.arange(n)]))


def _nt_xent_wrong_partner(z1, z2, temperature=0.5):
    if z1.dim() != 2 or z1.shape != z2.shape or not temperature > 0:
        raise ValueError("bad input")
    z = F.normalize(torch.cat([z1, z2]), dim=1)
    n = len(z1)
    logits = (z @ z.T / temperature).masked_fill(torch.eye(2 * n, dtype=torch.bool), float("-inf"))
    partner = (torch.arange(2 * n) + 1) % (2 * n)  # the neighbouring row, not row i + N
    partner = torch.where(partner == torch.arange(2 * n), (partner + 1) % (2 * n), partner)
    return F.cross_entropy(logits, partner)


def _nt_xent_only_first_half(z1, z2, temperature=0.5):
    if z1.dim() != 2 or z1.shape != z2.shape or not temperature > 0:
        raise ValueError("bad input")
    logits = F.normalize(z1, dim=1) @ F.normalize(z2, dim=1).T / temperature  # N negatives-1, one direction
    return F.cross_entropy(logits, torch.arange(len(z1)))


@pytest.mark.parametrize("wrong", [_nt_xent_unmasked, _nt_xent_wrong_partner, _nt_xent_only_first_half])
def test_nt_xent_check_rejects_wrong_losses(wrong):
    _fails(checks.check_nt_xent_loss, wrong)


def test_nt_xent_check_rejects_a_loss_without_input_validation(ns):
    def unchecked(z1, z2, temperature=0.5):
        return ns["nt_xent_loss"](z1, z2, temperature) if z1.shape == z2.shape and temperature > 0 else torch.tensor(0.0)

    _fails(checks.check_nt_xent_loss, unchecked)


def test_head_check_rejects_a_head_without_batchnorm():
    class NoBN(nn.Module):
        def __init__(self, in_dim, hidden_dim=1024, out_dim=128):
            super().__init__()
            self.net = nn.Sequential(nn.Linear(in_dim, hidden_dim), nn.ReLU(), nn.Linear(hidden_dim, out_dim))

        def forward(self, h):
            return self.net(h)

    _fails(checks.check_projection_head, NoBN)


def test_step_check_rejects_two_separate_forward_passes(ns):
    nt_xent = ns["nt_xent_loss"]

    def two_passes(encoder, head, optimizer, images, *, temperature=0.5, augment=None, generator=None, autocast_dtype=None):
        z1 = head(encoder(augment(images, generator)))
        z2 = head(encoder(augment(images, generator)))  # BatchNorm sees each view on its own
        loss = nt_xent(z1, z2, temperature)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss.detach()

    _fails(checks.check_simclr_train_step, two_passes, match="ONE batch")


def test_step_check_rejects_a_forgotten_zero_grad(ns):
    nt_xent = ns["nt_xent_loss"]

    def no_zero_grad(encoder, head, optimizer, images, *, temperature=0.5, augment=None, generator=None, autocast_dtype=None):
        z = head(encoder(torch.cat([augment(images, generator), augment(images, generator)])))
        loss = nt_xent(*z.chunk(2), temperature)
        loss.backward()
        optimizer.step()
        return loss.detach()

    _fails(checks.check_simclr_train_step, no_zero_grad, match="step 2")


def test_probe_check_rejects_training_on_the_test_set(ns):
    probe = ns["linear_probe_accuracy"]

    def cheat(train_feats, train_labels, test_feats, test_labels, **kwargs):
        return probe(test_feats, test_labels, test_feats, test_labels, **kwargs)

    _fails(checks.check_linear_probe_accuracy, cheat)


def test_probe_check_rejects_a_probe_without_standardisation():
    def raw(train_feats, train_labels, test_feats, test_labels, *, epochs=100, batch_size=512, seed=0, **kw):
        if len(train_feats) != len(train_labels) or train_feats.shape[1] != test_feats.shape[1]:
            raise ValueError("bad input")
        probe = nn.Linear(train_feats.shape[1], 4)
        nn.init.zeros_(probe.weight), nn.init.zeros_(probe.bias)
        opt = torch.optim.SGD(probe.parameters(), lr=1e-2)
        for _ in range(epochs):
            loss = F.cross_entropy(probe(train_feats), train_labels)
            opt.zero_grad(), loss.backward(), opt.step()
        return float((probe(test_feats).argmax(1) == test_labels).float().mean())

    _fails(checks.check_linear_probe_accuracy, raw)


def test_knn_check_rejects_euclidean_distance():
    def euclidean(train_feats, train_labels, test_feats, test_labels, *, k=20, batch_size=1024):
        if not 1 <= k <= len(train_feats):
            raise ValueError("bad k")
        idx = torch.cdist(test_feats, train_feats).topk(k, largest=False).indices
        votes = F.one_hot(train_labels[idx], int(train_labels.max()) + 1).sum(1)
        return float((votes.argmax(1) == test_labels).float().mean())

    _fails(checks.check_knn_accuracy, euclidean)


# ------------------------------------------------------------------------------ utils.vision
def test_resnet18_has_the_cifar_stem():
    net = vision.make_encoder("resnet18")
    resnet = net[1]
    assert resnet.conv1.kernel_size == (3, 3) and resnet.conv1.stride == (1, 1)
    assert isinstance(resnet.maxpool, nn.Identity) and isinstance(resnet.fc, nn.Identity)
    net.eval()
    with torch.no_grad():
        assert net(torch.rand(2, 3, 32, 32)).shape == (2, 512)


@pytest.mark.parametrize("name,dim", [("tiny_cnn", 128), ("small_cnn", 256)])
def test_small_encoders(name, dim):
    net = vision.make_encoder(name)
    assert net.feature_dim == dim
    feats = vision.extract_features(net, torch.randint(0, 256, (5, 3, 32, 32), dtype=torch.uint8), batch_size=2)
    assert feats.shape == (5, dim) and feats.dtype == torch.float32
    assert net.training, "extract_features must restore the module's mode"


def test_unknown_encoder_is_a_clear_error():
    with pytest.raises(ValueError, match="choose one of"):
        vision.make_encoder("resnet50")


def test_alignment_and_uniformity_match_known_values():
    g = torch.Generator().manual_seed(0)
    z = torch.randn(1000, 128, generator=g, dtype=torch.float64)
    # Collapsed features: perfect alignment and uniformity 0.
    same = z[:1].expand(50, -1)
    assert vision.alignment(same, same) == pytest.approx(0.0, abs=1e-12)
    assert vision.uniformity(same) == pytest.approx(0.0, abs=1e-12)
    # Independent uniform directions in 128-d: alignment about 2, uniformity about -3.94.
    assert vision.alignment(z[:500], z[500:]) == pytest.approx(2.0, abs=0.03)
    assert vision.uniformity(z) == pytest.approx(-4 + 8 / 128, abs=0.03)
    # Against the definition, computed with an explicit double loop.
    small = F.normalize(z[:12], dim=1)
    pairs = [((small[i] - small[j]).norm() ** 2).item() for i in range(12) for j in range(i + 1, 12)]
    assert vision.uniformity(z[:12]) == pytest.approx(math.log(sum(math.exp(-2 * d) for d in pairs) / len(pairs)), rel=1e-9)


def test_warmup_cosine_schedule():
    f = vision.warmup_cosine(100, 10)
    assert f(0) == pytest.approx(0.1) and f(9) == pytest.approx(1.0)
    assert f(55) == pytest.approx(0.5) and f(100) == pytest.approx(0.0, abs=1e-12)


def _regression_run(tmp_path, epochs, *, crash_in_epoch=None):
    """A deterministic toy training run through vision.train_loop (noise from a checkpointed generator)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(12, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    data = torch.randint(0, 256, (32, 3, 2, 2), dtype=torch.uint8)
    rng = torch.Generator().manual_seed(1)
    calls = {"n": 0}

    def step(batch, _labels):
        calls["n"] += 1
        if crash_in_epoch is not None and calls["n"] > crash_in_epoch * 4:
            raise KeyboardInterrupt  # the lecturer pressed stop
        x = batch.float() / 255 + 0.01 * torch.randn(batch.shape, generator=rng)
        loss = (model(x) - x.mean(dim=(1, 2, 3), keepdim=True)).pow(2).mean()
        opt.zero_grad(), loss.backward(), opt.step()
        return loss.detach()

    config = {"toy": 1}
    history = vision.train_loop(step, {"model": model}, opt, data, epochs=epochs, batch_size=8,
                                checkpoint=tmp_path / "ckpt.pt", config=config, rng=rng, desc="toy")
    return model, history


def test_train_loop_resumes_exactly_where_it_stopped(tmp_path):
    reference, ref_history = _regression_run(tmp_path / "a", 4)
    with pytest.raises(KeyboardInterrupt):
        _regression_run(tmp_path / "b", 4, crash_in_epoch=2)  # dies in epoch 3, after 2 saved epochs
    resumed, history = _regression_run(tmp_path / "b", 4)
    assert history["resumed_from"] == 2
    assert history["loss"] == pytest.approx(ref_history["loss"], rel=1e-6)
    for p, q in zip(resumed.parameters(), reference.parameters()):
        assert torch.allclose(p, q, atol=1e-7)
    # A finished run is loaded, not retrained.
    again, history = _regression_run(tmp_path / "b", 4, crash_in_epoch=0)
    assert history["resumed_from"] == 4


def test_checkpoint_of_another_config_is_ignored(tmp_path):
    path = tmp_path / "ckpt.pt"
    vision.save_checkpoint(path, config={"other": 1}, epoch=3)
    model = nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    def step(batch, _labels):
        loss = model(batch.float().flatten(1)).pow(2).mean()
        opt.zero_grad(), loss.backward(), opt.step()
        return loss.detach()

    hist = vision.train_loop(step, {"m": model}, opt, torch.zeros(4, 3, 1, 1, dtype=torch.uint8), epochs=1, batch_size=2,
                             checkpoint=path, config={"mine": 1})
    assert hist["resumed_from"] is None and vision.load_checkpoint(path)["config"] == {"mine": 1}


# ------------------------------------------------------------------------------- the benchmark
def test_benchmark_functions_run(ns):
    sys.path.insert(0, str(checks._SOLUTION.parents[2] / "benchmarks"))
    import simclr as bench

    images = torch.randint(0, 256, (256, 3, 32, 32), dtype=torch.uint8)
    aug = bench.bench_augmentation(ns, images, threads=1, seconds=0.2)
    assert aug["pack_batched_views_per_s"] > 0 and aug["baseline_per_image_views_per_s_one_process"] > 0
    train = bench.bench_training(ns, images, "tiny_cnn", torch.device("cpu"), batch_size=32, steps=1)
    assert train["train_images_per_s"] > 0
    labels = torch.arange(256) % 10
    result = bench.time_to_accuracy(ns, images[:128], labels[:128], images[128:192], labels[128:192], torch.device("cpu"),
                                    encoder_name="tiny_cnn", epochs=2, batch_size=32, autocast_dtype=None,
                                    channels_last=False, probe_every=1, probe_epochs=2, target=0.0)
    assert result["epochs_to_target"] == 1 and len(result["curve"]) == 2
