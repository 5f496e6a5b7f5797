"""The log_softmax ops: float64 references, inputs, bytes and edge cases.

``log_softmax(x, dim) = (x - max) - log(sum(exp(x - max)))`` and its gradient
``dx = dy - exp(y) * sum(dy)`` (y the forward output). Both reuse the softmax op's input makers
and row handling; nothing here is specific to a backend.

Tolerances (``TOLERANCES`` below, the op's own table): ``|err| <= atol + rtol * |ref|`` is
relative for the large-magnitude log-probabilities this op produces (-2e4 for a row spread over
+-1e4), and absolute near 0, where a dominant logit's log-probability sits. fp32/fp64 keep the
lab's default. fp16/bf16 get an absolute floor of about half an ulp of 1.0 (2^-11, 2^-8):
PyTorch's own CPU kernels round the row's sum to the input dtype before the log, so a
log-probability of -4.8e-4 comes out as exactly 0 in fp16 (measured; its relative error reaches
0.98 there, 2.6e-3 elsewhere). That is an honest answer at fp16 resolution; the default table
would fail PyTorch itself. An fp32 kernel computing ``x - (max + log(sum))`` instead of
``(x - max) - log(sum)`` loses ulp(max) near 0 and still fails (edge case ``inf_nan_rows``).

Overflow: the exact answer can lie outside the input dtype's range (fp16 logits +-6e4 give a
log-probability of -1.2e5); the correctly rounded result is then -inf, which is what PyTorch
returns. The reference says -inf there too, so the checker's "infinities must match" rule holds.
"""

from __future__ import annotations

import torch

from kernel_lab.base.inputs import ALL_DTYPES, FLOAT_DTYPES, randn
from kernel_lab.core.contract import row_backward_op, row_forward_op
from kernel_lab.core.reference import TOLERANCES as DEFAULT_TOLERANCES
from kernel_lab.core.reference import Tolerance
from kernel_lab.core.registry import register_op
from kernel_lab.ops.log_softmax.auto import LOG_SOFTMAX_AUTO, LOG_SOFTMAX_BACKWARD_AUTO

__all__ = ["ALL_DTYPES", "FLOAT_DTYPES", "LOG_SOFTMAX", "LOG_SOFTMAX_BACKWARD", "TOLERANCES"]

TOLERANCES: dict[torch.dtype, Tolerance] = {
    **DEFAULT_TOLERANCES,
    torch.float16: Tolerance(atol=6e-4, rtol=2e-3),  # 2^-11 = 4.9e-4: a sum rounded to fp16
    torch.bfloat16: Tolerance(atol=5e-3, rtol=1.2e-2),  # 2^-8 = 3.9e-3: ... rounded to bf16
}


def row_inputs(shape, dtype, device="cpu", generator=None) -> tuple[torch.Tensor]:
    """Fresh N(0, 2^2) logits (never zeros, never a constant row)."""
    return (randn(shape, dtype, device, generator),)


def _round_overflow(ref: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``ref`` (float64) with the values that overflow ``dtype`` replaced by +-inf."""
    if dtype == torch.float64:
        return ref
    rounded = ref.to(dtype).to(torch.float64)
    return torch.where(torch.isinf(rounded) & ~torch.isinf(ref), rounded, ref)


def log_softmax_reference(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """log_softmax in float64; -inf entries give -inf, all -inf rows NaN, NaN propagates."""
    return _round_overflow(torch.log_softmax(x.detach().to(torch.float64), dim=dim), x.dtype)


def log_softmax_bytes(x: torch.Tensor, dim: int = -1) -> int:
    """Read x once, write y once."""
    return 2 * x.numel() * x.element_size()


def log_softmax_backward_reference(
    y: torch.Tensor, dy: torch.Tensor, dim: int = -1
) -> torch.Tensor:
    """dx = dy - exp(y) * sum(dy) over ``dim``, in float64."""
    y64, dy64 = y.detach().to(torch.float64), dy.detach().to(torch.float64)
    return _round_overflow(dy64 - torch.exp(y64) * dy64.sum(dim=dim, keepdim=True), y.dtype)


def log_softmax_backward_error_scale(y: torch.Tensor, dy: torch.Tensor, dim: int = -1):
    """|dy| + exp(y) * |sum(dy)|: the size of the terms whose difference dx is. They cancel on
    long rows (a 2^20 row: exp(y) * sum(dy) ~ 5 for a result ~1e-3), where an fp32 exp's
    relative error alone exceeds an absolute 1e-6 - PyTorch's own CUDA kernel missed that on
    the H200 (1.9e-6 against 1.0e-6 allowed)."""
    y64, dy64 = y.detach().to(torch.float64), dy.detach().to(torch.float64)
    return dy64.abs() + torch.exp(y64) * dy64.sum(dim=dim, keepdim=True).abs()


def log_softmax_backward_inputs(shape, dtype, device="cpu", generator=None):
    """(y, dy): y a real log_softmax output of N(0, 2^2) logits, dy fresh N(0, 1)."""
    (x,) = row_inputs(shape, torch.float32, "cpu", generator)
    (dy,) = row_inputs(shape, torch.float32, "cpu", generator)
    y = torch.log_softmax(x, dim=-1)
    return y.to(device=device, dtype=dtype), (dy / 2).to(device=device, dtype=dtype)


def log_softmax_backward_bytes(y: torch.Tensor, dy: torch.Tensor, dim: int = -1) -> int:
    """Read y and dy once, write dx once."""
    return 3 * y.numel() * y.element_size()


def _big(dtype: torch.dtype) -> float:
    """A magnitude whose row spread (2 * big) stays finite in ``dtype`` - but only just."""
    return {torch.float16: 3e4, torch.bfloat16: 1e38}.get(dtype, 1e4)


def log_softmax_edge_cases(dtype, device="cpu", generator=None) -> list:
    """-inf entries, all -inf rows, NaN, a shifted row, huge spreads, dominant logits, overflow."""
    (x,) = row_inputs((7, 781), dtype, device, generator)
    x[0, ::3] = float("-inf")  # -inf entries give -inf exactly
    x[1] = float("-inf")  # an all -inf row gives NaN, like torch.log_softmax
    x[2, 5] = float("nan")  # NaN propagates to its whole row
    x[3, :400] = float("-inf")  # a long -inf prefix: an online max must not form -inf - -inf
    x[4] += 1e4 if dtype in (torch.float32, torch.float64) else 3e3  # skipping the max overflows
    x[4, 10] = x[4, 20] = x[4].max() + 20  # two log-probs of -log(2): x - (max + log(sum)) fails
    x[5, ::2], x[5, 1::2] = _big(dtype), -_big(dtype)  # log-probs ~ -2*big: large but finite
    x[6, 7], x[6, 100:] = 0.0, -_big(dtype)  # log-probs near 0 and near -big in one row
    cases = [("inf_nan_rows", (x,), {})]
    (big,) = row_inputs((3, 1823), dtype, device, generator)
    big[0, -1] = 80.0 if dtype != torch.float16 else 11.0  # one dominant logit, at the tail
    big[1, 0] = 80.0 if dtype != torch.float16 else 11.0  # ... and at the head
    cases.append(("dominant_logit", (big,), {}))
    if dtype in (torch.float16, torch.bfloat16):  # the exact answer overflows: -inf, like torch
        top = torch.finfo(dtype).max
        (ov,) = row_inputs((2, 127), dtype, device, generator)
        ov[0, 0], ov[0, 1], ov[1, ::2] = top, -top, -top
        cases.append(("overflow_to_inf", (ov,), {}))
    return cases


def log_softmax_backward_edge_cases(dtype, device="cpu", generator=None) -> list:
    """y with -inf entries (exp(y) = 0: dx = dy exactly), an all -inf row (NaN), huge spreads."""
    (x,) = row_inputs((4, 781), torch.float32, "cpu", generator)
    x[0, ::3] = float("-inf")
    x[1] = float("-inf")
    x[2, ::2], x[2, 1::2] = 1e4, -1e4
    x[3, 0] = 80.0  # one probability of ~1: dx = dy - sum(dy) at that element
    y = torch.log_softmax(x, dim=-1).to(device=device, dtype=dtype)
    (dy,) = row_inputs((4, 781), torch.float32, "cpu", generator)
    dy = (dy / 2).to(device=device, dtype=dtype)
    return [("neg_inf_logprobs", (y, dy), {})]


def log_softmax_double_backward(saved, g, kw):
    """Gradients of dx = dy - exp(y) * sum(dy) with respect to (y, dy), given g."""
    y, dy = saved
    dim = kw["dim"]
    p = torch.exp(y)
    return -g * p * dy.sum(dim, keepdim=True), g - (g * p).sum(dim, keepdim=True)


LOG_SOFTMAX = register_op(row_forward_op(
    "log_softmax", backward="log_softmax_backward",
    reference=log_softmax_reference, make_inputs=row_inputs, bytes_moved=log_softmax_bytes,
    description="log_softmax(x, dim): (x - max) - log(sum(exp(x - max)))",
    edge_cases=log_softmax_edge_cases, tolerances=TOLERANCES, auto=LOG_SOFTMAX_AUTO,
))

LOG_SOFTMAX_BACKWARD = register_op(row_backward_op(
    "log_softmax_backward", double_backward=log_softmax_double_backward,
    reference=log_softmax_backward_reference, make_inputs=log_softmax_backward_inputs,
    bytes_moved=log_softmax_backward_bytes, error_scale=log_softmax_backward_error_scale,
    description="dx = dy - exp(y) * sum(dy), the gradient of log_softmax",
    edge_cases=log_softmax_backward_edge_cases, tolerances=TOLERANCES,
    auto=LOG_SOFTMAX_BACKWARD_AUTO,
))
