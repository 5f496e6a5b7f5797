"""Row helpers shared by the Triton kernels of every op (``@triton.jit`` device functions).

Conventions: a row-major (M, N) input with unit column stride and a row stride in elements;
accumulation in fp32 (fp64 for fp64 input, the ``IS_FP64`` flag).
"""

import triton
import triton.language as tl


@triton.jit
def to_acc(x, IS_FP64: tl.constexpr):
    if IS_FP64:
        return x.to(tl.float64)
    else:
        return x.to(tl.float32)


@triton.jit
def row_block(M, N, ROWS: tl.constexpr, BLOCK_N: tl.constexpr):
    """Program p's rows [p*ROWS, p*ROWS + ROWS) and all BLOCK_N >= N columns: (row indices as an
    int64 (ROWS, 1) column, column indices as a (1, BLOCK_N) row, the in-bounds mask)."""
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK_N)
    return rows[:, None].to(tl.int64), cols[None, :], (rows[:, None] < M) & (cols[None, :] < N)


@triton.jit
def load_row_block(x_ptr, M, N, x_row_stride, ROWS: tl.constexpr, BLOCK_N: tl.constexpr,
                   IS_FP64: tl.constexpr):
    """Program p's rows (:func:`row_block`) in registers.

    Returns (x in the accumulator type, -inf in masked lanes; the mask; each element's offset in
    a contiguous (M, N) output).
    """
    r, c, mask = row_block(M, N, ROWS, BLOCK_N)
    x = tl.load(x_ptr + r * x_row_stride + c, mask=mask, other=-float("inf"))
    return to_acc(x, IS_FP64), mask, r * N + c


@triton.jit
def online_row_stats(x_row, N, BLOCK_N: tl.constexpr, IS_FP64: tl.constexpr):
    """(max, sum of exp(x - max)) of one row in a single pass over BLOCK_N-wide tiles.

    Each lane keeps a running (max, sum) - the online softmax of Milakov & Gimelshein -
    rescaling its sum by exp(m_old - m_new) when the max grows; the lanes merge at the end.
    A lane whose max is still -inf never forms exp(-inf - -inf) = NaN. An all -inf row returns
    (-inf, 0), so callers' exp(x - max) / sum gives NaN like torch.
    """
    cols = tl.arange(0, BLOCK_N)
    if IS_FP64:
        m = tl.full([BLOCK_N], -float("inf"), tl.float64)
        s = tl.zeros([BLOCK_N], tl.float64)
    else:
        m = tl.full([BLOCK_N], -float("inf"), tl.float32)
        s = tl.zeros([BLOCK_N], tl.float32)
    for start in range(0, N, BLOCK_N):
        c = start + cols
        x = to_acc(tl.load(x_row + c, mask=c < N, other=-float("inf")), IS_FP64)
        m_new = tl.maximum(m, x)
        safe = tl.where(m_new == -float("inf"), 0.0, m_new)
        s = s * tl.exp(m - safe) + tl.exp(x - safe)
        m = m_new
    row_max = tl.max(m, axis=0)
    safe_max = tl.where(row_max == -float("inf"), 0.0, row_max)
    return row_max, tl.sum(s * tl.exp(m - safe_max), axis=0)
