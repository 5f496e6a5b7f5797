"""``kernel_lab.cross_entropy`` and ``kernel_lab.CrossEntropyLoss``: drop-ins for
``F.cross_entropy`` and ``torch.nn.CrossEntropyLoss``, differentiable (twice) and compilable
(``torch.ops.kernel_lab.cross_entropy``), with no host synchronization in a training step."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from kernel_lab.base.errors import UnsupportedInputError, not_a_tensor, wrong_type
from kernel_lab.core import custom_ops, plans, registry
from kernel_lab.cuda import deferred
from kernel_lab.ops.cross_entropy import cuda_variants as cv
from kernel_lab.ops.cross_entropy.op import DEFERRING, REDUCTIONS, check_kwargs, check_targets

cross_entropy_op = custom_ops.define("cross_entropy")


VALIDATE = ("async", "sync")


class _Fused(torch.autograd.Function):
    """The gradient in the forward: the forward kernel writes the gradient for a unit upstream
    gradient, over the logits (``in_place``: the memory-saving mode) or into a fresh buffer (the
    default step, :data:`DEFAULT_FUSED`: two passes over the logits instead of three); the
    backward scales it in place on the device (a kernel that reads the upstream gradient and
    does nothing when it is 1: no host sync) and hands the buffer back as dlogits. A double
    backward (``create_graph=True``) or a second backward through a retained graph recomputes
    through the plain op; in place it cannot (the logits are gone) and raises."""

    @staticmethod
    def forward(ctx, logits, target, weight, step, one, kw):
        # step: the launcher's recorded call for this signature, kw its keywords (_fused_step)
        out = step((logits, target, weight, one), kw)  # (loss, dlogits), in place (loss,)
        in_place = kw["in_place"]
        loss, dx = out[0], logits if in_place else out[-1]
        ctx.dx, ctx.none, ctx.in_place = dx, kw["reduction"] == "none", in_place
        if not in_place:  # for a double backward only
            ctx.save_for_backward(logits, target, weight)
            ctx.kw = {"ignore_index": kw["ignore_index"], "reduction": kw["reduction"],
                      "label_smoothing": kw["eps"]}
        return loss

    @staticmethod
    def backward(ctx, g):
        again = ctx.dx is None  # a second backward through a retained graph
        create = torch.is_grad_enabled()  # create_graph: a double backward
        if create or again:
            if ctx.in_place:
                raise RuntimeError(
                    "kernel_lab.cross_entropy(inplace_backward=True) has no "
                    + ("double backward (create_graph=True)" if create else
                       "second backward (its gradient overwrote the logits)")
                    + ": call it without inplace_backward")
            ctx.dx = None  # recomputed through the plain op, differentiable when asked
            logits, target, weight = ctx.saved_tensors
            with torch.enable_grad():
                loss = custom_ops.call("cross_entropy", (logits, target, weight), ctx.kw)[0]
                (dx,) = torch.autograd.grad(loss, logits, g, create_graph=create)
            return dx, None, None, None, None, None
        dx, ctx.dx = ctx.dx, None
        if ctx.none:
            dx.mul_(g.to(dx.dtype)[:, None])
        else:  # cuda_variants.scale, its launch recorded once a signature and replayed
            plans.for_launcher(cv.scale, (dx, g), {})((dx, g), {})
        # a new tensor over the buffer: autograd may keep it as a leaf's .grad without a copy
        return dx.detach(), None, None, None, None, None


# The default training step writes the gradient in the forward (_Fused, not in place) wherever
# the fused mode applies: two passes over the logits instead of three, and its launches replay
# from a plan (plans.for_launcher) as the plain op's do. H100, default bf16 step, 3-pass ->
# fused: 512 x 32000 357 -> 298 us, 4096 x 32000 365 -> 295, 1024 x 151936 348 -> 305,
# 512 x 262144 340 -> 280; fp32 512 x 32000 293 -> 260 (and 1113 -> 749 at 1 GiB).
# DEFAULT_FUSED False: the forward reads the logits, the backward reads them again.
DEFAULT_FUSED = True


def _fused_applies(logits, target, weight, variant, backward_variant) -> bool:
    """Where the fused mode may run: eager CUDA logits with unit column stride, recorded by
    autograd, the CUDA kernels asked for (or "auto"); :func:`_fused_step` asks the rest."""
    return (logits.is_cuda and logits.requires_grad and torch.is_grad_enabled()
            and logits.stride(1) == 1 and logits.dtype != torch.float64
            and (logits.shape[0] <= 1 or logits.stride(0) >= logits.shape[1])
            and variant in (None, "auto", "cuda_cross_entropy")
            and backward_variant in (None, "auto", "cuda_cross_entropy_backward")
            and custom_ops.eager_fast_path(logits, target, weight))


def _fused_step(logits, target, weight, kw):
    """(the fused step's recorded forward, the 0-d 1 it reads) for this call signature and
    :func:`cuda_variants.fused_step`'s keywords ``kw``: its plan (``plans.for_launcher``: one
    lookup a call, the launches replayed), or (None, one) where ``cuda_cross_entropy`` does not
    take the tensors (or CuPy is missing)."""
    one = cv.unit(logits.device, logits.dtype)
    step = plans.for_launcher(
        cv.fused_step, (logits, target, weight, one), kw,
        lambda: plans.runs("cuda_cross_entropy", (logits, target, weight), {}))
    return step, one


def _as_rows(logits: torch.Tensor, target: torch.Tensor):
    """(rows, classes) logits and one target a row from F.cross_entropy's shapes: (C,) with a
    0-d target; (N, C); (N, C, d1, ...) with (N, d1, ...) (class dim 1: moved last, a view when
    the layout allows (channels-last), else a copy). None when they do not fit."""
    if logits.dim() == 1 and target.dim() == 0:
        return logits[None], target.reshape(1)
    if logits.dim() == 2 and target.dim() == 1:
        return logits, target
    if logits.dim() > 2 and target.shape == logits.shape[:1] + logits.shape[2:]:
        c = logits.shape[1]
        return logits.movedim(1, -1).reshape(-1, c), target.reshape(-1)
    return None


WHERE = "kernel_lab.cross_entropy"


def check_kw_types(where: str, ignore_index, reduction, label_smoothing, softcap=None) -> None:
    """Raise the lab's TypeError (:class:`~kernel_lab.base.errors.InputTypeError`) for a keyword of
    the wrong type; the values are checked after (``check_kwargs``, PyTorch's words). Where
    the types are right it costs four type() tests."""
    if (type(ignore_index) is int and type(reduction) is str
            and type(label_smoothing) in (float, int) and softcap is None):
        return
    if isinstance(ignore_index, bool) or not hasattr(type(ignore_index), "__index__"):
        raise wrong_type(where, "ignore_index", ignore_index, "an int")
    if not isinstance(reduction, str):
        raise wrong_type(where, "reduction", reduction, "'mean', 'sum' or 'none'")
    for arg, v in (("label_smoothing", label_smoothing), ("softcap", softcap or 0.0)):
        if not isinstance(v, (int, float)) and not hasattr(type(v), "__float__"):
            raise wrong_type(where, arg, v, "a float")


def cross_entropy(logits: torch.Tensor, target: torch.Tensor,
                  weight: torch.Tensor | None = None, ignore_index: int = -100,
                  reduction: str = "mean", label_smoothing: float = 0.0,
                  variant: str | None = None, *,
                  backward_variant: str | None = None,
                  inplace_backward: bool = False, validate: str = "async") -> torch.Tensor:
    """``F.cross_entropy(logits, target, weight, ignore_index=, reduction=, label_smoothing=)``
    computed by a lab variant. Accumulates in fp32; returns the loss in the logits' dtype.

    Shapes, as F.cross_entropy: logits (N, C) with class-index targets (N,); (C,) with a 0-d
    target; (N, C, d1, ...) with targets (N, d1, ...) - the class dim is moved last, a view
    when the layout allows (channels-last), else a copy of the logits. Class-probability
    targets (a float tensor shaped like the logits) run PyTorch's own F.cross_entropy (no lab
    kernel yet; ``variant`` is then ignored).

    ``variant``: a ``cross_entropy`` variant name, or None / ``"auto"`` for the best one for the
    logits (PyTorch's own off CUDA); ``backward_variant``: the same for
    ``cross_entropy_backward``.

    ``validate``, for a class index outside [0, C) that is not ``ignore_index``:

    * ``"async"`` (default): no host synchronization. The CUDA and Triton kernels give that
      row a NaN loss (and gradient) and flag it; the next ``kernel_lab`` cross-entropy call
      after the kernel has run raises UnsupportedInputError naming the first bad index
      (``kernel_lab.cuda.deferred``; CUDA-graph replays flag too). The PyTorch
      variants (CPU, or asked for by name) still check before they run.
    * ``"sync"``: checked before anything runs, one host sync per call (measured on an H200 at
      2^28 logits: a third of an fp32 step's time in a tight loop); the error is raised by the
      call itself. For debugging.

    Inside ``kernel_lab.core.registry.trusted_inputs()`` nothing is checked before the launch.

    A training step on CUDA logits (autograd recording, the CUDA kernels) writes the gradient
    for a unit upstream gradient in the forward, into a fresh buffer beside the logits: two
    passes over them instead of three, and a backward that only scales it on the device (no
    host sync). Its memory is held from the forward to the backward (1x the logits, as the
    backward's own dlogits would be); :data:`DEFAULT_FUSED` False gives the plain step.

    ``inplace_backward=True`` saves the memory of the gradient: the forward kernel writes
    dlogits over the logits (their values are gone after the call) and the backward returns
    that buffer, scaled on the device by the upstream gradient. It applies to eager CUDA logits
    that require grad; elsewhere (CPU, under ``torch.compile``, another variant) the call runs
    as without it. It has no double backward.
    """
    check_kw_types(WHERE, ignore_index, reduction, label_smoothing)
    if reduction not in REDUCTIONS or not 0.0 <= label_smoothing <= 1.0:
        check_kwargs(ignore_index, reduction, label_smoothing)  # raises, in PyTorch's words
    if validate not in VALIDATE:
        raise ValueError(f"validate must be one of {VALIDATE}, got {validate!r}")
    if not torch.compiler.is_compiling():  # a bad class index a kernel flagged: reported first
        for raised in deferred.RAISED:  # (deferred.raise_pending, read inline)
            if raised[0]:
                deferred.raise_pending()
    for arg, t in (("logits", logits), ("target", target)):
        if not isinstance(t, torch.Tensor):
            raise not_a_tensor(WHERE, arg, t)
    if target.is_floating_point() and target.shape == logits.shape:  # class probabilities
        return F.cross_entropy(logits, target, weight, reduction=reduction,
                               label_smoothing=label_smoothing)
    rows = _as_rows(logits, target)
    if rows is None:
        raise UnsupportedInputError(
            f"kernel_lab.cross_entropy takes logits (N, C), (C,) or (N, C, d1, ...) with targets "
            f"(N,), () or (N, d1, ...), got {tuple(logits.shape)} and {tuple(target.shape)}")
    x, t = rows
    loss = _rows_loss(x, t, weight, ignore_index, reduction, float(label_smoothing), variant,
                      backward_variant, inplace_backward, validate)
    if reduction == "none":
        return loss.reshape(target.shape)
    return loss


def _rows_loss(logits, target, weight, ignore_index, reduction, eps, variant, backward_variant,
               inplace_backward, validate):
    step = None
    if ((inplace_backward or DEFAULT_FUSED)
            and _fused_applies(logits, target, weight, variant, backward_variant)):
        kw = {"ignore_index": ignore_index, "reduction": reduction, "eps": eps,
              "in_place": inplace_backward, "with_lse": False}
        step, one = _fused_step(logits, target, weight, kw)
        if step is not None and (validate == "sync" or logits.shape[1] == 0):
            check_targets(logits, target, ignore_index)  # C = 0: no kernel runs to flag
    if step is None:
        kw = {"ignore_index": ignore_index, "reduction": reduction, "label_smoothing": eps}
        if torch.compiler.is_compiling():  # the variants check inside the compiled graph
            return custom_ops.call("cross_entropy", (logits, target, weight), kw, variant,
                                   backward_variant)[0]
        if validate == "sync":
            check_targets(logits, target, ignore_index)  # once: the variant then trusts them
            with registry.trusted_inputs():
                return custom_ops.call("cross_entropy", (logits, target, weight), kw, variant,
                                       backward_variant)[0]
    before, DEFERRING.on = DEFERRING.on, True  # op.deferred_targets(), inline: the per-step path
    try:
        if step is not None:
            return _Fused.apply(logits, target, weight, step, one, kw)
        return custom_ops.call("cross_entropy", (logits, target, weight), kw, variant,
                               backward_variant)[0]
    finally:
        DEFERRING.on = before


class CrossEntropyLoss(torch.nn.Module):
    """``torch.nn.CrossEntropyLoss`` run by a lab variant (:func:`cross_entropy`'s arguments)."""

    def __init__(self, weight: torch.Tensor | None = None, ignore_index: int = -100,
                 reduction: str = "mean", label_smoothing: float = 0.0,
                 variant: str | None = None, backward_variant: str | None = None,
                 inplace_backward: bool = False, validate: str = "async") -> None:
        super().__init__()
        check_kw_types("kernel_lab.CrossEntropyLoss", ignore_index, reduction, label_smoothing)
        check_kwargs(ignore_index, reduction, label_smoothing)
        if validate not in VALIDATE:
            raise ValueError(f"validate must be one of {VALIDATE}, got {validate!r}")
        self.validate = validate
        self.register_buffer("weight", weight)
        self.ignore_index, self.reduction = ignore_index, reduction
        self.label_smoothing = label_smoothing
        self.variant, self.backward_variant = variant, backward_variant
        self.inplace_backward = inplace_backward

    def forward(self, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return cross_entropy(logits, target, self.weight, self.ignore_index, self.reduction,
                             self.label_smoothing, self.variant,
                             backward_variant=self.backward_variant,
                             inplace_backward=self.inplace_backward, validate=self.validate)

    def extra_repr(self) -> str:
        return (f"ignore_index={self.ignore_index}, reduction={self.reduction!r}, "
                f"label_smoothing={self.label_smoothing}, variant={self.variant or 'auto'!r}")
