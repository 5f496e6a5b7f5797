"""Launch shapes of the row-softmax CUDA kernels: the fast family (cuda_src/row_softmax_kernels.cuh,
instantiated by fast_softmax.cu and log_softmax.cu) and vec_softmax's one-CTA vector shape.

Pure functions of (N, dtype, alignment) - no GPU needed - with the H200 measurements behind each
rule beside it; bench/NOTES.md has the full record. The launchers are in cuda_variants.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch

from kernel_lab.cuda_common import ALL_DTYPES, ctype, next_pow2, vec_width

_T = [ctype(dt) for dt in ALL_DTYPES]
VPT = (1, 2, 4, 8)  # 16-byte vectors per thread kept in registers (vec_softmax, backward block)
VEC_MAX_THREADS = 1024


# -- vec_softmax (and the backward's one-CTA kernel) ----------------------------------------------
def vec_config(n: int, dtype: torch.dtype, max_threads: int = VEC_MAX_THREADS):
    """(threads, vectors per thread) keeping a row of ``n`` in registers, or (threads, None)
    when it does not fit (the streaming kernel then runs)."""
    nv = -(-n // vec_width(dtype))
    threads = min(max_threads, max(32, next_pow2(-(-nv // 4))))
    vpt = next_pow2(-(-nv // threads))
    return (threads, vpt) if vpt <= VPT[-1] else (max_threads, None)


def round32(threads: int) -> int:
    return max(32, -(-threads // 32) * 32)


def cluster_shape(
    nw: int, vpt: int, max_threads: int, sizes: tuple[int, ...]
) -> tuple[int, int] | None:
    """(cluster, threads): the smallest cluster of ``sizes`` whose CTAs of <= ``max_threads``
    threads x ``vpt`` vectors hold ``nw`` windows, with the multiple of 32 threads that just
    covers them; None if even the largest cluster is too small."""
    for cl in sizes:
        if nw <= cl * max_threads * vpt:
            return cl, round32(-(-nw // (vpt * cl)))
    return None


# -- fast_softmax: speed of light ---------------------------------------------------------------
# Instantiations fast_softmax_config can pick (and nothing else: compile time is per name).
FAST_WARP = ((4, 1), (4, 2), (8, 2), (16, 2), (32, 1), (32, 2), (32, 4))  # (group, vpt)
FAST_BLOCK_VPT = (2, 4, 8)
BLOCK_SLOTS_VPT = 8  # kernel 2b (block_slots): vectors per thread in registers, the rest in slots
SLOTS_CL = (2, 4)  # kernel 3b (block_slots on a cluster): the row over 2 or 4 CTAs
# kernels with a row's last windows in shared-memory slots: 2b / 3b (a CTA or cluster a row) and
# 2c / 3c (persist_slots: 2b / 3b on resident CTAs / clusters looping over rows)
SLOTS_KINDS = ("block_slots", "persist_slots")
FAST_CL = (2, 4, 8, 16)
# 16-byte vectors per thread of the persistent instantiations, by itemsize. A thread keeps at
# most 64 exps in fp32 registers (kKeptFor in row_softmax_kernels.cuh): fp16/bf16 x 16 softmax
# keeps them rounded to fp16/bf16 instead (sixteenth run; 104-128 registers, spills: fp16 0 B,
# bf16 0 B in clusters, 80 B in one CTA), log_softmax the packed values (bf16 0 B, fp16 216-240
# B; NVRTC 13.0).
PERSIST_VPT = {4: (4, 8, 16), 2: (4, 8, 16)}
PERSIST_CL = (1, 2, 4, 8, 15, 16)


class PersistShape(NamedTuple):
    """One rule of the persistent kernels: ``vpt`` vectors x at most ``most`` threads per CTA in
    the first of ``clusters`` (CTAs per cluster) that holds the row; ``stages`` rows in flight;
    ``lines_only``: only rows that start on 128-byte lines (odd rows skip the rule); ``late``:
    the next row's copies issued while the messages fly (None: CTAs of <= LATE_MAX_THREADS);
    ``min_fill``: only where the row fills at least this share of the shape's windows (threads
    come in warps)."""

    vpt: int
    most: int
    clusters: tuple[int, ...]
    stages: int = 1
    lines_only: bool = False
    late: bool | None = None
    min_fill: float = 0.0


# Rows longer than the one-CTA kernel holds: the first PERSIST_SHAPES rule that holds the row,
# its CTA sized down to the multiple of 32 threads that covers it; cluster CTAs issue the next
# row's copies while the (max, sum) messages fly (`late`) when they have <= LATE_MAX_THREADS.
# H200, M*N = 2^28, % of copy, bench/tune_long_rows.py (NOTES: "Eleventh H200 run", "Twelfth"):
#   fp32 (eleventh run, once the prefetch slots sat on 128-byte lines; 15-CTA clusters and the
#   pipe had won while 2-, 4-, 8- and 16-CTA kernels read L2 twice): 50257 8x128x16 late 90.6
#   vs 15x64x16 late 86.4 (best 4x800x4 late s2 91.8); 65536 8x128x16 late 94.4 vs pipe
#   8x128x16 s2 91.7; 131072 8x256x16 late 92.1 vs 15x160x16 late 91.6 (best 8x1024x4 late
#   93.5); 151936 8x320x16 late 93.6 vs 92.0; 262144 16x256x16 late 92.0 vs 15x576x8 late 89.9;
#   524288 16x1024x8 late 85.9 (no shape better than 86.5).
#   2-byte (twelfth run, 8 vectors x <= 512 threads new): small CTAs x 8 vectors in 8 CTAs for
#   rows on lines - bf16 32768 8x64x8 late 93.1 vs 1x1024x4 90.9, 65536 8x128x8 late 93.6 vs
#   2x1024x4 91.0; 151936 16x160x8 late s2 86.4 vs 15x320x4 late 80.7 (s1 81.2); but odd rows
#   lost with 8 (50257 72-76 vs 2x800x4 84.2, before the warp-uniform checks), and so do rows
#   on lines that fill under 90 % of the x 8 shape (bf16 50176: 8x128x8 late 82.8 at 77 % vs
#   2x800x4 90.6; fp16 85.1 vs 92.0) - 50257 fills 77 % too, so lines_only may be fill alone;
#   131072 / 262144 / 524288 keep 4 x 1024 (91.8 / 90.7 / 84.6 vs 89.6 / 89.1 / 81.5). 15 CTAs
#   lost to 16 everywhere else in bf16 (65536 15x160x4 late 76.6, tenth run). bf16 2^20 (2 MB
#   rows) fits 16 x 512 x 16 (packed values, two exps, 96 B spill): 76.9 vs the wide kernel's
#   69.8 (late 71.5); fp16 spilled 312 B there and lost (55-60 vs 69.3).
#   Thirteenth run, the max on packed pairs (x 16 spills: bf16 0 B, fp16 16 B; x 8 110-122
#   registers): fp16 2^20 16x512x16 76.2 vs wide 72.2 (bf16 76.3), so x 16 is both dtypes'
#   (log_softmax's too, once its epilogue unpacked with get_again: bf16 77.9 / fp16 75.6 vs
#   62 on x 16 before, ~70 on wide); 151936 16x160x8 without late copies, one stage: bf16 91.0
#   / fp16 90.7 vs late s2 88.3 / 88.9 (the late s2 pick had won by 3 in bf16 before the packed
#   max; fp16 had preferred this by 1).
# Fourteenth run: fp32 rows past 16 x 320 x 16 (N > 327680) run in chunks (CHUNK_DEFAULT): 524288
# 90.2 vs the former rule 8 x <= 1024 in 8 or 16 CTAs (16x1024x8 late) 86.6.
# Fifteenth run: the 2-byte rule 16 x 512 x 16 in 16 CTAs (rows on lines, 2 MB: N = 2^20) gave way
# to the chunk kernel with the waiting chunk in registers (CHUNK_REG_DEFAULT): bf16 2^20 80.8 vs
# 76.1.
# Sixteenth run: fp16 / bf16 softmax keeps its exps rounded to T where fp32 exps do not fit (x 16:
# one exp per element, no spills), so the 16 x 160 x 8 rule (151936, rows on lines) became the same
# windows as 8 x 160 x 16, late: bf16 91.9 vs 90.1, fp16 91.2 vs 89.8 (one tune), and it moved
# ahead of 4 x 1024 in 2 or 4 CTAs: 131072 8x128x16 late 94.1 / 94.3 vs 4x1024x4 92.1 / 93.0
# (another tune; 65536 keeps 8x128x8 late 93.6 vs 8x64x16 late 92.9). With min_fill 0.9 it takes
# rows on lines of 88.5k-98.3k (96 threads), 118k-131k (128) and 147k-164k (160) 2-byte
# elements. 262144 / 524288 keep 4 x 1024 (x 16 best: 92.1 / 89.5 bf16 vs 93.8 / 89.6).
# fp32's one-CTA rule is 8 x <= 1024 rather than 16 x <= 512 (the same 128 KB per CTA): faster
# with rows that leave threads idle (fourth run: 151936 79 % vs 69 %, 50257 84 vs 81, 65536 88
# vs 85, 262144 equal).
# Seventeenth run: kernel 7b without its per-window read checks and 64-bit divisions (bf16 2^20
# 87.4 -> 92.0 %) beat the 16-CTA clusters: fp32 262144 chunks_reg 93.6 vs 16x256x16 late 91.0,
# bf16 / fp16 524288 93.0 / 91.7 vs 16x1024x4 90.2 / 88.8 (one tune), so the 16-CTA rules went
# and rows past 8 CTAs (fp32 N > 163840, 2-byte > 262144) run in chunks; 8 CTAs stay ahead
# in fp32 (151936 8x320x16 late 93.8 vs 92.9). In fp16 / bf16 every rule past 4 x 1024 x 4 but
# the x 16 one went: <= 512 x 4 in 8 or 15 CTAs had taken rows of 131k-246k at 78-84 % (200000:
# 15x448x4 late 77.5 / 78.3, 8x800x4 84.2 / 85.2, chunks_reg 86.4 / 86.9; odd 151937: 15x320x4
# 83.6 / 84.6, 8x608x4 79.2 / 80.5, chunks_reg 90.7 / 91.0). 262144 gives up a point (8x1024x4
# 93.6 / 93.0 vs chunks_reg 92.7 / 91.9).
# Twenty-second run (two tunes in one call, % of copy): fp32 rows that 8 CTAs of 1024 threads x 4
# vectors fill take them, late - 131072 8x1024x4 late 94.1 / 94.6 vs 8x256x16 late 93.2 / 93.4
# (the eleventh run: 93.5 vs 92.1) - but x 4 loses wherever its CTAs are smaller (65536 8x512x4
# late 90.1 / 89.9 vs 94.6 / 94.7; 50257 8x416x4 late 91.2 / 91.1 vs 92.9 / 93.0), so only rows
# that need CTAs of >= 992 threads (N 122881-131072 on lines; 128256 not measured).
# Twenty-third run (two tunes, fp16 / bf16): 2-CTA rows that need 608-800 threads x 4 take their
# next row's copies late with two rows in flight - 40000 2x640x4 late s2 94.0 / 94.0 vs 90.9 /
# 90.6, 44000 2x704x4 93.3-94.0 / 93.3-93.5 vs 91.1-91.7 / 91.0-91.2, 46000 94.1 / 94.9 vs 92.9 /
# 93.9, 50257 2x800x4 94.3 / 93.5-94.6 vs 92.7-93.3 / 92.5-93.7 (the eleventh and twenty-second
# runs: +1.2-1.6 and +0.7-0.8 in bf16), 50304 +0.2-0.6, 51200 -0.3 / -0.4 - but not 896-960
# threads (56000 2x896x4 late 92.3 vs 93.1, 60000 92.3 vs 92.6). Third tune: 38000 (608
# threads) late s2 92.8 / 92.3 vs 89.6 / 88.8, so from 608; rows that need 544-576 threads in 2
# CTAs run 4 CTAs of 288, late - 34000 4x288x4 late 92.5 / 92.2 vs 2x544x4 88.6 / 88.6, 36000
# 92.2-92.8 / 93.0-93.3 vs 88.9-89.3 / 89.0-89.8 (two tunes; late s2 there: 87.3-88.9).
# Twenty-fourth and twenty-fifth runs: one CTA a row (block x 8, then BLOCK_SLOTS_RULES, both
# checked before these rules) took every 2-byte row that 8 x <= 128 x 8 (rows on lines), 4 x 288
# x 4 and 2 x 608-800 x 4 late s2 held, at 95-97 % against their 92-94: those three rules went
# (no pick changed, N 2049-300000 checked), as did 16 x 96 x 16's rows (88.5k-98.3k on lines).
# Twenty-sixth run: kernel 2b at 256 threads took the odd rows of 20.5k-26.6k from the 2-byte
# one-CTA rule (<= 1024 x 4, 92-93.5 %, against 96-96.6): it went (only those picks changed, N
# 2049-300000).
# Twenty-seventh run: kernel 3b with its exps in T took the 2-byte rows of ~106.5k-163.8k (tune
# 93.7-95.3 % against 90.9-94.8); the x 16 rule (8 x <= 160, rows on lines) had no other rows
# and went (no pick changed, N 2049-300000 checked). 2-byte rows still here: the odd ones of
# ~57.3k-59.4k that neither block x 8 nor 512 x 8 + 6 takes (2 x 928-960 x 4).
# Twenty-ninth run: kernel 3b (first wave in phases) took the fp32 rows up to 131072, so the fp32
# 8 x 992-1024 x 4 rule had no rows left, nor had the one-CTA x 8 rule since kernel 2b (twenty-
# fifth run): both went, with the `least` field only the x 4 rule used (no pick changed, N
# 2049-300000 in three dtypes, rows on and off 16 bytes, checked).
PERSIST_SHAPES = {  # by itemsize
    4: (PersistShape(16, 320, (8,)),),
    2: (PersistShape(4, 1024, (2, 4)),),
}
# 2-byte CTAs of more than 512 threads issue their copies right after the local (max, sum), not
# late (tenth run: bf16 262144 8x1024x4 84.2 / 83.8 vs late 81-82; eleventh: 131072 4x1024x4
# 91.4 vs late 89.1).
LATE_MAX_THREADS = {2: 512}  # by itemsize; default: every cluster CTA issues late
PERSIST_DTYPES = (torch.float32, torch.float16, torch.bfloat16)  # fp64: correctness, not speed
# The pipelined persistent clusters (``pipe``, kernel 5b): each row's (max, sum) exchange overlaps
# the next row's reduction; PIPE_VPT vectors per thread (by itemsize), PIPE_CL CTAs.
# Instantiated for 8 and 16 CTAs and timed by bench/tune_long_rows.py, picked by no rule since
# the eleventh run: fp32 65536 pipe 8x128x16 s2 91.7 vs persist 8x128x16 late 94.4 once the
# persistent kernel's slots sat on lines (it had won 92.0 vs 88.0 with them off).
PIPE_CL = (8, 16)
PIPE_VPT = {4: (8, 16), 2: (4,)}
# Rows longer than the on-chip shapes hold: the persistent wide kernel, clusters of WIDE_CL[0]
# CTAs of 1024 threads, or WIDE_CL[1] when 8 CTAs' shared memory would keep under
# WIDE_MIN_KEPT of each chunk (the rest is read twice). H200, M*N = 2^28, % of copy, two calls:
# fp32 2^20 16x1024 keep 14 69.6 / 71.1 vs 8x1024 keep 14 (44 % kept) 64.5 / 64.2; bf16 2^20
# 8x1024 keep 14 (88 % kept) 67.7 / 67.6 vs 16x1024 67.8; fp16 68.1 vs 70.1. (Before the kernel
# was persistent, 16-CTA clusters lost badly: 41 % vs 61 % for bf16, one cluster launch a row.)
WIDE_CL = (8, 16)
# Rows in chunks (``chunks``, kernel 7): one CTA per chunk of threads x CHUNK_VPT vectors, the
# chunks' (max, sum) pairs through global memory, each chunk kept in shared memory until its row's
# last pair arrives (``lag`` steps later), ``ahead`` chunks in flight. No cluster: any row length
# whose chunks number at most lag * resident CTAs + 1.
CHUNK_VPT = (2, 4)
# ``chunks_reg`` (kernel 7b): lag 1 with the waiting chunk in registers, shared memory only for the
# ``ahead`` chunks in flight; CTAs of <= CHUNK_REG_MAX_THREADS threads (two chunks' values each).
# (Kernel 7c, one chunk in registers, lost at 61-68 %: branch exp/chunks-one, bench/NOTES.md.)
CHUNK_REG_VPT = (4, 8)
CHUNK_REG_MAX_THREADS = 512
WIDE_MIN_KEPT = 0.75
MAX_CTA_SHARED = 227 * 1024  # H100/H200: the most dynamic shared memory one CTA may take
WIDE_KEEP_BYTES = MAX_CTA_SHARED


def _fast_vpt_cap(dtype: torch.dtype) -> int:
    """Vectors per thread for cluster rows: 16 (fp32/fp64), 4 for 2-byte types - beyond
    32 fp16/bf16 elements per thread the unpacked fp32 copies spill (measured: 1.1-1.4 TB/s)."""
    return 4 if dtype.itemsize == 2 else 16


def pipe_vpts(dtype: torch.dtype) -> tuple[int, ...]:
    """Vectors per thread of the pipelined instantiations (PIPE_VPT)."""
    return PIPE_VPT[dtype.itemsize]


def block_max_threads(vpt: int) -> int:
    """CTA size limit of the warp / block / cluster kernels (``MaxThreads`` in
    row_softmax_kernels.cuh)."""
    return 512 if vpt >= 16 else 1024


def persist_max_threads(vpt: int, dtype: torch.dtype) -> int:
    """CTA size limit of the persistent kernels (``PersistThreads`` in row_softmax_kernels.cuh):
    512 where a thread keeps 64 or more elements in fp32 registers (fp32 x 16, fp16/bf16 x 8),
    else 1024."""
    return 512 if vpt * vec_width(dtype) >= 64 else 1024


def row_kernel_exprs(prefix: str) -> list[str]:
    """Every instantiation of the row-softmax family (row_softmax_kernels.cuh) under ``prefix``:
    fast_softmax.cu and log_softmax.cu declare the same list."""
    out = []
    for dt, t in zip(ALL_DTYPES, _T):
        big = _fast_vpt_cap(dt)
        out += [f"{prefix}_warp<{t}, {g}, {v}>" for g, v in FAST_WARP]
        out += [f"{prefix}_block<{t}, {v}>" for v in FAST_BLOCK_VPT]
        if dt in PERSIST_DTYPES:
            out += [f"{prefix}_{k}<{t}, {BLOCK_SLOTS_VPT}>" for k in SLOTS_KINDS]
            out += [f"{prefix}_{k}<{t}, {BLOCK_SLOTS_VPT}, {c}>" for c in SLOTS_CL
                    for k in ("cluster_slots", "persist_cluster_slots")]
        out += [f"{prefix}_cluster<{t}, {big}, {c}>" for c in FAST_CL]
        if dt in PERSIST_DTYPES:
            for v in PERSIST_VPT[dt.itemsize]:
                out += [f"{prefix}_persist<{t}, {v}>"]
                out += [f"{prefix}_persist_cluster<{t}, {v}, {c}>" for c in PERSIST_CL if c > 1]
            out += [f"{prefix}_persist_pipe<{t}, {v}, {c}>" for v in pipe_vpts(dt) for c in PIPE_CL]
        out += [f"{prefix}_wide<{t}, {c}>" for c in WIDE_CL]
        if dt in PERSIST_DTYPES:
            out += [f"{prefix}_chunks<{t}, {v}>" for v in CHUNK_VPT]
            out += [f"{prefix}_chunks_reg<{t}, {v}>" for v in CHUNK_REG_VPT]
    return out


@dataclass(frozen=True)
class FastConfig:
    """What fast_softmax (and log_softmax) launches for one (N, dtype): kernel kind and shape.

    kind: ``warp`` (``group`` lanes per row, several rows per block), ``block`` (a CTA per row),
    ``block_slots`` (a CTA per row - or, with ``cluster`` > 1, a cluster of that many - ``vpt``
    windows a thread in registers and ``slots`` more in shared memory), ``persist_slots``
    (block_slots on resident CTAs that loop over rows, each window refilled with the next row's
    once stored),
    ``cluster`` (``cluster`` CTAs per row, DSMEM reduction),
    ``persist`` (resident CTAs / clusters loop over rows, next row prefetched into shared memory;
    ``cluster`` = 1 is the single-CTA form), ``pipe`` (persistent clusters, ``stages`` rows in
    flight, each row's (max, sum) exchange overlapping the next row's reduction), ``wide``
    (``cluster`` CTAs per row, two passes) or ``chunks`` (persistent CTAs, one chunk of
    ``threads`` x ``vpt`` windows at a time, pairs through global memory; each chunk waits
    ``lag`` steps in shared memory for its row's (max, sum), ``ahead`` chunks in flight).
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
    lag: int = 1  # chunks: steps a chunk waits in shared memory for its row's (max, sum)
    ahead: int = 1  # chunks: chunks in flight into shared memory
    slots: int = 0  # block_slots: 16-byte windows per thread in shared memory

    def __post_init__(self):
        if self.stages not in (1, 2):
            raise ValueError(f"stages must be 1 or 2, not {self.stages}")
        if self.stages > 1 and self.kind not in ("persist", "pipe"):
            raise ValueError(f"stages apply to the persistent kernels, not {self.kind!r}")
        if self.kind == "chunks" and not (self.lag >= 1 and 0 <= self.ahead <= 7):
            raise ValueError(f"chunks need lag >= 1 and 0 <= ahead <= 7, not {self.lag}, "
                             f"{self.ahead}")
        if self.kind == "chunks_reg" and not (self.lag == 1 and 1 <= self.ahead <= 8
                                              and self.threads <= CHUNK_REG_MAX_THREADS):
            raise ValueError(f"chunks_reg needs lag 1, 1 <= ahead <= 8 and <= "
                             f"{CHUNK_REG_MAX_THREADS} threads, not {self.lag}, {self.ahead}, "
                             f"{self.threads}")
        if self.kind in SLOTS_KINDS and self.cluster not in (1, *SLOTS_CL):
            raise ValueError(f"{self.kind} runs on 1 CTA a row or clusters of {SLOTS_CL}, not "
                             f"{self.cluster}")
        if self.kind in SLOTS_KINDS and not (
                0 <= self.slots and self.shared_mem() <= MAX_CTA_SHARED):
            raise ValueError(f"{self.label()}: {self.shared_mem()} B of slots, more than a CTA "
                             f"may take ({MAX_CTA_SHARED} B)")

    def expr(self, t: str, prefix: str = "fast_softmax") -> str:
        if self.kind == "warp":
            return f"{prefix}_warp<{t}, {self.group}, {self.vpt}>"
        if self.kind == "block":
            return f"{prefix}_block<{t}, {self.vpt}>"
        if self.kind == "block_slots" and self.cluster > 1:
            return f"{prefix}_cluster_slots<{t}, {self.vpt}, {self.cluster}>"
        if self.kind == "persist_slots" and self.cluster > 1:
            return f"{prefix}_persist_cluster_slots<{t}, {self.vpt}, {self.cluster}>"
        if self.kind in SLOTS_KINDS:
            return f"{prefix}_{self.kind}<{t}, {self.vpt}>"
        if self.kind == "cluster":
            return f"{prefix}_cluster<{t}, {self.vpt}, {self.cluster}>"
        if self.kind == "persist":
            if self.cluster == 1:
                return f"{prefix}_persist<{t}, {self.vpt}>"
            return f"{prefix}_persist_cluster<{t}, {self.vpt}, {self.cluster}>"
        if self.kind == "pipe":
            return f"{prefix}_persist_pipe<{t}, {self.vpt}, {self.cluster}>"
        if self.kind in ("chunks", "chunks_reg"):
            return f"{prefix}_{self.kind}<{t}, {self.vpt}>"
        return f"{prefix}_wide<{t}, {self.cluster}>"

    def capacity(self) -> int:
        """Windows (16-byte slots) one row may span (wide: any row)."""
        if self.kind == "warp":
            return self.group * self.vpt
        if self.kind in ("wide", "chunks", "chunks_reg"):
            return 1 << 31
        if self.kind in SLOTS_KINDS:
            return self.cluster * self.threads * (self.vpt + self.slots)
        return self.threads * self.vpt * self.cluster

    def shared_mem(self) -> int:
        """Dynamic shared memory per CTA: the persistent kernels' prefetch slots, the wide
        kernel's kept windows."""
        if self.kind in ("persist", "pipe", "wide"):  # stages is 1 but for persist and pipe
            return self.threads * self.vpt * 16 * self.stages
        if self.kind in ("chunks", "chunks_reg"):
            return self.threads * self.vpt * 16 * self.chunk_sets()
        if self.kind in SLOTS_KINDS:
            return self.threads * self.slots * 16
        return 0

    def chunk_sets(self) -> int:
        """chunks: slot sets in shared memory - the chunk being reduced, ``lag`` waiting for
        their rows, ``ahead`` in flight; chunks_reg: only the ``ahead`` in flight."""
        return self.ahead if self.kind == "chunks_reg" else self.lag + 1 + self.ahead

    def label(self) -> str:
        if self.kind == "warp":
            return f"warp g{self.group}x{self.vpt}"
        if self.kind in ("cluster", "persist", "pipe"):
            late = " late" if self.late else ""
            stages = f" s{self.stages}" if self.stages > 1 else ""
            return f"{self.kind} {self.cluster}x{self.threads}x{self.vpt}{late}{stages}"
        if self.kind == "wide":
            return f"wide {self.cluster}x{self.threads} keep {self.vpt}"
        if self.kind == "chunks":
            return f"chunks {self.threads}x{self.vpt} lag {self.lag} ahead {self.ahead}"
        if self.kind == "chunks_reg":
            return f"chunks_reg {self.threads}x{self.vpt} ahead {self.ahead}"
        if self.kind in SLOTS_KINDS:
            cl = f"{self.cluster}x" if self.cluster > 1 else ""
            return f"{self.kind} {cl}{self.threads}x{self.vpt}+{self.slots}"
        return f"{self.kind} {self.threads}x{self.vpt}"


def vector_windows(n: int, dtype: torch.dtype, aligned: bool = True) -> int:
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


def rows_on_lines(n: int, dtype: torch.dtype, aligned: bool = True,
                  line: bool | None = None) -> bool:
    """``line`` if given, else whether contiguous rows of ``n`` start on 128-byte lines:
    ``aligned`` (rows on 16 bytes) and N * itemsize a multiple of 128."""
    return (aligned and n * dtype.itemsize % LINE_BYTES == 0) if line is None else line


def line_windows(n: int, dtype: torch.dtype, aligned: bool = True,
                  line: bool | None = None) -> int:
    """16-byte windows a row spans in the persistent kernels: ceil(n / W) for rows that start on
    a 128-byte line, else up to 7 more (a head of up to 127 bytes). ``line`` (rows on lines)
    defaults to ``aligned`` (rows on 16 bytes) with N * itemsize a multiple of 128."""
    w = vec_width(dtype)
    line = rows_on_lines(n, dtype, aligned, line)
    return -(-n // w) if line else -(-(n + LINE_BYTES // dtype.itemsize - 1) // w)


# The kinds whose windows start at the row's 128-byte line (line heads): they copy whole aligned
# 16-byte slots with cp.async, so input and output rows must share their 16-byte phase.
LINE_HEAD_KINDS = ("persist", "pipe", "chunks", "chunks_reg", "block_slots", "persist_slots")


def config_windows(cfg: "FastConfig", n: int, dtype: torch.dtype, aligned: bool,
                 line: bool) -> int:
    """Windows a row of ``n`` spans in ``cfg``'s kernel (line heads: LINE_HEAD_KINDS)."""
    if cfg.kind in LINE_HEAD_KINDS:
        return line_windows(n, dtype, line=line)
    return vector_windows(n, dtype, aligned)


def row_chunks(cfg: "FastConfig", n: int, dtype: torch.dtype, line: bool) -> int:
    """chunks: the chunks of ``cfg.threads * cfg.vpt`` windows a row of ``n`` is cut into (line
    heads, as the persistent kernels)."""
    return -(-line_windows(n, dtype, line=line) // (cfg.threads * cfg.vpt))


def chunks_fit(chunks: int, lag: int, groups: int) -> bool:
    """Whether a row of ``chunks`` chunks can run over ``groups`` resident CTAs waiting ``lag``
    steps: every chunk of a row must be reduced by the step a CTA waits for the row
    (row_softmax_kernels.cuh, kernel 7), i.e. chunks <= lag * groups + 1."""
    return chunks <= lag * groups + 1


def persist_config(nw: int, vpt: int, cluster: int, late: bool = False,
                   stages: int = 1) -> FastConfig:
    """The persistent shape holding ``nw`` windows with ``vpt`` per thread over ``cluster``
    CTAs: the multiple of 32 threads that just covers the row."""
    return FastConfig("persist", threads=round32(-(-nw // (vpt * cluster))), vpt=vpt,
                      cluster=cluster, late=late and cluster > 1, stages=stages)


def block_slots_config(nwl: int, threads: int, vpt: int = BLOCK_SLOTS_VPT,
                       cluster: int = 1, kind: str = "block_slots") -> FastConfig:
    """Kernel 2b (3b: ``cluster`` > 1 CTAs a row; 2c: ``kind`` ``persist_slots``) for a row of
    ``nwl`` windows (line heads: :func:`line_windows`) on CTAs of ``threads``: ``vpt`` windows a
    thread in registers, the rest in as few slots a thread as hold them."""
    per = cluster * threads
    return FastConfig(kind, threads=threads, vpt=vpt, cluster=cluster,
                      slots=max(0, -(-(nwl - per * vpt) // per)))


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


# The default chunk shape, for rows beyond every PERSIST_SHAPES rule (it replaced the wide kernel
# there). H200, M*N = 2^28, % of copy (fourteenth run, bench/tune_long_rows.py): fp32 2^20 1024 x 4
# lag 1 ahead 1 87.3 vs wide 72.9 (no other chunk shape over 82: the step's latency, not its
# bytes, sets the pace, so the largest chunk wins); bf16 2^20 76.5 vs x 16 76.0 (two exps per
# element: the MUFU, so 2-byte rows that fit x 16 kept it, until CHUNK_REG_DEFAULT below); 262144
# fp32 91.1 vs 91.4, bf16 76.4 vs 93.8 (the on-chip rules stay).
CHUNK_DEFAULT = FastConfig("chunks", threads=1024, vpt=4, lag=1, ahead=1)
# Rows of at most CHUNK_REG_MAX_CHUNKS chunks of 512 x 8 vectors (64 KB) run kernel 7b instead:
# the waiting chunk in registers, so a 64 KB chunk is in flight beside it (kernel 7 fits one 64 KB
# set per step in flight, reduced and waiting). H200, M*N = 2^28, % of copy (fifteenth run,
# bench/tune_long_rows.py): fp32 524288 (32 chunks) 92.7 vs CHUNK_DEFAULT 90.9, 2^20 (64) 90.2 vs
# 87.3, but 2^21 (128 chunks: a CTA waits on rows that the whole grid is still reducing) 74.6 vs
# 82.4; bf16 2^20 (32) 80.8 vs x 16 76.1, 2^21 (64) 79.7 vs 75.2 (ahead 2: 79.8); bf16 524288
# 81.3 vs persist 4 x 1024 x 4 89.5 (that rule stays first); fp16 2^20 75.9 vs x 16's 76.2-76.4
# (a tie: one rule for both). Four vectors per thread lost everywhere (56-70: 32 KB chunks, the
# step's fixed cost twice as often). Sixteenth run: fp16 / bf16 keep their exps rounded to T here
# (one exp per element): bf16 2^20 87.5-87.8 (two tunes), fp16 85.6-86.4; 524288 88.1-88.3 / 86.5-
# 87.3 against persist 4 x 1024 x 4's 88.6-89.7 (that rule stays). 1024 threads x 4 vectors (the
# same 64 KB chunks, 32 warps; 64 registers, 16-40 B spills) lost: bf16 2^20 80.8, fp32 75.8
# (branch exp/chunks-reg-1024). Seventeenth run, the step without per-window read checks and
# 64-bit divisions: 2^20 fp32 / bf16 / fp16 91.3 / 92.0 / 91.1, 524288 fp32 93.2 (A/B against the
# kernel before, bench/ab_kernels.py); ahead 2 91.3 / 91.1 (bf16 below ahead 1 again); it now also
# takes rows past 8-CTA clusters (PERSIST_SHAPES).
CHUNK_REG_DEFAULT = FastConfig("chunks_reg", threads=512, vpt=8, ahead=1)
CHUNK_REG_MAX_CHUNKS = 65  # 64 measured; + 1 for the same rows off 128-byte lines


def chunk_config(n: int, dtype: torch.dtype, line: bool) -> FastConfig:
    """The chunk kernel for a row of ``n`` past every persistent rule: CHUNK_REG_DEFAULT while the
    row has at most CHUNK_REG_MAX_CHUNKS of its chunks - its CTA sized down to the multiple of 32
    threads that cuts the row into as many chunks, all (nearly) full - else CHUNK_DEFAULT.

    Sized down (eighteenth H200 run, bf16, % of copy, 512 x 8 -> fitted): 135000 82.4 -> 85.3
    (448), 140000 86.1 -> 87.6 (448), 170000 79.5 -> 80.6, 200000 87.3 -> 89.8 (448), 245760 91.3
    -> 92.5 (480); 150000 / 180000 +0.2: never slower. The step's cost is nearly fixed, so a
    row's last, mostly empty chunk cost a whole step."""
    d = CHUNK_REG_DEFAULT
    chunks = row_chunks(d, n, dtype, line)
    if chunks > CHUNK_REG_MAX_CHUNKS:
        return CHUNK_DEFAULT
    threads = round32(-(-line_windows(n, dtype, line=line) // (chunks * d.vpt)))
    if threads >= d.threads:
        return d
    return FastConfig("chunks_reg", threads=threads, vpt=d.vpt, ahead=d.ahead)


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
    * fp16/bf16 rows of 2049-8192 windows whose CTA of 8 vectors a thread has a size in
      BLOCK_X8_THREADS (:func:`block_x8_threads`; rows on 16 bytes: N 16385-32768 and ~55.3k-65536,
      odd rows fewer): ``block`` x 8, any phase;
    * longer, when input and output rows share their 16-byte phase (``vec``) and the dtype is
      fp32/fp16/bf16: ``block_slots`` where BLOCK_SLOTS_RULES take the row (a CTA of 512 or
      1024 threads x 8 vectors and at most 5-6 slots a thread: fp32 N 32769-53248, fp16/bf16
      32769-57344 and 65537-106496, in line windows; 256 threads: the odd fp16/bf16 rows of
      ~20.5K-26.6K that block x 8 leaves; a cluster of 2 CTAs a row, kernel 3b: fp16/bf16
      ~106.5K-163.8K on 512 x 8 + 6-12, fp32 ~53.2K-81.9K on 512 x 8 + 5-12 and ~81.9K-131072
      on 1024 x 8 + 1-8; on 4 CTAs: fp16/bf16 ~213K-262144 on 512 x 8 + 6-8), else
      ``persist``, the first PERSIST_SHAPES rule that holds the row - fp32: <= 320 x 16 in 8
      CTAs; fp16/bf16: <= 1024 x 4 in 2 or 4 (the odd rows of ~57.3K-59.4K) - threads
      = the multiple of 32 that just covers the row, next row's copies issued late (2-byte CTAs:
      only up to LATE_MAX_THREADS);
    * longer rows of those dtypes (fp32 > 163840, 2-byte > 163840): ``chunks_reg``,
      CHUNK_REG_DEFAULT (512 threads x 8 vectors a chunk, the waiting chunk in registers, one
      chunk ahead; the CTA sized down so that the row's chunks come out full, :func:`chunk_config`)
      for rows of <= CHUNK_REG_MAX_CHUNKS chunks (N <= 2^20 fp32, 2^21 2-byte),
      else ``chunks``, CHUNK_DEFAULT (1024 threads x 4 vectors a chunk, lag 1, one chunk ahead);
      the launcher falls back to ``wide`` where a row has more chunks than resident CTAs + 1;
    * otherwise (fp64, misaligned phase): a one-row cluster of up to 16 CTAs
      with 16 vectors x <= 512 threads (fp32/fp64) or 4 x <= 1024 (fp16/bf16), else ``wide``
      (persistent clusters of 8 CTAs of 1024 threads, 16 where 8 would keep under 3/4 of each
      CTA's chunk; two passes, up to 227 KB per CTA kept in shared memory).

    ``aligned``: rows start on 16-byte boundaries (otherwise one extra window is budgeted).
    ``vec``: input and output rows share their 16-byte phase (the persistent kernels need it).
    ``line``: rows start on 128-byte lines (default: ``aligned`` and N * itemsize a multiple of
    128); otherwise the persistent shapes budget up to 7 more windows (:func:`line_windows`).
    """
    nw = vector_windows(n, dtype, aligned)
    es = dtype.itemsize
    if nw <= WARP_MAX_WINDOWS:
        if nw < 32:
            vpt = 1 if nw <= 4 else 2
            g = max(4, next_pow2(-(-nw // vpt)))
        else:
            g, vpt = 32, next_pow2(-(-nw // 32))
        return FastConfig("warp", threads=128, vpt=vpt, group=g)
    persist_ok = vec and dtype in PERSIST_DTYPES
    if es == 2 and nw > PERSIST_MIN_NW[2] and (x8 := block_x8_threads(nw, aligned)):
        return FastConfig("block", threads=x8, vpt=8)
    block_max = PERSIST_MIN_NW[es] if persist_ok else 1024 * (4 if es == 2 else 8)
    if nw <= block_max:
        vpt = 2 if (nw <= 256 and es >= 4) else 4 if (nw <= 2048 or es == 2) else 8
        return FastConfig("block", threads=round32(-(-nw // vpt)), vpt=vpt)
    if persist_ok:
        line = rows_on_lines(n, dtype, aligned, line)
        nwl = line_windows(n, dtype, aligned, line)
        for threads, above, most, cl in BLOCK_SLOTS_RULES[es]:
            if above < nwl <= most:
                return block_slots_config(nwl, threads, cluster=cl)
        for rule in PERSIST_SHAPES[es]:
            if rule.lines_only and not line:
                continue
            most = min(rule.most, persist_max_threads(rule.vpt, dtype))
            shape = cluster_shape(nwl, rule.vpt, most, rule.clusters)
            if shape and nwl >= rule.min_fill * shape[0] * shape[1] * rule.vpt:
                late = rule.late
                if late is None:
                    late = shape[1] <= LATE_MAX_THREADS.get(es, 1024)
                return persist_config(nwl, rule.vpt, shape[0], late=late, stages=rule.stages)
        return chunk_config(n, dtype, line)
    big = _fast_vpt_cap(dtype)
    shape = cluster_shape(nw, big, 1024 if big <= 8 else 512, FAST_CL)
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
# N = 32768: persist 1x1024x4 83 % vs block 1024x4 65 %), then block x 8 at BLOCK_X8_THREADS.
PERSIST_MIN_NW = {8: 1 << 30, 4: 8192, 2: 2048}

# fp16 / bf16 rows of 2049-8192 windows: one CTA a row of 8 vectors a thread (64 registers, none
# spilled since the twenty-fourth run), for the CTA sizes (threads, ranges inclusive) where it
# beat every persistent shape. H200, M*N = 2^28, % of copy, fp16 / bf16 softmax (bench/NOTES.md,
# twenty-fourth run): rows on 16 bytes 320-512 threads 96-99 against the persistent picks' 89-95,
# 896-1024 95.5-97 against 93-95; odd rows 288-320 and 448-512 96-98, 960-1024 94-95 against
# 92-94, but 352-416 threads 86-93 and 896-928 90-94 against 92-95 there: those stay persistent.
# CTAs of 544-864 threads (one an SM, < 112 KB in flight) read 84-94 %: persistent too.
BLOCK_X8_THREADS = {  # by rows on 16 bytes
    True: ((32, 512), (896, 1024)),
    False: ((32, 320), (448, 512), (960, 1024)),
}


# Rows past the one-CTA shapes above, when input and output share their 16-byte phase: one CTA a
# row of ``threads`` x 8 vectors in registers and the rest in shared-memory slots (kernel 2b,
# ``block_slots``), for rows of more than ``above`` and at most ``most`` line windows - at most 5
# or 6 slots a thread (by itemsize). H200, M*N = 2^28, % of copy, bench/tune_long_rows.py (NOTES,
# twenty-fifth run): fp16 / bf16 512 x 8 + 1-5 slots (two CTAs an SM) 36000 96.3 / 96.7, 40000
# 97.1 / 96.1, 44000 95.8 / 96.4, 48000 96.6 / 95.9, 50257 95.1 / 95.4, 53001 95.0 / 94.6 against
# the persistent picks' 92.0-95.1; 1024 x 8 + 2 / + 5: 80000 95.3 / 95.8, 100000 93.1 / 92.2
# against 82-85 (4 x 640-800 x 4). fp32 1024 x 8 + 2 / + 5: 40000 96.9, 50257 95.7 against 92.8 /
# 92.3 (8 x 96-128 x 16, late). More slots a thread lose (then three shared-memory reads each): 512
# x 8 + 12 92.8-93.5, + 17 80-81, fp32 1024 x 8 + 8 94.3 vs 94.5 (65536), 2-byte 1024 x 8 + 8
# 89.5-91.3 vs 93.4-94.8 (131072); rows of 53K-65K keep block x 8 (56000 896 x 8 96.3 / 94.7
# against 512 x 8 + 6 94.8 / 93.7); but odd rows there take 512 x 8 + 6 (57001 94.6 / 94.8 vs
# 2x896x4 93.0 / 92.8: second call). 98304 (rows on lines) 1024 x 8 + 4 93.6 / 93.7 vs the x 16
# rule's 8x96x16 s2 94.2 / 93.6: level.
# Twenty-sixth run (tune, softmax and log_softmax, fp16 / bf16): the odd 2-byte rows that block x
# 8 leaves below 32768 (CTAs of 352-416 threads: N ~20.5k-26.6k, not a multiple of 8) run 256 x 8
# + 3-6 (four CTAs an SM by registers) - 22001 256 x 8 + 3 96.0 / 96.1 vs persist 1x704x4 93.5 /
# 93.1, 24001 + 4 96.6 / 95.8 vs 1x768x4 92.4 / 91.8 (log_softmax the same) - the only rows the
# 2-byte one-CTA persistent rule (<= 1024 x 4) still took: it went.
# Twenty-seventh run (A/B in one process, softmax): kernel 3b keeping its 2-byte exps rounded to
# T (one exp an element) on 2 x 512 x 8 + 8-11: bf16 128256 94.6 / 131072 94.0 / fp16 131072
# 94.0 / bf16 151936 93.8 against kernel 5's 93.7 / 94.1 / 93.6 / 92.3 (log_softmax, call 1:
# 94.3 / 95.2 / 93.5 / 93.7 against 92.8 / 94.7 / 93.5 / 91.7): the fp16 / bf16 rows past the
# 1024 x 8 + 5 rule up to 2 x 512 x 8 + 12 (N ~106.5K-163.8K) take it.
# Twenty-eighth run: kernel 3b keeps its fp32 softmax exps too (one exp an element, exact in fp32;
# A/B in one process: 2 x 1024 x 8 + 8 at 131072 93.0 -> 94.0, 2 x 512 x 8 + 8 at 65536 95.2 ->
# 95.4; log_softmax byte-identical). Tune (softmax / log_softmax, % of copy): fp32 rows past the
# 1024 x 8 + 13 rule on 2 x 512 x 8 + 6-12 - 54001 95.7 / 95.5, 58000 95.3 / 95.2, 61001 96.1 /
# 96.2, 65536 95.3 / 95.5, 70001 95.4 / 95.6, 75000 94.8 / 94.8, 81920 94.9 / 95.2 - against
# kernel 5 (8 x 128-160 x 16 late) 91.8-94.4 / 90.2-92.4; then 2 x 1024 x 8 + 3 / + 5 at 90000 /
# 100000 94.9 / 95.5 and 93.5 / 94.3 against 93.4 / 91.5 and 93.2 / 91.9. At 131072 (+ 8) level
# with kernel 5 (94.0 vs 94.2): fp32 rows past 2 x 1024 x 8 + 5 (N ~106.5K) kept kernel 5.
# Twenty-ninth run: kernels 2b / 3b start their first wave in phases (cuda_variants
# STAGGERED_KINDS: kernel 3b's fixed cost a call 12-15 -> 6-8.4 us). Tune (softmax, % of copy): fp32
# 128256 / 131072 on 2 x 1024 x 8 + 8 95.7 / 96.2 against kernel 5's 94.5 / 95.1 (151936: + 11
# level, 94.8 / 94.8), so fp32 rows up to 2 x 1024 x 8 + 8 (N 131072) take kernel 3b; 2-byte
# 229376 / 262144 on 4 x 512 x 8 + 6 / + 8 bf16 93.0 / 94.7, fp16 93.0 / 95.0 against
# chunks_reg's 92.6 / 94.0, 92.5 / 94.6 (196608 on + 4: bf16 90.1 against 90.9), so 2-byte rows
# past 4 x 512 x 8 + 5 up to + 8 (N ~213K-262144) take kernel 3b on 4 CTAs.
class SlotsRule(NamedTuple):
    threads: int
    above: int  # line windows (line_windows): rows of more ...
    most: int  # ... and at most this many
    cluster: int = 1  # CTAs a row (kernel 3b past 1)


BLOCK_SLOTS_RULES = {  # by itemsize
    4: (SlotsRule(1024, 8192, 1024 * 13), SlotsRule(512, 1024 * 13, 1024 * 20, cluster=2),
        SlotsRule(1024, 1024 * 20, 2048 * 16, cluster=2)),
    2: (SlotsRule(256, 2048, 256 * 14), SlotsRule(512, 4096, 512 * 14),
        SlotsRule(1024, 8192, 1024 * 13), SlotsRule(512, 1024 * 13, 1024 * 20, cluster=2),
        SlotsRule(512, 2048 * 13, 2048 * 16, cluster=4)),
    8: (),
}


def block_x8_threads(nw: int, aligned: bool = True) -> int:
    """The CTA size of 8 vectors a thread that holds a row of ``nw`` 16-byte windows, where that
    CTA runs fast (fp16/bf16: BLOCK_X8_THREADS; ``aligned``: rows start on 16 bytes), else 0."""
    threads = round32(-(-nw // 8))
    return threads if any(lo <= threads <= hi for lo, hi in BLOCK_X8_THREADS[aligned]) else 0
