"""The LM-head loss ops: float64 references, inputs, bytes, edge cases and the input checks.

``linear_cross_entropy(hidden, weight, target, bias)`` with keywords ``ignore_index``,
``reduction``, ``label_smoothing`` and ``softcap`` is ``F.cross_entropy(z, target, ...)`` over the
logits ``z = hidden @ weight.T + bias`` (``cap * tanh(z / cap)`` when ``softcap`` > 0: Gemma 2's
soft cap; 0 means off, so the custom op's schema stays a float). ``hidden`` is (T, d), ``weight``
(V, d) as in ``nn.Linear``, ``bias`` (V,) or None, ``target`` (T,) class indices. The op returns
``(loss, lse)`` like ``cross_entropy``: loss in hidden's dtype, lse of the (capped) logits in fp32
for every row, what the backward recomputes the softmax from without another pass.

``linear_cross_entropy_backward(hidden, weight, target, bias, lse, grad)`` gives ``(dhidden,
dweight, dbias)`` (dbias is an empty (0,) tensor without a bias): with dz the cross-entropy
gradient of the logits (times ``1 - (z_c / cap)^2`` under the cap), dhidden = dz @ weight,
dweight = dz.T @ hidden, dbias = dz.sum(0). Every variant's logits stay inside it.

Targets outside [0, V) that are not ``ignore_index`` are refused before launch, as the
cross-entropy op does it (one host sync; skipped inside ``registry.trusted_inputs()``).
"""

from __future__ import annotations

import math

import torch

from kernel_lab.base.errors import UnsupportedInputError
from kernel_lab.base.inputs import acc_dtype, randn
from kernel_lab.core.contract import Autograd, Input, Op, Output
from kernel_lab.core.registry import register_op
from kernel_lab.ops.cross_entropy.op import (
    GRAD_TOLERANCES,
    REDUCTIONS,
    TOLERANCES,
    backward_error_scale,
    check_kwargs,
    check_targets,
    loss_error_scale,
    make_targets,
)
from kernel_lab.ops.linear_cross_entropy.auto import BACKWARD_AUTO, FORWARD_AUTO

__all__ = ["DTYPES", "KWARGS", "check_all", "check_inputs", "logits_reference"]

DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)
KWARGS = {"ignore_index": -100, "reduction": "mean", "label_smoothing": 0.0, "softcap": 0.0}
TEST_D = 40  # hidden size of the suites' inputs: two 32-wide K tiles, the second one ragged


def check_inputs(hidden, weight, target, bias=None, *rest, **kw) -> str | None:
    """Why (hidden, weight, target, bias) do not make an LM-head loss, or None: shapes and
    dtypes only (no sync). The registry's roles check devices and the target's shape."""
    if not isinstance(hidden, torch.Tensor) or hidden.dim() != 2:
        return "hidden must be a (tokens, d) tensor"
    if not isinstance(weight, torch.Tensor) or weight.dim() != 2:
        return "weight must be a (vocabulary, d) tensor, as nn.Linear's"
    if weight.shape[1] != hidden.shape[1]:
        return (f"weight is {tuple(weight.shape)} but hidden is {tuple(hidden.shape)}: "
                f"their last dims (d) differ")
    if weight.dtype != hidden.dtype:
        return f"weight is {weight.dtype}, hidden {hidden.dtype}: they must match"
    if bias is not None and (bias.dtype != hidden.dtype or tuple(bias.shape) != weight.shape[:1]):
        return f"bias must be a ({weight.shape[0]},) tensor of hidden's dtype"
    if not isinstance(target, torch.Tensor) or target.dim() != 1:
        return "target must be a (tokens,) integer tensor"
    softcap = kw.get("softcap", 0.0)
    if not (softcap >= 0.0 and math.isfinite(softcap)):
        return f"softcap must be a finite number >= 0 (0: off), got {softcap}"
    return None


def check_all(hidden, weight, target, bias, ignore_index: int, reduction: str,
              label_smoothing: float, softcap: float) -> None:
    """Raise before any launch: PyTorch's keyword errors, then shapes / dtypes, then targets
    out of [0, V) (one host sync, skipped inside ``trusted_inputs``)."""
    check_kwargs(ignore_index, reduction, label_smoothing)
    reason = check_inputs(hidden, weight, target, bias, softcap=softcap)
    if reason is not None:
        raise UnsupportedInputError(f"linear_cross_entropy: {reason}")
    # check_targets reads the class count from shape[1] and the device: weight.T is (d, V)
    check_targets(weight.t(), target, ignore_index)


def logits_reference(hidden, weight, bias=None, softcap=0.0) -> torch.Tensor:
    """The (capped) logits in float64."""
    z = hidden.detach().double() @ weight.detach().double().T
    if bias is not None:
        z = z + bias.detach().double()
    return softcap * torch.tanh(z / softcap) if softcap else z


def reference(hidden, weight, target, bias=None, ignore_index=-100, reduction="mean",
              label_smoothing=0.0, softcap=0.0):
    """(loss, lse) in float64: F.cross_entropy over the float64 logits, their logsumexp."""
    from kernel_lab.ops.cross_entropy.op import cross_entropy_reference

    z = logits_reference(hidden, weight, bias, softcap)
    return cross_entropy_reference(z, target, None, ignore_index, reduction, label_smoothing)


def error_scale(hidden, weight, target, bias=None, ignore_index=-100, reduction="mean",
                label_smoothing=0.0, softcap=0.0):
    """The loss's error scale: cross-entropy's over the float64 logits, plus the logits'
    own rounding (|h| @ |W|.T, what a matmul in the input dtype rounds relative to)."""
    z = logits_reference(hidden, weight, bias, softcap)
    zabs = hidden.detach().double().abs() @ weight.detach().double().abs().T
    s = loss_error_scale(z, target, None, ignore_index, reduction, label_smoothing)
    keep = (target != ignore_index).double()
    rows = zabs.amax(1) * keep if zabs.numel() else keep * 0
    extra = {"none": rows, "sum": rows.sum(), "mean": rows.sum() / keep.sum().clamp_min(1)}
    return s + extra[reduction].to(s.device)


def make_inputs(shape, dtype, device="cpu", generator=None, d: int = TEST_D):
    """(hidden, weight, target): ``shape`` read as (tokens..., vocabulary), hidden size ``d``;
    N(0, 4) hidden and weights scaled so the logits are N(0, ~4) too."""
    v = shape[-1] if len(shape) else 1
    t = math.prod(shape[:-1]) if len(shape) else 1
    hidden = randn((t, d), dtype, device, generator)
    weight = (randn((v, d), torch.float32, device, generator) / (2 * math.sqrt(d))).to(dtype)
    return hidden, weight, make_targets(t, v, device, generator)


def bench_inputs(shape, dtype, device="cpu", generator=None):
    """A benchmark cell's (hidden, weight, target): ``shape`` (tokens, hidden size,
    vocabulary), as the lm_head preset's; two dims read as :func:`make_inputs` does."""
    if len(shape) == 3:
        t, d, v = shape
        return make_inputs((t, v), dtype, device, generator, d=d)
    return make_inputs(shape, dtype, device, generator)


CHECK_TOKENS = 1024  # the benchmark's float64 check of a bigger cell: its first tokens


def check_slice(inputs: tuple) -> tuple:
    """The first CHECK_TOKENS tokens of a forward's or a backward's inputs (hidden, target and
    lse sliced; weight, bias and a reduced upstream gradient whole): the float64 logits of a
    whole lm-head cell (8192 x 128256: 8 GiB, with the check's intermediates several times
    that) would not fit beside it. Each token's loss depends on its own row only; dweight and
    dbias are checked as sums over the tokens checked."""
    h, t = inputs[0], inputs[2]
    k = CHECK_TOKENS
    if h.shape[0] <= k:
        return inputs
    out = [h[:k], inputs[1], t[:k], *inputs[3:]]
    if len(out) >= 6:  # the backward's (..., lse, grad): per-token lse; "none"'s grad per token
        out[4] = out[4][:k]
        if out[5].dim() == 1:
            out[5] = out[5][:k]
    return tuple(out)


def bytes_moved(hidden, weight, target, bias=None, **kw) -> int:
    """Read hidden and weight once (target, bias and the outputs are O(T + V))."""
    return (hidden.numel() + weight.numel()) * hidden.element_size()


def forward_flops(hidden, weight, *args, **kw) -> int:
    """The logits' matmul: 2 T d V."""
    return 2 * hidden.shape[0] * hidden.shape[1] * weight.shape[0]


def backward_flops(hidden, weight, *args, **kw) -> int:
    """Given the lse, not the logits: the logits again, dhidden and dweight, 6 T d V."""
    return 3 * forward_flops(hidden, weight)


def edge_cases(dtype, device="cpu", generator=None) -> list:
    """Bias, soft cap, smoothing, every reduction, ignored rows, all ignored, one class, one
    token, a huge logit, int32 targets."""
    h, w, t = make_inputs((9, 301), dtype, device, generator)
    b = randn((301,), dtype, device, generator)
    h[3] *= 8  # one row of large logits (|z| ~ 30)
    cases = []
    for red in REDUCTIONS:
        cases.append((f"plain_{red}", (h, w, t), {"reduction": red}))
        cases.append((f"bias_{red}", (h, w, t, b), {"reduction": red}))
        cases.append((f"softcap_{red}", (h, w, t, b), {"reduction": red, "softcap": 5.0}))
        cases.append((f"smoothed_{red}", (h, w, t), {"reduction": red, "label_smoothing": 0.1}))
    t7 = torch.where(t == -100, 7, t)  # ignore_index 7 (a real class) on every 5th row
    cases.append(("all", (h, w, t7, b), {"softcap": 3.0, "label_smoothing": 0.2,
                                         "ignore_index": 7}))
    ignored = torch.full_like(t, 7)
    cases.append(("all_ignored_sum", (h, w, ignored), {"ignore_index": 7, "reduction": "sum"}))
    one = make_inputs((6, 1), dtype, device, generator)
    cases.append(("one_class", (one[0], one[1], torch.zeros(6, dtype=torch.long, device=device)),
                  {}))
    single = make_inputs((1, 77), dtype, device, generator)
    cases.append(("single_token", (single[0], single[1], torch.tensor([76], device=device)), {}))
    cases.append(("int32_target", (h, w, t.int()), {"reduction": "sum"}))
    return cases


# -- the backward ---------------------------------------------------------------------------------
def backward_reference(hidden, weight, target, bias, lse, grad, ignore_index=-100,
                       reduction="mean", label_smoothing=0.0, softcap=0.0):
    """(dhidden, dweight, dbias) in float64 by autograd through the float64 forward (lse
    unused); dbias is (0,) without a bias."""
    h = hidden.detach().double().requires_grad_(True)
    w = weight.detach().double().requires_grad_(True)
    b = bias.detach().double().requires_grad_(True) if bias is not None else None
    z = h @ w.T + (b if b is not None else 0.0)
    z = softcap * torch.tanh(z / softcap) if softcap else z
    if z.shape[1] == 0 or z.shape[0] == 0:
        loss = z.sum()
    else:
        loss = torch.nn.functional.cross_entropy(z, target.long(), ignore_index=ignore_index,
                                                 reduction=reduction,
                                                 label_smoothing=label_smoothing)
    wanted = [h, w] + ([b] if b is not None else [])
    grads = torch.autograd.grad(loss, wanted, grad.detach().double(), allow_unused=True)
    grads = [torch.zeros_like(x) if g is None else g for g, x in zip(grads, wanted)]
    db = grads[2] if b is not None else h.new_empty((0,))
    return grads[0].detach(), grads[1].detach(), db.detach()


def _dz_scale(hidden, weight, target, bias, lse, grad, ignore_index=-100, reduction="mean",
              label_smoothing=0.0, softcap=0.0):
    """|what dz is the difference of|, per logit (cross-entropy's backward scale), times
    1 + |h| @ |W|.T: the logits are rounded to the input dtype, and p = exp(z - lse) moves by
    p times that rounding."""
    z = logits_reference(hidden, weight, bias, softcap)
    zabs = hidden.detach().double().abs() @ weight.detach().double().abs().T
    return backward_error_scale(z, target, None, None, grad, ignore_index, reduction,
                                label_smoothing).double() * (1 + zabs)


def _dhidden_scale(hidden, weight, *args, **kw):
    return _dz_scale(hidden, weight, *args, **kw) @ weight.detach().double().abs()


def _dweight_scale(hidden, weight, *args, **kw):
    return _dz_scale(hidden, weight, *args, **kw).T @ hidden.detach().double().abs()


def _dbias_scale(hidden, weight, target, bias, *args, **kw):
    if bias is None:
        return hidden.new_zeros((0,), dtype=torch.float64)
    return _dz_scale(hidden, weight, target, bias, *args, **kw).sum(0)


def backward_inputs(shape, dtype, device="cpu", generator=None):
    """(hidden, weight, target, None, lse, grad) for "mean": lse from the reference, in the
    accumulator's dtype (fp32; fp64 for fp64)."""
    return _with_lse(make_inputs(shape, dtype, device, generator), generator)


def bench_backward_inputs(shape, dtype, device="cpu", generator=None):
    """:func:`backward_inputs` of a benchmark cell (:func:`bench_inputs`' shapes)."""
    return _with_lse(bench_inputs(shape, dtype, device, generator), generator)


def _with_lse(hwt: tuple, generator) -> tuple:
    """(hidden, weight, target, None, lse, grad): lse from the float64 logits, a chunk of tokens
    at a time (a whole lm-head cell's would not fit)."""
    h, w, t = hwt
    lse = torch.cat([torch.logsumexp(logits_reference(h[i:i + CHECK_TOKENS], w), 1)
                     for i in range(0, max(h.shape[0], 1), CHECK_TOKENS)])[:h.shape[0]]
    grad = (torch.rand((), generator=generator) + 0.5).to(h.device)
    return h, w, t, None, lse.to(acc_dtype(h.dtype)), grad


def backward_edge_cases(dtype, device="cpu", generator=None) -> list:
    """The forward's edge cases with a random upstream gradient of the reduction's shape."""
    cases = []
    for label, inputs, kw in edge_cases(dtype, device, generator):
        h, w, t, b = (*inputs, None)[:4]
        lse = torch.logsumexp(logits_reference(h, w, b, kw.get("softcap", 0.0)), 1).to(
            acc_dtype(dtype))
        shape = (h.shape[0],) if kw.get("reduction") == "none" else ()
        g = (torch.rand(shape, generator=generator) + 0.5).to(device)
        cases.append((label, (h, w, t, b, lse, g), kw))
    return cases


def backward_bytes(hidden, weight, target, bias, lse, grad, **kw) -> int:
    """Read hidden and weight, write their gradients."""
    return 2 * (hidden.numel() + weight.numel()) * hidden.element_size()


def _lse_scale(hidden, weight, *args, **kw):
    """lse's error scale: the largest |h| @ |W|.T of the row (the logits' rounding), + 1."""
    zabs = hidden.detach().double().abs() @ weight.detach().double().abs().T
    if zabs.shape[1] == 0:
        return torch.ones(zabs.shape[0], dtype=torch.float64, device=zabs.device)
    return zabs.amax(1) + 1.0


def _save(inputs, out, kw):
    hidden, weight, target, bias = inputs
    return hidden, weight, target, bias, out[1]


def _backward_inputs(saved, grad, kw):
    return (*saved, grad)


def _loss_empty(hidden, weight, target, bias=None, reduction="mean", **kw):
    return hidden.new_empty((hidden.shape[0],) if reduction == "none" else ())


FORWARD = register_op(
    Op(
        name="linear_cross_entropy",
        reference=reference,
        make_inputs=make_inputs,
        bytes_moved=bytes_moved,
        description="F.cross_entropy(hidden @ weight.T + bias, target): (loss, lse), the "
        "LM-head loss",
        kwargs=dict(KWARGS),
        edge_cases=edge_cases,
        tolerances=TOLERANCES,
        inputs=(Input("hidden"), Input("weight", role="free"), Input("target", role="index"),
                Input("bias", role="free", optional=True)),
        outputs=(Output("loss", error_scale=error_scale, empty=_loss_empty),
                 # the logits are rounded to the input dtype by the matmul: the loss's table
                 Output("lse", tolerances=TOLERANCES, differentiable=False,
                        dtype=acc_dtype,
                        error_scale=_lse_scale,
                        empty=lambda h, *a, **kw: h.new_empty(
                            h.shape[:1],
                            dtype=acc_dtype(h.dtype)))),
        auto=FORWARD_AUTO,
        autograd=Autograd(save=_save, backward="linear_cross_entropy_backward",
                          backward_inputs=_backward_inputs, grad_of=(0, 1, 3)),
        bench_inputs=bench_inputs,
        check_slice=check_slice,
        flops=forward_flops,
    )
)

BACKWARD = register_op(
    Op(
        name="linear_cross_entropy_backward",
        reference=backward_reference,
        make_inputs=backward_inputs,
        bytes_moved=backward_bytes,
        description="(dhidden, dweight, dbias) of linear_cross_entropy, logits recomputed",
        kwargs=dict(KWARGS),
        edge_cases=backward_edge_cases,
        tolerances=GRAD_TOLERANCES,
        inputs=(Input("hidden"), Input("weight", role="free"), Input("target", role="index"),
                Input("bias", role="free", optional=True), Input("lse", role="per_row"),
                Input("grad", role="free")),
        outputs=(Output("dhidden", error_scale=_dhidden_scale),
                 Output("dweight", error_scale=_dweight_scale,
                        empty=lambda h, w, *a, **kw: torch.empty_like(
                            w, memory_format=torch.contiguous_format)),
                 Output("dbias", error_scale=_dbias_scale,
                        empty=lambda h, w, t, b, *a, **kw: h.new_empty(
                            w.shape[:1] if b is not None else (0,)))),
        auto=BACKWARD_AUTO,
        bench_inputs=bench_backward_inputs,
        check_slice=check_slice,
        flops=backward_flops,
    )
)
