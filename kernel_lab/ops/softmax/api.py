"""``kernel_lab.softmax`` and ``kernel_lab.Softmax``: drop-ins for ``torch.softmax`` and
``torch.nn.Softmax``, differentiable and compilable (``torch.ops.kernel_lab.softmax``)."""

from __future__ import annotations

import torch

from kernel_lab.core import custom_ops
from kernel_lab.core.dropin import RowDropIn, row_dropin

softmax_op = custom_ops.define("softmax")
softmax_backward_op = custom_ops.define("softmax_backward")

softmax = row_dropin("softmax", torch.softmax, doc="""
``torch.softmax(x, dim)`` computed by a lab variant.

``variant``: a ``softmax`` variant name, or None / ``"auto"`` for the best one for ``x``
(PyTorch's own kernel off CUDA, and on CUDA for small tensors); ``backward_variant``: the
same for ``softmax_backward``.
""")


class Softmax(RowDropIn):
    """``torch.nn.Softmax(dim)`` run by a lab variant. The dim defaults to -1 (no implicit-dim
    guessing)."""

    fn = staticmethod(softmax)
