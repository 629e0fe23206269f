"""Task A and Task B on torch.distributed: two CPU processes (gloo on 127.0.0.1) must reproduce one
process holding everything.

* the NT-Xent of benchmarks/simclr_ddp.py on embeddings gathered with
  ``utils.distributed.all_gather_with_grad``: loss, gradients of each rank's embeddings and, through
  DDP, of an encoder's parameters, against one process on the concatenated batch (and a plain
  ``dist.all_gather`` must get the parameter gradients wrong);
* two DDP training steps (SGD with momentum, no BatchNorm: SyncBatchNorm runs on GPUs only) on a
  global batch split in two, against the same steps in one process;
* ``shard`` + ``merge_results`` over two processes evaluating checkpoints of the miniature Pythia
  suite, against a single-process loop.

The workers are this file run as a script (``python tests/test_distributed.py worker ...``) with
the environment torchrun would give them (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT),
so ``init_from_env`` is exercised as under torchrun. About 20 s in all on 2 cores.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch
from torch import nn

REPO = Path(__file__).resolve().parents[1]
for _p in (REPO, REPO / "benchmarks"):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

import simclr_ddp  # noqa: E402  (benchmarks/simclr_ddp.py)
from utils import distributed as du  # noqa: E402

WORLD = 2
B, D_IN, TAU = 8, 12, 0.5  # global batch (4 images per rank), input width, temperature


# =========================================================================== launching workers
def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _launch(scenario: str, out: Path, *args: str, world: int = WORLD, timeout: float = 120.0) -> list[dict]:
    """Run ``world`` worker processes of ``scenario``; return each rank's saved dict."""
    port = _free_port()
    procs = []
    for rank in range(world):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank),
                   LOCAL_WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                   OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="",
                   PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
        procs.append(subprocess.Popen([sys.executable, __file__, "worker", scenario, str(out), *args], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    logs = []
    try:
        for proc in procs:
            logs.append(proc.communicate(timeout=timeout)[0])
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    for rank, (proc, log) in enumerate(zip(procs, logs)):
        assert proc.returncode == 0, f"rank {rank} of {scenario!r} failed (exit {proc.returncode}):\n{log[-4000:]}"
    return [torch.load(out / f"{scenario}.rank{r}.pt", weights_only=False) for r in range(world)]


# ============================================================================ shared test data
def _grad_problem():
    """Float64 inputs of two views of a global batch [B, D_IN] and a small encoder (no BN)."""
    g = torch.Generator().manual_seed(0)
    x1, x2 = torch.randn(B, D_IN, generator=g, dtype=torch.float64), torch.randn(B, D_IN, generator=g, dtype=torch.float64)
    torch.manual_seed(1)
    encoder = nn.Sequential(nn.Linear(D_IN, 16), nn.Tanh(), nn.Linear(16, 8)).double()
    return x1, x2, encoder


def _step_problem():
    """uint8 images [B, 3, 8, 8], fixed per-image 'augmentation' noise for each view, a small
    conv net with a projection (float32, no BatchNorm)."""
    g = torch.Generator().manual_seed(2)
    images = torch.randint(0, 256, (B, 3, 8, 8), dtype=torch.uint8, generator=g)
    noise = 0.1 * torch.randn(2, B, 3, 8, 8, generator=g)
    torch.manual_seed(3)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, stride=2, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                          nn.Flatten(), nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 8))
    return images, noise, model


def _augment_for(noise: torch.Tensor, rows: slice):
    """A deterministic stand-in for augment_batch: the k-th call adds the k-th view's noise of
    the images at global positions ``rows`` (so one process and two agree on every view)."""
    calls = [0]

    def augment(images, _generator=None):
        view = calls[0] % 2
        calls[0] += 1
        return images.float() / 255 + noise[view, rows]

    return augment


def _naive_gather(x: torch.Tensor) -> torch.Tensor:
    """The common mistake: dist.all_gather (no backward), this rank's rows put back in."""
    import torch.distributed as dist

    parts = [torch.empty_like(x) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, x.detach().contiguous())
    parts[dist.get_rank()] = x
    return torch.cat(parts)


@contextmanager
def _gather_replaced_by(fn):
    original = du.all_gather_with_grad
    du.all_gather_with_grad = fn
    try:
        yield
    finally:
        du.all_gather_with_grad = original


def _two_steps(model, images, noise, rows, *, steps: int = 2) -> list[torch.Tensor]:
    opt = torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.9, weight_decay=5e-4)
    losses = []
    for _ in range(steps):
        losses.append(simclr_ddp.ddp_train_step(model, opt, images[rows], augment=_augment_for(noise, rows),
                                                temperature=TAU))
    return losses


# ===================================================================================== workers
def _worker_grad(out: Path, info: du.DistInfo) -> dict:
    from torch.nn.parallel import DistributedDataParallel as DDP

    x1, x2, encoder = _grad_problem()
    b = B // info.world_size
    rows = slice(info.rank * b, (info.rank + 1) * b)
    result = {}
    for anchors in ("local", "all"):
        # Gradients w.r.t. this rank's embeddings (leaves).
        with torch.no_grad():
            z1, z2 = encoder(x1[rows]), encoder(x2[rows])
        z1.requires_grad_(), z2.requires_grad_()
        loss = simclr_ddp.nt_xent_distributed(z1, z2, TAU, anchors=anchors)
        loss.backward()
        result[anchors] = {"loss": loss.detach(), "loss_mean": du.all_reduce_mean(loss), "z1_grad": z1.grad,
                           "z2_grad": z2.grad}
        # Parameter gradients after DDP's averaging: the real thing, and the plain all_gather.
        for name, gather in (("ddp", None), ("naive", _naive_gather)):
            model = DDP(_grad_problem()[2])
            z = model(torch.cat([x1[rows], x2[rows]]))
            with _gather_replaced_by(gather or du.all_gather_with_grad):
                simclr_ddp.nt_xent_distributed(*z.chunk(2), TAU, anchors=anchors).backward()
            result[anchors][f"{name}_param_grads"] = [p.grad.clone() for p in model.module.parameters()]
    return result


def _worker_step(out: Path, info: du.DistInfo) -> dict:
    from torch.nn.parallel import DistributedDataParallel as DDP

    images, noise, _ = _step_problem()
    b = B // info.world_size
    rows = slice(info.rank * b, (info.rank + 1) * b)
    result = {}
    for name, gather in (("ddp", du.all_gather_with_grad), ("naive", _naive_gather)):
        model = DDP(_step_problem()[2])
        with _gather_replaced_by(gather):
            losses = _two_steps(model, images, noise, rows)
        result[name] = {"params": [p.detach().clone() for p in model.module.parameters()],
                        "losses": [du.all_reduce_mean(l) for l in losses]}
    return result


def _checkpoint_jobs(folder: Path) -> list[tuple[str, int]]:
    import json

    manifest = json.loads((folder / "manifest.json").read_text())
    steps = manifest["steps"]
    chosen = sorted({steps[0], steps[len(steps) // 2], steps[-1]})
    return [(m["name"], s) for m in manifest["models"] for s in chosen]


def _held_out_ids() -> torch.Tensor:
    from utils.data import load_text, split_text
    from utils.lm import load_tokenizer

    _, held_out = split_text(load_text("tinyshakespeare"))
    ids = torch.tensor(load_tokenizer()(held_out[:2000])["input_ids"][:128])
    return ids.view(2, 64)  # two windows of 64 tokens (the micro suite's context)


def _load_checkpoint(folder: Path):
    def load(name: str, step: int):
        from transformers import GPTNeoXForCausalLM
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()
        return GPTNeoXForCausalLM.from_pretrained(folder / name / f"step{step}", dtype=torch.float32).eval(), None
    return load


def _toy_evaluate(model, tokenizer, documents, *, original_documents=None, progress=False, ids=None):
    """A stand-in for the notebook's graded evaluate_loss: mean next-token NLL on fixed windows."""
    with torch.no_grad():
        nll = float(model(ids, labels=ids).loss)
    return {"nll_per_token": nll, "tokens": int(ids[:, 1:].numel())}


def _toy_count(model):
    total = sum(p.numel() for p in model.parameters())
    return total, total - model.get_input_embeddings().weight.numel()


def _sweep(folder: Path, cache: Path | None, shard=None):
    from utils import scaling

    return scaling.evaluate_checkpoints(
        _toy_evaluate, _toy_count, _load_checkpoint(folder), sorted({n for n, _ in _checkpoint_jobs(folder)}),
        lambda name: sorted({s for n, s in _checkpoint_jobs(folder) if n == name}),
        documents=["held-out shakespeare"], text_key="toy", cache=cache, progress=False, shard=shard,
        ids=_held_out_ids())


def _worker_taskb(out: Path, info: du.DistInfo, folder: str) -> dict:
    """Task B's sweep with ``shard=(rank, world)``: each rank appends to its own results file, then
    rank 0 folds them into the cache after a barrier."""
    from utils import scaling

    rows = _sweep(Path(folder), out / "results.csv", shard=(info.rank, info.world_size))
    du.barrier()
    if info.is_main:
        scaling.merge_rank_caches(out / "results.csv")
    du.barrier()
    return {"n": len(rows), "jobs": [(r.model, int(r.step)) for r in rows.itertuples()]}


def _worker_simclr(out: Path, info: du.DistInfo) -> dict:
    # One launch for both SimCLR checks: each process pays for `import torch` and for the
    # torch._dynamo import inside DDP's constructor (seconds) only once.
    return {"grad": _worker_grad(out, info), "step": _worker_step(out, info)}


def _worker_main(scenario: str, out: str, *args: str) -> None:
    torch.set_num_threads(1)
    out = Path(out)
    info = du.init_from_env(device="cpu", timeout_s=90)
    assert info.backend == "gloo" and du.is_distributed() and info.world_size == du.get_world_size()
    try:
        result = {"_simclr": _worker_simclr, "_taskb": _worker_taskb}[f"_{scenario}"](out, info, *args)
        torch.save(result, out / f"{scenario}.rank{info.rank}.pt")
    finally:
        du.cleanup()


# ======================================================================================= tests
@pytest.fixture(scope="module")
def simclr_ranks(tmp_path_factory) -> list[dict]:
    """Each rank's results of the two SimCLR scenarios (gradients, training steps)."""
    return _launch("simclr", tmp_path_factory.mktemp("simclr-ddp"))


def _single_process_grads(anchors: str = "all"):
    """The reference: one process, no process group, the whole batch."""
    assert not du.is_distributed()
    x1, x2, encoder = _grad_problem()
    with torch.no_grad():
        z1, z2 = encoder(x1), encoder(x2)
    z1.requires_grad_(), z2.requires_grad_()
    loss = simclr_ddp.nt_xent_distributed(z1, z2, TAU, anchors=anchors)
    loss.backward()
    z = encoder(torch.cat([x1, x2]))
    simclr_ddp.nt_xent_distributed(*z.chunk(2), TAU).backward()
    return loss.detach(), z1.grad, z2.grad, [p.grad for p in encoder.parameters()]


def test_single_process_loss_is_the_notebooks_nt_xent():
    """Without a process group the script's loss (both modes) is the model solution's nt_xent_loss."""
    from grader.checks.taskA_simclr import solution_namespace

    nt_xent_loss = solution_namespace()["nt_xent_loss"]
    g = torch.Generator().manual_seed(5)
    z1, z2 = torch.randn(6, 16, generator=g, dtype=torch.float64), torch.randn(6, 16, generator=g, dtype=torch.float64)
    ref = nt_xent_loss(z1, z2, 0.3)
    for anchors in ("local", "all"):
        assert torch.allclose(simclr_ddp.nt_xent_distributed(z1, z2, 0.3, anchors=anchors), ref, rtol=1e-12)
    assert du.all_gather_with_grad(z1) is z1
    # 2N - 2 negatives: views equal to their partners and orthogonal to the rest.
    e = torch.eye(6, 16)
    want = -torch.log(torch.tensor(torch.e ** 2 / (torch.e ** 2 + 10)))
    assert torch.isclose(simclr_ddp.nt_xent_distributed(e, e, 0.5), want, atol=1e-6)


def test_distributed_nt_xent_matches_one_process(simclr_ranks):
    ranks = [r["grad"] for r in simclr_ranks]
    ref_loss, ref_g1, ref_g2, ref_params = _single_process_grads()
    b = B // WORLD
    for anchors in ("local", "all"):
        for rank, res in enumerate(ranks):
            r = res[anchors]
            rows = slice(rank * b, (rank + 1) * b)
            # The global-batch loss: on every rank ("all") or as the mean over ranks ("local").
            assert torch.allclose(r["loss_mean"], ref_loss, rtol=1e-12)
            if anchors == "all":
                assert torch.allclose(r["loss"], ref_loss, rtol=1e-12)
            # Each rank's embeddings get W times their single-process gradient (the gather's
            # backward sums the W ranks' contributions) ...
            assert torch.allclose(r["z1_grad"], WORLD * ref_g1[rows], rtol=1e-9, atol=1e-15), (anchors, rank)
            assert torch.allclose(r["z2_grad"], WORLD * ref_g2[rows], rtol=1e-9, atol=1e-15), (anchors, rank)
            # ... which DDP's average over ranks turns into exactly the single-process parameter gradients.
            for got, want in zip(r["ddp_param_grads"], ref_params):
                assert torch.allclose(got, want, rtol=1e-9, atol=1e-14), (anchors, rank)
            # A plain all_gather (no backward) gets them wrong, so this test can fail.
            assert not all(torch.allclose(got, want, rtol=1e-3) for got, want in zip(r["naive_param_grads"], ref_params))


def test_ddp_training_steps_match_one_process(simclr_ranks):
    ranks = [r["step"] for r in simclr_ranks]
    images, noise, model = _step_problem()
    ref_losses = _two_steps(model, images, noise, slice(0, B))
    ref_params = [p.detach() for p in model.parameters()]
    for rank, res in enumerate(ranks):
        for got, want in zip(res["ddp"]["losses"], ref_losses):
            assert torch.allclose(got, want, rtol=1e-5), rank
        for got, want in zip(res["ddp"]["params"], ref_params):
            assert torch.allclose(got, want, rtol=1e-4, atol=1e-6), rank
        assert not all(torch.allclose(got, want, rtol=1e-4, atol=1e-6)
                       for got, want in zip(res["naive"]["params"], ref_params)), "the naive gather must differ"
    for a, b in zip(ranks[0]["ddp"]["params"], ranks[1]["ddp"]["params"]):
        assert torch.equal(a, b), "DDP replicas diverged"


def test_sharded_checkpoint_evaluation_merges_to_single_process(tmp_path, micro_suite):
    """utils.scaling.evaluate_checkpoints split over 2 gloo processes (shard=(rank, world)) on real
    miniature-suite checkpoints: each rank does a different half, and the merged cache equals a
    single-process sweep row for row."""
    from utils import scaling

    ranks = _launch("taskb", tmp_path, str(micro_suite))
    jobs = _checkpoint_jobs(Path(micro_suite))
    assert [r["n"] for r in ranks] == [len(du.shard(sorted(jobs), r, WORLD)) for r in range(WORLD)]
    assert all(r["n"] > 0 for r in ranks), "both ranks must have done some of the work"
    assert not set(map(tuple, ranks[0]["jobs"])) & set(map(tuple, ranks[1]["jobs"])), "no checkpoint twice"
    assert not list(tmp_path.glob("results.rank*.csv")), "the rank files are folded into the cache"
    merged = scaling.load_results(tmp_path / "results.csv")

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        single = _sweep(Path(micro_suite), None)
    finally:
        torch.set_num_threads(threads)
    single = single.sort_values(["model", "step"], kind="stable").reset_index(drop=True)
    assert list(zip(merged["model"], merged["step"])) == list(zip(single["model"], single["step"]))
    assert len(merged) == len(jobs)
    for got, want in zip(merged.itertuples(), single.itertuples()):
        assert got.non_embedding_params == want.non_embedding_params and got.tokens == want.tokens
        assert abs(got.nll_per_token - want.nll_per_token) <= 1e-5 * abs(want.nll_per_token), (got, want)

    # A rerun finds every row in the merged cache and evaluates nothing.
    again = _sweep(Path(micro_suite), tmp_path / "results.csv", shard=(1, WORLD))
    assert len(again) == len(du.shard(sorted(jobs), 1, WORLD)) and not list(tmp_path.glob("results.rank*.csv"))


def test_merge_results_sorts_and_reports_a_missing_rank(tmp_path):
    rows = [[{"index": 2, "v": 1.0}, {"index": 0, "v": 2.0}], [{"index": 1, "v": 3.0}]]
    paths = [du.write_results(r, du.rank_results_path(tmp_path, rank)) for rank, r in enumerate(rows)]
    assert [r["index"] for r in du.merge_results(paths, sort_by="index")] == [0, 1, 2]
    assert [r["index"] for r in du.merge_results(paths)] == [2, 0, 1], "without sort_by: rank by rank"
    paths[1].unlink()
    with pytest.raises(FileNotFoundError, match="did every rank finish"):
        du.merge_results(paths)


def test_shard_and_atomic_write(tmp_path):
    items = list("abcdefg")
    shards = [du.shard(items, r, 3) for r in range(3)]
    assert shards == [list("adg"), list("be"), list("cf")]
    assert sorted(sum(shards, [])) == items and du.shard(items, 0, 1) == items
    assert du.shard(items) == items  # no process group: everything
    try:
        du.shard(items, 3, 3)
    except ValueError:
        pass
    else:
        raise AssertionError("rank >= world must be rejected")
    rows = [{"index": 1, "loss": torch.tensor(0.5), "n": 3}, {"index": 0, "loss": float("nan"), "n": 4}]
    for suffix in (".json", ".csv"):
        path = du.write_results(rows, tmp_path / f"r{suffix}")
        back = du.merge_results([path], sort_by="index")
        assert [r["index"] for r in back] == [0, 1] and back[1]["loss"] == 0.5
        assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


if __name__ == "__main__" and len(sys.argv) > 1 and sys.argv[1] == "worker":
    _worker_main(*sys.argv[2:])
