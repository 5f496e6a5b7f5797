"""Launchers for the fused Triton LM-head loss in ``triton_src/linear_cross_entropy.py``.

Forward: one program per BLOCK_T tokens, the online log-sum-exp over vocabulary tiles; the
reduction of the per-row losses is torch ops. Backward: a (token tile x vocabulary tile) grid
recomputing the logits, adding into fp32 accumulators for dhidden and dweight (T x d + V x d
fp32, cast to the input dtype at the end: for 16-bit inputs the memory this variant holds
above its gradients). No vocabulary gradient filtering: every softmax
entry reaches the gradient. Tiles are smaller in the interpreter, which runs ~1 ms a program.
"""

from __future__ import annotations

import os

import torch

from kernel_lab.core.registry import registrar
from kernel_lab.ops.linear_cross_entropy.op import check_inputs
from kernel_lab.ops.linear_cross_entropy.torch_variants import (
    _empty_backward,
    check_call,
    reduce_rows,
    torch_linear_cross_entropy,
)
from kernel_lab.triton_src import linear_cross_entropy as kernels

SOURCE = "triton_src/linear_cross_entropy.py"
DTYPES = (torch.float32, torch.float16, torch.bfloat16)
triton_variant = registrar(op="linear_cross_entropy", backend="triton", dtypes=DTYPES,
                            check=check_inputs, source=SOURCE)


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def _tiles() -> tuple[int, int, int, int]:
    """(BLOCK_T, BLOCK_V, BLOCK_D, num_warps)."""
    if _interpreting():
        return 16, 64, 32, 4
    return 64, 128, 64, 8


def _prepare(target, bias):
    t = target if target.dtype in (torch.int32, torch.int64) else target.long()
    return t.contiguous(), bias.contiguous() if bias is not None else None


def forward(hidden, weight, target, bias, ignore_index: int, reduction: str, eps: float,
            softcap: float):
    """(loss, lse) without the checks."""
    t, b = _prepare(target, bias)
    T, D = hidden.shape
    V = weight.shape[0]
    lse = torch.empty(T, dtype=torch.float32, device=hidden.device)
    rows = torch.empty(T, dtype=torch.float32, device=hidden.device)
    bt, bv, bd, warps = _tiles()
    import triton

    kernels.lce_fwd_kernel[(triton.cdiv(T, bt),)](
        hidden, weight, b, t, lse, rows, T, V, D, hidden.stride(0), hidden.stride(1),
        weight.stride(0), weight.stride(1), ignore_index, float(eps), float(softcap or 1.0),
        HAS_BIAS=b is not None, SOFTCAP=bool(softcap), SMOOTH=bool(eps),
        BLOCK_T=bt, BLOCK_V=bv, BLOCK_D=bd, DOT_F32=_interpreting(), num_warps=warps)
    return reduce_rows(rows, t, ignore_index, reduction, hidden.dtype), lse


@triton_variant(
    "triton_fused_linear_cross_entropy",
    description="matmul tiles with an online log-sum-exp over vocabulary tiles: the "
          "logits never reach memory",
)
def triton_fused_linear_cross_entropy(hidden, weight, target, bias=None, ignore_index=-100,
                                      reduction="mean", label_smoothing=0.0, softcap=0.0):
    check_call(hidden, weight, target, bias, ignore_index, reduction, label_smoothing, softcap)
    if hidden.numel() == 0 or weight.shape[0] == 0:
        return torch_linear_cross_entropy(hidden, weight, target, bias, ignore_index,
                                          reduction, label_smoothing, softcap)
    return forward(hidden, weight, target, bias, ignore_index, reduction, label_smoothing,
                   softcap)


def backward(hidden, weight, target, bias, lse, grad, ignore_index: int, reduction: str,
             eps: float, softcap: float):
    """(dhidden, dweight, dbias) without the checks."""
    t, b = _prepare(target, bias)
    T, D = hidden.shape
    V = weight.shape[0]
    keep = t != ignore_index
    g = grad.float().expand(T) if reduction != "none" else grad.float()
    if reduction == "mean":
        g = g / keep.sum()
    scale = torch.where(keep, g, 0.0).contiguous()
    dh = torch.zeros(T, D, dtype=torch.float32, device=hidden.device)
    dw = torch.zeros(V, D, dtype=torch.float32, device=hidden.device)
    db = torch.zeros(V, dtype=torch.float32, device=hidden.device) if b is not None else None
    bt, bv, bd, warps = _tiles()
    import triton

    kernels.lce_bwd_kernel[(triton.cdiv(T, bt), triton.cdiv(V, bv))](
        hidden, weight, b, t, lse.float().contiguous(), scale, dh, dw, db, T, V, D,
        hidden.stride(0), hidden.stride(1), weight.stride(0), weight.stride(1), float(eps),
        float(softcap or 1.0), HAS_BIAS=b is not None, SOFTCAP=bool(softcap),
        BLOCK_T=bt, BLOCK_V=bv, BLOCK_D=bd, DOT_F32=_interpreting(), num_warps=warps)
    dt = hidden.dtype
    return (dh.to(dt), dw.to(dt),
            db.to(dt) if db is not None else hidden.new_empty((0,)))


@triton_variant(
    "triton_fused_linear_cross_entropy_backward",
    op="linear_cross_entropy_backward",
    description="logits recomputed tile by tile, dz formed in registers, dhidden and "
          "dweight by fp32 atomic adds",
)
def triton_fused_linear_cross_entropy_backward(hidden, weight, target, bias, lse, grad,
                                               ignore_index=-100, reduction="mean",
                                               label_smoothing=0.0, softcap=0.0):
    check_call(hidden, weight, target, bias, ignore_index, reduction, label_smoothing, softcap)
    if hidden.numel() == 0 or weight.shape[0] == 0:
        return _empty_backward(hidden, weight, bias)
    return backward(hidden, weight, target, bias, lse, grad, ignore_index, reduction,
                    label_smoothing, softcap)
