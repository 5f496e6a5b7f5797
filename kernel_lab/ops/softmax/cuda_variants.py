"""Launchers for the hand-written CUDA C++ softmax kernels in ``cuda_src/``.

Each variant is named after its file (``cuda_src/online_softmax.cu`` -> ``"online_softmax"``)
and launches through :mod:`kernel_lab.cuda_common` with the row-kernel convention. The ladder,
simple -> fast: naive -> block -> warp -> online -> vec, then ``fast_softmax`` (its per-(N, dtype)
dispatch is ``fast_softmax_config``) and the fused backward.

Launch-shape choices (threads per row, registers per thread) are plain functions of (N, dtype),
exposed as ``*_config`` so benchmarks and notes can print exactly what ran.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import NamedTuple

import torch

from kernel_lab.cuda_common import (
    ALL_DTYPES,
    ctype,
    cuda_source,
    device_index,
    launch_rows,
    next_pow2,
    same_vector_phase,
    vec_aligned,
    vec_width,
)
from kernel_lab.interop import i32
from kernel_lab.registry import register
from kernel_lab.rows import normalize_dim, rowwise

_T = [ctype(dt) for dt in ALL_DTYPES]
WARP_EPT = (1, 2, 4, 8, 16, 32)  # elements per lane: rows up to 32 * 32 = 1024
VPT = (1, 2, 4, 8)  # 16-byte vectors per thread kept in registers
WARP_MAX_N = 32 * WARP_EPT[-1]
VEC_MAX_THREADS, BWD_MAX_THREADS = 1024, 512

NAIVE = cuda_source("naive_softmax.cu", [f"naive_softmax<{t}>" for t in _T])
BLOCK = cuda_source("block_softmax.cu", [f"block_softmax<{t}>" for t in _T])
WARP = cuda_source("warp_softmax.cu", [f"warp_softmax<{t}, {e}>" for t in _T for e in WARP_EPT])
ONLINE = cuda_source("online_softmax.cu", [f"online_softmax<{t}>" for t in _T])
VEC = cuda_source(
    "vec_softmax.cu",
    [f"vec_softmax<{t}, {v}>" for t in _T for v in VPT] + [f"vec_softmax_stream<{t}>" for t in _T],
)
BACKWARD_CL = (2, 4, 8, 16)
BACKWARD_PERSIST_VPT = 4  # vectors of y and of dy per thread: 2 x 64 KB per 1024-thread CTA
BACKWARD_PERSIST_SIZES = (2, 4, 8, 15, 16)  # instantiated cluster sizes (tuning, tests)
# More vectors per thread, for rows past 15 CTAs x 1024 threads x 4 vectors (fp32 N > 245760,
# where 16x1024x4 lost to the one-row cluster: 262144 at 69 %): (dtype, vectors, CTAs).
# Instantiated for tuning and tested; the config does not pick them until they are measured
# (fp32 x 8 at the 640-thread bound: 91 registers, no spills, NVRTC 13.0).
BACKWARD_PERSIST_WIDE = ((torch.float32, 8, 15),)
# The config: rows longer than one CTA holds take persistent clusters of (CTAs, most threads
# per CTA) from BACKWARD_PERSIST_SHAPES, the first that holds the row; longer rows keep the
# one-row cluster kernel. Measured (H200, M*N = 2^28, % of copy, bench/tune_backward.py,
# after the message exchange): fp32 32000 8x256x4 87.7 (2x1024x4 83.6), 65536 8x512x4 88.1
# (4x1024x4 79.6), 151936 16x608x4 79.0 (one-row cluster 62.7), 262144 16x1024x4 70.5 vs the
# one-row cluster's 75.6 (so 16-CTA fp32 clusters stop at 768 threads); bf16 65536 8x256x4
# 89.4 (one-row 4-CTA cluster 73.9), 151936 16x320x4 82.7 (63.0), 262144 16x512x4 80.1
# (56.1). fp16 runs the bf16 rule (the same kernel; its speed was not measured separately).
# 8-CTA fp32 clusters go up to 1024 threads: 131072 8x1024x4 88.6 / 87.4 against 16x512x4 s2
# 80.8 / 80.7 (2026-11-30, sixth run, one call each with and without the unchecked interior).
# Two rows in flight (stages = 2) for CTAs of >= BACKWARD_TWO_STAGE_THREADS threads, measured
# twice (2026-11-30): bf16 151936 16x320x4 85.3 / 85.5 vs 80.8 / 81.1; 262144 16x512x4 81.1 /
# 80.5 vs 80.4 / 79.6; fp32 65536 8x512x4 88.9 / 88.9 vs 87.7 / 87.7; smaller CTAs lost 1-1.5
# points (fp32 32000 8x256x4 86.9 vs 88.3; bf16 65536 8x256x4 88.5 vs 89.5). The 1024-thread
# fp32 CTA stays at one stage (two would need 256 KB of shared memory).
# 15-CTA clusters (2026-11-30, seventh run; one call each, % of copy): fp32 32000 15x160x4 92.1
# vs 8x256x4 87.2; 65536 15x288x4 94.3 vs 8x512x4 s2 88.2; 131072 15x576x4 s2 95.4 vs 8x1024x4
# 86.1; 151936 15x640x4 s2 96.8 vs 16x608x4 s2 78.3; bf16 65536 15x160x4 s2 96.3 vs 8x256x4
# 88.9; 151936 15x320x4 s2 88.3 vs 16x320x4 s2 84.9. Where 15 lost: rows not 16-byte aligned
# (50257: fp32 15x224x4 s2 86.7 vs 8x416x4 88.4; bf16 15x128x4 s2 86.4 vs 8x224x4 s2 88.6) and
# bf16 131072 (15x288x4 s2 77.2 vs 8x512x4 s2 88.3). Entries: (CTAs, most threads per CTA,
# fewest windows per row, 16-byte aligned rows only, fewest threads for two stages); the first
# that holds the row wins.
# 2-byte CTAs at <= 90 registers (launch bound 640 instead of 512, which let ptxas take 107:
# CTAs of >= 320 threads were one per SM; 2026-11-30, eighth run, one call, % of copy): 15-CTA
# shapes of up to 512 threads with one stage win - bf16 65536 15x160x4 97.2 (two stages 93.3;
# at 107 registers two stages won, 96.3 vs 88.6), 128256 15x288x4 97.2 vs 8x512x4 s2 88.4,
# 131072 97.0 vs 88.4, 151936 15x320x4 97.5 vs s2 95.0; and with CTAs of up to 640 threads
# (call 3): bf16 262144 15x576x4 98.2 vs 16x512x4 s2 79.9 (fp16 97.8 vs 80.3), so 2-byte rows
# need no 16-CTA shape up to N = 307200. Unchanged: 32000-32768 (block 512x8 91.4 / 91.9;
# 15x96x4 91.8 / 93.1); rows not 16-byte aligned (50257: 8x224x4 87.6, best 4x416x4 s2 88.4).
BACKWARD_TWO_STAGE_THREADS = 320


class BackwardShape(NamedTuple):
    """A persistent backward cluster shape the config may pick (BACKWARD_PERSIST_SHAPES)."""

    ctas: int
    most_threads: int
    min_windows: int = 0  # rows of fewer 16-byte windows skip it
    aligned_only: bool = False  # only rows that start on 16 bytes
    two_stage_threads: int | None = BACKWARD_TWO_STAGE_THREADS  # CTAs this large prefetch two
    # rows (None: never)


BACKWARD_PERSIST_SHAPES = {  # by itemsize
    4: (BackwardShape(15, 768, min_windows=8000, aligned_only=True), BackwardShape(8, 512),
        BackwardShape(15, 768), BackwardShape(16, 768)),
    2: (BackwardShape(15, 640, min_windows=8000, aligned_only=True, two_stage_threads=None),
        BackwardShape(8, 512), BackwardShape(15, 640, two_stage_threads=None)),
}
BACKWARD_PERSIST_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def backward_persist_max_threads(dtype: torch.dtype, vpt: int = BACKWARD_PERSIST_VPT) -> int:
    """CTA size limit of fused_softmax_backward_persist (``BackwardPersistThreads`` in the .cu):
    640 for 2-byte types or more than 4 vectors per thread (<= 90 registers, no spills), else
    1024."""
    return 640 if dtype.itemsize == 2 or vpt > 4 else 1024


def backward_persist_instantiations() -> list[tuple[torch.dtype, int, int]]:
    """Every declared persistent backward kernel: (dtype, vectors per thread, CTAs)."""
    return [(d, BACKWARD_PERSIST_VPT, c) for d in BACKWARD_PERSIST_DTYPES
            for c in BACKWARD_PERSIST_SIZES] + list(BACKWARD_PERSIST_WIDE)


BACKWARD = cuda_source(
    "fused_softmax_backward.cu",
    [f"fused_softmax_backward<{t}, {v}>" for t in _T for v in VPT]
    + [f"fused_softmax_backward_cluster<{ctype(d)}, {4 if vec_width(d) == 8 else 8}, {c}>"
       for d in ALL_DTYPES for c in BACKWARD_CL]
    + [f"fused_softmax_backward_persist<{ctype(d)}, {v}, {c}>"
       for d, v, c in backward_persist_instantiations()]
    + [f"fused_softmax_backward_stream<{t}>" for t in _T],
)


def _row_threads(n: int, per_thread: int = 8) -> int:
    """Threads for a block-per-row kernel: ~per_thread elements each, 32..1024."""
    return min(1024, max(32, next_pow2(-(-n // per_thread))))


def _n(x: torch.Tensor, dim: int) -> int:
    return x.shape[normalize_dim(dim, x.dim())] if x.dim() else 0


# -- 1. naive -----------------------------------------------------------------------------------
@register(
    "naive_softmax",
    op="softmax",
    backend="cuda",
    dtypes=ALL_DTYPES,
    description="one thread per row, three uncoalesced passes over global memory (baseline)",
    source="cuda_src/naive_softmax.cu",
)
def naive_softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    def launch(out, x2d):
        m = out.shape[0]
        launch_rows(NAIVE, f"naive_softmax<{ctype(x2d.dtype)}>", out, (x2d,),
                    grid=-(-m // 128), block=128)

    return rowwise(launch, x, dim=dim)


# -- 2. block per row ---------------------------------------------------------------------------
@register(
    "block_softmax",
    op="softmax",
    backend="cuda",
    dtypes=ALL_DTYPES,
    description="one block per row, shared-memory reductions, three coalesced passes",
    source="cuda_src/block_softmax.cu",
)
def block_softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    def launch(out, x2d):
        m, n = out.shape
        launch_rows(BLOCK, f"block_softmax<{ctype(x2d.dtype)}>", out, (x2d,),
                    grid=m, block=_row_threads(n))

    return rowwise(launch, x, dim=dim)


# -- 3. warp per row ----------------------------------------------------------------------------
def _warp_limit(x: torch.Tensor, dim: int = -1) -> str | None:
    n = _n(x, dim)
    if n > WARP_MAX_N:
        return f"row length {n} > {WARP_MAX_N}: a row must fit one warp's registers (32 x 32)"
    return None


def warp_softmax_config(n: int) -> int:
    """Elements per lane for a row of ``n``: the smallest EPT with 32 * EPT >= n."""
    return min(e for e in WARP_EPT if 32 * e >= n)


@register(
    "warp_softmax",
    op="softmax",
    backend="cuda",
    dtypes=ALL_DTYPES,
    description="one warp per row, row in registers, shuffle reductions (N <= 1024)",
    source="cuda_src/warp_softmax.cu",
    check=_warp_limit,
)
def warp_softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    def launch(out, x2d):
        m, n = out.shape
        ept = warp_softmax_config(n)
        launch_rows(WARP, f"warp_softmax<{ctype(x2d.dtype)}, {ept}>", out, (x2d,),
                    grid=-(-m // 4), block=128)

    return rowwise(launch, x, dim=dim)


# -- 4. online (max, sum) -------------------------------------------------------------------------
@register(
    "online_softmax",
    op="softmax",
    backend="cuda",
    dtypes=ALL_DTYPES,
    description="single online (max, sum) pass + one write pass; any N, stride, alignment",
    source="cuda_src/online_softmax.cu",
)
def online_softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    def launch(out, x2d):
        m, n = out.shape
        launch_rows(ONLINE, f"online_softmax<{ctype(x2d.dtype)}>", out, (x2d,),
                    grid=m, block=_row_threads(n))

    return rowwise(launch, x, dim=dim)


# -- 5. row on chip, 16-byte vectors ------------------------------------------------------------
def vec_config(n: int, dtype: torch.dtype, max_threads: int = VEC_MAX_THREADS):
    """(threads, vectors per thread) keeping a row of ``n`` in registers, or (threads, None)
    when it does not fit (the streaming kernel then runs)."""
    nv = -(-n // vec_width(dtype))
    threads = min(max_threads, max(32, next_pow2(-(-nv // 4))))
    vpt = next_pow2(-(-nv // threads))
    return (threads, vpt) if vpt <= VPT[-1] else (max_threads, None)


@register(
    "vec_softmax",
    op="softmax",
    backend="cuda",
    dtypes=ALL_DTYPES,
    description="row kept in registers, 16-byte loads/stores, one read + one write "
    "(scalar fallback when misaligned; streaming two-pass beyond 128 KB rows)",
    source="cuda_src/vec_softmax.cu",
)
def vec_softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    def launch(out, x2d):
        m, n = out.shape
        threads, vpt = vec_config(n, x2d.dtype)
        t = ctype(x2d.dtype)
        expr = f"vec_softmax<{t}, {vpt}>" if vpt else f"vec_softmax_stream<{t}>"
        ok = i32(int(vec_aligned(x2d, out)))
        launch_rows(VEC, expr, out, (x2d,), grid=m, block=threads, extra=(ok,))

    return rowwise(launch, x, dim=dim)


# -- backward -----------------------------------------------------------------------------------
@register(
    "fused_softmax_backward",
    op="softmax_backward",
    backend="cuda",
    dtypes=ALL_DTYPES,
    description="y and dy kept in registers (16-byte loads): read once, dx written once",
    source="cuda_src/fused_softmax_backward.cu",
)
def fused_softmax_backward(y: torch.Tensor, dy: torch.Tensor, dim: int = -1) -> torch.Tensor:
    def launch(dx, y2d, dy2d):
        aligned = vec_aligned(y2d, dy2d, dx)
        phase = aligned or bool(same_vector_phase(dx, y2d, dy2d))
        cfg = backward_config(dx.shape[1], y2d.dtype, aligned, phase)
        backward_launch(dx, y2d, dy2d, cfg, aligned, phase=phase)

    return rowwise(launch, y, dy, dim=dim)


class BackwardConfig(NamedTuple):
    """One fused_softmax_backward launch shape: kernel kind, CTA size, vectors of y and of dy
    per thread (None: streaming), CTAs per cluster, and for ``persist`` the rows in flight into
    shared memory (1: the next row; 2: the next two)."""

    kind: str
    threads: int
    vpt: int | None
    cluster: int = 1
    stages: int = 1

    def label(self) -> str:
        stages = f" s{self.stages}" if self.stages > 1 else ""
        return f"{self.kind} {self.cluster}x{self.threads}x{self.vpt}{stages}"


def backward_launch(dx, y2d, dy2d, cfg: BackwardConfig | tuple, aligned: bool,
                    max_groups: int | None = None, phase: bool | None = None) -> None:
    """Launch one :func:`backward_config` shape ``cfg`` (a BackwardConfig or the tuple of its
    fields) on (M, N) rows (tests and tuning force shapes through it). ``aligned``: y, dy, dx
    16-byte aligned (vector loads in ``block`` and ``cluster``); ``persist`` needs only rows of
    y, dy and dx in the same 16-byte phase (any N). ``phase``: the registered op passes the
    phase it sized ``cfg`` for (no re-check on the per-call path); None (tests, tuning: a
    caller's own shape) checks phase and capacity first. ``max_groups`` caps the persistent
    grid, so each cluster loops."""
    m, n = dx.shape
    t = ctype(y2d.dtype)
    cfg = BackwardConfig(*cfg)
    kind, threads, vpt, cl, stages = cfg
    if stages not in (1, 2):
        raise ValueError(f"stages must be 1 or 2, not {stages}")
    smem, extra = 0, (i32(int(aligned)),)
    if kind == "block":
        expr, grid = f"fused_softmax_backward<{t}, {vpt}>", m
    elif kind == "cluster":
        expr, grid = f"fused_softmax_backward_cluster<{t}, {vpt}, {cl}>", m * cl
        if cl > 8:
            _allow_non_portable_cluster(BACKWARD, expr, device_index(dx))
    elif kind == "persist":
        expr = f"fused_softmax_backward_persist<{t}, {vpt}, {cl}>"
        smem, extra = stages * backward_smem(threads, vpt), (i32(1), i32(stages))
        if phase is None:
            check_backward_persist(dx, y2d, dy2d, cfg)
        grid = persistent_grid(BACKWARD, expr, threads, cl, smem, m, device_index(dx),
                               max_groups)
    else:
        expr, grid = f"fused_softmax_backward_stream<{t}>", m
    launch_rows(BACKWARD, expr, dx, (y2d, dy2d), grid=grid, block=threads, extra=extra,
                shared_mem=smem)


def backward_smem(threads: int, vpt: int = BACKWARD_PERSIST_VPT) -> int:
    """Shared memory of one prefetch stage of the persistent backward: y and dy slots."""
    return 2 * threads * vpt * 16


def check_backward_persist(dx, y2d, dy2d, cfg: BackwardConfig) -> None:
    """Raise ValueError unless the persistent backward ``cfg`` can run on these rows: y, dy and
    dx in one 16-byte phase, and the shape holding a row's windows (one more when rows start
    mid-slot: odd N or an offset base)."""
    if not same_vector_phase(dx, y2d, dy2d):
        raise ValueError(f"{cfg.label()} needs the rows of y, dy and dx in the same 16-byte phase")
    n = dx.shape[1]
    need = _windows(n, y2d.dtype, aligned=_rows_aligned(y2d))
    if cfg.threads * cfg.vpt * cfg.cluster < need:
        raise ValueError(f"{cfg.label()} holds {cfg.threads * cfg.vpt * cfg.cluster} 16-byte "
                         f"windows; a row of {n} {y2d.dtype} here spans {need}")


@functools.lru_cache(maxsize=None)  # runs on every launch: a pure function of its arguments
def backward_config(n: int, dtype: torch.dtype, aligned: bool = True,
                    phase: bool | None = None) -> BackwardConfig:
    """The BackwardConfig (kind, threads, vectors per thread, cluster size, stages) of
    fused_softmax_backward for rows of n.

    One CTA holds y and dy up to 512 threads x 8 vectors each (``block``). Longer rows, when
    the rows of y, dy and dx share their 16-byte phase (``phase``; default ``aligned``: 16-byte
    aligned rows, which vectorize every kernel): ``persist``, persistent clusters of CTAs of
    threads x 4 vectors, the first of BACKWARD_PERSIST_SHAPES that holds the row: for 16-byte
    aligned rows of >= 8000 windows 15 CTAs of <= 768 (fp32) / 640 (fp16/bf16) threads, then
    8 of <= 512, 15 of <= 768 / 640, for fp32 16 of <= 768 (fp32 N <= 196608, 2-byte N <=
    307200); the next row is prefetched (the next two rows from each shape's
    ``two_stage_threads``, where shared memory holds them; never for 2-byte 15-CTA shapes).
    Otherwise a
    one-row cluster of up to 16 CTAs of 512 x 8 (fp32) or x 4 (2-byte) vectors; longer rows
    stream (two passes)."""
    threads, vpt = vec_config(n, dtype, BWD_MAX_THREADS)
    if vpt:
        return BackwardConfig("block", threads, vpt)
    nw = -(-n // vec_width(dtype))
    if (aligned if phase is None else phase) and dtype in BACKWARD_PERSIST_DTYPES:
        nwa = _windows(n, dtype, aligned)
        for sh in BACKWARD_PERSIST_SHAPES[dtype.itemsize]:
            if nwa < sh.min_windows or (sh.aligned_only and not aligned):
                continue
            shape = _cluster_shape(nwa, BACKWARD_PERSIST_VPT, sh.most_threads, (sh.ctas,))
            if shape:
                cl, threads = shape
                two = sh.two_stage_threads is not None and sh.two_stage_threads <= threads \
                    and 2 * backward_smem(threads) <= MAX_CTA_SHARED
                return BackwardConfig("persist", threads, BACKWARD_PERSIST_VPT, cl, 2 if two else 1)
    vpt = 4 if vec_width(dtype) == 8 else 8  # fp16/bf16: 2 x 32 elements per thread, no spills
    shape = _cluster_shape(nw, vpt, BWD_MAX_THREADS, BACKWARD_CL)
    if shape:
        return BackwardConfig("cluster", shape[1], vpt, shape[0])
    return BackwardConfig("stream", 1024, None)


def _round32(threads: int) -> int:
    return max(32, -(-threads // 32) * 32)


def _cluster_shape(
    nw: int, vpt: int, max_threads: int, sizes: tuple[int, ...]
) -> tuple[int, int] | None:
    """(cluster, threads): the smallest cluster of ``sizes`` whose CTAs of <= ``max_threads``
    threads x ``vpt`` vectors hold ``nw`` windows, with the multiple of 32 threads that just
    covers them; None if even the largest cluster is too small."""
    for cl in sizes:
        if nw <= cl * max_threads * vpt:
            return cl, _round32(-(-nw // (vpt * cl)))
    return None


# -- fast_softmax: speed of light ---------------------------------------------------------------
# Instantiations fast_softmax_config can pick (and nothing else: compile time is per name).
FAST_WARP = ((4, 1), (4, 2), (8, 2), (16, 2), (32, 1), (32, 2), (32, 4))  # (group, vpt)
FAST_BLOCK_VPT = (2, 4, 8)
FAST_CL = (2, 4, 8, 16)
PERSIST_VPT = {4: (4, 8, 16), 2: (4,)}  # by itemsize: 2-byte types spill beyond 4 (see NOTES)
PERSIST_CL = (1, 2, 4, 8, 15, 16)
# Rows longer than one persistent CTA: clusters of 8, 15, else 16 CTAs, trying (vectors per thread,
# most threads per CTA) in the order of PERSIST_CLUSTER_SHAPES, sized down to the threads that
# cover the row, the next row's copies issued while the (max, sum) messages fly (`late`).
# Measured twice on the H200 (M*N = 2^28, % of copy, bench/tune_long_rows.py, 2026-11-30):
# small CTAs of many vectors win - fp32 65536 8x128x16 late 88.2 / 88.8 vs the former
# 8x256x8 84.5 / 83.8; 151936 16x160x16 late 85.4 / 86.8 vs 8x608x8 83.9 / 84.0; 262144
# 16x256x16 late 86.0 vs 8x1024x8 84.3 / 79.1; 524288 16x1024x8 late 78.1 / 79.0 vs 71.3 /
# 71.4; bf16 65536 8x256x4 late 84.6 / 86.2 vs 81.7 / 82.2; 151936 16x320x4 late 77.8 / 77.7
# vs 8x608x4 74.6 / 74.5; 262144 16x512x4 late 81.4 / 80.7 vs 8x1024x4 79.3 / 77.8.
# 15 before 16: rows between 8 and 15 CTAs' capacity waste less of the shape in rounding the
# CTA up to 32 threads. H200, % of copy, two calls: fp32 151936 15x160x16 late 91.9 / 91.9 vs
# 16x160x16 late 85.2 / 85.1 (98.9 vs 92.7 % of the shape filled); bf16 151936 15x320x4 late
# 80.2 / 80.1 vs 16x320x4 late 77.0 / 76.9. (Clusters of 5 and 10 lost at 50257 and 151936.)
PERSIST_CLUSTER_SIZES = (8, 15, 16)
PERSIST_CLUSTER_SHAPES = {4: ((16, 256), (8, 1024)), 2: ((4, 512), (4, 1024))}  # by itemsize
PERSIST_DTYPES = (torch.float32, torch.float16, torch.bfloat16)  # fp64: correctness, not speed
# The pipelined persistent clusters (``pipe``, kernel 5b): each row's (max, sum) exchange overlaps
# the next row's reduction; the cluster sizes and vectors per thread of PERSIST_CLUSTER_SHAPES.
PIPE_CL = (8, 16)
PIPE_FP32_SHAPE = (128, 16)  # threads, vectors per thread: 2 x 32 KB of slots per CTA
PIPE_MIN_FILL = 0.9  # of the shape's windows: fp32 N = 59000-65536 and 118000-131072
# Rows longer than the on-chip shapes hold: the persistent wide kernel, clusters of WIDE_CL[0]
# CTAs of 1024 threads, or WIDE_CL[1] when 8 CTAs' shared memory would keep under
# WIDE_MIN_KEPT of each chunk (the rest is read twice). H200, M*N = 2^28, % of copy, two calls:
# fp32 2^20 16x1024 keep 14 69.6 / 71.1 vs 8x1024 keep 14 (44 % kept) 64.5 / 64.2; bf16 2^20
# 8x1024 keep 14 (88 % kept) 67.7 / 67.6 vs 16x1024 67.8; fp16 68.1 vs 70.1. (Before the kernel
# was persistent, 16-CTA clusters lost badly: 41 % vs 61 % for bf16, one cluster launch a row.)
WIDE_CL = (8, 16)
WIDE_MIN_KEPT = 0.75
MAX_CTA_SHARED = 227 * 1024  # H100/H200: the most dynamic shared memory one CTA may take
WIDE_KEEP_BYTES = MAX_CTA_SHARED
_NON_PORTABLE_CLUSTER_ATTR = 14  # CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED


def _fast_vpt_cap(dtype: torch.dtype) -> int:
    """Vectors per thread for cluster rows: 16 (fp32/fp64), 4 for 2-byte types - beyond
    32 fp16/bf16 elements per thread the unpacked fp32 copies spill (measured: 1.1-1.4 TB/s)."""
    return 4 if dtype.itemsize == 2 else 16


def pipe_vpts(dtype: torch.dtype) -> tuple[int, ...]:
    """Vectors per thread of the pipelined instantiations: those of PERSIST_CLUSTER_SHAPES."""
    return tuple(sorted({v for v, _ in PERSIST_CLUSTER_SHAPES[dtype.itemsize]}))


def persist_max_threads(vpt: int) -> int:
    """CTA size limit of the persistent kernels (``MaxThreads`` in row_softmax_kernels.cuh)."""
    return 512 if vpt >= 16 else 1024


def row_kernel_exprs(prefix: str) -> list[str]:
    """Every instantiation of the row-softmax family (row_softmax_kernels.cuh) under ``prefix``:
    fast_softmax.cu and log_softmax.cu declare the same list."""
    out = []
    for dt, t in zip(ALL_DTYPES, _T):
        big = _fast_vpt_cap(dt)
        out += [f"{prefix}_warp<{t}, {g}, {v}>" for g, v in FAST_WARP]
        out += [f"{prefix}_block<{t}, {v}>" for v in FAST_BLOCK_VPT]
        out += [f"{prefix}_cluster<{t}, {big}, {c}>" for c in FAST_CL]
        if dt in PERSIST_DTYPES:
            for v in PERSIST_VPT[dt.itemsize]:
                out += [f"{prefix}_persist<{t}, {v}>"]
                out += [f"{prefix}_persist_cluster<{t}, {v}, {c}>" for c in PERSIST_CL if c > 1]
            out += [f"{prefix}_persist_pipe<{t}, {v}, {c}>" for v in pipe_vpts(dt) for c in PIPE_CL]
        out += [f"{prefix}_wide<{t}, {c}>" for c in WIDE_CL]
    return out


@dataclass(frozen=True)
class RowKernels:
    """One op's instantiation of the row-softmax family: its CudaSource and kernel-name prefix
    (fast_softmax.cu -> ``fast_softmax_*``, log_softmax.cu -> ``log_softmax_*``)."""

    src: object  # CudaSource
    prefix: str


FAST = cuda_source("fast_softmax.cu", row_kernel_exprs("fast_softmax"))
FAST_KERNELS = RowKernels(FAST, "fast_softmax")


@dataclass(frozen=True)
class FastConfig:
    """What fast_softmax (and log_softmax) launches for one (N, dtype): kernel kind and shape.

    kind: ``warp`` (``group`` lanes per row, several rows per block), ``block`` (a CTA per row),
    ``cluster`` (``cluster`` CTAs per row, DSMEM reduction),
    ``persist`` (resident CTAs / clusters loop over rows, next row prefetched into shared memory;
    ``cluster`` = 1 is the single-CTA form), ``pipe`` (persistent clusters, ``stages`` rows in
    flight, each row's (max, sum) exchange overlapping the next row's reduction) or ``wide``
    (``cluster`` CTAs per row, two passes).
    ``threads`` is the CTA size, ``vpt`` the 16-byte vectors each thread keeps in registers
    (``wide``: in shared memory between its passes).
    """

    kind: str
    threads: int
    vpt: int
    group: int = 32
    cluster: int = 1
    late: bool = False  # persist clusters: next row's copies issued while (max, sum) messages fly
    stages: int = 1  # persist, pipe: rows in flight into shared memory (1: the next; 2: two)

    def __post_init__(self):
        if self.stages not in (1, 2):
            raise ValueError(f"stages must be 1 or 2, not {self.stages}")
        if self.stages > 1 and self.kind not in ("persist", "pipe"):
            raise ValueError(f"stages apply to the persistent kernels, not {self.kind!r}")

    def expr(self, t: str, prefix: str = "fast_softmax") -> str:
        if self.kind == "warp":
            return f"{prefix}_warp<{t}, {self.group}, {self.vpt}>"
        if self.kind == "block":
            return f"{prefix}_block<{t}, {self.vpt}>"
        if self.kind == "cluster":
            return f"{prefix}_cluster<{t}, {self.vpt}, {self.cluster}>"
        if self.kind == "persist":
            if self.cluster == 1:
                return f"{prefix}_persist<{t}, {self.vpt}>"
            return f"{prefix}_persist_cluster<{t}, {self.vpt}, {self.cluster}>"
        if self.kind == "pipe":
            return f"{prefix}_persist_pipe<{t}, {self.vpt}, {self.cluster}>"
        return f"{prefix}_wide<{t}, {self.cluster}>"

    def capacity(self) -> int:
        """Windows (16-byte slots) one row may span (wide: any row)."""
        if self.kind == "warp":
            return self.group * self.vpt
        if self.kind == "wide":
            return 1 << 31
        return self.threads * self.vpt * self.cluster

    def shared_mem(self) -> int:
        """Dynamic shared memory per CTA: the persistent kernels' prefetch slots, the wide
        kernel's kept windows."""
        if self.kind in ("persist", "pipe", "wide"):  # stages is 1 but for persist and pipe
            return self.threads * self.vpt * 16 * self.stages
        return 0

    def label(self) -> str:
        if self.kind == "warp":
            return f"warp g{self.group}x{self.vpt}"
        if self.kind in ("cluster", "persist", "pipe"):
            late = " late" if self.late else ""
            stages = f" s{self.stages}" if self.stages > 1 else ""
            return f"{self.kind} {self.cluster}x{self.threads}x{self.vpt}{late}{stages}"
        if self.kind == "wide":
            return f"wide {self.cluster}x{self.threads} keep {self.vpt}"
        return f"{self.kind} {self.threads}x{self.vpt}"


def _windows(n: int, dtype: torch.dtype, aligned: bool = True) -> int:
    """16-byte windows a row spans: ceil(n / W) when rows start 16-byte aligned, else one more
    for the worst-case head offset."""
    w = vec_width(dtype)
    return -(-n // w) if aligned else -(-(n + w - 1) // w)


# The persistent kernels (persist, pipe) measure a row's head from its 128-byte line, not its
# 16-byte vector (softmax_common.cuh, line_head), so that each warp's windows are whole lines.
# H200, M*N = 2^28, % of copy, the same shape on rows on and off 128-byte lines (2026-11-30):
# fp32 151936 vs 151940 15x160x16 91.9 vs 84.9; 50176 vs 50256 8x128x16 86.9 vs 82.4; bf16
# 151936 vs 151940 15x320x4 80.1 vs 75.9.
LINE_BYTES = 128


def _line_windows(n: int, dtype: torch.dtype, aligned: bool = True,
                  line: bool | None = None) -> int:
    """16-byte windows a row spans in the persistent kernels: ceil(n / W) for rows that start on
    a 128-byte line, else up to 7 more (a head of up to 127 bytes). ``line`` (rows on lines)
    defaults to ``aligned`` (rows on 16 bytes) with N * itemsize a multiple of 128."""
    w = vec_width(dtype)
    if line is None:
        line = aligned and n * dtype.itemsize % LINE_BYTES == 0
    return -(-n // w) if line else -(-(n + LINE_BYTES // dtype.itemsize - 1) // w)


def _row_windows(cfg: "FastConfig", n: int, dtype: torch.dtype, aligned: bool,
                 line: bool) -> int:
    """Windows a row of ``n`` spans in ``cfg``'s kernel (line heads for persist and pipe)."""
    if cfg.kind in ("persist", "pipe"):
        return _line_windows(n, dtype, line=line)
    return _windows(n, dtype, aligned)


def persist_vpt(dtype: torch.dtype) -> int:
    """Vectors per thread of the persistent kernels: fp32 8 x <= 1024 threads (128 KB of
    registers per CTA, and as much again of prefetch slots, 64 registers, no spills) - the same
    capacity as 16 x 512, and faster with rows that leave threads idle (H200, M*N = 2^28:
    151936 79 % vs 69 %, 50257 84 vs 81, 65536 88 vs 85, 262144 equal); fp16/bf16 4 x <= 1024
    (64 KB + 64 KB): at 8 or 16 vectors ptxas spills 50-300 bytes per thread even with the
    packed words kept opaque between loops."""
    return 8 if dtype.itemsize == 4 else 4


def persist_config(nw: int, vpt: int, cluster: int, late: bool = False,
                   stages: int = 1) -> FastConfig:
    """The persistent shape holding ``nw`` windows with ``vpt`` per thread over ``cluster``
    CTAs: the multiple of 32 threads that just covers the row."""
    return FastConfig("persist", threads=_round32(-(-nw // (vpt * cluster))), vpt=vpt,
                      cluster=cluster, late=late and cluster > 1, stages=stages)


def pipe_config(nw: int, dtype: torch.dtype) -> FastConfig | None:
    """The pipelined persistent cluster (kernel 5b) for fp32 rows of ``nw`` windows that fill at
    least PIPE_MIN_FILL of a PIPE_FP32_SHAPE cluster of 8 or 16 CTAs, else None.

    Measured on the H200 (M*N = 2^28, % of copy, bench/tune_long_rows.py, 2026-11-30): fp32 65536
    pipe 8x128x16 92.0 / 91.8 against persist 8x128x16 late 87.8 / 88.2; 131072 pipe 16x128x16
    89.1 against 86.4. It lost where a CTA's two rows of slots pass 64 KB (fewer CTAs per SM:
    262144 16x256x16 62.9 vs 83.7; 151936 16x160x16 72.1 vs 85.2), where rows fill little of the
    shape (50257 8x128x16 62.6 vs 83.4), and in bf16 everywhere (the second exp per element and
    the extra unpacking: 65536 68.9 vs 83.9), so 2-byte types keep kernel 5."""
    if dtype != torch.float32:
        return None
    threads, vpt = PIPE_FP32_SHAPE
    for cl in PIPE_CL:
        cap = cl * threads * vpt
        if nw <= cap:
            return FastConfig("pipe", threads=threads, vpt=vpt, cluster=cl, stages=2) if (
                nw >= PIPE_MIN_FILL * cap) else None
    return None


def wide_config(nw: int, cluster: int | None = None, threads: int = 1024,
                keep_bytes: int = WIDE_KEEP_BYTES) -> FastConfig:
    """The wide kernel for rows of ``nw`` windows: ``cluster`` CTAs of ``threads`` (default:
    WIDE_CL[0], or WIDE_CL[1] if WIDE_CL[0] CTAs would keep under WIDE_MIN_KEPT of their
    windows), each thread keeping as many of its windows in shared memory as ``keep_bytes``
    per CTA hold."""
    most = keep_bytes // (16 * threads)
    if cluster is None:
        per = wide_per_thread(nw, WIDE_CL[0], threads)
        cluster = WIDE_CL[0] if most >= WIDE_MIN_KEPT * per else WIDE_CL[1]
    return FastConfig("wide", threads=threads, cluster=cluster,
                      vpt=min(wide_per_thread(nw, cluster, threads), most))


def wide_per_thread(nw: int, cluster: int, threads: int) -> int:
    """Windows each thread of the wide kernel owns: ceil(ceil(nw / cluster) / threads)."""
    chunk = -(-nw // cluster)
    return -(-chunk // threads)


def fast_softmax_config(
    n: int, dtype: torch.dtype, aligned: bool = True, vec: bool = True, line: bool | None = None
) -> FastConfig:
    """The launch fast_softmax (and log_softmax) uses for rows of ``n`` elements of ``dtype``.

    Rules, in 16-byte windows ``nw`` per row (bench/NOTES.md, "CUDA kernel versions", has the
    sweeps behind them; ``python bench/tune_long_rows.py`` reruns them):

    * nw <= WARP_MAX_WINDOWS (64: rows of <= 1 KB): a lane group per row, 1-2 vectors per lane;
    * nw <= PERSIST_MIN_NW (8192 fp32, 2048 fp16/bf16): one CTA per row (``block``), 2 (fp32,
      nw <= 256), 4 (nw <= 2048, and always for 2-byte types) or 8 vectors per thread, threads
      = the multiple of 32 that just covers the row (no idle pow2 padding);
    * longer, when input and output rows share their 16-byte phase (``vec``) and the dtype is
      fp32/fp16/bf16: ``persist``, one CTA of <= 1024 threads x 8 vectors (fp32) or x 4
      (fp16/bf16) if it holds the row, else a cluster of PERSIST_CLUSTER_SIZES (8, 15, 16)
      CTAs of the first PERSIST_CLUSTER_SHAPES entry that holds it (fp32: <= 256 threads x 16
      vectors, then <= 1024 x 8; fp16/bf16: <= 512 x 4, then <= 1024 x 4), threads = the
      multiple of 32 that just covers the row, next row's copies issued late; fp32 rows that
      fill >= 90 % of 8 or 16 CTAs x 128 threads x 16 vectors take the pipelined form
      (``pipe``, :func:`pipe_config`);
    * otherwise (fp64, misaligned phase, or longer rows): a one-row cluster of up to 16 CTAs
      with 16 vectors x <= 512 threads (fp32/fp64) or 4 x <= 1024 (fp16/bf16), else ``wide``
      (persistent clusters of 8 CTAs of 1024 threads, 16 where 8 would keep under 3/4 of each
      CTA's chunk; two passes, up to 227 KB per CTA kept in shared memory).

    ``aligned``: rows start on 16-byte boundaries (otherwise one extra window is budgeted).
    ``vec``: input and output rows share their 16-byte phase (the persistent kernels need it).
    ``line``: rows start on 128-byte lines (default: ``aligned`` and N * itemsize a multiple of
    128); otherwise the persistent shapes budget up to 7 more windows (:func:`_line_windows`).
    """
    nw = _windows(n, dtype, aligned)
    es = dtype.itemsize
    if nw <= WARP_MAX_WINDOWS:
        if nw < 32:
            vpt = 1 if nw <= 4 else 2
            g = max(4, next_pow2(-(-nw // vpt)))
        else:
            g, vpt = 32, next_pow2(-(-nw // 32))
        return FastConfig("warp", threads=128, vpt=vpt, group=g)
    persist_ok = vec and dtype in PERSIST_DTYPES
    block_max = PERSIST_MIN_NW[es] if persist_ok else 1024 * (4 if es == 2 else 8)
    if nw <= block_max:
        vpt = 2 if (nw <= 256 and es >= 4) else 4 if (nw <= 2048 or es == 2) else 8
        return FastConfig("block", threads=_round32(-(-nw // vpt)), vpt=vpt)
    if persist_ok:
        nwl = _line_windows(n, dtype, aligned, line)
        vpt = persist_vpt(dtype)
        if _cluster_shape(nwl, vpt, persist_max_threads(vpt), (1,)):
            return persist_config(nwl, vpt, 1)
        pipe = pipe_config(nwl, dtype)
        if pipe:
            return pipe
        for vpt, most in PERSIST_CLUSTER_SHAPES[es]:
            shape = _cluster_shape(nwl, vpt, most, PERSIST_CLUSTER_SIZES)
            if shape:
                return persist_config(nwl, vpt, shape[0], late=True)
    big = _fast_vpt_cap(dtype)
    shape = _cluster_shape(nw, big, 1024 if big <= 8 else 512, FAST_CL)
    if shape:
        return FastConfig("cluster", threads=shape[1], vpt=big, cluster=shape[0])
    return wide_config(nw)


# Rows of at most this many 16-byte windows (1 KB) take a lane group each (``warp``), longer
# ones a CTA. H200, M*N = 2^28, % of copy (2026-11-30, eighth run): fp32 N = 256 (64 windows)
# warp g32x2 99.6 against block 32x2 79.1 (one 32-thread CTA per row: the former rule, 79-80 %
# in every sweep); bf16 N = 1024 (128 windows) block 32x4 101.1 against warp g32x4 99.1.
WARP_MAX_WINDOWS = 64

# Rows of more windows than this take the persistent kernels (by itemsize). fp32: one CTA per
# row up to 8192 windows (block 1024x8: 93 % at N = 32768 vs 92 % for persist 1x512x16, and
# 97 % vs 90 % at 16384); 2-byte types: up to 2048 (N = 16384: block 512x4 87 %, persist 83 %;
# N = 32768: persist 1x1024x4 83 % vs block 1024x4 65 %).
PERSIST_MIN_NW = {8: 1 << 30, 4: 8192, 2: 2048}

# Every (N, dtype, rows aligned, same vector phase, rows on 128-byte lines) launched so far and
# the config it got.
FAST_CHOICES: dict[tuple[int, torch.dtype, bool, bool, bool], FastConfig] = {}


def _rows_start_on(x2d: torch.Tensor, boundary: int) -> bool:
    """Every row of x starts on a multiple of ``boundary`` bytes."""
    return x2d.data_ptr() % boundary == 0 and (
        x2d.shape[0] == 1 or x2d.stride(0) * x2d.element_size() % boundary == 0)


def _rows_aligned(x2d: torch.Tensor) -> bool:
    """Every row of x (and so of the output, in vector mode) starts on a 16-byte boundary."""
    m, n = x2d.shape
    return _rows_start_on(x2d, 16) and (m == 1 or n * x2d.element_size() % 16 == 0)


def _rows_on_lines(x2d: torch.Tensor) -> bool:
    """Every row of x starts on a 128-byte line (the persistent kernels' line heads are 0)."""
    return _rows_start_on(x2d, LINE_BYTES)


def fast_choice(out: torch.Tensor, x2d: torch.Tensor) -> tuple[FastConfig, int]:
    """(config, vector phase) for this launch, memoized in FAST_CHOICES."""
    phase = same_vector_phase(out, x2d)
    aligned = phase == 1 and _rows_aligned(x2d)
    key = (out.shape[1], x2d.dtype, aligned, phase == 1, aligned and _rows_on_lines(x2d))
    cfg = FAST_CHOICES.get(key)
    if cfg is None:
        cfg = FAST_CHOICES[key] = fast_softmax_config(*key)
    return cfg, phase


def fast_launch(
    out: torch.Tensor,
    x2d: torch.Tensor,
    cfg: FastConfig,
    phase: int | None = None,
    kernels: RowKernels = FAST_KERNELS,
    max_groups: int | None = None,
) -> None:
    """Launch ``cfg`` on (M, N) ``x2d`` into contiguous ``out`` (used by tuning scripts too).

    ``phase``: :func:`same_vector_phase` of (out, x2d) when the caller already computed it.
    ``kernels``: which op's instantiation (fast_softmax's or log_softmax's).
    ``max_groups``: for ``persist`` and ``wide``, cap the resident CTAs / clusters (tests use it
    to make each one loop over many rows).
    """
    m, n = out.shape
    t = ctype(x2d.dtype)
    src, expr = kernels.src, cfg.expr(t, kernels.prefix)
    if phase is None:  # a caller's own config (tests, tuning): check that it holds the row
        phase = same_vector_phase(out, x2d)
        need = _row_windows(cfg, n, x2d.dtype, aligned=not phase or _rows_aligned(x2d),
                            line=_rows_on_lines(x2d))
        if cfg.capacity() < need:
            raise ValueError(f"{cfg.label()} holds {cfg.capacity()} 16-byte windows; a row of "
                             f"{n} {x2d.dtype} here spans {need}")
    vec = i32(phase)
    if cfg.kind == "warp":
        rows_per_block = cfg.threads // cfg.group
        launch_rows(src, expr, out, (x2d,), grid=-(-m // rows_per_block), block=cfg.threads,
                    extra=(vec,))
    elif cfg.kind == "block":
        launch_rows(src, expr, out, (x2d,), grid=m, block=cfg.threads, extra=(vec,))
    elif cfg.kind == "cluster":
        if cfg.cluster > 8:
            _allow_non_portable_cluster(src, expr, device_index(out))
        launch_rows(src, expr, out, (x2d,), grid=m * cfg.cluster, block=cfg.threads,
                    extra=(vec,))
    elif cfg.kind in ("persist", "pipe"):  # kernel 5 also takes `late`
        if not vec:
            raise ValueError(f"{expr} needs input and output rows in the same 16-byte phase")
        late = (i32(int(cfg.late)),) if cfg.kind == "persist" else ()
        grid = persistent_grid(src, expr, cfg.threads, cfg.cluster, cfg.shared_mem(), m,
                               device_index(out), max_groups)
        launch_rows(src, expr, out, (x2d,), grid=grid, block=cfg.threads,
                    extra=(vec, *late, i32(cfg.stages)), shared_mem=cfg.shared_mem())
    elif cfg.kind == "wide":
        grid = persistent_grid(src, expr, cfg.threads, cfg.cluster, cfg.shared_mem(), m,
                               device_index(out), max_groups)
        launch_rows(src, expr, out, (x2d,), grid=grid, block=cfg.threads,
                    extra=(vec, i32(cfg.vpt)), shared_mem=cfg.shared_mem())
    else:
        raise ValueError(f"unknown FastConfig kind {cfg.kind!r}")


_non_portable_done: set[tuple[int, int]] = set()


def _allow_non_portable_cluster(src, expr: str, dev: int) -> None:
    """Clusters of 16 CTAs are 'non-portable' on H100/H200: the kernel must opt in."""
    fn = src.function(expr, dev)
    if (fn.ptr, dev) in _non_portable_done:  # keyed by the loaded function: reloads re-opt-in
        return
    from cupy.cuda import driver

    driver.funcSetAttribute(fn.ptr, _NON_PORTABLE_CLUSTER_ATTR, 1)
    _non_portable_done.add((fn.ptr, dev))


_resident: dict[tuple[int, int, int, int, int], int] = {}


def persistent_grid(src, expr: str, threads: int, cluster: int, smem: int, m: int, dev: int,
                    max_groups: int | None = None) -> int:
    """Blocks to launch for a persistent kernel over ``m`` rows: one group (CTA or cluster) per
    row up to the resident groups (:func:`resident_groups`), at most ``max_groups`` (>= 1; tests
    use it to make each group loop over many rows), times ``cluster``."""
    groups = min(m, resident_groups(src, expr, threads, cluster, smem, dev))
    if max_groups is not None:
        groups = max(1, min(groups, max_groups))
    return groups * cluster


def resident_groups(src, expr: str, threads: int, cluster: int, smem: int, dev: int) -> int:
    """CTAs (cluster 1) or clusters of ``cluster`` CTAs of ``threads`` threads and ``smem`` bytes
    of dynamic shared memory that are resident at once on device ``dev``: a persistent grid.
    Sets the kernel's dynamic shared memory limit (and the non-portable cluster opt-in) first.
    Keyed by the loaded function, so a hot reload asks again.

    A grid larger than this would run a second, mostly idle wave (each group owns ~M / grid
    rows), so it must not be overestimated: clusters are counted by the driver
    (cuOccupancyMaxActiveClusters), since GPCs do not divide evenly into clusters.
    """
    fn = src.function(expr, dev)
    key = (fn.ptr, dev, threads, cluster, smem)
    got = _resident.get(key)
    if got is not None:
        return got
    from cupy.cuda import driver

    from kernel_lab import jit

    jit.set_max_dynamic_shared(fn, smem)
    if cluster > 8:
        _allow_non_portable_cluster(src, expr, dev)
    sms = torch.cuda.get_device_properties(dev).multi_processor_count
    per_sm = driver.occupancyMaxActiveBlocksPerMultiprocessor(fn.ptr, threads, smem)
    if per_sm <= 0:  # e.g. 608 threads x 107 registers: more than one SM's register file
        raise RuntimeError(f"{expr}: {threads} threads with {smem} B of shared memory "
                           "do not fit on one SM")
    if cluster == 1:
        got = per_sm * sms
    else:
        got = _max_active_clusters(fn.ptr, threads, smem, cluster, dev)
        if got <= 0:  # no driver answer: whole clusters per SM-aligned share, one spare
            got = max(1, per_sm * sms // cluster - 1)
    if got <= 0:
        raise RuntimeError(f"{expr}: no cluster of {cluster} CTAs of {threads} threads with "
                           f"{smem} B of shared memory fits on this GPU")
    _resident[key] = got
    return got


def _max_active_clusters(func: int, threads: int, smem: int, cluster: int, dev: int) -> int:
    """cuOccupancyMaxActiveClusters through ctypes (CuPy does not wrap it); 0 if unavailable."""
    import ctypes

    class LaunchConfig(ctypes.Structure):  # CUlaunchConfig
        _fields_ = [("grid", ctypes.c_uint * 3), ("block", ctypes.c_uint * 3),
                    ("shared", ctypes.c_uint), ("stream", ctypes.c_void_p),
                    ("attrs", ctypes.c_void_p), ("num_attrs", ctypes.c_uint)]

    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return 0
    import cupy

    cfg = LaunchConfig((cluster, 1, 1), (threads, 1, 1), smem, None, None, 0)
    count = ctypes.c_int(0)
    with cupy.cuda.Device(dev):
        rc = lib.cuOccupancyMaxActiveClusters(ctypes.byref(count), ctypes.c_void_p(func),
                                              ctypes.byref(cfg))
    return count.value if rc == 0 else 0


@register(
    "fast_softmax",
    op="softmax",
    backend="cuda",
    dtypes=ALL_DTYPES,
    description="speed-of-light dispatch per (N, dtype): lane groups / CTA / persistent "
    "prefetching CTAs or clusters (DSMEM) / wide, rows on chip with 16-byte aligned windows "
    "(see fast_softmax_config)",
    source="cuda_src/fast_softmax.cu",
)
def fast_softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    def launch(out, x2d):
        cfg, phase = fast_choice(out, x2d)
        fast_launch(out, x2d, cfg, phase)

    return rowwise(launch, x, dim=dim)
