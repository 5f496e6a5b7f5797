"""Time every lane-group (``warp``) and one-CTA (``block``) shape of fast_softmax that holds a row,
per (N, dtype) at M*N = 2^28, against the copy and ``triton_fused``.

    python bench/tune_short_rows.py [--ns 128,256,1024] [--dtypes float32,bfloat16]

The counterpart of tune_long_rows.py for rows up to 32768 elements: the shape
``fast_softmax_config`` picks (marked ``*``), ``warp`` groups of FAST_WARP at 128 and 256
threads per block, ``block`` shapes of FAST_BLOCK_VPT vectors per thread, each forced through
``fast_launch`` and timed by CUDA events around back-to-back launches (method B), output checked
on three rows. One line per (N, dtype), shapes best first, % of copy.
"""

from __future__ import annotations

import argparse

if __name__ == "__main__":  # no GPU: one line and exit 2, before torch loads
    from gpu_check import require_gpu  # bench/ is sys.path[0] when a script runs

    require_gpu("it times fast_softmax's warp and block shapes against the copy")

import torch  # noqa: E402

import kernel_lab  # noqa: E402
from kernel_lab.cuda.rowkernels import forward_config as fc  # noqa: E402
from kernel_lab.cuda.rowkernels import launch as rk  # noqa: E402
from kernel_lab.cuda.sources import cdiv  # noqa: E402
from kernel_lab.ops.softmax import cuda_variants as cv  # noqa: E402

try:  # run as a script from the repository root
    from tune_long_rows import med_ms, sane
except ImportError:  # pragma: no cover - imported as bench.tune_short_rows
    from bench.tune_long_rows import med_ms, sane

NS = "128,256,512,1024,2048,4096,8192,16384,32000,32768"


def candidates(n: int, dtype: torch.dtype) -> dict[str, fc.FastConfig]:
    nw = fc.vector_windows(n, dtype)
    default = fc.fast_softmax_config(n, dtype)
    out = {default.label(): default}
    for g, v in fc.FAST_WARP:
        if nw <= g * v < 4 * nw:
            for threads in (128, 256):
                c = fc.FastConfig("warp", threads=threads, vpt=v, group=g)
                if c != default:
                    out.setdefault(f"warp g{g}x{v} t{threads}", c)
    for v in fc.FAST_BLOCK_VPT:
        threads = fc.round32(cdiv(nw, v))
        if nw > 32 and threads <= fc.block_max_threads(v):
            c = fc.FastConfig("block", threads=threads, vpt=v)
            out.setdefault(c.label(), c)
    return out


def measure(n: int, dtype: torch.dtype, total_log2: int) -> tuple[float, list[tuple]]:
    """(copy GB/s, [(shape, % of copy, output sane)] best first) for rows of n."""
    x = torch.randn(max(1, (1 << total_log2) // n), n, device="cuda", dtype=dtype)
    y = torch.empty_like(x)
    mb = 2 * x.numel() * x.element_size() / 1e6
    copy = mb / med_ms(lambda: y.copy_(x))
    rows = []
    default = fc.fast_softmax_config(n, dtype)
    for label, c in candidates(n, dtype).items():
        label += " *" if c == default else ""
        try:
            ms = med_ms(lambda c=c: rk.fast_launch(y, x, c, 1, kernels=cv.FAST_KERNELS))
            rows.append((label, round(100 * mb / ms / copy, 1), sane(y, x, False)))
        except Exception as ex:  # noqa: BLE001 - record and keep going
            print(f"ERR {dtype} {n} {label}: {ex}", flush=True)
    try:
        ms = med_ms(lambda: kernel_lab.get("triton_fused")(x))
        rows.append(("triton_fused", round(100 * mb / ms / copy, 1), True))
    except Exception as ex:  # noqa: BLE001
        print(f"ERR {dtype} {n} triton_fused: {ex}", flush=True)
    return copy, sorted(rows, key=lambda r: -r[1])


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ns", default=NS)
    ap.add_argument("--dtypes", default="float32,bfloat16")
    ap.add_argument("--total-log2", type=int, default=28)
    args = ap.parse_args(argv)
    for dname in args.dtypes.split(","):
        for n in map(int, args.ns.split(",")):
            copy, rows = measure(n, getattr(torch, dname), args.total_log2)
            print(f"{dname:9s} {n:6d} copy {copy:5.0f} GB/s | "
                  + "; ".join(f"{lab} {pct}{'' if ok else ' WRONG'}" for lab, pct, ok in rows),
                  flush=True)
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
