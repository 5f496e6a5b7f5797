"""``kernel_lab.cross_entropy`` and ``kernel_lab.CrossEntropyLoss``: drop-ins for
``F.cross_entropy`` and ``torch.nn.CrossEntropyLoss`` over (rows, classes) logits,
differentiable and compilable (``torch.ops.kernel_lab.cross_entropy``)."""

from __future__ import annotations

import torch

from kernel_lab import custom_ops, dispatch, registry

from .op import check_kwargs, check_targets

cross_entropy_op = custom_ops.define("cross_entropy")


class _Fused(torch.autograd.Function):
    """The memory-saving mode: the forward kernel writes the gradient (for a unit upstream
    gradient) over the logits; the backward scales it in place when the upstream gradient is
    not 1 (one host sync to find out) and hands the logits' buffer back as dlogits."""

    @staticmethod
    def forward(ctx, logits, target, weight, ignore_index, reduction, eps):
        from .cuda_variants import fused_forward

        check_targets(logits, target, ignore_index)
        loss, _, dx = fused_forward(logits, target, weight, ignore_index, reduction, eps)
        ctx.dx, ctx.none = dx, reduction == "none"
        return loss

    @staticmethod
    def backward(ctx, g):
        dx, ctx.dx = ctx.dx, None
        if ctx.none:
            dx.mul_(g.to(dx.dtype)[:, None])
        elif bool(g != 1):
            dx.mul_(g.to(dx.dtype))
        # a new tensor over the buffer: autograd may keep it as a leaf's .grad without a copy
        return dx.detach(), None, None, None, None, None


def _fused_applies(logits, target, weight, variant, backward_variant) -> bool:
    """Where the fused mode runs: eager CUDA logits with unit column stride, recorded by
    autograd, the CUDA kernels asked for (or "auto") and CuPy present."""
    return (logits.is_cuda and logits.requires_grad and torch.is_grad_enabled()
            and logits.stride(1) == 1 and logits.dtype != torch.float64
            and variant in (None, "auto", "cuda_cross_entropy")
            and backward_variant in (None, "auto", "cuda_cross_entropy_backward")
            and custom_ops.eager_fast_path(logits, target, weight)
            and dispatch.can_run(_cuda_variant(), logits, target, weight))


def _cuda_variant():
    return registry.get("cuda_cross_entropy")


def cross_entropy(logits: torch.Tensor, target: torch.Tensor,
                  weight: torch.Tensor | None = None, ignore_index: int = -100,
                  reduction: str = "mean", label_smoothing: float = 0.0,
                  variant: str | None = None, *,
                  backward_variant: str | None = None,
                  inplace_backward: bool = False) -> torch.Tensor:
    """``F.cross_entropy(logits, target, weight, ignore_index=, reduction=, label_smoothing=)``
    computed by a lab variant, for logits of shape (rows, classes) (or (classes,) with a 0-d
    target) and class-index targets. Accumulates in fp32; returns the loss in the logits' dtype.

    ``variant``: a ``cross_entropy`` variant name, or None / ``"auto"`` for the best one for the
    logits (PyTorch's own off CUDA); ``backward_variant``: the same for
    ``cross_entropy_backward``. A target outside [0, classes) that is not ``ignore_index``
    raises before anything runs: one host sync per call (measured on an H200 at 2^28 logits: a
    third of an fp32 step's time in a tight loop). Inside ``kernel_lab.registry.trusted_inputs()``
    it is skipped; the CUDA and Triton kernels then give such a row a NaN loss, never a fault.

    ``inplace_backward=True`` saves the memory of the gradient: the forward kernel writes
    dlogits over the logits (their values are gone after the call) and the backward returns
    that buffer. It applies to eager CUDA logits that require grad; elsewhere (CPU, under
    ``torch.compile``, another variant) the call runs as without it.
    """
    check_kwargs(ignore_index, reduction, label_smoothing)
    if not isinstance(logits, torch.Tensor) or logits.dim() not in (1, 2):
        shape = tuple(logits.shape) if isinstance(logits, torch.Tensor) else type(logits)
        raise ValueError(f"kernel_lab.cross_entropy takes logits of shape (rows, classes) or "
                         f"(classes,), got {shape}; move the class dim last and flatten the rest")
    if logits.dim() == 1:
        loss = cross_entropy(logits[None], target.reshape(1), weight, ignore_index, reduction,
                             label_smoothing, variant, backward_variant=backward_variant,
                             inplace_backward=inplace_backward)
        return loss[0] if reduction == "none" else loss
    if inplace_backward and _fused_applies(logits, target, weight, variant, backward_variant):
        return _Fused.apply(logits, target, weight, ignore_index, reduction,
                            float(label_smoothing))
    kw = {"ignore_index": ignore_index, "reduction": reduction,
          "label_smoothing": float(label_smoothing)}
    if torch.compiler.is_compiling():  # the variants check inside the compiled graph
        return custom_ops.call("cross_entropy", (logits, target, weight), kw, variant,
                               backward_variant)[0]
    check_targets(logits, target, ignore_index)  # once: the variant then trusts them
    with registry.trusted_inputs():
        return custom_ops.call("cross_entropy", (logits, target, weight), kw, variant,
                               backward_variant)[0]


class CrossEntropyLoss(torch.nn.Module):
    """``torch.nn.CrossEntropyLoss`` run by a lab variant (class-index targets)."""

    def __init__(self, weight: torch.Tensor | None = None, ignore_index: int = -100,
                 reduction: str = "mean", label_smoothing: float = 0.0,
                 variant: str | None = None, backward_variant: str | None = None,
                 inplace_backward: bool = False) -> None:
        super().__init__()
        check_kwargs(ignore_index, reduction, label_smoothing)
        self.register_buffer("weight", weight)
        self.ignore_index, self.reduction = ignore_index, reduction
        self.label_smoothing = label_smoothing
        self.variant, self.backward_variant = variant, backward_variant
        self.inplace_backward = inplace_backward

    def forward(self, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return cross_entropy(logits, target, self.weight, self.ignore_index, self.reduction,
                             self.label_smoothing, self.variant,
                             backward_variant=self.backward_variant,
                             inplace_backward=self.inplace_backward)

    def extra_repr(self) -> str:
        return (f"ignore_index={self.ignore_index}, reduction={self.reduction!r}, "
                f"label_smoothing={self.label_smoothing}, variant={self.variant or 'auto'!r}")
