"""cross_entropy kernels in Triton: forward (loss, lse and w_t per row) and backward (dlogits).

Logits are (M, C) with unit column stride and a row stride in elements; dlogits are contiguous
(M, C). Accumulation is fp32 (fp64 for fp64 input); lse is stored as max + log(sum) summed in
fp64 (the lse buffer is fp64 for fp32 / fp64 rows, fp32 for 2-byte ones) and read back as an
(hi, lo) pair: exp((x - hi) - lo) keeps the fp32 gradient exact at any logit magnitude. Per
row i, t = target[i], eps = label smoothing, w the class weights (1 without, sum(w) = C):

    lse    = max + log(sum_j exp(x_j - max))
    loss_i = (1 - eps) * w_t * (lse - x_t) + eps / C * (lse * sum_j w_j - sum_j w_j x_j)
    dx_j   = s_i * (a_i * exp(x_j - lse) - (1 - eps) * w_t * [j == t] - eps / C * w_j)

with a_i = (1 - eps) * w_t + eps / C * sum(w) and s_i the row's upstream gradient. A row whose
target is ignore_index has loss 0, w_t 0 and s_i = 0: a zero gradient row (its lse is still
computed; NaN where exp(x - lse) is, as PyTorch's autograd gives). A target outside [0, C) that
is not ignore_index is never read: loss, w_t and the gradient row are NaN, and the forward flags
the row for the host (``_flag_bad``). -inf logits follow PyTorch: exp(-inf) adds
0, with smoothing sum(w x) is -inf and the loss +inf, an all -inf row gives NaN. eps is a
constexpr (one compile per smoothing value, 0 compiles the smoothing sums out): a runtime float
argument would be fp32, 1e-8 off for fp64 inputs.
"""

import triton
import triton.language as tl

from .rows import to_acc


@triton.jit
def _num(x, IS_FP64: tl.constexpr):
    """A scalar (a runtime int, or a constexpr) in the accumulator type."""
    if IS_FP64:
        return tl.cast(x, tl.float64)
    else:
        return tl.cast(x, tl.float32)


@triton.jit
def _target(t_ptr, row, N, ignore_index):
    """(t clamped into [0, N) so it can always be read, kept: t != ignore_index, bad: kept and
    outside [0, N))."""
    t = tl.load(t_ptr + row).to(tl.int64)
    keep = t != ignore_index
    bad = keep & ((t < 0) | (t >= N))
    return tl.where(keep & ~bad, t, 0), keep, bad


@triton.jit
def _flag_bad(first_ptr, flag_ptr, row, t, bad):
    """For a bad row: atomic min of row << 32 | (t + 2^31) (both saturated) into the device
    word, and 1 into the host-mapped word (kernel_lab/cuda/deferred.py)."""
    r = tl.minimum(row, 2147483647)
    v = tl.minimum(tl.maximum(t, -2147483648), 2147483647) + 2147483648
    tl.atomic_min(first_ptr, r * 4294967296 + v, mask=bad)
    tl.store(flag_ptr, 1, mask=bad)


@triton.jit
def cross_entropy_fwd_kernel(
    loss_ptr, lse_ptr, wt_ptr, x_ptr, t_ptr, w_ptr, N, x_row_stride, ignore_index,
    bad_first_ptr, bad_flag_ptr,
    BLOCK_N: tl.constexpr, HAS_WEIGHT: tl.constexpr, EPS: tl.constexpr,
    IS_FP64: tl.constexpr, FLAG: tl.constexpr,
):
    """Any row length: program p owns row p, walks it once in BLOCK_N tiles.

    Each lane keeps a running (max, sum of exp) (the online softmax, as ``online_row_stats`` in
    softmax.py) and, with smoothing, sum(w x) and sum(w); the lanes merge at the end, then x_t
    and w_t are two scalar loads. Writes loss_i, lse_i, w_t_i (accumulator type); a bad target
    also flags the row (``_flag_bad``). Cost: one read
    of the row (M*C*elem bytes; with smoothing and weights also C weights a row, from L2).
    """
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * x_row_stride
    cols = tl.arange(0, BLOCK_N)
    if IS_FP64:
        m = tl.full([BLOCK_N], -float("inf"), tl.float64)
        s = tl.zeros([BLOCK_N], tl.float64)
    else:
        m = tl.full([BLOCK_N], -float("inf"), tl.float32)
        s = tl.zeros([BLOCK_N], tl.float32)
    wx = s
    ws = s
    for start in range(0, N, BLOCK_N):
        c = start + cols
        x = to_acc(tl.load(x_row + c, mask=c < N, other=-float("inf")), IS_FP64)
        m_new = tl.maximum(m, x)
        safe = tl.where(m_new == -float("inf"), 0.0, m_new)  # never -inf - -inf
        s = s * tl.exp(m - safe) + tl.exp(x - safe)
        m = m_new
        if EPS != 0.0:
            if HAS_WEIGHT:
                w = to_acc(tl.load(w_ptr + c, mask=c < N, other=0.0), IS_FP64)
                wx += tl.where(c < N, w * x, 0.0)  # a real -inf logit adds -inf, as in PyTorch
                ws += w
            else:
                wx += tl.where(c < N, x, 0.0)
    row_max = tl.max(m, axis=0)
    safe_max = tl.where(row_max == -float("inf"), 0.0, row_max)
    log_sum = tl.log(tl.sum(s * tl.exp(m - safe_max), axis=0))
    lse = row_max + log_sum  # an all -inf row: -inf + log(0) = -inf
    # stored as max + log(sum) summed in fp64: an fp64 lse_ptr (fp32 rows) keeps it unrounded
    lse_exact = row_max.to(tl.float64) + log_sum.to(tl.float64)

    t, keep, bad = _target(t_ptr, row, N, ignore_index)
    x_t = to_acc(tl.load(x_row + t), IS_FP64)
    if HAS_WEIGHT:
        w_t = to_acc(tl.load(w_ptr + t), IS_FP64)
    else:
        w_t = _num(1.0, IS_FP64)
    # (max - x_t) + log(sum): exact to ulp(lse - x_t), not ulp(lse) as lse - x_t would be
    loss = (1.0 - EPS) * w_t * ((row_max - x_t) + log_sum)
    if EPS != 0.0:
        if HAS_WEIGHT:
            w_sum = tl.sum(ws, axis=0)
        else:
            w_sum = _num(N, IS_FP64)
        loss += EPS / _num(N, IS_FP64) * (lse * w_sum - tl.sum(wx, axis=0))
    nan = float("nan")
    loss = tl.where(bad, nan, tl.where(keep, loss, 0.0))
    tl.store(loss_ptr + row, loss)
    tl.store(lse_ptr + row, lse_exact)
    tl.store(wt_ptr + row, tl.where(bad, nan, tl.where(keep, w_t, 0.0)))
    if FLAG:
        _flag_bad(bad_first_ptr, bad_flag_ptr, row, tl.load(t_ptr + row).to(tl.int64), bad)


@triton.jit
def cross_entropy_bwd_kernel(
    dx_ptr, x_ptr, t_ptr, w_ptr, lse_ptr, g_ptr, den_ptr, wsum_ptr, N, x_row_stride,
    ignore_index,
    BLOCK_N: tl.constexpr, HAS_WEIGHT: tl.constexpr, EPS: tl.constexpr,
    GRAD_PER_ROW: tl.constexpr, MEAN: tl.constexpr, IS_FP64: tl.constexpr,
):
    """Program (r, b) owns columns [b*BLOCK_N, (b+1)*BLOCK_N) of row r.

    The row's scalars first: t, w_t, lse_i, s_i = grad (grad[r] for "none"), divided by the
    mean's denominator *den_ptr for "mean", and sum(w) (*wsum_ptr, with smoothing and weights)
    - a few scalar loads, from L2 after the row's first block. Then one read of x (and w with
    smoothing) and one write of dx: 2*M*C*elem bytes. An ignored row has s_i = 0: zeros, except
    0 * NaN = NaN where exp(x - lse) is NaN (an all -inf row), as PyTorch's autograd gives.
    """
    row = tl.program_id(0).to(tl.int64)
    c = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = c < N
    t, keep, bad = _target(t_ptr, row, N, ignore_index)
    if HAS_WEIGHT:
        w_t = to_acc(tl.load(w_ptr + t), IS_FP64)
    else:
        w_t = _num(1.0, IS_FP64)
    if GRAD_PER_ROW:
        s = to_acc(tl.load(g_ptr + row), IS_FP64)
    else:
        s = to_acc(tl.load(g_ptr), IS_FP64)
    if MEAN:
        s = s / to_acc(tl.load(den_ptr), IS_FP64)
    s = tl.where(keep, s, 0.0)
    b = (1.0 - EPS) * w_t  # the target's coefficient
    a = b
    if EPS != 0.0:
        if HAS_WEIGHT:
            a += EPS / _num(N, IS_FP64) * to_acc(tl.load(wsum_ptr), IS_FP64)
        else:
            a += EPS
    x = to_acc(tl.load(x_ptr + row * x_row_stride + c, mask=mask, other=-float("inf")), IS_FP64)
    lse = tl.load(lse_ptr + row).to(tl.float64)  # (hi, lo): x - lse exact to its own rounding
    hi = to_acc(lse, IS_FP64)
    lo = to_acc(lse - hi.to(tl.float64), IS_FP64)
    dx = a * tl.exp((x - hi) - lo) - tl.where(c == t, b, 0.0)
    if EPS != 0.0:
        if HAS_WEIGHT:
            w = to_acc(tl.load(w_ptr + c, mask=mask, other=0.0), IS_FP64)
            dx -= EPS / _num(N, IS_FP64) * w
        else:
            dx -= EPS / _num(N, IS_FP64)
    dx = tl.where(bad, float("nan"), s * dx)
    tl.store(dx_ptr + row * N + c, dx.to(dx_ptr.dtype.element_ty), mask=mask)
