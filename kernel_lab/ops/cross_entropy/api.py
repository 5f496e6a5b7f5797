"""``kernel_lab.cross_entropy`` and ``kernel_lab.CrossEntropyLoss``: drop-ins for
``F.cross_entropy`` and ``torch.nn.CrossEntropyLoss`` over (rows, classes) logits,
differentiable and compilable (``torch.ops.kernel_lab.cross_entropy``)."""

from __future__ import annotations

import torch

from kernel_lab import custom_ops

from .op import check_kwargs

cross_entropy_op = custom_ops.define("cross_entropy")


def cross_entropy(logits: torch.Tensor, target: torch.Tensor,
                  weight: torch.Tensor | None = None, ignore_index: int = -100,
                  reduction: str = "mean", label_smoothing: float = 0.0,
                  variant: str | None = None, *,
                  backward_variant: str | None = None) -> torch.Tensor:
    """``F.cross_entropy(logits, target, weight, ignore_index=, reduction=, label_smoothing=)``
    computed by a lab variant, for logits of shape (rows, classes) (or (classes,) with a 0-d
    target) and class-index targets. Accumulates in fp32; returns the loss in the logits' dtype.

    ``variant``: a ``cross_entropy`` variant name, or None / ``"auto"`` for the best one for the
    logits (PyTorch's own off CUDA); ``backward_variant``: the same for
    ``cross_entropy_backward``. A target outside [0, classes) that is not ``ignore_index``
    raises before anything runs.
    """
    check_kwargs(ignore_index, reduction, label_smoothing)
    if not isinstance(logits, torch.Tensor) or logits.dim() not in (1, 2):
        shape = tuple(logits.shape) if isinstance(logits, torch.Tensor) else type(logits)
        raise ValueError(f"kernel_lab.cross_entropy takes logits of shape (rows, classes) or "
                         f"(classes,), got {shape}; move the class dim last and flatten the rest")
    if logits.dim() == 1:
        loss = cross_entropy(logits[None], target.reshape(1), weight, ignore_index, reduction,
                             label_smoothing, variant, backward_variant=backward_variant)
        return loss[0] if reduction == "none" else loss
    kw = {"ignore_index": ignore_index, "reduction": reduction,
          "label_smoothing": float(label_smoothing)}
    return custom_ops.call("cross_entropy", (logits, target, weight), kw, variant,
                           backward_variant)[0]


class CrossEntropyLoss(torch.nn.Module):
    """``torch.nn.CrossEntropyLoss`` run by a lab variant (class-index targets)."""

    def __init__(self, weight: torch.Tensor | None = None, ignore_index: int = -100,
                 reduction: str = "mean", label_smoothing: float = 0.0,
                 variant: str | None = None, backward_variant: str | None = None) -> None:
        super().__init__()
        check_kwargs(ignore_index, reduction, label_smoothing)
        self.register_buffer("weight", weight)
        self.ignore_index, self.reduction = ignore_index, reduction
        self.label_smoothing = label_smoothing
        self.variant, self.backward_variant = variant, backward_variant

    def forward(self, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return cross_entropy(logits, target, self.weight, self.ignore_index, self.reduction,
                             self.label_smoothing, self.variant,
                             backward_variant=self.backward_variant)

    def extra_repr(self) -> str:
        return (f"ignore_index={self.ignore_index}, reduction={self.reduction!r}, "
                f"label_smoothing={self.label_smoothing}, variant={self.variant or 'auto'!r}")
