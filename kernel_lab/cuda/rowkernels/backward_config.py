"""Launch shapes of fused_softmax_backward (cuda_src/fused_softmax_backward.cu) and
log_softmax_backward: kernel kind, CTA size, vectors per thread, cluster size and prefetch
stages as pure functions of (N, dtype, alignment) - no GPU needed. Beside each rule, the H200
measurement that justifies it (% of the device-to-device copy, M*N = 2^28,
bench/tune_backward.py); cuda_src/README.md has each kind's design. The launcher is in
launch.py.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from kernel_lab.cuda.archs import Arch
from kernel_lab.cuda.rowkernels.forward_config import TUNED_ARCH, vec_config
from kernel_lab.cuda.rowkernels.geometry import (
    cluster_shape,
    line_windows,
    max_cluster,
    round32,
    runs_on,
)
from kernel_lab.cuda.rowkernels.kinds import BACKWARD_KINDS, BackwardKind
from kernel_lab.cuda.sources import cdiv, vec_width

BWD_MAX_THREADS = 512  # the one-CTA and one-row cluster kernels' CTA size limit
BACKWARD_CL = (2, 4, 8, 16)
BACKWARD_PERSIST_VPT = 4  # vectors of y and of dy per thread: 2 x 64 KB per 1024-thread CTA
BACKWARD_PERSIST_SIZES = (2, 4, 8, 15, 16)  # instantiated cluster sizes (tuning, tests)
# fp32 x 8 vectors on 15-CTA clusters (dtype, vectors, CTAs; 91 registers at the 640-thread
# bound, no spills): instantiated for the tunes, picked by no rule (fp32 262144 chunks 97.6 % vs
# 15x576x8 93.2 %).
BACKWARD_PERSIST_WIDE = ((torch.float32, 8, 15),)
# persist: rows longer than one CTA holds (y, dy and dx in one 16-byte phase) take the first
# BACKWARD_PERSIST_SHAPES entry that holds the row; two rows in flight only where they won
# (fp32 CTAs of 448-640 threads: 512 97.9 vs 96.6; 2-byte 4-CTA CTAs of 384-448). Measured on
# H200: fp32 32000 2x1024x4 97.8, 50257 8x416x4 96.8, 65536 8x512x4 s2 97.9, 131072 8x1024x4
# 97.9, 151936 16x608x4 s2 96.8; bf16 32000 4x256x4 99.1, 65536 4x512x4 100.1, 131072 8x512x4
# 100.4, 262144 16x512x4 100.4 (15-CTA shapes: 92.2-98.5). fp32 16-CTA CTAs stop at 640 threads
# and 2-byte at 512: chunks win past them.


# chunks: rows past every persistent shape (fp32 N > 163840, 2-byte N 163841-196608 and
# > 262144; y, dy and dx in one 16-byte phase), chunks of BACKWARD_CHUNK_VPT windows of y and of
# dy a thread (two chunks in registers: 110 registers, no spills), BACKWARD_CHUNK_AHEAD chunks in
# flight (one lost 0.3-1.3 points); CTAs of up to 512 threads while a row has at most
# BACKWARD_CHUNK_MAX_WIDE chunks, else 256 (rows of ~128 chunks wait on nearly the whole grid),
# sized down to keep the chunk count. Measured on H200: fp32 327680-524288 90.1-90.5 % vs stream
# 71.5-73.6 %; bf16 524288 96.5-97.3 vs 74.1; fp32 2^20 256x4 79.0-79.4 vs 512x4 76.3-76.5; bf16
# 196608 94.9 vs 16x384x4 91.5; fp32 262144 97.6 vs 16x1024x4 95.8.
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
# kernel would hold them (2-byte rows of 4000-4096 windows: N = 32000-32768; bf16 32000 4x256x4
# 99.1 % vs block 512x8 91.6 %), by itemsize.
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

    @property
    def kind_of(self) -> BackwardKind:
        """This shape's :class:`~.kinds.BackwardKind` (ValueError for an unknown kind)."""
        try:
            return BACKWARD_KINDS[self.kind]
        except KeyError:
            raise ValueError(f"unknown backward kind {self.kind!r}; kinds: "
                             f"{', '.join(BACKWARD_KINDS)}") from None

    def label(self) -> str:
        return self.kind_of.label(self)

    def expr(self, t: str, prefix: str = "fused_softmax_backward") -> str:
        """The name expression this shape launches for C type t: fused_softmax_backward.cu's,
        or (``prefix`` "log_softmax_backward") fused_log_softmax_backward.cu's, which has the
        ``block``, ``persist``, ``chunks`` and ``stream`` kinds."""
        return self.kind_of.template(self, t, prefix)

    def chunks_of(self, windows: int) -> int:
        """``chunks``: the chunks of ``threads * vpt`` windows a row of ``windows`` is cut into."""
        return cdiv(windows, self.threads * self.vpt)

    def shared_mem(self) -> int:
        """Dynamic shared memory per CTA: ``stages`` sets of y and dy slots (persist, chunks)."""
        return self.kind_of.shared_mem(self)


def backward_smem(threads: int, vpt: int = BACKWARD_PERSIST_VPT) -> int:
    """Shared memory of one prefetch stage of the persistent backward: y and dy slots."""
    return 2 * threads * vpt * 16


def backward_config(n: int, dtype: torch.dtype, aligned: bool = True,
                    phase: bool | None = None, arch: Arch = TUNED_ARCH) -> BackwardConfig:
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
    vectors; longer rows stream (two passes). ``arch``: the first of those shapes it can launch
    (forward_config.runs_on; the streaming kernel runs anywhere)."""
    return next(c for c in _backward_shapes(n, dtype, aligned, phase, arch) if runs_on(c, arch))


def _backward_shapes(n: int, dtype: torch.dtype, aligned: bool, phase: bool | None,
                     arch: Arch):
    """backward_config's rules in order, each one's shape; the streaming kernel last."""
    nw = cdiv(n, vec_width(dtype))
    persist_ok = (aligned if phase is None else phase) and dtype in BACKWARD_PERSIST_DTYPES
    threads, vpt = vec_config(n, dtype, BWD_MAX_THREADS)
    if vpt and not (persist_ok and aligned
                    and nw >= BACKWARD_PERSIST_BEFORE_BLOCK.get(dtype.itemsize, 1 << 31)):
        yield BackwardConfig("block", threads, vpt)
    if persist_ok:
        if cfg := backward_persist_config(n, dtype, aligned, arch):
            yield cfg
        yield backward_chunk_config(n, dtype, aligned)
        yield backward_chunk_config(n, dtype, aligned, ahead=1)
    else:
        vpt = 4 if vec_width(dtype) == 8 else 8  # fp16/bf16: 2 x 32 elements a thread, no spills
        sizes = tuple(c for c in BACKWARD_CL if c <= max_cluster(arch))
        if shape := cluster_shape(nw, vpt, BWD_MAX_THREADS, sizes):
            yield BackwardConfig("cluster", shape[1], vpt, shape[0])
    yield BackwardConfig("stream", 1024, None)


def backward_persist_config(n: int, dtype: torch.dtype, aligned: bool,
                            arch: Arch = TUNED_ARCH) -> BackwardConfig | None:
    """The persistent shape for rows of n whose y, dy and dx share their 16-byte phase: the
    first of BACKWARD_PERSIST_SHAPES that holds the row with room for the kernel's line head (up
    to 7 windows before the row), its stages (see :func:`backward_config`); None for dtypes
    without the persistent kernel or rows longer than every shape. ``aligned``: rows start on 16
    bytes (else one more window is budgeted). ``arch``: shapes of larger clusters than it has
    are skipped."""
    if dtype not in BACKWARD_PERSIST_DTYPES:
        return None
    nwl = line_windows(n, dtype, aligned)
    for sh in BACKWARD_PERSIST_SHAPES[dtype.itemsize]:
        if sh.ctas > max_cluster(arch):
            continue
        shape = cluster_shape(nwl, sh.vpt, sh.most_threads, (sh.ctas,))
        if shape and shape[1] >= sh.least_threads:
            cl, threads = shape
            two = sh.two_stage_threads is not None \
                and sh.two_stage_threads <= threads <= sh.two_stage_max \
                and 2 * backward_smem(threads, sh.vpt) <= arch.smem_per_block_optin
            cfg = BackwardConfig("persist", threads, sh.vpt, cl, 2 if two else 1)
            if runs_on(cfg, arch):
                return cfg
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
    nearly fixed, so a mostly empty last chunk would cost a whole one (as the forward's
    chunks_reg). ``most``: another CTA size to fit (bench/tune_backward.py)."""
    vpt = BACKWARD_CHUNK_VPT
    nwl = line_windows(n, dtype, aligned)
    if most is None:
        most = BACKWARD_CHUNK_MAX_THREADS
        if cdiv(nwl, most * vpt) > BACKWARD_CHUNK_MAX_WIDE:
            most = BACKWARD_CHUNK_SMALL_THREADS
    chunks = cdiv(nwl, most * vpt)
    threads = round32(cdiv(nwl, chunks * vpt))
    return BackwardConfig("chunks", threads, vpt, 1, ahead)
