"""``nn.Module`` wrappers: drop-in replacements for ``torch.nn.Softmax`` / ``torch.nn.LogSoftmax``.

They hold the dim and the variant names (plain strings, so ``torch.compile`` treats them as
constants) and call :func:`kernel_lab.softmax` / :func:`kernel_lab.log_softmax`.
"""

from __future__ import annotations

import torch

from . import torch_ops


class _RowOp(torch.nn.Module):
    _fn = staticmethod(torch_ops.softmax)

    def __init__(
        self, dim: int = -1, variant: str | None = None, backward_variant: str | None = None
    ) -> None:
        super().__init__()
        self.dim = dim
        self.variant = variant
        self.backward_variant = backward_variant

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._fn(x, self.dim, self.variant, backward_variant=self.backward_variant)

    def extra_repr(self) -> str:
        extra = f", backward_variant={self.backward_variant!r}" if self.backward_variant else ""
        return f"dim={self.dim}, variant={self.variant or torch_ops.AUTO!r}{extra}"


class Softmax(_RowOp):
    """``torch.nn.Softmax(dim)`` run by a lab variant (``variant=None``: the best for the input).

    Unlike ``torch.nn.Softmax`` the dim defaults to -1 (no implicit-dim guessing).
    """

    _fn = staticmethod(torch_ops.softmax)


class LogSoftmax(_RowOp):
    """``torch.nn.LogSoftmax(dim)`` run by a lab variant (``variant=None``: the best for it)."""

    _fn = staticmethod(torch_ops.log_softmax)
