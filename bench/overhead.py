"""Per-call overhead: wall time of back-to-back calls on a small (launch-bound) tensor.

    python bench/overhead.py [--variant online_softmax] [--shape 32x1024]

Prints microseconds per call for torch.softmax and the variant through ``kernel_lab.run`` and
through the variant's launcher directly, plus the pieces of the per-call path. The target:
``kernel_lab.run`` at most 1.5x ``torch.softmax``.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

import kernel_lab


def per_call_us(fn, calls: int = 2000, rounds: int = 7) -> float:
    """Median over rounds of (wall time of ``calls`` back-to-back calls + one sync) / calls."""
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
        samples.append((time.perf_counter() - t0) / calls * 1e6)
    return statistics.median(samples)


def pieces(v, x) -> dict[str, float]:
    """Each step of the CUDA launch path timed alone: where the microseconds go."""
    import numpy as np
    from cupy.cuda import driver, runtime

    from kernel_lab import interop, registry, rows
    from kernel_lab.ops.softmax import cuda_variants as cv

    expr = "online_softmax<float>"
    fn = cv.ONLINE.function(expr, 0)
    out = torch.empty_like(x)
    m, n = x.shape
    args = (out.data_ptr(), x.data_ptr(), np.int64(m), np.int32(n), np.int64(n))
    params = interop.pack_args(args)
    stream = interop.current_stream_ptr(0)
    steps = {
        "registry.ensure_supported": lambda: registry.ensure_supported(v, x),
        "rows.rowwise (no kernel)": lambda: rows.rowwise(lambda o, i: None, x),
        "torch.empty_like": lambda: torch.empty_like(x),
        "CudaSource.function (2 os.stat)": lambda: cv.ONLINE.function(expr, 0),
        "argument tuple (2 data_ptr, 3 numpy ints)": lambda: (
            out.data_ptr(), x.data_ptr(), np.int64(m), interop.i32(n), np.int64(x.stride(0))),
        "interop.pack_args": lambda: interop.pack_args(args),
        "current_stream_ptr": lambda: interop.current_stream_ptr(0),
        "runtime.getDevice": runtime.getDevice,
        "driver.launchKernel (raw)": lambda: driver.launchKernel(
            fn.ptr, m, 1, 1, 128, 1, 1, 0, stream, params, 0),
        "interop.launch": lambda: interop.launch(fn, (m,), (128,), args, device_index=0),
    }
    return {name: per_call_us(f, calls=5000, rounds=5) for name, f in steps.items()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--variant", default="online_softmax")
    p.add_argument("--shape", default="32x1024")
    p.add_argument("--profile", action="store_true", help="cProfile the launcher: top 15 calls")
    p.add_argument("--pieces", action="store_true",
                   help="time each step of the launch path on its own (online_softmax)")
    args = p.parse_args()
    m, n = (int(s) for s in args.shape.split("x"))
    x = torch.randn(m, n, device="cuda")
    v = kernel_lab.get(args.variant)
    rows = {
        "torch.softmax(x, -1)": lambda: torch.softmax(x, -1),
        f'kernel_lab.run("{v.name}", x)': lambda: kernel_lab.run(v.name, x),
        f"{v.name} launcher (no registry checks)": lambda: v.fn(x),
        "torch.empty_like(x)": lambda: torch.empty_like(x),
    }
    print(f"{torch.cuda.get_device_name()}, {m}x{n} fp32, back-to-back calls:")
    results = {name: per_call_us(fn) for name, fn in rows.items()}
    base = results["torch.softmax(x, -1)"]
    for name, us in results.items():
        print(f"  {name:<45} {us:7.2f} us/call  ({us / base:4.2f}x torch.softmax)")
    if args.pieces:
        print("pieces of the launch path (us per call, back-to-back, no profiler):")
        for name, us in pieces(v, x).items():
            print(f"  {name:<45} {us:7.2f}")
    if args.profile:
        import cProfile
        import pstats

        prof = cProfile.Profile()
        prof.runcall(lambda: [v.fn(x) for _ in range(5000)])
        pstats.Stats(prof).sort_stats("tottime").print_stats(15)


if __name__ == "__main__":
    main()
