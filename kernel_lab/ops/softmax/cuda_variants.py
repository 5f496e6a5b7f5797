"""Launchers for the hand-written CUDA C++ softmax kernels in ``cuda_src/``.

Each variant is named after its file (``cuda_src/online_softmax.cu`` -> ``"online_softmax"``)
and launches through :mod:`kernel_lab.cuda.sources` with the row-kernel convention. The ladder,
simple -> fast: naive -> block -> warp -> online -> vec, then ``fast_softmax`` (its per-(N, dtype)
dispatch is ``fast_softmax_config``) and the fused backward.

Launch-shape choices (threads per row, registers per thread) are plain functions of (N, dtype),
exposed as ``*_config`` so benchmarks and notes can print exactly what ran: the fast family's
and vec_softmax's in :mod:`kernel_lab.cuda.rowkernels.forward_config`, the fused backward's in
:mod:`kernel_lab.cuda.rowkernels.backward_config`; the family's launchers in
:mod:`kernel_lab.cuda.rowkernels.launch`.
"""

from __future__ import annotations

import functools

import torch

from kernel_lab.core.registry import registrar
from kernel_lab.core.rows import as_rows, normalize_dim, per_row
from kernel_lab.cuda.archs import device_arch
from kernel_lab.cuda.interop import i32
from kernel_lab.cuda.rowkernels.backward_config import (
    BACKWARD_CL,
    backward_chunk_instantiations,
    backward_config,
    backward_persist_instantiations,
)
from kernel_lab.cuda.rowkernels.forward_config import VPT, row_kernel_exprs, vec_config
from kernel_lab.cuda.rowkernels.launch import (
    RowKernels,
    backward_launch,
    backward_shape,
    fast_choice,
    fast_launch,
    fast_shape,
    fast_shape_missing,
)
from kernel_lab.cuda.sources import (
    ALL_DTYPES,
    cdiv,
    ctype,
    cuda_source,
    device_index,
    launch_rows,
    next_pow2,
    same_vector_phase,
    vec_aligned,
    vec_width,
)

cuda_variant = registrar(op="softmax", backend="cuda", dtypes=ALL_DTYPES)
_T = [ctype(dt) for dt in ALL_DTYPES]
WARP_EPT = (1, 2, 4, 8, 16, 32)  # elements per lane: rows up to 32 * 32 = 1024
WARP_MAX_N = 32 * WARP_EPT[-1]

NAIVE = cuda_source("naive_softmax.cu", [f"naive_softmax<{t}>" for t in _T])
BLOCK = cuda_source("block_softmax.cu", [f"block_softmax<{t}>" for t in _T])
WARP = cuda_source("warp_softmax.cu", [f"warp_softmax<{t}, {e}>" for t in _T for e in WARP_EPT])
ONLINE = cuda_source("online_softmax.cu", [f"online_softmax<{t}>" for t in _T])
VEC = cuda_source(
    "vec_softmax.cu",
    [f"vec_softmax<{t}, {v}>" for t in _T for v in VPT] + [f"vec_softmax_stream<{t}>" for t in _T],
)
BACKWARD = cuda_source(
    "fused_softmax_backward.cu",
    [f"fused_softmax_backward<{t}, {v}>" for t in _T for v in VPT]
    + [f"fused_softmax_backward_cluster<{ctype(d)}, {4 if vec_width(d) == 8 else 8}, {c}>"
       for d in ALL_DTYPES for c in BACKWARD_CL]
    + [f"fused_softmax_backward_persist<{ctype(d)}, {v}, {c}>"
       for d, v, c in backward_persist_instantiations()]
    + [f"fused_softmax_backward_chunks<{ctype(d)}, {v}>"
       for d, v in backward_chunk_instantiations()]
    + [f"fused_softmax_backward_stream<{t}>" for t in _T],
)


def _row_threads(n: int, per_thread: int = 8) -> int:
    """Threads for a block-per-row kernel: ~per_thread elements each, 32..1024."""
    return min(1024, max(32, next_pow2(cdiv(n, per_thread))))


def _n(x: torch.Tensor, dim: int) -> int:
    return x.shape[normalize_dim(dim, x.dim())] if x.dim() else 0


# -- 1. naive -----------------------------------------------------------------------------------
@cuda_variant(
    "naive_softmax",
    description="one thread per row, three uncoalesced passes over global memory (baseline)",
    source="cuda_src/naive_softmax.cu",
)
@per_row
def naive_softmax(out, x2d):
    m = out.shape[0]
    launch_rows(NAIVE, f"naive_softmax<{ctype(x2d.dtype)}>", out, (x2d,),
                grid=cdiv(m, 128), block=128)


# -- 2. block per row ---------------------------------------------------------------------------
@cuda_variant(
    "block_softmax",
    description="one block per row, shared-memory reductions, three coalesced passes",
    source="cuda_src/block_softmax.cu",
)
@per_row
def block_softmax(out, x2d):
    m, n = out.shape
    launch_rows(BLOCK, f"block_softmax<{ctype(x2d.dtype)}>", out, (x2d,),
                grid=m, block=_row_threads(n))


# -- 3. warp per row ----------------------------------------------------------------------------
def _warp_limit(x: torch.Tensor, dim: int = -1) -> str | None:
    n = _n(x, dim)
    if n > WARP_MAX_N:
        return f"row length {n} > {WARP_MAX_N}: a row must fit one warp's registers (32 x 32)"
    return None


def warp_softmax_config(n: int) -> int:
    """Elements per lane for a row of ``n``: the smallest EPT with 32 * EPT >= n."""
    return min(e for e in WARP_EPT if 32 * e >= n)


@cuda_variant(
    "warp_softmax",
    description="one warp per row, row in registers, shuffle reductions (N <= 1024)",
    source="cuda_src/warp_softmax.cu",
    check=_warp_limit,
)
@per_row
def warp_softmax(out, x2d):
    m, n = out.shape
    ept = warp_softmax_config(n)
    launch_rows(WARP, f"warp_softmax<{ctype(x2d.dtype)}, {ept}>", out, (x2d,),
                grid=cdiv(m, 4), block=128)


# -- 4. online (max, sum) -------------------------------------------------------------------------
@cuda_variant(
    "online_softmax",
    description="single online (max, sum) pass + one write pass; any N, stride, alignment",
    source="cuda_src/online_softmax.cu",
)
@per_row
def online_softmax(out, x2d):
    m, n = out.shape
    launch_rows(ONLINE, f"online_softmax<{ctype(x2d.dtype)}>", out, (x2d,),
                grid=m, block=_row_threads(n))


# -- 5. row on chip, 16-byte vectors (shape: fast_config.vec_config) -----------------------------


@cuda_variant(
    "vec_softmax",
    description="row kept in registers, 16-byte loads/stores, one read + one write "
    "(scalar fallback when misaligned; streaming two-pass beyond 128 KB rows)",
    source="cuda_src/vec_softmax.cu",
)
@per_row
def vec_softmax(out, x2d):
    m, n = out.shape
    threads, vpt = vec_config(n, x2d.dtype)
    t = ctype(x2d.dtype)
    expr = f"vec_softmax<{t}, {vpt}>" if vpt else f"vec_softmax_stream<{t}>"
    ok = i32(int(vec_aligned(x2d, out)))
    launch_rows(VEC, expr, out, (x2d,), grid=m, block=threads, extra=(ok,))


# -- backward -----------------------------------------------------------------------------------
@cuda_variant(
    "fused_softmax_backward",
    op="softmax_backward",
    description="y and dy kept in registers (16-byte loads): read once, dx written once",
    source="cuda_src/fused_softmax_backward.cu",
)
@per_row(inputs=2)
def fused_softmax_backward(dx, y2d, dy2d):
    aligned = vec_aligned(y2d, dy2d, dx)
    phase = aligned or bool(same_vector_phase(dx, y2d, dy2d))
    cfg = backward_config(dx.shape[1], y2d.dtype, aligned, phase,
                          device_arch(device_index(dx)))
    backward_launch(dx, y2d, dy2d, cfg, aligned, phase=phase, kernels=BACKWARD_KERNELS)


fused_softmax_backward.launch_shape = functools.partial(backward_shape,
                                                      prefix="fused_softmax_backward")


# The row-kernel family, instantiated with the softmax epilogue (forward and backward).
FAST = cuda_source("fast_softmax.cu", row_kernel_exprs("fast_softmax"))
FAST_KERNELS = RowKernels(FAST, "fast_softmax")
BACKWARD_KERNELS = RowKernels(BACKWARD, "fused_softmax_backward")


def _shape_on_this_gpu(x: torch.Tensor, dim: int = -1) -> str | None:
    """None, or why no fast-kernel shape holds these rows on x's GPU (launch.fast_shape_missing)."""
    return fast_shape_missing(as_rows(x, dim)[0]) if x.numel() and x.dim() else None


@cuda_variant(
    "fast_softmax",
    description="speed-of-light dispatch per (N, dtype): lane groups / CTA / CTA + shared-memory "
    "slots / persistent prefetching CTAs or clusters (DSMEM) / chunks / wide, rows on chip with "
    "16-byte aligned windows (see fast_softmax_config)",
    source="cuda_src/fast_softmax.cu",
    check=_shape_on_this_gpu,
)
@per_row
def fast_softmax(out, x2d):
    cfg, phase = fast_choice(out, x2d)
    fast_launch(out, x2d, cfg, phase, FAST_KERNELS)


fast_softmax.launch_shape = functools.partial(fast_shape, prefix="fast_softmax")
