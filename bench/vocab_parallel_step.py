"""The vocabulary-parallel loss: time per training step against P, beside the single-GPU step.

    torchrun --nproc-per-node 2 bench/vocab_parallel_step.py [--json FILE]          # 2 GPUs, NCCL
    torchrun --nproc-per-node 2 bench/vocab_parallel_step.py --device cpu \\
        --tokens 64 --cells 32x1000 --reps 3                                        # CPU, gloo

Per cell (d x V) at ``--tokens`` rows, ``--dtype`` (default bf16), two forms of the loss:
  logits   the (tokens, V) logits, split by columns: kernel_lab.distributed.
           vocab_parallel_cross_entropy on each rank's (tokens, V/P) leaf, against one device's
           F.cross_entropy and kernel_lab.cross_entropy on the whole (tokens, V) leaf;
  linear   the classifier (V, d), split by rows: vocab_parallel_linear_cross_entropy on
           (hidden, weight shard), against one device's hidden @ W.T -> F.cross_entropy (and
           kernel_lab.linear_cross_entropy where the lab has it).
P runs over 1, 2, 4, ... up to the world size, each in groups of P consecutive ranks (P = 1:
every rank alone). One step = forward + backward, timed per rank over ``--reps`` steps after
warm-up (CUDA events on a GPU, perf_counter on a CPU); the table shows the slowest rank's median,
the step's ratio to the single-device F.cross_entropy step ("x torch") and, on a GPU, the peak
memory a rank allocates above its inputs during a step. The single-device steps run on every
rank's own device at once. Nothing here uses do_bench: its adaptive repeat count could differ
between ranks, and a collective step must run the same number of times on each.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from datetime import datetime, timezone

if __name__ == "__main__":  # no GPU: one line and exit 2, before torch loads
    from gpu_check import require_gpu  # bench/ is sys.path[0] when a script runs

    require_gpu("it times the vocabulary-parallel loss over NCCL", cpu_option="--device")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import kernel_lab  # noqa: E402
from kernel_lab.checking.checker import parse_dtype  # noqa: E402
from kernel_lab.distributed import (  # noqa: E402
    vocab_parallel_cross_entropy,
    vocab_parallel_linear_cross_entropy,
    vocab_shard,
)

LLAMA3, GEMMA2 = "4096x128256", "2304x256000"


def step_times(step, device: torch.device, reps: int, warmup: int = 2) -> list[float]:
    """Seconds per call of ``step`` (forward + backward), each timed on its own."""
    for _ in range(warmup):
        step()
    out = []
    for _ in range(reps):
        if device.type == "cuda":
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            step()
            b.record()
            b.synchronize()
            out.append(a.elapsed_time(b) / 1e3)
        else:
            t = time.perf_counter()
            step()
            out.append(time.perf_counter() - t)
    return out


def measure(step, device: torch.device, reps: int) -> dict:
    """Median seconds per step and, on a GPU, the peak bytes allocated above what existed."""
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    times = step_times(step, device, reps)
    peak = torch.cuda.max_memory_allocated() - base if device.type == "cuda" else None
    return {"s": statistics.median(times), "peak_bytes": peak}


def leaf(x: torch.Tensor) -> torch.Tensor:
    return x.detach().requires_grad_()


def make_step(loss_fn, *leaves):
    """loss_fn(*views).backward(), the leaves' gradients cleared first; the loss sees views of
    the leaves, as a model's loss sees a matmul's output (see bench/loss_step.py)."""
    def step():
        for v in leaves:
            v.grad = None
        loss_fn(*(v.view_as(v) for v in leaves)).backward()
    return step


def single_steps(form: str, h, w, x, t) -> dict:
    """The single-device steps of the whole shape."""
    if form == "logits":
        xl = leaf(x)
        steps = {"F.cross_entropy": make_step(lambda v: F.cross_entropy(v, t), xl),
                 "kernel_lab.cross_entropy": make_step(lambda v: kernel_lab.cross_entropy(v, t),
                                                       xl)}
    else:
        hl, wl = leaf(h), leaf(w)
        steps = {"F.cross_entropy": make_step(lambda a, b: F.cross_entropy(a @ b.t(), t), hl, wl)}
        lab = getattr(kernel_lab, "linear_cross_entropy", None)
        if lab is not None:
            steps["kernel_lab.linear_cross_entropy"] = make_step(lambda a, b: lab(a, b, t), hl, wl)
    return steps


def parallel_step(form: str, v: int, h, w, x, t, group, p: int, grank: int):
    """This rank's step on its shard: the columns (logits) or rows (classifier) of vocab_shard's
    split, each rank's shard its own contiguous tensor."""
    start, stop = vocab_shard(v, grank, p)
    if form == "logits":
        xs = leaf(x[:, start:stop].contiguous())
        return make_step(lambda s: vocab_parallel_cross_entropy(s, t, group, vocab_start=start),
                         xs)
    hl, ws = leaf(h), leaf(w[start:stop].contiguous())
    return make_step(lambda a, b: vocab_parallel_linear_cross_entropy(
        a, b, t, group, vocab_start=start), hl, ws)


def groups_of_size(p: int, world: int, rank: int):
    """(group, rank in it) of this rank among consecutive groups of p ranks (every rank calls
    new_group for every group, in the same order)."""
    mine = None
    for first in range(0, world, p):
        members = list(range(first, first + p))
        g = dist.new_group(members) if p < world else dist.group.WORLD
        if rank in members:
            mine = (g, members.index(rank))
    return mine


def slowest(result: dict) -> dict:
    """The slowest rank's time and the largest peak, gathered (outside any timing)."""
    every = [None] * dist.get_world_size()
    dist.all_gather_object(every, result)
    peaks = [r["peak_bytes"] for r in every if r["peak_bytes"] is not None]
    return {"s": max(r["s"] for r in every), "peak_bytes": max(peaks) if peaks else None}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cells", default=f"{LLAMA3},{GEMMA2}", help="d x V, comma-separated")
    p.add_argument("--tokens", type=int, default=8192)
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--forms", default="logits,linear")
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--json", default=None, help="rank 0 writes the rows here")
    args = p.parse_args(argv)
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if args.device == "cuda":
        torch.cuda.set_device(local)
        device = torch.device("cuda", local)
    else:
        device = torch.device("cpu")
    # NVLink multicast stays off (the GPU machines require it; set there already, kept here
    # for a machine where it is not)
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    dtype = parse_dtype(args.dtype)
    sizes = [q for q in (1, 2, 4, 8, 16) if q <= world and world % q == 0]
    groups = {q: groups_of_size(q, world, rank) for q in sizes}
    what = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU (gloo)"
    if rank == 0:
        print(f"{world} x {what}: a loss step (forward + backward) at {args.tokens} tokens, "
              f"{str(dtype)[6:]}; the slowest rank's median of {args.reps}")
        print(f"{'form':7s} {'d x V':>12s} {'way':>34s} {'ms/step':>9s} {'x torch':>8s} "
              f"{'peak GiB':>9s}")
    rows = []
    for cell in args.cells.split(","):
        d, v = map(int, cell.split("x"))
        gen = torch.Generator(device=device).manual_seed(0)
        t = torch.randint(0, v, (args.tokens,), device=device, generator=gen)
        for form in args.forms.split(","):
            if form == "logits":
                h = w = None
                x = torch.randn(args.tokens, v, device=device, dtype=dtype, generator=gen) * 2
            else:
                x = None
                h = torch.randn(args.tokens, d, device=device, dtype=dtype, generator=gen)
                w = torch.randn(v, d, device=device, dtype=dtype, generator=gen) / d ** 0.5
            results = {}
            for name, step in single_steps(form, h, w, x, t).items():
                results[f"1 device, {name}"] = slowest(measure(step, device, args.reps))
            for q in sizes:
                group, grank = groups[q]
                step = parallel_step(form, v, h, w, x, t, group, q, grank)
                results[f"P={q}, vocab_parallel"] = slowest(measure(step, device, args.reps))
                del step
            base = results["1 device, F.cross_entropy"]["s"]
            for way, r in results.items():
                peak = "" if r["peak_bytes"] is None else f"{r['peak_bytes'] / 2**30:9.2f}"
                if rank == 0:
                    print(f"{form:7s} {cell:>12s} {way:>34s} {r['s'] * 1e3:9.3f} "
                          f"{r['s'] / base:8.2f} {peak}", flush=True)
                rows.append({"form": form, "d": d, "v": v, "tokens": args.tokens,
                             "dtype": str(dtype)[6:], "way": way, "ms": r["s"] * 1e3,
                             "peak_bytes": r["peak_bytes"], "world": world, "device": what})
            del x, h, w
            if device.type == "cuda":
                torch.cuda.empty_cache()
    if rank == 0 and args.json:
        stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        with open(args.json, "w") as f:
            json.dump({"measured_utc": stamp, "rows": rows}, f, indent=1)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
