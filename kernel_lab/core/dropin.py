"""Drop-ins: the row ops' functions (:func:`row_dropin`) and the ``nn.Module`` wrapper for any
drop-in function (an op's module holds its keyword arguments and variant names: plain strings,
so ``torch.compile`` treats them as constants)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from kernel_lab.core import custom_ops
from kernel_lab.core.dispatch import AUTO


def row_dropin(op: str, torch_op: Callable[[torch.Tensor, int], torch.Tensor],
               doc: str) -> Callable[..., torch.Tensor]:
    """``kernel_lab.<op>(x, dim=-1, variant=None, *, backward_variant=None)`` for row op ``op``
    whose PyTorch twin is ``torch_op(x, dim)``: PyTorch's op at once where "auto" would run it,
    a warm plan at once, else the lab's call (:func:`custom_ops.row_call`)."""
    dropin = custom_ops.row_call(op, torch_op)
    dropin.__name__ = dropin.__qualname__ = op
    dropin.__doc__ = doc.strip()
    return dropin


class DropIn(torch.nn.Module):
    """Calls ``fn(*tensors, *args, variant, backward_variant=...)``; subclasses set ``fn``."""

    fn: Callable[..., Any]

    def __init__(self, *args: Any, variant: str | None = None,
                 backward_variant: str | None = None) -> None:
        super().__init__()
        self.args = args
        self.variant = variant
        self.backward_variant = backward_variant

    def forward(self, *tensors: torch.Tensor) -> Any:
        return type(self).fn(*tensors, *self.args, self.variant,
                             backward_variant=self.backward_variant)

    def extra_repr(self) -> str:
        extra = f", backward_variant={self.backward_variant!r}" if self.backward_variant else ""
        return f"{self._args_repr()}, variant={self.variant or AUTO!r}{extra}"

    def _args_repr(self) -> str:
        return ", ".join(map(repr, self.args))


class RowDropIn(DropIn):
    """The module of a row op's drop-in: ``Op(dim=-1, variant=None, backward_variant=None)``
    (no implicit-dim guessing)."""

    def __init__(self, dim: int = -1, variant: str | None = None,
                 backward_variant: str | None = None) -> None:
        super().__init__(dim, variant=variant, backward_variant=backward_variant)
        self.dim = dim

    def _args_repr(self) -> str:
        return f"dim={self.dim}"
