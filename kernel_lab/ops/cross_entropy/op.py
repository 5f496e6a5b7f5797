"""The cross-entropy ops: float64 references, inputs, bytes, edge cases and the target check.

``cross_entropy(logits, target, weight)`` with keywords ``ignore_index``, ``reduction`` and
``label_smoothing`` follows ``torch.nn.functional.cross_entropy`` over 2-D logits (M rows of
C classes). Per row i, with lse = log(sum_j exp(x_j)), t = target[i], eps = label_smoothing:

    loss_i = (1 - eps) * w_t * (lse - x_t) + eps / C * sum_j w_j * (lse - x_j)

(w = 1 without weights), 0 where t == ignore_index; "mean" divides the sum by the sum of w_t over
the rows not ignored (0 / 0 = NaN when every row is ignored, like PyTorch), "sum" sums, "none"
keeps the rows. The op returns ``(loss, lse)``: loss in the logits' dtype, lse in float32 for
every row - what the backward reads instead of the logits' softmax.

``cross_entropy_backward(logits, target, weight, lse, grad)`` gives dlogits; with p = exp(x - lse)
and s_i the upstream gradient of row i (grad, or grad / the mean's denominator; 0 if ignored):

    dx_j = s_i * ((1 - eps) * w_t * (p_j - [j == t]) + eps / C * (sum(w) * p_j - w_j))

lse is kept in float64 for fp32 and fp64 logits (float32 for 2-byte ones), summed from the row's
max and log(sum) without rounding; the backward splits it into an fp32 pair (hi, lo) and takes
p = exp((x - hi) - lo), so x - lse is exact to the rounding of the difference, not of |lse|: the
fp32 gradient is as exact as PyTorch's (from (x - max) - log(sum)) at any logit magnitude.

Targets outside [0, C) that are not ``ignore_index``: the CUDA and Triton kernels never read
outside a row for such a target; they give it a NaN loss and gradient and flag it
(:mod:`.deferred`), and the next call raises - how the drop-in runs by default, with no host
sync (:func:`deferred_targets`). Every forward variant run by name, the PyTorch and peer
variants always, and the drop-in with ``validate="sync"`` refuse them before launch instead
(:func:`check_targets`, one host sync). The backward variants do not check.
"""

from __future__ import annotations

import torch

from kernel_lab.base.errors import UnsupportedInputError
from kernel_lab.base.inputs import ALL_DTYPES, FLOAT_DTYPES, randn
from kernel_lab.core.contract import Autograd, Input, Op, Output
from kernel_lab.core.reference import Tolerance
from kernel_lab.core.registry import TRUST, ThreadSwitch, inputs_trusted, register_op
from kernel_lab.cuda import deferred, interop
from kernel_lab.ops.cross_entropy.auto import CROSS_ENTROPY_AUTO, CROSS_ENTROPY_BACKWARD_AUTO

__all__ = ["ALL_DTYPES", "FLOAT_DTYPES", "KWARGS", "REDUCTIONS", "check_targets",
           "deferred_targets", "DEFERRING"]

REDUCTIONS = ("mean", "sum", "none")
KWARGS = {"ignore_index": -100, "reduction": "mean", "label_smoothing": 0.0}

# Losses are sums of O(10) terms; fp16 / bf16 outputs are rounded once from fp32.
TOLERANCES: dict[torch.dtype, Tolerance] = {
    torch.float64: Tolerance(atol=1e-12, rtol=1e-9),
    torch.float32: Tolerance(atol=1e-5, rtol=1e-5),
    torch.float16: Tolerance(atol=1e-4, rtol=2e-3),
    torch.bfloat16: Tolerance(atol=1e-4, rtol=1.2e-2),
}
LSE_TOLERANCE = {d: Tolerance(atol=1e-5, rtol=1e-5) for d in FLOAT_DTYPES} | {
    torch.float64: Tolerance(atol=1e-12, rtol=1e-9)}  # fp32 accumulators whatever the input
GRAD_TOLERANCES: dict[torch.dtype, Tolerance] = {
    torch.float64: Tolerance(atol=1e-12, rtol=1e-9),
    torch.float32: Tolerance(atol=1e-9, rtol=1e-4),
    torch.float16: Tolerance(atol=1e-7, rtol=2e-3),
    torch.bfloat16: Tolerance(atol=1e-7, rtol=1.2e-2),
}


def lse_dtype(dtype: torch.dtype) -> torch.dtype:
    """lse's dtype: float64 for fp32 and fp64 logits (module docstring), float32 for 2-byte
    ones (their gradient's rounding dominates)."""
    return torch.float64 if dtype in (torch.float32, torch.float64) else torch.float32


def row_lse(x: torch.Tensor) -> torch.Tensor:
    """Per row of fp32 / fp64 / fp16 / bf16 ``x``: max + log(sum(exp(x - max))) in fp32 (fp64
    for fp64), the sum taken in ``lse_dtype`` so that it is not rounded to fp32 (-inf for a row
    of -inf or no classes, +inf for +inf, NaN for NaN, as torch.logsumexp)."""
    acc = torch.float64 if x.dtype == torch.float64 else torch.float32
    out = lse_dtype(x.dtype)
    x = x.to(acc)
    if x.shape[1] == 0:
        return torch.full(x.shape[:1], float("-inf"), dtype=out, device=x.device)
    m = x.amax(1)
    ms = torch.where(torch.isinf(m), 0.0, m)  # never inf - inf
    log_sum = torch.log(torch.exp(x - ms[:, None]).sum(1))
    return ms.to(out) + log_sum.to(out)


def split_lse(lse: torch.Tensor, acc: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """(hi, lo) in ``acc`` with hi + lo = lse (lo = 0 when lse is already ``acc``): the
    backward's p = exp((x - hi) - lo)."""
    hi = lse.to(acc)
    return hi, (lse - hi.to(lse.dtype)).to(acc)


def check_kwargs(ignore_index: int, reduction: str, label_smoothing: float) -> None:
    """Refuse keywords PyTorch refuses, with its wording."""
    if reduction not in REDUCTIONS:
        raise ValueError(f"{reduction} is not a valid value for reduction")
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"label_smoothing must be between 0.0 and 1.0. Got: {label_smoothing}")


_deferring = ThreadSwitch()
DEFERRING = _deferring  # the switch deferred_targets() turns on (the drop-in sets it inline)


def deferred_targets():
    """Inside, the variants whose kernels flag a bad target (:mod:`.deferred`: the CUDA and
    Triton forwards) skip the synchronizing check; the others still check. What the drop-in
    does by default (``validate="async"``)."""
    return _deferring.turned_on()


def check_targets(logits: torch.Tensor, target: torch.Tensor, ignore_index: int,
                  deferrable: bool = False) -> None:
    """Raise UnsupportedInputError for a target outside [0, C) that is not ignore_index: one
    host sync. Skipped while a CUDA graph is captured (the kernels then give that row NaN),
    inside ``registry.trusted_inputs()`` (the drop-in checked them; the benchmark made them),
    for a ``deferrable`` caller (a kernel that flags bad rows) inside :func:`deferred_targets`,
    and for targets the input contract refuses (not one integer per row, another device)."""
    if (not isinstance(target, torch.Tensor) or target.numel() == 0
            or target.dim() != 1 or target.device != logits.device
            or target.dtype.is_floating_point or target.dtype == torch.bool):
        return
    # a plan's replay of this call (kernel_lab.core.plans) runs none of what follows: it may
    # replay only in the modes that skip the check, and never a call that checked
    interop.guard(TRUST, "on")
    if deferrable:
        interop.guard(_deferring, "on")
    if inputs_trusted() or (deferrable and _deferring.on):
        return
    interop.refuse_replay()
    if target.is_cuda and torch.cuda.is_current_stream_capturing():
        return
    c = logits.shape[1]
    bad = ((target < 0) | (target >= c)) & (target != ignore_index)
    if bool(bad.any()):
        i = int(bad.nonzero()[0, 0])
        raise UnsupportedInputError(
            f"target[{i}] = {int(target[i])} is out of range for {c} classes "
            f"(ignore_index = {ignore_index})")


def check_call(logits, target, ignore_index, reduction, label_smoothing, deferrable=False):
    """What every variant checks first: the keywords, a bad target a kernel flagged earlier
    (:mod:`kernel_lab.cuda.deferred`), and the targets too unless ``deferrable`` (a kernel that
    flags bad rows, given classes to run on: C = 0 launches nothing) and deferred
    (:func:`deferred_targets`). Returns the targets as int64."""
    check_kwargs(ignore_index, reduction, label_smoothing)
    deferred.raise_pending()  # a bad target an earlier kernel flagged
    check_targets(logits, target, ignore_index, deferrable and logits.shape[-1] > 0)
    return target.long()


def cross_entropy_reference(logits, target, weight=None, ignore_index=-100, reduction="mean",
                            label_smoothing=0.0):
    """(loss, lse) in float64: PyTorch's cross_entropy on float64 copies, and logsumexp."""
    x = logits.detach().double()
    w = weight.detach().double() if weight is not None else None
    t = target.long()
    if x.shape[1] == 0:  # no classes: every row must be ignored (check_targets)
        loss = torch.zeros(x.shape[0], dtype=torch.float64, device=x.device)
        loss = {"none": loss, "sum": loss.sum(), "mean": loss.sum() / 0.0}[reduction]
    else:
        loss = torch.nn.functional.cross_entropy(x, t, weight=w, ignore_index=ignore_index,
                                                 reduction=reduction,
                                                 label_smoothing=label_smoothing)
    return loss.to(logits.device), torch.logsumexp(x, dim=1).to(logits.device)


def target_weights(target, weight, ignore_index: int, dtype: torch.dtype):
    """(keep, t, w_t) per row: not ignored; the target, 0 where ignored (always an index);
    the weight of that target in ``dtype`` (1 without weights)."""
    keep = target != ignore_index
    t = torch.where(keep, target.long(), 0)
    wt = weight.to(dtype)[t] if weight is not None else torch.ones(
        target.shape, dtype=dtype, device=target.device)
    return keep, t, wt


def _class_weights(weight, x: torch.Tensor) -> torch.Tensor:
    """The class weights in float64, ones without them."""
    return weight.detach().double() if weight is not None else torch.ones(
        x.shape[1], dtype=torch.float64, device=x.device)


def _row_scale(logits, target, weight, ignore_index, label_smoothing) -> torch.Tensor:
    """Per row, the size of the terms a row's loss is the difference of (|lse| + |x_t| and
    the smoothing sum's), the magnitude its rounding is relative to."""
    x = logits.detach().double()
    if x.shape[1] == 0:
        return torch.zeros(x.shape[0], dtype=torch.float64, device=x.device)
    keep, tt, wt = target_weights(target, weight, ignore_index, torch.float64)
    w = _class_weights(weight, x)
    xf = torch.where(torch.isfinite(x), x, 0.0)
    lse = torch.logsumexp(x, 1).nan_to_num(0.0, 0.0, 0.0).abs()
    nll = wt * (lse + xf.gather(1, tt[:, None])[:, 0].abs())
    smooth = (xf.abs() * w).sum(1) / x.shape[1] + lse * w.abs().sum() / x.shape[1]
    return torch.where(keep, nll + label_smoothing * smooth, 0.0)


def loss_error_scale(logits, target, weight=None, ignore_index=-100, reduction="mean",
                     label_smoothing=0.0):
    """The loss's error scale, reduced as the loss is."""
    s = _row_scale(logits, target, weight, ignore_index, label_smoothing)
    if reduction == "none":
        return s.to(logits.device)
    total = s.sum()
    if reduction == "mean":
        keep, _, wt = target_weights(target, weight, ignore_index, torch.float64)
        den = wt[keep].sum()
        total = total / den if den else total
    return total.to(logits.device)


def make_targets(m: int, c: int, device, generator, ignore_index: int = -100) -> torch.Tensor:
    """Random classes in [0, C), every 5th row ignore_index (all of them when C = 0)."""
    t = torch.randint(0, max(c, 1), (m,), generator=generator)
    t[::5] = ignore_index
    if c == 0:
        t[:] = ignore_index
    return t.to(device)


def cross_entropy_inputs(shape, dtype, device="cpu", generator=None):
    """(logits, target): N(0, 2^2) logits of ``shape`` as (rows, classes), random targets."""
    c = shape[-1] if len(shape) else 1
    m = 1
    for s in shape[:-1]:
        m *= s
    logits = randn((m, c), dtype, device, generator)
    return logits, make_targets(m, c, device, generator)


def cross_entropy_bytes(logits, target, weight=None, **kw) -> int:
    """Read the logits once (targets and outputs are O(rows))."""
    return logits.numel() * logits.element_size()


def _edge_logits(dtype, device, generator):
    x = randn((9, 781), dtype, device, generator)
    x[0, ::3] = float("-inf")  # -inf logits (never the target's)
    x[1] += 1e4 if dtype in (torch.float32, torch.float64) else 3e3  # huge shift: lse ~ 1e4
    x[2, ::2], x[2, 1::2] = 30.0, -30.0  # wide spread
    x[3, 17] = 80.0 if dtype != torch.float16 else 11.0  # one dominant logit (the target's)
    x[4, :700] = float("-inf")  # a long -inf prefix
    # |logits| in the hundreds: the fp32 gradient must not lose ulp(|lse|) (fp16: up to ~45;
    # PyTorch's fp16 smoothing sum, 781 terms of about lse - x, overflows 65504 from ~80)
    x[6] *= 100 if dtype != torch.float16 else 5
    return x


def cross_entropy_edge_cases(dtype, device="cpu", generator=None) -> list:
    """Weights, smoothing, every reduction, ignored rows, all rows ignored, -inf and huge
    logits, one class, a single row."""
    x = _edge_logits(dtype, device, generator)
    t = torch.tensor([1, 5, 0, 17, 750, -100, 3, 780, 2], device=device)
    w = (torch.rand(781, generator=generator) + 0.5).to(device=device, dtype=dtype)
    cases = []
    for red in REDUCTIONS:
        cases.append((f"edges_{red}", (x, t), {"reduction": red}))
        cases.append((f"weighted_{red}", (x, t, w), {"reduction": red}))
        cases.append((f"smoothed_{red}", (x, t), {"reduction": red, "label_smoothing": 0.1}))
        cases.append((f"weighted_smoothed_{red}", (x, t, w),
                      {"reduction": red, "label_smoothing": 0.25}))
    ignored = torch.full_like(t, 7)
    cases.append(("all_ignored_mean", (x, ignored), {"ignore_index": 7}))
    cases.append(("all_ignored_sum", (x, ignored), {"ignore_index": 7, "reduction": "sum"}))
    one = randn((6, 1), dtype, device, generator)
    cases.append(("one_class", (one, torch.zeros(6, dtype=torch.long, device=device)), {}))
    if dtype == torch.bfloat16:  # near bf16's largest: an exp's shifted argument must not overflow
        huge = randn((3, 40), dtype, device, generator) * 1e37
        huge[0, 3] = 3e38
        huge[1:, 0] = huge[1:].abs().amax(1) * 2  # one max a row (module docstring: fp32 lse)
        cases.append(("huge_bf16", (huge, torch.tensor([3, 0, 39], device=device)), {}))
    row = randn((1, 50), dtype, device, generator)
    cases.append(("single_row", (row, torch.tensor([49], device=device)), {}))
    cases.append(("int32_target", (x, t.int()), {"reduction": "sum"}))
    return cases


def cross_entropy_backward_reference(logits, target, weight, lse, grad, ignore_index=-100,
                                     reduction="mean", label_smoothing=0.0):
    """dlogits in float64 by autograd through PyTorch's float64 cross_entropy (lse unused)."""
    x = logits.detach().double().requires_grad_(True)
    w = weight.detach().double() if weight is not None else None
    if x.shape[1] == 0:
        return torch.zeros_like(x).to(logits.device)
    loss = torch.nn.functional.cross_entropy(x, target.long(), weight=w,
                                             ignore_index=ignore_index, reduction=reduction,
                                             label_smoothing=label_smoothing)
    (dx,) = torch.autograd.grad(loss, x, grad.detach().double())
    return dx.to(logits.device)


def backward_error_scale(logits, target, weight, lse, grad, ignore_index=-100,
                         reduction="mean", label_smoothing=0.0):
    """|s_i| * (a_i * p_j + terms subtracted): the size of what dx is the difference of."""
    x = logits.detach().double()
    if x.shape[1] == 0:
        return torch.zeros_like(x).to(logits.device)
    p = torch.softmax(x, 1).nan_to_num(0.0)
    keep, _, wt = target_weights(target, weight, ignore_index, torch.float64)
    w = _class_weights(weight, x)
    g = grad.detach().double()
    s = g.expand(x.shape[0]) if g.dim() == 0 else g
    if reduction == "mean":
        den = wt[keep].sum()
        s = s / den if den else s
    s = torch.where(keep, s.abs(), 0.0)
    c = x.shape[1]
    a = (1 - label_smoothing) * wt + label_smoothing / c * w.sum()
    return (s[:, None] * (a[:, None] * p + w.abs() * (1 + label_smoothing / c))).to(
        logits.device)


def cross_entropy_backward_inputs(shape, dtype, device="cpu", generator=None):
    """(logits, target, None, lse, grad) for the default "mean" reduction: grad a random 0-d."""
    logits, target = cross_entropy_inputs(shape, dtype, device, generator)
    lse = torch.logsumexp(logits.to(lse_dtype(dtype)), dim=1)
    grad = (torch.rand((), generator=generator) + 0.5).to(device)
    return logits, target, None, lse, grad


def cross_entropy_backward_bytes(logits, target, weight, lse, grad, **kw) -> int:
    """Read the logits once, write dlogits once."""
    return 2 * logits.numel() * logits.element_size()


def cross_entropy_backward_edge_cases(dtype, device="cpu", generator=None) -> list:
    """The forward's edge cases with a random upstream gradient of the reduction's shape."""
    cases = []
    for label, inputs, kw in cross_entropy_edge_cases(dtype, device, generator):
        x, t, w = (*inputs, None)[:3]
        lse = torch.logsumexp(x.to(lse_dtype(dtype)), dim=1)
        shape = (x.shape[0],) if kw.get("reduction") == "none" else ()
        g = (torch.rand(shape, generator=generator) + 0.5).to(device)
        cases.append((label, (x, t, w, lse, g), kw))
    return cases


def row_scale(target, weight, grad, ignore_index: int, reduction: str, dtype):
    """s_i: each row's upstream gradient (the mean's denominator divided out; 0 if ignored)
    and w_t, as ``dtype`` vectors."""
    keep, t, wt = target_weights(target, weight, ignore_index, dtype)
    s = grad.to(dtype).expand(target.shape)
    if reduction == "mean":
        s = s / torch.where(keep, wt, 0.0).sum()
    return torch.where(keep, s, 0.0), wt, t


def cross_entropy_backward_math(logits, target, weight, lse, grad, ignore_index: int,
                                reduction: str, label_smoothing: float):
    """dx = s * ((1 - eps) * w_t * (p - onehot) + eps / C * (sum(w) * p - w))."""
    acc = torch.float64 if logits.dtype == torch.float64 else torch.float32
    x = logits.to(acc)
    c = x.shape[1]
    s, wt, t = row_scale(target, weight, grad, ignore_index, reduction, acc)
    hi, lo = split_lse(lse, acc)
    p = torch.exp((x - hi[:, None]) - lo[:, None])
    a = (1 - label_smoothing) * wt
    if label_smoothing:
        wsum = weight.to(acc).sum() if weight is not None else torch.tensor(float(c), dtype=acc)
        a = a + label_smoothing / c * wsum
    dx = a[:, None] * p
    dx = dx.scatter_add(1, t[:, None], -((1 - label_smoothing) * wt)[:, None])
    if label_smoothing:
        dx = dx - label_smoothing / c * (weight.to(acc) if weight is not None else 1.0)
    return (s[:, None] * dx).to(logits.dtype)


def cross_entropy_double_backward(saved, gg, kw):
    """Gradients of the backward op's dlogits (the second derivative) by autograd through the
    PyTorch formula, with lse recomputed from the logits: the saved lse is a function of them
    (a non-differentiable output of the forward), so its path is taken here. None for the
    target, the weights and lse."""
    logits, target, weight, _lse, grad = saved
    acc = lse_dtype(logits.dtype)
    x = logits.detach().requires_grad_()
    g = grad.detach().requires_grad_()
    with torch.enable_grad():
        if x.shape[1] == 0:
            return None, None, None, None, None
        dx = cross_entropy_backward_math(x, target, weight, torch.logsumexp(x.to(acc), 1), g,
                                         kw["ignore_index"], kw["reduction"],
                                         kw["label_smoothing"])
        gx, gg_grad = torch.autograd.grad(dx, (x, g), gg.to(dx.dtype), allow_unused=True)
    return gx, None, None, None, gg_grad


def _save(inputs, out, kw):
    logits, target, weight = inputs
    return logits, target, weight, out[1]


def _backward_inputs(saved, grad, kw):
    logits, target, weight, lse = saved
    return logits, target, weight, lse, grad


CROSS_ENTROPY = register_op(
    Op(
        name="cross_entropy",
        reference=cross_entropy_reference,
        make_inputs=cross_entropy_inputs,
        bytes_moved=cross_entropy_bytes,
        description="F.cross_entropy(logits, target): (loss, lse) over (rows, classes)",
        kwargs=dict(KWARGS),
        edge_cases=cross_entropy_edge_cases,
        tolerances=TOLERANCES,
        inputs=(Input("logits"), Input("target", role="index"),
                Input("weight", role="column", optional=True)),
        outputs=(Output("loss", error_scale=loss_error_scale,
                        empty=lambda logits, target, weight=None, reduction="mean", **kw:
                        logits.new_empty((logits.shape[0],) if reduction == "none" else ())),
                 Output("lse", tolerances=LSE_TOLERANCE, differentiable=False, dtype=lse_dtype,
                        empty=lambda logits, *a, **kw: logits.new_empty(
                            logits.shape[:1], dtype=lse_dtype(logits.dtype)))),
        auto=CROSS_ENTROPY_AUTO,
        autograd=Autograd(save=_save, backward="cross_entropy_backward",
                          backward_inputs=_backward_inputs),
    )
)

CROSS_ENTROPY_BACKWARD = register_op(
    Op(
        name="cross_entropy_backward",
        reference=cross_entropy_backward_reference,
        make_inputs=cross_entropy_backward_inputs,
        bytes_moved=cross_entropy_backward_bytes,
        description="dlogits of cross_entropy from logits, target, weight, lse and grad",
        kwargs=dict(KWARGS),
        edge_cases=cross_entropy_backward_edge_cases,
        tolerances=GRAD_TOLERANCES,
        error_scale=backward_error_scale,
        inputs=(Input("logits"), Input("target", role="index"),
                Input("weight", role="column", optional=True), Input("lse", role="per_row"),
                Input("grad", role="free")),
        outputs=(Output("dlogits"),),
        auto=CROSS_ENTROPY_BACKWARD_AUTO,
        autograd=Autograd(save=lambda inputs, dx, kw: inputs,
                          formula=cross_entropy_double_backward),
    )
)
