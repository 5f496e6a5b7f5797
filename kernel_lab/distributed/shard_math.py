"""The per-rank math of the vocabulary-parallel loss, in plain PyTorch with fp32 accumulation.

Two functions, each one pass over this rank's (rows, width) block of logits, are the seams where
a kernel goes: :func:`shard_stats` (the forward's per-row statistics of the shard: the lab's
cross-entropy kernel could emit them in one read) and :func:`shard_grad` (the shard's dlogits
from the global lse and per-row coefficients: the cross-entropy backward kernel's job). Both work
in chunks of rows so that their fp32 temporaries stay at ``ROW_CHUNK_ELEMENTS`` elements, whatever
the shard's size; neither communicates.
"""

from __future__ import annotations

import torch

from kernel_lab.base.inputs import acc_dtype

# Rows per chunk = this many elements / the shard's width (fp32 temporaries: 256 MiB).
ROW_CHUNK_ELEMENTS = 1 << 26




def row_chunks(rows: int, width: int, chunk_rows: int | None = None) -> list[tuple[int, int]]:
    """[start, stop) row ranges of at most ``chunk_rows`` rows (default: ROW_CHUNK_ELEMENTS /
    width)."""
    step = chunk_rows or max(1, ROW_CHUNK_ELEMENTS // max(width, 1))
    return [(i, min(i + step, rows)) for i in range(0, rows, step)]


def finite_shift(m: torch.Tensor) -> torch.Tensor:
    """The shift a shard's sums are taken about: its row max, 0 where that is -inf (a shard of
    width 0 or of -inf logits), so that no -inf - -inf appears."""
    return torch.where(m == float("-inf"), 0.0, m)


def shard_stats(x: torch.Tensor, t_local: torch.Tensor, w: torch.Tensor | None,
                smoothing: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor,
                                          torch.Tensor | None]:
    """Per row of this rank's logits ``x`` (rows, width), in the accumulator dtype, with
    c = finite_shift(m):

    * ``m``: the shard's row max (-inf for a shard of width 0);
    * ``s``: sum_j exp(x_j - c), so that the shard's lse is c + log(s) (kept apart: c is exact,
      and the merge adds them in float64, so the lse the backward reads is not rounded to fp32
      at |lse| ~ 1e4, where that would cost 5e-4 relative in every probability);
    * ``xt``: the target's logit where this shard owns the target (0 <= t_local < width), else 0;
    * ``smooth`` (only when ``smoothing``): sum_j w_j * (c - x_j), w_j = 1 without class
      weights ``w`` (this shard's slice, accumulator dtype).

    The one-read kernel seam: a kernel returning these four from one pass over ``x`` replaces
    this function; nothing else changes.
    """
    acc = acc_dtype(x.dtype)
    rows, width = x.shape
    m = torch.full((rows,), float("-inf"), dtype=acc, device=x.device)
    s = torch.zeros(rows, dtype=acc, device=x.device)
    xt = torch.zeros(rows, dtype=acc, device=x.device)
    smooth = torch.zeros(rows, dtype=acc, device=x.device) if smoothing else None
    if width == 0:
        return m, s, xt, smooth
    owned = (t_local >= 0) & (t_local < width)
    t_safe = torch.where(owned, t_local, 0)
    for a, b in row_chunks(rows, width):
        xc = x[a:b].to(acc)
        m[a:b] = xc.amax(1)
        c = finite_shift(m[a:b])[:, None]
        s[a:b] = torch.exp(xc - c).sum(1)
        xt[a:b] = torch.where(owned[a:b], xc.gather(1, t_safe[a:b, None])[:, 0], 0.0)
        if smoothing:
            smooth[a:b] = ((c - xc) * w).sum(1) if w is not None else (c - xc).sum(1)
    return m, s, xt, smooth


def shard_grad(x: torch.Tensor, t_local: torch.Tensor, w: torch.Tensor | None,
               lse: torch.Tensor, coef_p: torch.Tensor, coef_t: torch.Tensor,
               coef_w: torch.Tensor | None) -> torch.Tensor:
    """This rank's dlogits, in ``x``'s dtype, from the global per-row ``lse`` (float64):

        dx_ij = coef_p_i * exp(x_ij - lse_i) - coef_t_i * [j == t_local_i] - coef_w_i * w_j

    (w_j = 1 without class weights; the coef_t term only where this shard owns the target; no
    coef_w term when it is None). x - lse is taken as (x - hi) - lo with lse = hi + lo split
    into two accumulator-dtype numbers: exact where p is not negligible. The coefficient vectors
    are in the accumulator dtype; the caller folds the upstream gradient, the reduction and the
    weights into them. The backward kernel seam, as :func:`shard_stats` is the forward's.
    """
    acc = acc_dtype(x.dtype)
    rows, width = x.shape
    dx = torch.empty_like(x, memory_format=torch.contiguous_format)
    if dx.numel() == 0:
        return dx
    hi = lse.to(acc)
    lo = (lse - hi.to(lse.dtype)).to(acc)
    owned = (t_local >= 0) & (t_local < width)
    t_safe = torch.where(owned, t_local, 0)
    for a, b in row_chunks(rows, width):
        g = x[a:b].to(acc, copy=True)  # a copy: the in-place steps below must not touch x
        g.sub_(hi[a:b, None]).sub_(lo[a:b, None]).exp_().mul_(coef_p[a:b, None])
        g.scatter_add_(1, t_safe[a:b, None], torch.where(owned[a:b], -coef_t[a:b], 0.0)[:, None])
        if coef_w is not None:
            g.sub_(coef_w[a:b, None] * (w[None] if w is not None else 1.0))
        dx[a:b] = g
    return dx
