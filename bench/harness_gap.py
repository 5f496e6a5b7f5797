"""Where fast_softmax's GB/s goes between a bare launch and the benchmark's call.

    python bench/harness_gap.py --shape float32:2048 --shape bfloat16:4096

The sweep (``kernel_lab bench``) read fast_softmax's block kernel 3-5 % under what
bench/ab_kernels.py reads for the same kernel and shape (sweep18 fp32 2048: 94 % of copy; the
nineteenth run's A/B: 97.5 %), while triton_fused read the same in both. Per shape, in one
process and the same rounds (CUDA events, tune_long_rows.med_ms), M*N = 2^28:

  bare      rk.fast_launch into one preallocated output, the kernel built alone (ab_kernels)
  module    the same, from the process-wide module (every instantiation, as fast_softmax)
  call      fast_softmax(x): the variant as the registry calls it (a new output each call)
  harness   the benchmark's own timer (benchmarking.calibrate / time_rounds) around ``call``
  triton    triton_fused(x)
  NAME      with --variant NAME=DIR: ``call`` with the kernel built from another copy of
            cuda_src/ (bench/policy_variants.py makes them), a new output each call

--workload takes x from the benchmark's own workload (benchmarking.make_workload, its float64
reference computed and kept, as a sweep holds them) instead of a bare torch.randn.
Prints one line per shape: GB/s and % of the copy timed in the same rounds.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path
from typing import Callable

import torch

from kernel_lab import benchmarking as bm
from kernel_lab import registry
from kernel_lab.cuda_common import CudaSource
from kernel_lab.ops.softmax import cuda_variants as cv
from kernel_lab.rowkernels import launch as rk

try:  # run as a script from the repository root
    from ab_kernels import variant
    from tune_long_rows import med_ms, sane
except ImportError:  # pragma: no cover - imported as bench.harness_gap
    from bench.ab_kernels import variant
    from bench.tune_long_rows import med_ms, sane


def harness_ms(fn) -> float:
    """Per-call ms by the benchmark's own plan and timer (pytest-benchmark's rounds)."""
    p = bm.plan(fn, bm.cuda_sync_timer, bm.host_latency(fn))
    return 1e3 * statistics.median(bm.time_rounds(fn, bm.cuda_sync_timer, p))


def new_output_call(x: torch.Tensor, cfg, phase: int,
                    kernels) -> Callable[[], torch.Tensor]:
    """fast_softmax's own call (a new output each time) with ``kernels`` built elsewhere."""
    def call() -> torch.Tensor:
        out = torch.empty_like(x)
        rk.fast_launch(out, x, cfg, phase, kernels=kernels)
        return out
    return call


def race(spec: str, rounds: int, variants: list[tuple[str, Path]],
         workload: bool) -> str:
    """One shape's line: each way's GB/s and % of the copy (medians over the rounds)."""
    fast, triton = registry.get("fast_softmax").fn, registry.get("triton_fused").fn
    dname, _, ns = spec.partition(":")
    dtype, n = bm.parse_dtype(dname), int(ns)
    shape = (max(1, (1 << 28) // n), n)
    if workload:  # kept alive (and its reference) until the shape's line is printed
        work = bm.make_workload(bm.Case("softmax", dtype, shape), "cuda")
        work.reference()
        x = work.inputs[0]
    else:
        x = torch.randn(*shape, device="cuda", dtype=dtype)
    y = torch.empty_like(x)
    cfg, phase = rk.fast_choice(y, x)
    expr = (cfg.expr(cv.ctype(dtype)),)
    alone = rk.RowKernels(CudaSource(cv.FAST.path, expr), "fast_softmax")
    ways = {
        "bare": lambda: rk.fast_launch(y, x, cfg, phase, kernels=alone),
        "module": lambda: rk.fast_launch(y, x, cfg, phase, kernels=cv.FAST_KERNELS),
        "call": lambda: fast(x),
        "triton": lambda: triton(x),
    }
    for name, path in variants:
        ways[name] = new_output_call(
            x, cfg, phase, rk.RowKernels(CudaSource(path.resolve(), expr), "fast_softmax"))
    for name, fn in ways.items():
        y.fill_(float("nan"))
        out = fn()
        if not sane(y if out is None else out, x, log=False):
            raise SystemExit(f"{name}: wrong output for {spec}")
    mb = 2 * x.numel() * x.element_size() / 1e6
    pct = {name: [] for name in [*ways, "harness"]}
    copies = []
    for _ in range(rounds):
        copy = mb / med_ms(lambda: y.copy_(x))
        copies.append(copy)
        for name, fn in ways.items():
            pct[name].append(100 * mb / med_ms(fn) / copy)
        pct["harness"].append(100 * mb / harness_ms(ways["call"]) / copy)
    c = statistics.median(copies)
    cells = [f"{k} {statistics.median(v) * c / 100:,.0f} ({statistics.median(v):.1f} %)"
             for k, v in pct.items()]
    return f"{dname} {x.shape[0]}x{n} {cfg.label()} | copy {c:,.0f} | " + " | ".join(cells)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shape", action="append", required=True, help="DTYPE:N")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--variant", type=variant, action="append", default=[],
                    help="NAME=DIR: also time fast_softmax's call with DIR's kernels")
    ap.add_argument("--workload", action="store_true",
                    help="x from the benchmark's workload (its float64 reference kept)")
    a = ap.parse_args()
    for spec in a.shape:
        print(race(spec, a.rounds, a.variant, a.workload), flush=True)


if __name__ == "__main__":
    main()
