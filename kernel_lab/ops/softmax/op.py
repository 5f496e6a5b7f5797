"""The softmax ops: what they compute (float64 references), their inputs and their bytes."""

from __future__ import annotations

import torch

from kernel_lab.registry import Op, register_op

FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
ALL_DTYPES = (torch.float64, *FLOAT_DTYPES)


def _randn(shape, dtype, device, generator, scale=2.0):
    x = torch.randn(shape, generator=generator, dtype=torch.float32)
    return (x * scale).to(device=device, dtype=dtype)


def softmax_reference(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """exp(x - max) / sum(exp(x - max)) over ``dim``, in float64. All -inf rows give NaN."""
    return torch.softmax(x.detach().to(torch.float64), dim=dim)


def softmax_inputs(shape, dtype, device="cpu", generator=None) -> tuple[torch.Tensor]:
    """Fresh N(0, 2^2) logits (never zeros, never a constant row)."""
    return (_randn(shape, dtype, device, generator),)


def softmax_bytes(x: torch.Tensor, dim: int = -1) -> int:
    """Read x once, write y once."""
    return 2 * x.numel() * x.element_size()


def softmax_backward_reference(y: torch.Tensor, dy: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """dx = y * (dy - sum(dy * y)) over ``dim``, in float64."""
    y64, dy64 = y.detach().to(torch.float64), dy.detach().to(torch.float64)
    return y64 * (dy64 - (dy64 * y64).sum(dim=dim, keepdim=True))


def softmax_backward_inputs(shape, dtype, device="cpu", generator=None):
    """(y, dy): y a real softmax output (rows sum to 1), dy fresh N(0, 1)."""
    y = torch.softmax(_randn(shape, torch.float32, "cpu", generator), dim=-1)
    dy = _randn(shape, torch.float32, "cpu", generator, scale=1.0)
    return y.to(device=device, dtype=dtype), dy.to(device=device, dtype=dtype)


def softmax_backward_bytes(y: torch.Tensor, dy: torch.Tensor, dim: int = -1) -> int:
    """Read y and dy once, write dx once."""
    return 3 * y.numel() * y.element_size()


SOFTMAX = register_op(
    Op(
        name="softmax",
        reference=softmax_reference,
        make_inputs=softmax_inputs,
        bytes_moved=softmax_bytes,
        description="softmax(x, dim): exp(x - max) / sum(exp(x - max))",
        kwargs={"dim": -1},
    )
)

SOFTMAX_BACKWARD = register_op(
    Op(
        name="softmax_backward",
        reference=softmax_backward_reference,
        make_inputs=softmax_backward_inputs,
        bytes_moved=softmax_backward_bytes,
        description="dx = y * (dy - sum(dy * y)), the gradient of softmax",
        kwargs={"dim": -1},
    )
)
