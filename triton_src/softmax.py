"""Softmax kernels in Triton: forward (whole row, or tiled online) and backward.

Conventions shared by every kernel here: the input is (M, N) with unit column stride and a row
stride in elements; the output is contiguous (M, N). Accumulation is fp32 (fp64 for fp64 input).
-inf entries give 0, an all -inf row gives NaN, NaN propagates - exactly like torch.softmax.
"""

import triton
import triton.language as tl

from .rows import load_row_block, online_row_stats, row_block, to_acc


@triton.jit
def softmax_fused_kernel(
    out_ptr, x_ptr, M, N, x_row_stride,
    BLOCK_N: tl.constexpr, ROWS: tl.constexpr, IS_FP64: tl.constexpr,
):
    """Whole rows in registers: program p owns rows [p*ROWS, p*ROWS + ROWS), all N columns.

    One read and one write per element. BLOCK_N = next_pow2(N) >= N, tail lanes masked (-inf in,
    no store). ROWS > 1 packs several narrow rows into one program so a program still moves
    a few KB. Cost: 2*M*N*elem bytes; registers hold ROWS*BLOCK_N values (spills past ~64K).
    """
    x, mask, out_offsets = load_row_block(x_ptr, M, N, x_row_stride, ROWS, BLOCK_N, IS_FP64)
    m = tl.max(x, axis=1)
    e = tl.where(mask, tl.exp(x - m[:, None]), 0.0)
    y = e / tl.sum(e, axis=1)[:, None]
    tl.store(out_ptr + out_offsets, y.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def softmax_online_kernel(
    out_ptr, x_ptr, M, N, x_row_stride,
    BLOCK_N: tl.constexpr, IS_FP64: tl.constexpr,
):
    """Any row length: program p owns row p and walks it in BLOCK_N tiles, twice.

    Pass 1 is :func:`online_row_stats` (running (max, sum) per lane). Pass 2 re-reads each tile
    and writes exp(x - m) / s. Cost: 2 reads + 1 write per element (the second read often hits
    L2 for rows up to a few MB).
    """
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * x_row_stride
    o_row = out_ptr + row * N
    cols = tl.arange(0, BLOCK_N)
    row_max, row_sum = online_row_stats(x_row, N, BLOCK_N, IS_FP64)
    for start in range(0, N, BLOCK_N):
        c = start + cols
        x = to_acc(tl.load(x_row + c, mask=c < N, other=-float("inf")), IS_FP64)
        y = tl.exp(x - row_max) / row_sum
        tl.store(o_row + c, y.to(out_ptr.dtype.element_ty), mask=c < N)


@triton.jit
def softmax_backward_kernel(
    dx_ptr, y_ptr, dy_ptr, M, N, y_row_stride, dy_row_stride,
    BLOCK_N: tl.constexpr, ROWS: tl.constexpr, IS_FP64: tl.constexpr,
):
    """dx = y * (dy - sum(y * dy)).

    When BLOCK_N >= N (the launcher's choice up to 16K columns) program p owns rows
    [p*ROWS, p*ROWS + ROWS), each one tile: y and dy are read once, dx written once
    (3*N*elem bytes per row); ROWS > 1 packs narrow rows so a program still moves a few KB (as
    softmax_fused_kernel). Longer rows: program p owns row p (ROWS = 1) in BLOCK_N tiles and
    reads y, dy twice.
    """
    if BLOCK_N >= N:
        r, c, mask = row_block(M, N, ROWS, BLOCK_N)
        y = to_acc(tl.load(y_ptr + r * y_row_stride + c, mask=mask, other=0.0), IS_FP64)
        dy = to_acc(tl.load(dy_ptr + r * dy_row_stride + c, mask=mask, other=0.0), IS_FP64)
        dx = y * (dy - tl.sum(y * dy, axis=1)[:, None])
        tl.store(dx_ptr + r * N + c, dx.to(dx_ptr.dtype.element_ty), mask=mask)
    else:
        row = tl.program_id(0).to(tl.int64)
        cols = tl.arange(0, BLOCK_N)
        if IS_FP64:
            acc = tl.zeros([BLOCK_N], tl.float64)
        else:
            acc = tl.zeros([BLOCK_N], tl.float32)
        for start in range(0, N, BLOCK_N):
            c = start + cols
            y = to_acc(tl.load(y_ptr + row * y_row_stride + c, mask=c < N, other=0.0), IS_FP64)
            dy = to_acc(tl.load(dy_ptr + row * dy_row_stride + c, mask=c < N, other=0.0), IS_FP64)
            acc += y * dy
        dot = tl.sum(acc, axis=0)
        for start in range(0, N, BLOCK_N):
            c = start + cols
            y = to_acc(tl.load(y_ptr + row * y_row_stride + c, mask=c < N, other=0.0), IS_FP64)
            dy = to_acc(tl.load(dy_ptr + row * dy_row_stride + c, mask=c < N, other=0.0), IS_FP64)
            dx = y * (dy - dot)
            tl.store(dx_ptr + row * N + c, dx.to(dx_ptr.dtype.element_ty), mask=c < N)
