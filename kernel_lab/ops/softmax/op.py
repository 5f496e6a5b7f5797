"""The softmax ops: what they compute (float64 references), their inputs and their bytes."""

from __future__ import annotations

import torch

from kernel_lab.base.inputs import ALL_DTYPES, FLOAT_DTYPES, randn
from kernel_lab.core.contract import row_backward_op, row_forward_op
from kernel_lab.core.registry import register_op
from kernel_lab.ops.softmax.auto import SOFTMAX_AUTO, SOFTMAX_BACKWARD_AUTO

__all__ = ["ALL_DTYPES", "FLOAT_DTYPES", "SOFTMAX", "SOFTMAX_BACKWARD"]




def softmax_reference(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """exp(x - max) / sum(exp(x - max)) over ``dim``, in float64. All -inf rows give NaN."""
    return torch.softmax(x.detach().to(torch.float64), dim=dim)


def softmax_inputs(shape, dtype, device="cpu", generator=None) -> tuple[torch.Tensor]:
    """Fresh N(0, 2^2) logits (never zeros, never a constant row)."""
    return (randn(shape, dtype, device, generator),)


def softmax_bytes(x: torch.Tensor, dim: int = -1) -> int:
    """Read x once, write y once."""
    return 2 * x.numel() * x.element_size()


def softmax_backward_reference(y: torch.Tensor, dy: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """dx = y * (dy - sum(dy * y)) over ``dim``, in float64."""
    y64, dy64 = y.detach().to(torch.float64), dy.detach().to(torch.float64)
    return y64 * (dy64 - (dy64 * y64).sum(dim=dim, keepdim=True))


def softmax_backward_error_scale(y: torch.Tensor, dy: torch.Tensor, dim: int = -1):
    """|y| * (|dy| + |sum(dy * y)|): the size of the terms whose difference dx is."""
    y64, dy64 = y.detach().to(torch.float64), dy.detach().to(torch.float64)
    return y64.abs() * (dy64.abs() + (dy64 * y64).sum(dim=dim, keepdim=True).abs())


def softmax_backward_inputs(shape, dtype, device="cpu", generator=None):
    """(y, dy): y a real softmax output (rows sum to 1), dy fresh N(0, 1)."""
    y = torch.softmax(randn(shape, torch.float32, "cpu", generator), dim=-1)
    dy = randn(shape, torch.float32, "cpu", generator, scale=1.0)
    return y.to(device=device, dtype=dtype), dy.to(device=device, dtype=dtype)


def softmax_backward_bytes(y: torch.Tensor, dy: torch.Tensor, dim: int = -1) -> int:
    """Read y and dy once, write dx once."""
    return 3 * y.numel() * y.element_size()


def softmax_edge_cases(dtype, device="cpu", generator=None) -> list:
    """Rows that break careless kernels: -inf entries, an all -inf row, NaN, huge magnitudes."""
    cases = []
    (x,) = softmax_inputs((6, 781), dtype, device, generator)
    x[0, ::3] = float("-inf")  # -inf entries give exact zeros
    x[1] = float("-inf")  # an all -inf row gives NaN, like torch.softmax
    x[2, 5] = float("nan")  # NaN propagates to its whole row
    x[3, :400] = float("-inf")  # a long -inf prefix: an online max must not form -inf - -inf
    x[4] += 1e4 if dtype in (torch.float32, torch.float64) else 3e3  # skipping the max overflows
    cases.append(("inf_nan_rows", (x,), {}))
    (big,) = softmax_inputs((3, 1823), dtype, device, generator)
    big[0, -1] = 80.0 if dtype != torch.float16 else 11.0  # one dominant logit, at the tail
    big[1, 0] = 80.0 if dtype != torch.float16 else 11.0  # ... and at the head
    cases.append(("dominant_logit", (big,), {}))
    return cases


def softmax_double_backward(saved, g, kw):
    """Gradients of dx = y * (dy - <y, dy>) with respect to (y, dy), given g = d(loss)/dx."""
    y, dy = saved
    dim = kw["dim"]
    yg = (y * g).sum(dim, keepdim=True)
    return g * (dy - (y * dy).sum(dim, keepdim=True)) - dy * yg, y * (g - yg)


SOFTMAX = register_op(row_forward_op(
    "softmax", backward="softmax_backward",
    reference=softmax_reference, make_inputs=softmax_inputs, bytes_moved=softmax_bytes,
    description="softmax(x, dim): exp(x - max) / sum(exp(x - max))",
    edge_cases=softmax_edge_cases, auto=SOFTMAX_AUTO,
))

SOFTMAX_BACKWARD = register_op(row_backward_op(
    "softmax_backward", double_backward=softmax_double_backward,
    reference=softmax_backward_reference, make_inputs=softmax_backward_inputs,
    bytes_moved=softmax_backward_bytes, error_scale=softmax_backward_error_scale,
    description="dx = y * (dy - sum(dy * y)), the gradient of softmax",
    auto=SOFTMAX_BACKWARD_AUTO,
))
