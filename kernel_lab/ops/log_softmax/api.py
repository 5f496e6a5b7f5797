"""``kernel_lab.log_softmax`` and ``kernel_lab.LogSoftmax``: drop-ins for
``torch.log_softmax`` and ``torch.nn.LogSoftmax``, differentiable and compilable
(``torch.ops.kernel_lab.log_softmax``)."""

from __future__ import annotations

import torch

from kernel_lab.core import custom_ops
from kernel_lab.core.dropin import RowDropIn, row_dropin

log_softmax_op = custom_ops.define("log_softmax")
log_softmax_backward_op = custom_ops.define("log_softmax_backward")

log_softmax = row_dropin("log_softmax", torch.log_softmax, doc="""
``torch.log_softmax(x, dim)`` computed by a lab variant.

``variant``: a ``log_softmax`` variant name, or None / ``"auto"`` for the best one for ``x``
(PyTorch's own kernel off CUDA, and on CUDA for small tensors); ``backward_variant``: the
same for ``log_softmax_backward``.
""")


class LogSoftmax(RowDropIn):
    """``torch.nn.LogSoftmax(dim)`` run by a lab variant. The dim defaults to -1."""

    fn = staticmethod(log_softmax)
