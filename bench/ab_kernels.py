"""A/B: the same fast_softmax launches built from several copies of cuda_src/, timed in turn.

    mkdir -p /tmp/head && git archive HEAD cuda_src | tar -x -C /tmp/head   # before an edit
    python bench/ab_kernels.py --variant head=/tmp/head/cuda_src --variant new=cuda_src \\
        --shape bfloat16:1048576 --shape float32:524288 [--kind chunks_reg --threads 512 ...]

Each variant is a directory with fast_softmax.cu and the headers it includes. Every (shape,
variant) gets the config fast_softmax picks for the shape (or the one given by --kind and its
options, as bench/profile_config.py takes them), compiled from that directory alone (NVRTC, only
the launched instantiation: seconds, not the whole family), checked against torch.softmax on
three rows, then timed by CUDA events (tune_long_rows.med_ms) in --rounds rounds, the variants
in turn within each round and the copy in the same round: drift between variants cancels. Prints
per shape the median GB/s and % of copy of each variant and its ratio to the first; M*N = 2^28.
--peer NAME adds a registered variant (e.g. triton_fused), called as kernel_lab.run would call
it (its own output each call), timed in the same rounds: the race the auto pick is made on.
--op log_softmax times log_softmax.cu's kernels instead, on the same configs.
--unchecked NAME times a variant whose output is wrong by design (a diagnostic: the kernel with
its cluster exchange or its math cut out, to see what each costs); its output is not checked and
its line says so. --compile-only fills the cubin cache on a machine without a GPU (the config is
the one fast_softmax picks for a fresh contiguous (M, N) tensor, or --kind's):

    KERNEL_LAB_CACHE_DIR=.klc python bench/ab_kernels.py --compile-only --variant ... --shape ...
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch

from kernel_lab import jit, registry
from kernel_lab.benchmarking import parse_dtype
from kernel_lab.cuda_common import CudaSource
from kernel_lab.ops.softmax import cuda_variants as cv
from kernel_lab.rowkernels import forward_config as fc
from kernel_lab.rowkernels import launch as rk

try:  # run as a script from the repository root
    from tune_long_rows import OPS as TUNE_OPS
    from tune_long_rows import med_ms, sane
except ImportError:  # pragma: no cover - imported as bench.ab_kernels
    from bench.tune_long_rows import OPS as TUNE_OPS
    from bench.tune_long_rows import med_ms, sane


# --op: the source file each variant directory gives (the registered kernels' file name), its
# kernels' prefix, and whether its output is checked as a log
OPS = {op: (k.src.path.name, k.prefix, log) for op, (k, log) in TUNE_OPS.items()}


def variant(spec: str) -> tuple[str, Path]:
    name, _, path = spec.partition("=")
    if not name or not (Path(path) / "fast_softmax.cu").is_file():
        raise argparse.ArgumentTypeError(f"--variant NAME=DIR with DIR/fast_softmax.cu: {spec!r}")
    return name, Path(path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--variant", type=variant, action="append", required=True,
                    help="NAME=DIR (DIR holds fast_softmax.cu and its headers); the first is "
                    "the baseline")
    ap.add_argument("--shape", action="append", required=True,
                    help="DTYPE:N, e.g. bfloat16:1048576")
    ap.add_argument("--unchecked", action="append", default=[], metavar="NAME",
                    help="a --variant whose output is not checked (a diagnostic, wrong by "
                    "design); repeatable")
    ap.add_argument("--compile-only", action="store_true",
                    help="compile every (shape, variant) into the cubin cache and exit (no GPU)")
    ap.add_argument("--arch", default="sm_90", help="--compile-only's target (default sm_90)")
    ap.add_argument("--peer", action="append", default=[],
                    help="a registered variant timed beside them (repeatable), e.g. triton_fused")
    ap.add_argument("--op", choices=sorted(OPS), default="softmax",
                    help="whose kernels: fast_softmax.cu's (default) or log_softmax.cu's, on "
                    "the same config (fast_softmax_config serves both)")
    ap.add_argument("--kind", default=None, help="a config instead of fast_softmax's pick")
    ap.add_argument("--threads", type=int, default=512)
    ap.add_argument("--vpt", type=int, default=8)
    ap.add_argument("--cluster", type=int, default=1)
    ap.add_argument("--late", action="store_true")
    ap.add_argument("--stages", type=int, default=1)
    ap.add_argument("--lag", type=int, default=1)
    ap.add_argument("--ahead", type=int, default=1)
    ap.add_argument("--slots", type=int, default=-1,
                    help="block_slots / persist_slots: shared-memory windows a thread "
                    "(default: as few as hold each shape's row, block_slots_config)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--total-log2", type=int, default=28)
    a = ap.parse_args()
    unknown = set(a.unchecked) - {name for name, _ in a.variant}
    if unknown:
        ap.error(f"--unchecked names no --variant: {sorted(unknown)}")
    if a.variant[0][0] in a.unchecked:
        ap.error("the baseline (first --variant) must be checked")
    src_file, prefix, log = OPS[a.op]
    if a.compile_only:
        compile_only(a)
        return

    cases = []  # (label, x, y, cfg, {variant: RowKernels})
    for spec in a.shape:
        dname, _, ns = spec.partition(":")
        dtype, n = parse_dtype(dname), int(ns)
        x = torch.randn(max(1, (1 << a.total_log2) // n), n, device="cuda", dtype=dtype)
        y = torch.empty_like(x)
        cfg = rk.fast_choice(y, x)[0] if a.kind is None else given_config(a, n, dtype)
        expr = cfg.expr(cv.ctype(dtype), prefix)
        kernels = {}
        for name, path in a.variant:
            print(f"check {name}: {dname} {n} {cfg.label()}", flush=True)  # names a crash
            k = rk.RowKernels(CudaSource((path / src_file).resolve(), (expr,)), prefix)
            y.fill_(float("nan"))
            rk.fast_launch(y, x, cfg, 1, kernels=k)
            at = jit.function_attributes(k.src.function(expr, x.device.index))
            print(f"  {expr}: {at['num_regs']} registers, {at['local_size_bytes']} B local",
                  flush=True)
            if name in a.unchecked:
                print(f"  {name}: output not checked (--unchecked)", flush=True)
            elif not sane(y, x, log=log):
                raise SystemExit(f"{name}: wrong output for {dname} {n} {cfg.label()}")
            kernels[name] = k
        for name in a.peer:
            fn = registry.get(name).fn
            if not sane(fn(x), x, log=log):
                raise SystemExit(f"{name}: wrong output for {dname} {n}")
            kernels[name] = lambda fn=fn, x=x: fn(x)
        cases.append((f"{a.op} {dname} {x.shape[0]}x{n} {cfg.label()}", x, y, cfg, kernels))

    names = [name for name, _ in a.variant] + a.peer
    if a.unchecked:
        print(f"unchecked (diagnostics, wrong output by design): {', '.join(a.unchecked)}")
    for case in cases:
        print(time_case(*case, names, a.rounds), flush=True)


def given_config(a: argparse.Namespace, n: int, dtype: torch.dtype) -> fc.FastConfig:
    if a.kind in fc.SLOTS_KINDS and a.slots < 0:  # as few slots as hold a row on 16 bytes
        return fc.block_slots_config(fc.line_windows(n, dtype), a.threads, a.vpt, a.cluster,
                                     kind=a.kind)
    return fc.FastConfig(a.kind, threads=a.threads, vpt=a.vpt, cluster=a.cluster, late=a.late,
                         stages=a.stages, lag=a.lag, ahead=a.ahead, slots=max(a.slots, 0))


def fresh_tensor_config(n: int, dtype: torch.dtype, rows: int) -> fc.FastConfig:
    """fast_softmax's pick for a fresh contiguous (rows, n) tensor: allocations start on 256 B,
    so its rows are 16-byte aligned (and on 128-byte lines) when a row's bytes are."""
    row_bytes = n * torch.empty((), dtype=dtype).element_size()
    aligned = rows == 1 or row_bytes % 16 == 0
    on_lines = aligned and (rows == 1 or row_bytes % 128 == 0)
    return fc.fast_softmax_config(n, dtype, aligned, True, on_lines)


def compile_only(a: argparse.Namespace) -> None:
    """Every (shape, variant) instantiation into the cubin cache, for --arch; no GPU needed."""
    for spec in a.shape:
        dname, _, ns = spec.partition(":")
        dtype, n = parse_dtype(dname), int(ns)
        rows = max(1, (1 << a.total_log2) // n)
        cfg = fresh_tensor_config(n, dtype, rows) if a.kind is None else given_config(a, n, dtype)
        expr = cfg.expr(cv.ctype(dtype), OPS[a.op][1])
        for name, path in a.variant:
            before, t0 = jit.CudaModule.compile_count, time.perf_counter()
            CudaSource((path / OPS[a.op][0]).resolve(), (expr,)).module.cubin(a.arch)
            how = "compiled" if jit.CudaModule.compile_count > before else "cached"
            print(f"{name} {dname} {n} {cfg.label()}: {expr} {how} in "
                  f"{time.perf_counter() - t0:.1f} s", flush=True)


def time_case(label: str, x: torch.Tensor, y: torch.Tensor, cfg: fc.FastConfig | None,
              kernels: dict, names: list[str], rounds: int, mb: float | None = None) -> str:
    """One line: each variant's median GB/s, % of copy (half its spread) and ratio to the first.
    A variant is RowKernels (launched on ``cfg``) or a callable (called as is); ``mb``: the MB a
    call moves (default one read and one write of x, as the copy of x into y)."""
    copy_mb = 2 * x.numel() * x.element_size() / 1e6
    mb = copy_mb if mb is None else mb
    pct = {name: [] for name in names}
    gbs = {name: [] for name in names}
    copies = []
    for _ in range(rounds):
        copy = copy_mb / med_ms(lambda: y.copy_(x))
        copies.append(copy)
        for name in names:
            k = kernels[name]
            g = mb / med_ms(k if callable(k) else lambda k=k: rk.fast_launch(y, x, cfg, 1,
                                                                             kernels=k))
            gbs[name].append(g)
            pct[name].append(100 * g / copy)
    base = statistics.median(gbs[names[0]])
    cells = []
    for name in names:
        g, p = statistics.median(gbs[name]), statistics.median(pct[name])
        half = (max(pct[name]) - min(pct[name])) / 2
        cells.append(f"{name} {g:,.0f} GB/s {p:.1f} % (+-{half:.1f}) x{g / base:.3f}")
    return f"{label} | copy {statistics.median(copies):,.0f} | " + " | ".join(cells)


if __name__ == "__main__":
    main()
