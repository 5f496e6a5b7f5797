"""``nn.Module`` wrapper for any drop-in function: an op's module holds its keyword arguments
and variant names (plain strings, so ``torch.compile`` treats them as constants)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from kernel_lab.core.dispatch import AUTO


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
