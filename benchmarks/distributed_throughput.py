"""Throughput of the DDP SimCLR step (benchmarks/simclr_ddp.py) on 1 and 2 processes, in one run.

    python benchmarks/distributed_throughput.py                  # about a minute on 2 CPU cores
    python benchmarks/distributed_throughput.py --encoders tiny_cnn --steps 10 --repeats 3

For every world size it starts ``torchrun --standalone --nproc_per_node W`` on this script (gloo on
the CPU, NCCL with one GPU per process when CUDA is available) and times, per encoder and thread
count, ``--warmup`` untimed steps and then ``--steps`` timed ones of ``ddp_train_step`` (the
notebook's augmentation, encoder + projection head, NT-Xent on the gathered projections, DDP's
gradient all-reduce, SGD) on a fixed GLOBAL batch of SYNTHETIC CIFAR-shaped images split across
the processes, ``--repeats`` times. Images/s = steps x global batch / wall time between two
barriers, the best of the repeats.

On the CPU the fair comparison keeps the cores fixed: 1 process x 2 threads against 2 processes x
1 thread (1 process x 1 thread is shown too). The numbers move with whatever else runs on the
machine: compare rows of the same run only. Writes build/bench/distributed_throughput.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from utils import distributed as du  # noqa: E402
from utils.paths import build_dir  # noqa: E402


# ------------------------------------------------------------------------------------ the worker
def measure(info: du.DistInfo, *, encoder: str, threads: int, batch_size: int, warmup: int, steps: int,
            repeats: int, parts: dict) -> dict:
    """Time the DDP SimCLR step on this rank (all ranks call it together): the best of ``repeats``
    timings of ``steps`` steps (the least disturbed by other load)."""
    import simclr_ddp
    from utils.data import synthetic_cifar_like

    torch.set_num_threads(threads)
    world, rank = info.world_size, info.rank
    cuda = info.device.type == "cuda"
    images = synthetic_cifar_like(batch_size, seed=0).images.to(info.device)
    local = images[simclr_ddp.local_batch_indices(torch.arange(batch_size), 0, batch_size, rank, world)]
    model = simclr_ddp.build_model(encoder, parts["ProjectionHead"], info.device, channels_last=cuda)
    ddp = simclr_ddp.wrap_ddp(model, info)
    opt = simclr_ddp.make_optimizer(model, 0.1)
    gen = torch.Generator(device=info.device).manual_seed(rank)
    autocast = torch.bfloat16 if cuda else None

    def step():
        return simclr_ddp.ddp_train_step(ddp, opt, local, augment=parts["augment_batch"], generator=gen,
                                         temperature=0.5, autocast_dtype=autocast)

    for _ in range(warmup):
        step()
    if cuda:
        torch.cuda.synchronize()
    rates = []
    for _ in range(repeats):
        du.barrier()
        start = time.perf_counter()
        for _ in range(steps):
            loss = step()
        float(loss)
        if cuda:
            torch.cuda.synchronize()
        du.barrier()
        rates.append(steps * batch_size / (time.perf_counter() - start))
    best = max(rates)
    return {"world_size": world, "threads_per_process": threads, "encoder": encoder, "global_batch": batch_size,
            "local_batch": batch_size // world, "steps": steps, "repeats": repeats,
            "images_per_s": best, "views_per_s": 2 * best, "images_per_s_each_repeat": rates,
            "backend": info.backend, "device": str(info.device)}


def worker(args) -> int:
    sys.path.insert(0, str(REPO / "benchmarks"))
    import simclr_ddp

    info = du.init_from_env()
    try:
        parts = simclr_ddp.notebook_parts()
        rows = []
        for encoder in args.encoders:
            for threads in args.thread_counts:
                rows.append(measure(info, encoder=encoder, threads=threads, batch_size=args.batch_size,
                                    warmup=args.warmup, steps=args.steps, repeats=args.repeats, parts=parts))
                if info.is_main:
                    r = rows[-1]
                    print(f"  world {r['world_size']} x {threads} thread(s), {encoder}: {r['images_per_s']:,.0f} images/s",
                          flush=True)
        if info.is_main:
            du.write_results(rows, args.result)
    finally:
        du.cleanup()
    return 0


# ------------------------------------------------------------------------------------- the driver
def launch(world: int, thread_counts: list[int], args, result: Path) -> list[dict]:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={world}",
           str(Path(__file__).resolve()), "--worker", "--result", str(result),
           "--encoders", *args.encoders, "--thread-counts", *map(str, thread_counts),
           "--batch-size", str(args.batch_size), "--warmup", str(args.warmup), "--steps", str(args.steps),
           "--repeats", str(args.repeats)]
    env = dict(os.environ, OMP_NUM_THREADS=str(max(thread_counts)),
               PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    print(f"torchrun --standalone --nproc_per_node={world} ... (threads per process: {thread_counts})", flush=True)
    subprocess.run(cmd, env=env, check=True)
    return du.read_results(result)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--encoders", nargs="+", default=["tiny_cnn", "small_cnn"])
    parser.add_argument("--batch-size", type=int, default=128, help="GLOBAL batch (images; 2 views each)")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--steps", type=int, default=4, help="timed steps per repeat")
    parser.add_argument("--repeats", type=int, default=2, help="timings per row; the best one is reported")
    parser.add_argument("--cores", type=int, default=min(2, os.cpu_count() or 1),
                        help="CPU cores to share out (1 process x cores threads vs cores processes x 1 thread)")
    parser.add_argument("--out", default=str(build_dir() / "bench" / "distributed_throughput.json"))
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    parser.add_argument("--thread-counts", nargs="+", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return worker(args)

    cuda = torch.cuda.is_available()
    worlds = [1, 2] if not cuda else [1, min(2, torch.cuda.device_count())]
    report = {
        "benchmark": "distributed_throughput", "python": platform.python_version(), "torch": torch.__version__,
        "cpu": platform.processor() or platform.machine(), "cpu_count": os.cpu_count(),
        "gpu": torch.cuda.get_device_name() if cuda else None, "images": "SYNTHETIC CIFAR-shaped stand-in (32x32)",
        "global_batch": args.batch_size, "warmup_steps": args.warmup, "timed_steps": args.steps,
        "repeats": args.repeats, "images_per_s": "best of the repeats",
        "note": "Shared machine: numbers move with other load; compare rows of this run only.",
        "load_average_at_start": os.getloadavg(),
    }
    rows = []
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        for world in dict.fromkeys(worlds):
            if cuda:
                threads = [max(1, args.cores // world)]
            else:
                threads = sorted({1, args.cores}) if world == 1 else [max(1, args.cores // world)]
            rows += launch(world, threads, args, Path(tmp) / f"world{world}.json")
    report["rows"] = rows
    report["wall_seconds"] = time.perf_counter() - start
    report["load_average_at_end"] = os.getloadavg()

    print(f"\nDDP SimCLR step, global batch {args.batch_size} (synthetic), {args.warmup} warm-up steps, best of {args.repeats} x {args.steps} timed steps")
    print(f"{'encoder':<10} {'processes':>9} {'threads/proc':>12} {'local batch':>11} {'images/s':>10} "
          f"{'vs 1 proc x 1 thread':>21} {'vs 1 proc, same cores':>22}")
    for encoder in args.encoders:
        mine = [r for r in rows if r["encoder"] == encoder]
        one = next((b for b in mine if b["world_size"] == 1 and b["threads_per_process"] == 1), None)
        for r in mine:
            cores = r["world_size"] * r["threads_per_process"]
            same = next((b for b in mine if b["world_size"] == 1 and b["threads_per_process"] == cores), None)
            ratios = [f"{r['images_per_s'] / b['images_per_s']:.2f}x" if b and b is not r else "" for b in (one, same)]
            r["speedup_vs_1x1"] = r["images_per_s"] / one["images_per_s"] if one else None
            print(f"{encoder:<10} {r['world_size']:>9} {r['threads_per_process']:>12} {r['local_batch']:>11} "
                  f"{r['images_per_s']:>10,.0f} {ratios[0]:>21} {ratios[1]:>22}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2, default=str) + "\n", encoding="utf-8")
    print(f"load average {report['load_average_at_start']} -> {report['load_average_at_end']}; wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
