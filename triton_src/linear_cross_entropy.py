"""The LM-head loss in Triton, logits never written to memory.

hidden H is (T, D), the classifier W (V, D), both read through their strides. A logits tile
z = H[rows] @ W[cols].T (+ bias, then cap * tanh(z / cap) under a soft cap) is built in
registers by ``tl.dot`` over D tiles (fp32 accumulation, "ieee" so fp32 is not rounded to tf32).

Forward (``lce_fwd_kernel``): one program owns BLOCK_T rows and walks every vocabulary tile,
merging (max, sum of exp) online, as the seed's online softmax does over a row; it also picks
up z_t (and sum_j z_j for label smoothing). It writes lse and the row's loss
    loss_i = (1 - eps) * (lse - z_t) + eps * (lse - sum_j z_j / V),  0 when ignored.

Backward (``lce_bwd_kernel``): one program owns a (BLOCK_T rows x BLOCK_V columns) tile: it
recomputes z, forms dz = s_i * (exp(z - lse) - (1 - eps) [j == t] - eps / V) (times
1 - (z_c / cap)^2 under the cap; s_i: the row's upstream gradient, 0 when ignored), then adds
dz @ W[cols] into dH[rows] and dz.T @ H[rows] into dW[cols], D tile by D tile, with fp32 atomic
adds (every token tile adds into the same dW rows), and dz's column sums into db.

``DOT_F32``: the operands of every ``tl.dot`` are cast to fp32 first (exact for 16-bit inputs:
the products are what tensor cores form). Set in the interpreter, whose 16-bit dot is wrong
(Triton 3.6: bf16 16 x 16 tiles off by 1e10).
"""

import triton
import triton.language as tl


@triton.jit
def _dot(a, b, acc, DOT_F32: tl.constexpr):
    """acc + a @ b: fp32 operands exactly ("ieee", not tf32), 16-bit ones on tensor cores."""
    if DOT_F32:
        return tl.dot(a.to(tl.float32), b.to(tl.float32), acc, input_precision="ieee")
    elif a.dtype == tl.float32:
        return tl.dot(a, b, acc, input_precision="ieee")
    else:
        return tl.dot(a, b, acc)


@triton.jit
def _logits_tile(h_ptr, w_ptr, b_ptr, rows, cols, T, V, D, s_ht, s_hd, s_wv, s_wd, softcap,
                 HAS_BIAS: tl.constexpr, SOFTCAP: tl.constexpr, BLOCK_T: tl.constexpr,
                 BLOCK_V: tl.constexpr, BLOCK_D: tl.constexpr, DOT_F32: tl.constexpr):
    """(z capped, fp32 [BLOCK_T, BLOCK_V]); rows / columns past T / V hold garbage-free 0s."""
    rmask = rows < T
    cmask = cols < V
    acc = tl.zeros((BLOCK_T, BLOCK_V), dtype=tl.float32)
    for k0 in range(0, D, BLOCK_D):
        ks = k0 + tl.arange(0, BLOCK_D)
        kmask = ks < D
        a = tl.load(h_ptr + rows[:, None] * s_ht + ks[None, :] * s_hd,
                    mask=rmask[:, None] & kmask[None, :], other=0.0)
        b = tl.load(w_ptr + cols[None, :] * s_wv + ks[:, None] * s_wd,
                    mask=kmask[:, None] & cmask[None, :], other=0.0)
        acc = _dot(a, b, acc, DOT_F32)
    if HAS_BIAS:
        acc += tl.load(b_ptr + cols, mask=cmask, other=0.0).to(tl.float32)[None, :]
    if SOFTCAP:
        acc = softcap * (2.0 * tl.sigmoid(2.0 * acc / softcap) - 1.0)  # cap * tanh(z / cap)
    return acc


@triton.jit
def lce_fwd_kernel(h_ptr, w_ptr, b_ptr, t_ptr, lse_ptr, loss_ptr, T, V, D,
                   s_ht, s_hd, s_wv, s_wd, ignore_index, eps, softcap,
                   HAS_BIAS: tl.constexpr, SOFTCAP: tl.constexpr, SMOOTH: tl.constexpr,
                   BLOCK_T: tl.constexpr, BLOCK_V: tl.constexpr, BLOCK_D: tl.constexpr,
                   DOT_F32: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    rmask = rows < T
    tgt = tl.load(t_ptr + rows, mask=rmask, other=0).to(tl.int64)
    m = tl.full((BLOCK_T,), float("-inf"), dtype=tl.float32)
    s = tl.zeros((BLOCK_T,), dtype=tl.float32)
    zt = tl.zeros((BLOCK_T,), dtype=tl.float32)
    zsum = tl.zeros((BLOCK_T,), dtype=tl.float32)
    for v0 in range(0, V, BLOCK_V):
        cols = v0 + tl.arange(0, BLOCK_V)
        cmask = cols < V
        z = _logits_tile(h_ptr, w_ptr, b_ptr, rows, cols, T, V, D, s_ht, s_hd, s_wv, s_wd,
                         softcap, HAS_BIAS, SOFTCAP, BLOCK_T, BLOCK_V, BLOCK_D, DOT_F32)
        zt += tl.sum(tl.where(cols[None, :] == tgt[:, None], z, 0.0), 1)
        if SMOOTH:
            zsum += tl.sum(tl.where(cmask[None, :], z, 0.0), 1)
        z = tl.where(cmask[None, :], z, float("-inf"))
        m_new = tl.maximum(m, tl.max(z, 1))  # finite: every tile has a valid column
        s = s * tl.exp(m - m_new) + tl.sum(tl.exp(z - m_new[:, None]), 1)
        m = m_new
    lse = m + tl.log(s)
    loss = (1.0 - eps) * (lse - zt)
    if SMOOTH:
        loss += eps * (lse - zsum / V)
    loss = tl.where(tgt == ignore_index, 0.0, loss)
    tl.store(lse_ptr + rows, lse, mask=rmask)
    tl.store(loss_ptr + rows, loss, mask=rmask)


@triton.jit
def lce_bwd_kernel(h_ptr, w_ptr, b_ptr, t_ptr, lse_ptr, scale_ptr, dh_ptr, dw_ptr, db_ptr,
                   T, V, D, s_ht, s_hd, s_wv, s_wd, eps, softcap,
                   HAS_BIAS: tl.constexpr, SOFTCAP: tl.constexpr,
                   BLOCK_T: tl.constexpr, BLOCK_V: tl.constexpr, BLOCK_D: tl.constexpr,
                   DOT_F32: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    cols = tl.program_id(1) * BLOCK_V + tl.arange(0, BLOCK_V)
    rmask = rows < T
    cmask = cols < V
    z = _logits_tile(h_ptr, w_ptr, b_ptr, rows, cols, T, V, D, s_ht, s_hd, s_wv, s_wd, softcap,
                     HAS_BIAS, SOFTCAP, BLOCK_T, BLOCK_V, BLOCK_D, DOT_F32)
    tgt = tl.load(t_ptr + rows, mask=rmask, other=0).to(tl.int64)
    lse = tl.load(lse_ptr + rows, mask=rmask, other=0.0)
    scale = tl.load(scale_ptr + rows, mask=rmask, other=0.0)  # 0 on ignored rows
    p = tl.exp(z - lse[:, None])
    dz = p - (1.0 - eps) * (cols[None, :] == tgt[:, None]).to(tl.float32) - eps / V
    if SOFTCAP:
        dz = dz * (1.0 - (z / softcap) * (z / softcap))
    dz = tl.where(cmask[None, :], dz * scale[:, None], 0.0)
    if HAS_BIAS:
        tl.atomic_add(db_ptr + cols, tl.sum(dz, 0), mask=cmask)
    dzc = dz.to(h_ptr.dtype.element_ty)
    for k0 in range(0, D, BLOCK_D):
        ks = k0 + tl.arange(0, BLOCK_D)
        kmask = ks < D
        w = tl.load(w_ptr + cols[:, None] * s_wv + ks[None, :] * s_wd,
                    mask=cmask[:, None] & kmask[None, :], other=0.0)
        dh = _dot(dzc, w, tl.zeros((BLOCK_T, BLOCK_D), dtype=tl.float32), DOT_F32)
        tl.atomic_add(dh_ptr + rows[:, None] * D + ks[None, :], dh,
                      mask=rmask[:, None] & kmask[None, :])
        h = tl.load(h_ptr + rows[:, None] * s_ht + ks[None, :] * s_hd,
                    mask=rmask[:, None] & kmask[None, :], other=0.0)
        dw = _dot(tl.trans(dzc), h, tl.zeros((BLOCK_V, BLOCK_D), dtype=tl.float32), DOT_F32)
        tl.atomic_add(dw_ptr + cols[:, None] * D + ks[None, :], dw,
                      mask=cmask[:, None] & kmask[None, :])
