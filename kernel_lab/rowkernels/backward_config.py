"""Launch shapes of fused_softmax_backward (cuda_src/fused_softmax_backward.cu): kernel kind,
CTA size, vectors per thread, cluster size and prefetch stages as pure functions of (N, dtype,
alignment) - no GPU needed - with the H200 measurements behind each rule beside it. The
launcher is in cuda_variants.py.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import torch

from kernel_lab.cuda_common import vec_width

from .forward_config import MAX_CTA_SHARED, cluster_shape, line_windows, round32, vec_config

BWD_MAX_THREADS = 512  # the one-CTA and one-row cluster kernels' CTA size limit
BACKWARD_CL = (2, 4, 8, 16)
BACKWARD_PERSIST_VPT = 4  # vectors of y and of dy per thread: 2 x 64 KB per 1024-thread CTA
BACKWARD_PERSIST_SIZES = (2, 4, 8, 15, 16)  # instantiated cluster sizes (tuning, tests)
# More vectors per thread, for fp32 rows past 15 CTAs x 768 threads x 4 vectors (N > 184320,
# where 16x1024x4 lost to the one-row cluster: 262144 at 69 %): (dtype, vectors, CTAs); fp32 x 8
# at the 640-thread bound: 91 registers, no spills (NVRTC 13.0). H200, M*N = 2^28, % of copy
# (2026-11-30, ninth run, call 2): 262144 15x576x8 92.8 vs the one-row cluster 16x512x8 75.6
# and 16x1024x4 69.9; 151936 15x640x8 99.0 vs 15x640x4 s2 97.8.
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
# Two rows in flight (stages = 2) for CTAs of >= 320 threads (until the thirteenth run), measured
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
# 16 against 15 CTAs at equal CTA sizes (ninth run, call 2, fp32 151936, one / two stages):
# 16x608 / 640 / 704 x 4 77.8-79.7 against 15x640 / 704 x 4 93.6-97.8, so the cost follows the
# cluster size, not the CTA size: no 16-CTA shape is left (fp32 N 184320-196608 took 16x768x4;
# it now takes 15 x <= 640 x 8, the shape of 262144). 2-byte rows of 4000-8000 windows (N =
# 32000-64000) take 15-CTA clusters before the one-CTA kernel: bf16 32000 15x96x4 s2 91.8 vs
# block 512x8 91.6, 32768 15x96x4 93.1 vs 91.5 (larger 15-CTA CTAs lost: 15x128x4 83.9-87.5,
# 15x192x4 54-55; tune of the ninth run, call 3).
# 2-byte 15-CTA CTAs of 384-544 threads prefetch two rows: at 90 registers they are one per SM
# (from 384 threads), and one stage's slots (< 72 KB) kept too few bytes in flight. H200, % of
# copy (ninth run, call 6): bf16 196608 15x416x4 84.4 -> s2 94.3 (15x448x4 s2 95.2), fp16 84.2 ->
# 92.3; 229376 15x480x4 94.4 / s2 94.8 (fp16 93.7 / 95.2). Smaller CTAs (two per SM) and 576-640
# keep one stage: 151936 15x320x4 97.5 vs s2 95.0, 262144 15x576x4 98.2 (eighth run).
# fp32 16-byte aligned rows of 8000-19200 windows (N = 32000-76800) take 15 CTAs of <= 160
# threads x 8 vectors (one stage) instead of x 4. H200, M*N = 2^28, % of copy (2026-11-30,
# tenth run, call 3, tune_backward --dtypes float32): 32000 15x96x8 95.7 vs 15x160x4 92.0;
# 32768 95.9 vs 92.5; 50176 15x128x8 96.0 vs 15x224x4 92.4; 65536 15x160x8 96.9 vs 15x288x4
# 94.3; 131072 15x288x8 95.1 vs 15x576x4 s2 95.2 (a tie: longer rows keep x 4). Rows not on 16
# bytes take the same shapes since the kernel's line heads (50257: 15x128x8 94.8 vs 8x416x4 s2
# 86.4, tenth run, call 6; 87.5 vs 88.4 before, with 16-byte heads). Past 160 x 8 the rows
# keep x 4 with two stages up to 896 threads (N <= 215040; 2 x 2 x 896 x 64 B
# = 224 KB of slots): call 4, 131072 15x576x4 s2 95.9 vs 15x288x8 95.4; 151936 15x640x4 s2
# 97.2 vs 15x320x8 96.5; 196608 15x832x4 s2 96.7 vs 15x416x8 89.8 (the former default: the
# x 4 entry stopped at 768 threads).
# Thirteenth run (2026-11-30): with the prefetch slots on 128-byte lines (eleventh run) the
# 15-CTA shapes above lost to 2-, 4-, 8- and 16-CTA shapes at every N timed, in two tunes
# (calls 4-5 of the twelfth run, call 2 of the thirteenth; H200, M*N = 2^28, % of copy, second
# tune): fp32 32000 2x1024x4 97.8 vs 15x96x8 95.6; 50257 8x416x4 96.8 vs 15x128x8 94.7; 65536
# 8x512x4 s2 97.9 vs 15x160x8 96.5; 128256 / 131072 8x1024x4 97.9 vs 15x544x4 s2 94.8 / 15x576x4
# s2 95.3; 151936 16x608x4 s2 96.8 vs 15x640x4 s2 96.3; 262144 16x1024x4 95.9 vs 15x576x8 93.2.
# bf16 32000 4x256x4 99.1 (16x64x4 99.3) vs 15x96x4 92.2; 50257 4x416x4 s2 100.1 (one stage
# 91.4) vs 15x128x4 95.7; 65536 4x512x4 100.1 (s2 96.6) vs 15x160x4 97.3; 128256 / 131072
# 8x512x4 100.5 / 100.4 vs 15x288x4 96.9 / 97.4; 151936 8x608x4 98.3 (s2 98.8) vs 15x320x4
# 96.8; 262144 16x512x4 100.4 (s2 96.4) vs 15x576x4 98.5. Two stages only where they won:
# fp32 CTAs of 448-640 threads (512: 97.9 vs 96.6, 608: 96.8 vs 94.7; 416: 95.2 vs 96.8), 2-byte
# CTAs of 384-448 threads in 4-CTA clusters (416). fp32 rows past 16 x 1024 x 4 (N > 262144)
# keep 15 x <= 640 x 8; 2-byte rows past 16 x 640 x 4 (N > 327680) the one-row cluster. (Until
# the twenty-second run, which gave the rows from 16 x 640 x 4 (fp32) / 16 x 512 x 4 (2-byte) on
# to the chunk kernel, below.)


# Rows past every persistent shape (fp32 N > 163840, 2-byte N > 262144 and bf16 163841-196608;
# y, dy and dx rows in one 16-byte phase): rows in chunks of one CTA (backward_chunks.cuh, the
# forward's kernel 7b for the backward), each chunk BACKWARD_CHUNK_VPT windows of y and of dy per
# thread (two chunks in registers: 110 registers, no spills, NVRTC 13.0), BACKWARD_CHUNK_AHEAD
# chunks in flight. CTAs of up to 512 threads (one per SM) while a row has at most
# BACKWARD_CHUNK_MAX_WIDE of their chunks, else up to 256 (two per SM), sized down to the fewest
# threads that keep the chunk count. Such rows were streamed in two passes (5 tensors' traffic)
# or, from 163840 / 196608, ran 16-CTA clusters. H200, M*N = 2^28, % of copy, twenty-second run
# (bench/tune_backward.py; three tunes in three calls):
#   first (softmax / log backward): fp32 327680 512x4 90.5 / 90.1 vs stream 71.5; 524288 90.3 /
#   90.3 vs 73.6; bf16 524288 96.5-96.9 / 97.3 vs 74.1; bf16 2^20 90.6 / 91.5 vs 74.5. Where a
#   row is ~128 chunks of 512 (nearly every CTA of the grid: each step waits on all of them)
#   256-thread CTAs win: fp32 2^20 256x4 79.4 / 79.0 vs 512x4 76.5 / 76.3 vs stream 59.6-73.0;
#   bf16 2^21 78.2 / 78.0 vs 75.6 / 74.7 vs 59-70.
#   second (softmax backward): chunks beat the 16-CTA clusters' longest rows - fp32 196608
#   512x4 96.0 vs 16x768x4 94.5, 262144 97.6 vs 16x1024x4 95.8 (so fp32 16-CTA clusters stop at
#   640 threads and 15 x 640 x 8 went); bf16 327680 96.5 vs 16x640x4 94.4 (2-byte 16-CTA
#   clusters stop at 512). The clusters stay ahead at fp32 151936 16x608x4 s2 97.9 vs 96.3 and
#   bf16 131072 / 262144 8x512x4 / 16x512x4 101.4 / 100.6 vs 98.5; level at fp32 65536 / 131072
#   (98.1 / 99.1 vs 98.2 / 99.4).
#   third: fp32 163840 16x640x4 s2 99.0 vs chunks 96.5; bf16 163840 8x640x4 99.3 vs 97.0,
#   229376 16x448x4 97.4 vs 96.8, but 196608 16x384x4 91.5 vs chunks 94.9 (91 % in the same
#   run's benchmark too), so 2-byte 16-CTA clusters start at 416 threads (rows of 20481-24576
#   windows, bf16 N 163841-196608, take chunks).
#   Chunks in flight: one ran level with two or three in the first tune (+-0.6), behind two in
#   the second and third (-0.3 to -1.3: fp32 131072 99.2 vs 100.0, 163840 95.3 vs 96.5; bf16
#   163840 95.7 vs 97.0), so two are in flight (2 x 64 KB of slots).
BACKWARD_CHUNK_VPT = 4
BACKWARD_CHUNK_MAX_THREADS = 512  # the kernels' launch bound
BACKWARD_CHUNK_SMALL_THREADS = 256
BACKWARD_CHUNK_MAX_WIDE = 64
BACKWARD_CHUNK_AHEAD = 2


class BackwardShape(NamedTuple):
    """A persistent backward cluster shape the config may pick (BACKWARD_PERSIST_SHAPES)."""

    ctas: int
    most_threads: int
    two_stage_threads: int | None = None  # CTAs this large prefetch two rows (None: never) ...
    two_stage_max: int = 1024  # ... up to this size
    vpt: int = 4  # 16-byte vectors of y and of dy per thread (BACKWARD_PERSIST_VPT)
    least_threads: int = 0  # rows that need smaller CTAs skip the shape


BACKWARD_PERSIST_SHAPES = {  # by itemsize
    4: (BackwardShape(2, 1024),
        BackwardShape(8, 1024, two_stage_threads=448, two_stage_max=640),
        BackwardShape(16, 640, two_stage_threads=448, two_stage_max=640)),
    2: (BackwardShape(4, 512, two_stage_threads=384, two_stage_max=448),
        BackwardShape(8, 640),
        BackwardShape(16, 512, least_threads=416)),
}
# Aligned rows of at least this many windows take the persistent shapes even where the one-CTA
# kernel would hold them (2-byte rows of 4000-4096 windows: N = 32000-32768), by itemsize.
BACKWARD_PERSIST_BEFORE_BLOCK = {2: 4000}
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


class BackwardConfig(NamedTuple):
    """One fused_softmax_backward launch shape: kernel kind, CTA size, vectors of y and of dy
    per thread (None: streaming), CTAs per cluster, and the prefetch sets in flight into shared
    memory: for ``persist`` rows (1: the next row; 2: the next two), for ``chunks`` chunks
    (``ahead``, 1 to 4 as shared memory allows)."""

    kind: str
    threads: int
    vpt: int | None
    cluster: int = 1
    stages: int = 1

    def label(self) -> str:
        if self.kind == "chunks":
            return f"chunks {self.threads}x{self.vpt} ahead {self.stages}"
        stages = f" s{self.stages}" if self.stages > 1 else ""
        return f"{self.kind} {self.cluster}x{self.threads}x{self.vpt}{stages}"

    def expr(self, t: str, prefix: str = "fused_softmax_backward") -> str:
        """The name expression this shape launches for C type t: fused_softmax_backward.cu's,
        or (``prefix`` "log_softmax_backward") log_softmax_backward.cu's, which has the
        ``block``, ``persist``, ``chunks`` and ``stream`` kinds."""
        if self.kind == "block":
            return f"{prefix}<{t}, {self.vpt}>"
        if self.kind == "cluster":
            return f"{prefix}_cluster<{t}, {self.vpt}, {self.cluster}>"
        if self.kind == "persist":
            return f"{prefix}_persist<{t}, {self.vpt}, {self.cluster}>"
        if self.kind == "chunks":
            return f"{prefix}_chunks<{t}, {self.vpt}>"
        return f"{prefix}_stream<{t}>"

    def chunks_of(self, windows: int) -> int:
        """``chunks``: the chunks of ``threads * vpt`` windows a row of ``windows`` is cut into."""
        return -(-windows // (self.threads * self.vpt))

    def shared_mem(self) -> int:
        """Dynamic shared memory per CTA: ``stages`` sets of y and dy slots (persist, chunks)."""
        if self.kind in ("persist", "chunks"):
            return self.stages * backward_smem(self.threads, self.vpt)
        return 0


def backward_smem(threads: int, vpt: int = BACKWARD_PERSIST_VPT) -> int:
    """Shared memory of one prefetch stage of the persistent backward: y and dy slots."""
    return 2 * threads * vpt * 16


@functools.lru_cache(maxsize=None)  # runs on every launch: a pure function of its arguments
def backward_config(n: int, dtype: torch.dtype, aligned: bool = True,
                    phase: bool | None = None) -> BackwardConfig:
    """The BackwardConfig (kind, threads, vectors per thread, cluster size, stages) of
    fused_softmax_backward for rows of n.

    One CTA holds y and dy up to 512 threads x 8 vectors each (``block``; 2-byte aligned rows
    of >= 4000 windows skip it). Longer rows, when the rows of y, dy and dx share their 16-byte
    phase (``phase``; default ``aligned``: 16-byte aligned rows, which vectorize every kernel):
    ``persist``, persistent clusters, the first of BACKWARD_PERSIST_SHAPES that holds the row
    (with room for the kernel's line head: up to 7 windows before the row) - fp32: 2 CTAs of
    <= 1024 threads x 4 vectors, then 8, then 16 of <= 640 (N <= 163840); 2-byte: 4 CTAs of <=
    512 x 4, then 8 of <= 640 x 4, then 16 of 416-512 (N 196609-262144); the
    next row is prefetched (the next two rows for each shape's ``two_stage_threads`` to
    ``two_stage_max``, where shared memory holds them: fp32 448-640 threads, 2-byte 4-CTA
    shapes of 384-448). Rows past every persistent shape: ``chunks`` (:func:`backward_chunk_config`;
    the launcher streams them when the GPU holds too few CTAs for a row's chunks). Rows in
    different phases: a one-row cluster of up to 16 CTAs of 512 x 8 (fp32) or x 4 (2-byte)
    vectors; longer rows stream (two passes)."""
    nw = -(-n // vec_width(dtype))
    persist_ok = (aligned if phase is None else phase) and dtype in BACKWARD_PERSIST_DTYPES
    threads, vpt = vec_config(n, dtype, BWD_MAX_THREADS)
    if vpt and not (persist_ok and aligned
                    and nw >= BACKWARD_PERSIST_BEFORE_BLOCK.get(dtype.itemsize, 1 << 31)):
        return BackwardConfig("block", threads, vpt)
    if persist_ok:
        return backward_persist_config(n, dtype, aligned) or backward_chunk_config(n, dtype,
                                                                                   aligned)
    vpt = 4 if vec_width(dtype) == 8 else 8  # fp16/bf16: 2 x 32 elements per thread, no spills
    shape = cluster_shape(nw, vpt, BWD_MAX_THREADS, BACKWARD_CL)
    if shape:
        return BackwardConfig("cluster", shape[1], vpt, shape[0])
    return BackwardConfig("stream", 1024, None)


def backward_persist_config(n: int, dtype: torch.dtype, aligned: bool) -> BackwardConfig | None:
    """The persistent shape for rows of n whose y, dy and dx share their 16-byte phase: the
    first of BACKWARD_PERSIST_SHAPES that holds the row with room for the kernel's line head (up
    to 7 windows before the row), its stages (see :func:`backward_config`); None for dtypes
    without the persistent kernel or rows longer than every shape. ``aligned``: rows start on 16
    bytes (else one more window is budgeted)."""
    if dtype not in BACKWARD_PERSIST_DTYPES:
        return None
    nwl = line_windows(n, dtype, aligned)
    for sh in BACKWARD_PERSIST_SHAPES[dtype.itemsize]:
        shape = cluster_shape(nwl, sh.vpt, sh.most_threads, (sh.ctas,))
        if shape and shape[1] >= sh.least_threads:
            cl, threads = shape
            two = sh.two_stage_threads is not None \
                and sh.two_stage_threads <= threads <= sh.two_stage_max \
                and 2 * backward_smem(threads, sh.vpt) <= MAX_CTA_SHARED
            return BackwardConfig("persist", threads, sh.vpt, cl, 2 if two else 1)
    return None


def backward_chunk_instantiations() -> list[tuple[torch.dtype, int]]:
    """Every declared chunk backward kernel: (dtype, vectors per thread)."""
    return [(d, BACKWARD_CHUNK_VPT) for d in BACKWARD_PERSIST_DTYPES]


def backward_chunk_config(n: int, dtype: torch.dtype, aligned: bool = True,
                          ahead: int = BACKWARD_CHUNK_AHEAD,
                          most: int | None = None) -> BackwardConfig:
    """The chunk kernel for rows of n (any length; the launcher checks that the GPU's resident
    CTAs can hold a row's chunks, else streams): chunks of ``most`` x BACKWARD_CHUNK_VPT windows
    - by default BACKWARD_CHUNK_MAX_THREADS while a row has at most BACKWARD_CHUNK_MAX_WIDE of
    them, else BACKWARD_CHUNK_SMALL_THREADS - the CTA then sized down to the multiple of 32
    threads that keeps the chunk count, so that every chunk is (nearly) full - a step's cost is
    nearly fixed, so a mostly empty last chunk would cost a whole one (the forward's kernel 7b,
    eighteenth H200 run). ``most``: another CTA size to fit (bench/tune_backward.py)."""
    vpt = BACKWARD_CHUNK_VPT
    nwl = line_windows(n, dtype, aligned)
    if most is None:
        most = BACKWARD_CHUNK_MAX_THREADS
        if -(-nwl // (most * vpt)) > BACKWARD_CHUNK_MAX_WIDE:
            most = BACKWARD_CHUNK_SMALL_THREADS
    chunks = -(-nwl // (most * vpt))
    threads = round32(-(-nwl // (chunks * vpt)))
    return BackwardConfig("chunks", threads, vpt, 1, ahead)
