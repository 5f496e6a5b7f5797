"""Launchers for the Triton cross_entropy kernels in ``triton_src/cross_entropy.py``.

Forward: one program a row writes (loss_i, lse_i, w_t_i); torch ops reduce them ("mean" is
sum(loss_i) / sum(w_t_i)). Backward: a grid of (row, column block) programs; the mean's
denominator and sum(w) stay on the device (torch ops, no host sync) and reach the kernel as
pointers. Neither launches for M = 0 or C = 0 (every row is then ignored: the target check).
"""

from __future__ import annotations

import torch
import triton

from kernel_lab.base.inputs import acc_dtype
from kernel_lab.core import triton_rows
from kernel_lab.core.registry import register
from kernel_lab.cuda import deferred
from kernel_lab.ops.cross_entropy.op import ALL_DTYPES, check_call, check_kwargs, lse_dtype, row_lse
from kernel_lab.triton_src import cross_entropy as kernels

SOURCE = "triton_src/cross_entropy.py"
FORWARD_BLOCK = 4096  # the online tile, as log_softmax's
BACKWARD_BLOCK = 4096




def _prepare(logits, target, weight):
    """Logits with unit column stride (a row stride is fine), contiguous int32 / int64 targets,
    a contiguous weight."""
    x = logits if logits.stride(1) == 1 or logits.shape[1] <= 1 else logits.contiguous()
    if target.dtype not in (torch.int32, torch.int64):
        target = target.long()
    return x, target.contiguous(), weight.contiguous() if weight is not None else None


def _reduce(rows: torch.Tensor, den: torch.Tensor, reduction: str) -> torch.Tensor:
    if reduction == "none":
        return rows
    return rows.sum() / den.sum() if reduction == "mean" else rows.sum()


def forward(logits, target, weight, ignore_index: int, reduction: str, eps: float):
    """(loss, lse) without the checks: the kernels' own answer for any target (NaN rows for
    targets outside [0, C), flagged: :mod:`.deferred`)."""
    x, t, w = _prepare(logits, target, weight)
    m, n = x.shape
    acc = acc_dtype(x.dtype)
    if m == 0 or n == 0:  # as torch_cross_entropy: loss 0 a row (0 / 0 for "mean")
        zeros = x.new_zeros(m)
        return _reduce(zeros, zeros, reduction), row_lse(x)
    loss, wt = (torch.empty(m, dtype=acc, device=x.device) for _ in range(2))
    lse = torch.empty(m, dtype=lse_dtype(x.dtype), device=x.device)
    block = min(triton.next_power_of_2(n), FORWARD_BLOCK)
    flags = deferred.flags_or_none(x.device)  # None: first use inside a graph capture
    kernels.cross_entropy_fwd_kernel[(m,)](
        loss, lse, wt, x, t, w, n, x.stride(0), ignore_index,
        flags.first if flags else loss, flags.raised if flags else loss, FLAG=flags is not None,
        BLOCK_N=block, HAS_WEIGHT=w is not None, EPS=float(eps),
        IS_FP64=acc == torch.float64, num_warps=triton_rows.num_warps(block),
    )
    return _reduce(loss, wt, reduction).to(x.dtype), lse


@register(
    "triton_cross_entropy",
    op="cross_entropy",
    backend="triton",
    dtypes=ALL_DTYPES,
    description="one program a row: online (max, sum) in BLOCK tiles, one read; torch reduces",
    source=SOURCE,
)
def triton_cross_entropy(logits, target, weight=None, ignore_index=-100, reduction="mean",
                         label_smoothing=0.0):
    check_call(logits, target, ignore_index, reduction, label_smoothing, deferrable=True)
    return forward(logits, target, weight, ignore_index, reduction, label_smoothing)


def row_weights(target, weight, n: int, ignore_index: int, dtype) -> torch.Tensor:
    """w_t per row (1 without weights), 0 where ignored, NaN where out of [0, n): torch ops,
    never indexing outside the weights."""
    keep = target != ignore_index
    ok = keep & (target >= 0) & (target < n)
    if weight is None:
        wt = torch.ones(target.shape, dtype=dtype, device=target.device)
    else:
        wt = weight.to(dtype)[torch.where(ok, target, 0).long()]
    return torch.where(ok, wt, torch.where(keep, float("nan"), 0.0))


def backward(logits, target, weight, lse, grad, ignore_index: int, reduction: str,
             eps: float) -> torch.Tensor:
    """dlogits (contiguous) without the checks."""
    x, t, w = _prepare(logits, target, weight)
    m, n = x.shape
    dx = torch.empty((m, n), dtype=x.dtype, device=x.device)
    if m == 0 or n == 0:
        return dx.zero_()
    acc = acc_dtype(x.dtype)
    g = grad.to(acc).contiguous()
    mean = reduction == "mean"
    # device scalars, or any tensor where the kernel does not read them
    den = row_weights(t, w, n, ignore_index, acc).sum() if mean else g
    wsum = w.to(acc).sum() if w is not None and eps else g
    block = min(triton.next_power_of_2(n), BACKWARD_BLOCK)
    kernels.cross_entropy_bwd_kernel[(m, triton.cdiv(n, block))](
        dx, x, t, w, lse.to(lse_dtype(x.dtype)).contiguous(), g, den, wsum, n, x.stride(0),
        ignore_index,
        BLOCK_N=block, HAS_WEIGHT=w is not None, EPS=float(eps), GRAD_PER_ROW=g.dim() > 0,
        MEAN=mean, IS_FP64=acc == torch.float64, num_warps=triton_rows.num_warps(block),
    )
    return dx


@register(
    "triton_cross_entropy_backward",
    op="cross_entropy_backward",
    backend="triton",
    dtypes=ALL_DTYPES,
    description="a (row, column block) grid: one read of the logits, one write of dlogits",
    source=SOURCE,
)
def triton_cross_entropy_backward(logits, target, weight, lse, grad, ignore_index=-100,
                                  reduction="mean", label_smoothing=0.0):
    check_kwargs(ignore_index, reduction, label_smoothing)  # targets: NaN rows, no check
    return backward(logits, target, weight, lse, grad, ignore_index, reduction,
                    label_smoothing)
