"""log_softmax kernels in Triton: forward (whole rows, or tiled online) and backward.

Same conventions as ``softmax.py`` (row helpers in ``rows.py``): the input is (M, N) with unit
column stride and a row stride in elements; the output is contiguous (M, N); accumulation is fp32
(fp64 for fp64 input). -inf entries give -inf, an all -inf row gives NaN, NaN propagates - like
torch.log_softmax. Outputs are ``(x - max) - log(sum)``, never ``x - (max + log(sum))``: the
latter rounds to ulp(max), which is 1e-3 for a row near 1e4 in fp32.
"""

import triton
import triton.language as tl

from .rows import load_row_block, online_row_stats, row_block, to_acc


@triton.jit
def log_softmax_rows_kernel(
    out_ptr, x_ptr, M, N, x_row_stride,
    BLOCK_N: tl.constexpr, ROWS: tl.constexpr, IS_FP64: tl.constexpr,
):
    """Whole rows in registers (BLOCK_N >= N): program p owns rows [p*ROWS, p*ROWS + ROWS).

    One read, one write per element (2*M*N*elem bytes). Masked tail lanes load -inf, which adds
    exp(-inf) = 0 to the sum; an all -inf row forms -inf - -inf = NaN, as torch does.
    """
    x, mask, out_offsets = load_row_block(x_ptr, M, N, x_row_stride, ROWS, BLOCK_N, IS_FP64)
    shifted = x - tl.max(x, axis=1)[:, None]
    s = tl.sum(tl.where(mask, tl.exp(shifted), 0.0), axis=1)
    y = shifted - tl.log(s)[:, None]
    tl.store(out_ptr + out_offsets, y.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def log_softmax_online_kernel(
    out_ptr, x_ptr, M, N, x_row_stride,
    BLOCK_N: tl.constexpr, IS_FP64: tl.constexpr,
):
    """Any row length: program p owns row p, walks it in BLOCK_N tiles twice.

    Pass 1: ``online_row_stats`` (softmax.py), the running (max, sum) per lane.
    Pass 2: re-read each tile, write (x - max) - log(sum). 2 reads + 1 write per element.
    """
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * x_row_stride
    o_row = out_ptr + row * N
    cols = tl.arange(0, BLOCK_N)
    row_max, row_sum = online_row_stats(x_row, N, BLOCK_N, IS_FP64)
    log_sum = tl.log(row_sum)
    for start in range(0, N, BLOCK_N):
        c = start + cols
        x = to_acc(tl.load(x_row + c, mask=c < N, other=-float("inf")), IS_FP64)
        y = (x - row_max) - log_sum  # an all -inf row: -inf - -inf = NaN, like torch
        tl.store(o_row + c, y.to(out_ptr.dtype.element_ty), mask=c < N)


@triton.jit
def log_softmax_backward_kernel(
    dx_ptr, y_ptr, dy_ptr, M, N, y_row_stride, dy_row_stride,
    BLOCK_N: tl.constexpr, ROWS: tl.constexpr, IS_FP64: tl.constexpr,
):
    """dx = dy - exp(y) * sum(dy).

    One tile (BLOCK_N >= N): program p owns rows [p*ROWS, p*ROWS + ROWS) (several narrow rows
    per program, as the softmax backward); y and dy read once, dx written once (3*N*elem bytes
    per row). Longer rows: program p owns row p (ROWS = 1) in BLOCK_N tiles, reading dy twice
    and y once: pass 1 needs only sum(dy).
    """
    if BLOCK_N >= N:
        r, c, mask = row_block(M, N, ROWS, BLOCK_N)
        y = to_acc(tl.load(y_ptr + r * y_row_stride + c, mask=mask, other=0.0), IS_FP64)
        dy = to_acc(tl.load(dy_ptr + r * dy_row_stride + c, mask=mask, other=0.0), IS_FP64)
        dx = dy - tl.exp(y) * tl.sum(dy, axis=1)[:, None]
        tl.store(dx_ptr + r * N + c, dx.to(dx_ptr.dtype.element_ty), mask=mask)
    else:
        row = tl.program_id(0).to(tl.int64)
        cols = tl.arange(0, BLOCK_N)
        y_row = y_ptr + row * y_row_stride
        dy_row = dy_ptr + row * dy_row_stride
        if IS_FP64:
            acc = tl.zeros([BLOCK_N], tl.float64)
        else:
            acc = tl.zeros([BLOCK_N], tl.float32)
        for start in range(0, N, BLOCK_N):
            c = start + cols
            acc += to_acc(tl.load(dy_row + c, mask=c < N, other=0.0), IS_FP64)
        total = tl.sum(acc, axis=0)
        for start in range(0, N, BLOCK_N):
            c = start + cols
            y = to_acc(tl.load(y_row + c, mask=c < N, other=0.0), IS_FP64)
            dy = to_acc(tl.load(dy_row + c, mask=c < N, other=0.0), IS_FP64)
            dx = dy - tl.exp(y) * total
            tl.store(dx_ptr + row * N + c, dx.to(dx_ptr.dtype.element_ty), mask=c < N)
