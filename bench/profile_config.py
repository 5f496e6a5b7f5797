"""Launch one fast_softmax (or fused_softmax_backward) config a few times, for Nsight Compute.

    ncu --clock-control none -k regex:persist --launch-skip 2 --launch-count 1 \\
        --section SpeedOfLight --section WarpStateStats --section MemoryWorkloadAnalysis \\
        python3 bench/profile_config.py --n 65536 --dtype bfloat16 --kind persist \\
        --threads 1024 --vpt 4 --cluster 2 --late

``--backward`` launches fused_softmax_backward instead (``--kind persist`` with ``--threads``,
``--vpt``, ``--cluster``, ``--stages``; default: the shape ``backward_config`` picks), e.g. to set
the bf16 forward's counters beside the backward's, whose loop is the same:

    ncu ... -k regex:persist ... python3 bench/profile_config.py --n 65536 --dtype bfloat16 \
        --backward

The first launch compiles (NVRTC) and sets the kernel's attributes; ``--launch-skip`` skips the
warm-up launches so the profiled one runs like the benchmark's. M * N = 2^``--total-log2``.
Without ncu it prints the config and the median time of the launches (CUDA events).
"""

from __future__ import annotations

import argparse

if __name__ == "__main__":  # no GPU: one line and exit 2, before torch loads
    from gpu_check import require_gpu  # bench/ is sys.path[0] when a script runs

    require_gpu("it launches a fast_softmax config on CUDA tensors for Nsight Compute")

import torch  # noqa: E402

from kernel_lab.cuda.rowkernels import backward_config as bc  # noqa: E402
from kernel_lab.cuda.rowkernels import forward_config as fc  # noqa: E402
from kernel_lab.cuda.rowkernels import launch as rk  # noqa: E402
from kernel_lab.measure.benchmarking import parse_dtype  # noqa: E402
from kernel_lab.ops.softmax import cuda_variants as cv  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, required=True)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--kind", default=None, help="warp/block/cluster/persist/pipe/wide/chunks "
                    "(default: the config fast_softmax picks)")
    ap.add_argument("--threads", type=int, default=1024)
    ap.add_argument("--vpt", type=int, default=8)
    ap.add_argument("--cluster", type=int, default=1)
    ap.add_argument("--late", action="store_true")
    ap.add_argument("--stages", type=int, default=1, help="persist / pipe: rows of slots")
    ap.add_argument("--lag", type=int, default=1, help="chunks: steps a chunk waits")
    ap.add_argument("--ahead", type=int, default=1, help="chunks: chunks in flight")
    ap.add_argument("--slots", type=int, default=-1,
                    help="block_slots / persist_slots: shared-memory windows a thread "
                    "(default: as few as hold the row)")
    ap.add_argument("--backward", action="store_true",
                    help="fused_softmax_backward (y, dy -> dx; 3 tensors) instead of the forward")
    ap.add_argument("--launches", type=int, default=4)
    ap.add_argument("--total-log2", type=int, default=28)
    a = ap.parse_args(argv)
    dtype = parse_dtype(a.dtype)
    m = max(1, (1 << a.total_log2) // a.n)
    x = torch.randn(m, a.n, device="cuda", dtype=dtype)
    y = torch.empty_like(x)
    if a.backward:
        y = torch.softmax(x.float(), -1).to(dtype)
        dy, dx = torch.randn_like(x), torch.empty_like(x)
        aligned = a.n * x.element_size() % 16 == 0
        if a.kind is None:  # what the registered op launches on these contiguous rows
            cfg = bc.backward_config(a.n, dtype, aligned, phase=True)
        else:
            cfg = bc.BackwardConfig(a.kind, a.threads, a.vpt, a.cluster, a.stages)
        launch, tensors = (lambda: rk.backward_launch(dx, y, dy, cfg, aligned,
            kernels=cv.BACKWARD_KERNELS)), 3
    else:
        if a.kind is None:
            cfg, _ = rk.fast_choice(y, x)
        elif a.kind in fc.SLOTS_KINDS and a.slots < 0:  # as few slots as hold the row
            cfg = fc.block_slots_config(fc.line_windows(a.n, dtype), a.threads, a.vpt,
                                        a.cluster, kind=a.kind)
        else:
            cfg = fc.FastConfig(a.kind, threads=a.threads, vpt=a.vpt, cluster=a.cluster,
                                late=a.late, stages=a.stages, lag=a.lag, ahead=a.ahead,
                                slots=max(a.slots, 0))
        launch, tensors = (lambda: rk.fast_launch(y, x, cfg, 1, kernels=cv.FAST_KERNELS)), 2
    times = []
    for _ in range(a.launches):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        launch()
        e1.record()
        e1.synchronize()
        times.append(e0.elapsed_time(e1))
    ms = sorted(times)[len(times) // 2]
    gbs = tensors * x.numel() * x.element_size() / ms / 1e6
    what = "backward " if a.backward else ""
    print(f"{a.dtype} {m}x{a.n} {what}{cfg.label()}: {ms:.3f} ms, {gbs:,.0f} GB/s "
          "(one launch, events)")

if __name__ == "__main__":
    main()
