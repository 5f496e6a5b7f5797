"""cross_entropy in plain PyTorch: ``F.cross_entropy`` (the peer to beat), and the
decomposition under ``torch.compile``; the backward both ways."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from kernel_lab.core.compiling import CompiledPerSignature
from kernel_lab.core.registry import registrar
from kernel_lab.ops.cross_entropy.op import (
    ALL_DTYPES,
    check_call,
    cross_entropy_backward_math,
    row_lse,
    target_weights,
)

SOURCE = "kernel_lab/ops/cross_entropy/torch_variants.py"
variant = registrar(op="cross_entropy", dtypes=ALL_DTYPES, source=SOURCE)


@variant(
    "torch_cross_entropy",
    backend="torch",
    description="F.cross_entropy (log_softmax + nll_loss), lse by torch.logsumexp",
)
def torch_cross_entropy(logits, target, weight=None, ignore_index=-100, reduction="mean",
                        label_smoothing=0.0):
    target = check_call(logits, target, ignore_index, reduction, label_smoothing)
    lse = row_lse(logits)
    if logits.shape[1] == 0:  # PyTorch refuses C = 0 even with every row ignored
        loss = logits.new_zeros(logits.shape[0])
        loss = {"none": loss, "sum": loss.sum(), "mean": loss.sum() / 0.0}[reduction]
    else:
        loss = F.cross_entropy(logits, target, weight=weight, ignore_index=ignore_index,
                               reduction=reduction, label_smoothing=label_smoothing)
    return loss, lse


def cross_entropy_math(logits, target, weight, ignore_index: int, reduction: str,
                       label_smoothing: float):
    """(loss, lse) from one fp32 logsumexp and gathers: what inductor fuses into a row
    reduction (the op module's formula)."""
    x = logits if logits.dtype == torch.float64 else logits.float()
    c = x.shape[1]
    lse_out = row_lse(logits)
    lse = lse_out.to(x.dtype)
    keep, t, wt = target_weights(target, weight, ignore_index, x.dtype)
    w = weight.to(x.dtype) if weight is not None else None
    loss = (1 - label_smoothing) * wt * (lse - x.gather(1, t[:, None])[:, 0])
    if label_smoothing:
        if w is not None:
            smooth = lse * w.sum() - (x * w).sum(1)
        else:
            smooth = c * lse - x.sum(1)
        loss = loss + label_smoothing / c * smooth
    loss = torch.where(keep, loss, 0.0)
    if reduction == "sum":
        loss = loss.sum()
    elif reduction == "mean":
        loss = loss.sum() / torch.where(keep, wt, 0.0).sum()
    return loss.to(logits.dtype), lse_out


_compiled = CompiledPerSignature(cross_entropy_math)


@variant(
    "compile_cross_entropy",
    backend="compile",
    description="the decomposition under torch.compile (one fused row reduction)",
)
def compile_cross_entropy(logits, target, weight=None, ignore_index=-100, reduction="mean",
                          label_smoothing=0.0):
    target = check_call(logits, target, ignore_index, reduction, label_smoothing)
    if logits.numel() == 0:  # nothing to compile: PyTorch's answer (every row ignored)
        return torch_cross_entropy(logits, target, weight, ignore_index, reduction,
                                   label_smoothing)
    return _compiled(logits, target, weight, ignore_index=ignore_index, reduction=reduction,
                     label_smoothing=label_smoothing)


@variant(
    "torch_cross_entropy_backward",
    op="cross_entropy_backward",
    backend="torch",
    description="the gradient formula in PyTorch ops (fp32)",
)
def torch_cross_entropy_backward(logits, target, weight, lse, grad, ignore_index=-100,
                                 reduction="mean", label_smoothing=0.0):
    target = check_call(logits, target, ignore_index, reduction, label_smoothing)
    if logits.numel() == 0:
        return torch.zeros_like(logits)
    return cross_entropy_backward_math(logits, target, weight, lse, grad, ignore_index,
                                       reduction, label_smoothing)


_compiled_backward = CompiledPerSignature(cross_entropy_backward_math)


@variant(
    "compile_cross_entropy_backward",
    op="cross_entropy_backward",
    backend="compile",
    description="the gradient formula under torch.compile",
)
def compile_cross_entropy_backward(logits, target, weight, lse, grad, ignore_index=-100,
                                   reduction="mean", label_smoothing=0.0):
    target = check_call(logits, target, ignore_index, reduction, label_smoothing)
    if logits.numel() == 0:
        return torch.zeros_like(logits)
    return _compiled_backward(logits, target, weight, lse, grad, ignore_index=ignore_index,
                              reduction=reduction, label_smoothing=label_smoothing)
