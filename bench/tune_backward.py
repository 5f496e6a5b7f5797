"""Time fused_softmax_backward launch shapes per (N, dtype) at M*N = 2^28 against copy speed.

    python bench/tune_backward.py [--ns 65536,151936,262144] [--dtypes float32,bfloat16] [--log]

For every (N, dtype): the device-to-device copy on the same tensors, the shape
``backward_config`` picks, and every persistent cluster shape that holds the row (every
declared instantiation, ``backward_persist_instantiations``: clusters of
``BACKWARD_PERSIST_SIZES`` CTAs x 4 vectors and the wider ``BACKWARD_PERSIST_WIDE`` ones;
threads = the multiple of 32 that covers it, up to the kernel's bound; one and two rows
in flight, ``stages``, where they fit shared memory), for rows of >= CHUNK_MIN_WINDOWS
windows the chunk kernel (CHUNK_THREADS, each fitted to the row as the config fits its CTA, with
1-4 chunks in flight) and the streaming kernel, each forced
through ``backward_launch`` and timed by CUDA events around back-to-back launches (method B of
tune_long_rows.py). Bytes: y and dy read, dx written (3 tensors). ``--log``: the same shapes
on log_softmax_backward's kernels (the log rule; y from log_softmax). One JSON line per (N,
dtype) on stdout, a summary table last.
"""

from __future__ import annotations

import argparse
import json
import re

if __name__ == "__main__":  # no GPU: one line and exit 2, before torch loads
    from gpu_check import require_gpu  # bench/ is sys.path[0] when a script runs

    require_gpu("it times fused_softmax_backward's launch shapes against the copy")

import torch  # noqa: E402

from kernel_lab.cuda.rowkernels import backward_config as bc  # noqa: E402
from kernel_lab.cuda.rowkernels import forward_config as fc  # noqa: E402
from kernel_lab.cuda.rowkernels import launch as rk  # noqa: E402
from kernel_lab.cuda.sources import cdiv  # noqa: E402

try:  # run as a script from the repository root
    from tune_long_rows import med_ms
except ImportError:  # pragma: no cover - imported as bench.tune_backward
    from bench.tune_long_rows import med_ms


def candidates(n: int, dtype: torch.dtype, extra_threads: tuple[int, ...] = (),
               aligned: bool = True) -> dict[str, bc.BackwardConfig]:
    """The default shape (what the registered op launches on contiguous rows of n: ``aligned``
    when n * itemsize is a multiple of 16, and always in one 16-byte phase), then per declared
    persistent instantiation the CTA size that just covers the row and every ``extra_threads``
    size that holds it too (to separate cluster size from CTA size), each with one and two
    stages where shared memory holds them."""
    default = bc.backward_config(n, dtype, aligned, phase=True)
    out = {"default " + default.label(): default}
    nw = fc.line_windows(n, dtype, aligned)  # as the op sizes persistent shapes: line heads
    for d, vpt, cl in bc.backward_persist_instantiations():
        if d != dtype:
            continue
        most = bc.backward_persist_max_threads(dtype, vpt)
        cover = max(64, fc.round32(cdiv(nw, vpt * cl)))
        for threads in sorted({cover, *(t for t in extra_threads if t * vpt * cl >= nw)}):
            if threads > most or threads % 32:
                continue
            for stages in (1, 2):
                if stages * bc.backward_smem(threads, vpt) <= fc.MAX_CTA_SHARED:
                    cfg = bc.BackwardConfig("persist", threads, vpt, cl, stages)
                    out[cfg.label()] = cfg
    if nw >= CHUNK_MIN_WINDOWS:
        for most in CHUNK_THREADS:  # each fitted to the row as the op fits its own
            for ahead in (1, 2, 3, 4):
                cfg = bc.backward_chunk_config(n, dtype, aligned, ahead, most)
                if cfg.shared_mem() <= fc.MAX_CTA_SHARED:
                    out.setdefault(cfg.label(), cfg)
        out["stream"] = bc.BackwardConfig("stream", 1024, None)
    return out


# the chunk kernel's CTA sizes timed (each fitted down to the row: as few threads as keep the
# chunk count), for rows of at least this many windows
CHUNK_THREADS = (128, 256, 384, 512)
CHUNK_MIN_WINDOWS = 16384


def measure(n: int, dtype: torch.dtype, total_log2: int, extra_threads: tuple[int, ...] = (),
            only: str | None = None, groups: tuple[int, ...] = (),
            log: bool = False) -> tuple[int, float, list]:
    """(rows M, copy GB/s, [(shape, GB/s, % of copy) or (shape, error)]). ``only``: time the
    shapes whose label matches this regular expression; ``groups``: each persistent shape also
    with its grid capped at that many clusters (label " g<count>"), below what the occupancy
    API calls resident - do all of them really run at once? ``log``: log_softmax_backward's
    kernels."""
    m = max(1, (1 << total_log2) // n)
    from kernel_lab.ops.softmax import cuda_variants as cv

    kernels = cv.BACKWARD_KERNELS
    if log:
        from kernel_lab.ops.log_softmax import cuda_variants as lcv

        kernels = lcv.BACKWARD_KERNELS
    x = torch.randn(m, n, device="cuda")
    y = (torch.log_softmax(x, -1) if log else torch.softmax(x, -1)).to(dtype)
    del x
    dy = torch.randn(m, n, device="cuda").to(dtype)
    dx = torch.empty_like(y)
    es = y.element_size()
    copy = 2 * y.numel() * es / med_ms(lambda: dx.copy_(y)) / 1e6
    aligned = n * es % 16 == 0  # odd rows: still one 16-byte phase (contiguous tensors)
    runs = []
    for label, cfg in candidates(n, dtype, extra_threads, aligned).items():
        if only and not re.search(only, label):
            continue
        runs.append((label, cfg, None))
        if cfg.kind == "persist":
            runs += [(f"{label} g{g}", cfg, g) for g in groups]
    rows = []
    for label, cfg, g in runs:
        try:
            ms = med_ms(lambda cfg=cfg, g=g: rk.backward_launch(dx, y, dy, cfg, aligned,
                                                               max_groups=g, kernels=kernels))
        except Exception as ex:  # noqa: BLE001 - record and keep going
            rows.append((label, str(ex)[:80]))
            continue
        gbs = 3 * y.numel() * es / ms / 1e6
        rows.append((label, round(gbs), round(100 * gbs / copy, 1)))
    return m, copy, rows


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ns", default="32000,65536,151936,262144")
    ap.add_argument("--dtypes", default="float32,bfloat16")
    ap.add_argument("--total-log2", type=int, default=28)
    ap.add_argument("--threads", default="", help="also time these CTA sizes (multiples of "
                    "32) for every cluster size whose CTAs of that size hold the row, e.g. "
                    "608,640,704")
    ap.add_argument("--only", default=None, help="time only the shapes whose label matches "
                    "this regular expression, e.g. '^persist 1[56]x640x4'")
    ap.add_argument("--groups", default="", help="also run each persistent shape on this many "
                    "clusters (comma-separated), e.g. 5,6,7")
    ap.add_argument("--log", action="store_true", help="log_softmax_backward's kernels")
    args = ap.parse_args(argv)
    extra = tuple(int(t) for t in args.threads.split(",") if t)
    groups = tuple(int(g) for g in args.groups.split(",") if g)
    summary = []
    for dname in args.dtypes.split(","):
        dtype = getattr(torch, dname)
        for n in map(int, args.ns.split(",")):
            m, copy, rows = measure(n, dtype, args.total_log2, extra, args.only, groups,
                                    args.log)
            print(json.dumps({"op": "log_softmax_backward" if args.log else "softmax_backward",
                              "dtype": dname, "N": n, "M": m, "copy": round(copy),
                              "rows": rows}), flush=True)
            summary.append((dname, n, rows))
            torch.cuda.empty_cache()
    print("\nSUMMARY dtype N | shapes, % of copy (3 tensors), best first")
    for dname, n, rows in summary:
        ok = sorted((r for r in rows if len(r) == 3), key=lambda r: -r[1])
        print(f"{dname:9s} {n:7d} | " + "; ".join(f"{r[0]} {r[2]}" for r in ok))


if __name__ == "__main__":
    main()
