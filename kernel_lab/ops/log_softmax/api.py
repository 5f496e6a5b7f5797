"""``kernel_lab.log_softmax`` and ``kernel_lab.LogSoftmax``: drop-ins for
``torch.log_softmax`` and ``torch.nn.LogSoftmax``, differentiable and compilable
(``torch.ops.kernel_lab.log_softmax``)."""

from __future__ import annotations

import torch

from kernel_lab.core import custom_ops
from kernel_lab.core.dropin import DropIn

log_softmax_op = custom_ops.define("log_softmax")
log_softmax_backward_op = custom_ops.define("log_softmax_backward")
_native = custom_ops.native_path("log_softmax")


def log_softmax(x: torch.Tensor, dim: int = -1, variant: str | None = None, *,
                backward_variant: str | None = None) -> torch.Tensor:
    """``torch.log_softmax(x, dim)`` computed by a lab variant.

    ``variant``: a ``log_softmax`` variant name, or None / ``"auto"`` for the best one for ``x``
    (PyTorch's own kernel off CUDA); ``backward_variant``: the same for ``log_softmax_backward``.
    """
    if variant is None and backward_variant is None and _native(x, dim):
        try:  # "auto" on this tensor is PyTorch's own op: called at once, no plan (Auto.native)
            return torch.log_softmax(x, dim)
        except IndexError:
            pass  # dim out of range: the lab's call below says so in its words
    return custom_ops.call("log_softmax", (x,), {"dim": dim}, variant, backward_variant)


class LogSoftmax(DropIn):
    """``torch.nn.LogSoftmax(dim)`` run by a lab variant. The dim defaults to -1."""

    fn = staticmethod(log_softmax)

    def __init__(self, dim: int = -1, variant: str | None = None,
                 backward_variant: str | None = None) -> None:
        super().__init__(dim, variant=variant, backward_variant=backward_variant)
        self.dim = dim

    def _args_repr(self) -> str:
        return f"dim={self.dim}"
