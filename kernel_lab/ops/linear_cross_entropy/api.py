"""``kernel_lab.linear_cross_entropy`` and ``kernel_lab.LinearCrossEntropyLoss``: the LM head's
classifier matmul and ``F.cross_entropy`` in one differentiable, compilable call
(``torch.ops.kernel_lab.linear_cross_entropy``) that need not hold the logits."""

from __future__ import annotations

import torch

from kernel_lab.base.errors import UnsupportedInputError, not_a_tensor
from kernel_lab.base.inputs import acc_dtype
from kernel_lab.core import custom_ops, registry
from kernel_lab.core.dispatch import AUTO
from kernel_lab.ops.cross_entropy.api import check_kw_types
from kernel_lab.ops.linear_cross_entropy.op import check_all, check_inputs
from kernel_lab.ops.linear_cross_entropy.torch_variants import chunked_forward, scale_

linear_cross_entropy_op = custom_ops.define("linear_cross_entropy")
CHUNKED = "torch_chunked_linear_cross_entropy"


class _GradsInForward(torch.autograd.Function):
    """The chunked variant's training step: each chunk's dlogits are formed in the forward
    (over its logits, by the CUDA cross-entropy kernel where it runs) and turned into dhidden
    and dweight at once, so the backward is one scale of those by the upstream gradient, not
    a second pass of matmuls, scaling them in place (so it runs once: a second backward, as
    retain_graph asks, raises). For "mean" and "sum" (a per-row "none" gradient is not known
    until the backward: that reduction recomputes through the backward op), and only when no
    backward variant is named."""

    @staticmethod
    def forward(ctx, hidden, weight, bias, target, ignore_index, reduction, eps, softcap):
        # the mean's 1 / max(kept rows, 1) goes into each chunk's gradient as it is formed (no
        # row kept: every row's gradient is 0 already, torch's answer), so the backward of
        # loss.backward()'s 1 reads nothing; not in fp16, whose dlogits / rows would underflow
        # (scaled in the backward)
        den = inv = None
        if reduction == "mean":
            den = (target != ignore_index).sum().clamp_min(1)
            if hidden.dtype != torch.float16:
                inv, den = 1 / den.to(acc_dtype(hidden.dtype)), None
        loss, _lse, dh, dw, db = chunked_forward(hidden, weight, target, bias, ignore_index,
                                                 reduction, eps, softcap, with_grads=True,
                                                 grad_scale=inv)
        ctx.grads, ctx.den = (dh, dw, db), den
        return loss

    @staticmethod
    def backward(ctx, g):
        grads, ctx.grads = ctx.grads, None
        if grads is None:
            raise RuntimeError("linear_cross_entropy: the gradients formed in the forward were "
                               "used by a first backward; for retain_graph / higher order, "
                               "name a backward_variant")
        s = g.float() if g.dtype != torch.float64 else g
        if ctx.den is not None:
            s = s / ctx.den  # (max(kept rows, 1): no row kept, a zero gradient, as torch's)
        out = [scale_(t, s) if t is not None and need else None
               for t, need in zip(grads, ctx.needs_input_grad[:3])]
        return (*out, None, None, None, None, None)


def _grads_in_forward(tensors: tuple, reduction: str, variant, backward_variant) -> bool:
    hidden, weight, _t, bias = tensors
    return (reduction != "none" and torch.is_grad_enabled()
            and any(t is not None and t.requires_grad for t in (hidden, weight, bias))
            and variant in (None, AUTO, CHUNKED)
            and backward_variant in (None, AUTO)
            and hidden.numel() > 0 and weight.shape[0] > 0
            and custom_ops.eager_fast_path(*tensors))


def linear_cross_entropy(hidden: torch.Tensor, weight: torch.Tensor, target: torch.Tensor,
                         bias: torch.Tensor | None = None, ignore_index: int = -100,
                         reduction: str = "mean", label_smoothing: float = 0.0,
                         softcap: float | None = None, variant: str | None = None, *,
                         backward_variant: str | None = None) -> torch.Tensor:
    """``F.cross_entropy(hidden @ weight.T + bias, target, ignore_index=, reduction=,
    label_smoothing=)`` (logits capped as ``softcap * tanh(z / softcap)`` when given: Gemma 2),
    differentiable in hidden, weight and bias, without holding the (tokens, V) logits.

    ``hidden`` is (..., d) and ``target`` (...) class indices; ``weight`` (V, d) as in
    ``nn.Linear``; ``bias`` (V,) or None. The loss comes back in hidden's dtype ("none": shaped
    like target). ``variant`` / ``backward_variant``: a ``linear_cross_entropy`` /
    ``linear_cross_entropy_backward`` variant, or None / ``"auto"`` (the chunked one). A
    mismatched d, mixed dtypes or a target outside [0, V) that is not ``ignore_index`` raise
    before anything runs (the last is one host sync, skipped inside
    ``kernel_lab.core.registry.trusted_inputs()`` and under torch.compile).

    With the chunked (or "auto") variant, no backward variant named and a "mean" / "sum" loss
    that needs gradients, an eager call forms the gradients in its forward, chunk by chunk, the
    mean's division included (the backward only scales them by the upstream gradient, on the
    device, reading nothing when it is 1; once: name a backward_variant for retain_graph).
    """
    where = "kernel_lab.linear_cross_entropy"
    for arg, t in (("hidden", hidden), ("weight", weight), ("target", target), ("bias", bias)):
        if not isinstance(t, torch.Tensor) and (t is not None or arg != "bias"):
            raise not_a_tensor(where, arg, t)
    check_kw_types(where, ignore_index, reduction, label_smoothing, softcap)
    if hidden.dim() < 1 or tuple(target.shape) != tuple(hidden.shape[:-1]):
        raise UnsupportedInputError(
            f"{where} takes hidden (..., d) and target (...) of the same leading shape, got "
            f"{tuple(hidden.shape)} and {tuple(target.shape)}")
    out_shape = target.shape
    h = hidden.reshape(-1, hidden.shape[-1])
    t = target.reshape(-1)
    cap = 0.0 if softcap is None else float(softcap)
    eps = float(label_smoothing)
    kw = {"ignore_index": ignore_index, "reduction": reduction, "label_smoothing": eps,
          "softcap": cap}
    tensors = (h, weight, t, bias)
    if torch.compiler.is_compiling():  # shapes checked here; targets inside the graph's variant
        reason = check_inputs(h, weight, t, bias, softcap=cap)
        if reason is not None:
            raise ValueError(f"linear_cross_entropy: {reason}")
        loss = custom_ops.call("linear_cross_entropy", tensors, kw, variant,
                               backward_variant)[0]
    else:
        check_all(h, weight, t, bias, ignore_index, reduction, eps, cap)
        with registry.trusted_inputs():
            if _grads_in_forward(tensors, reduction, variant, backward_variant):
                loss = _GradsInForward.apply(h, weight, bias, t, ignore_index, reduction, eps,
                                             cap)
            else:
                loss = custom_ops.call("linear_cross_entropy", tensors, kw, variant,
                                       backward_variant)[0]
    return loss.reshape(out_shape) if reduction == "none" else loss


class LinearCrossEntropyLoss(torch.nn.Module):
    """The LM-head loss as a module: ``forward(hidden, weight, target, bias=None)``."""

    def __init__(self, ignore_index: int = -100, reduction: str = "mean",
                 label_smoothing: float = 0.0, softcap: float | None = None,
                 variant: str | None = None, backward_variant: str | None = None) -> None:
        super().__init__()
        from kernel_lab.ops.cross_entropy.op import check_kwargs

        check_kw_types("kernel_lab.LinearCrossEntropyLoss", ignore_index, reduction,
                       label_smoothing, softcap)
        check_kwargs(ignore_index, reduction, label_smoothing)
        self.ignore_index, self.reduction = ignore_index, reduction
        self.label_smoothing, self.softcap = label_smoothing, softcap
        self.variant, self.backward_variant = variant, backward_variant

    def forward(self, hidden: torch.Tensor, weight: torch.Tensor, target: torch.Tensor,
                bias: torch.Tensor | None = None) -> torch.Tensor:
        return linear_cross_entropy(hidden, weight, target, bias, self.ignore_index,
                                    self.reduction, self.label_smoothing, self.softcap,
                                    self.variant, backward_variant=self.backward_variant)

    def extra_repr(self) -> str:
        return (f"ignore_index={self.ignore_index}, reduction={self.reduction!r}, "
                f"label_smoothing={self.label_smoothing}, softcap={self.softcap}, "
                f"variant={self.variant or 'auto'!r}")
