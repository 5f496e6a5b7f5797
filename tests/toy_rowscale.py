"""A toy op of another shape, registered from this file alone (no edit to kernel_lab):
``rowscale(x, w) = x * w`` over the last dim, with a per-column weight ``w`` of shape (N,).

``tests/test_op_contract.py`` imports it in a fresh process and runs the lab's correctness
checker, the custom-op factory and autograd over it.
"""

from __future__ import annotations

import torch

from kernel_lab.base.inputs import ALL_DTYPES, randn
from kernel_lab.core import custom_ops
from kernel_lab.core.contract import Auto, Autograd, Input, Op, Output
from kernel_lab.core.registry import register, register_op


def reference(x, w):
    return x.detach().double() * w.detach().double()


def make_inputs(shape, dtype, device="cpu", generator=None):
    return randn(shape, dtype, device, generator), randn(shape[-1:], dtype, device, generator)


def backward(saved, g, kw):
    x, w = saved
    if x.dim() == 0:
        return g * w, g * x
    gw = (g * x).reshape(-1, x.shape[-1]).sum(0) if x.numel() else torch.zeros_like(w)
    return g * w, gw


register_op(Op(
    name="rowscale",
    reference=reference,
    make_inputs=make_inputs,
    bytes_moved=lambda x, w: (2 * x.numel() + w.numel()) * x.element_size(),
    description="x * w, w a per-column weight",
    inputs=(Input("x"), Input("w", role="column")),
    outputs=(Output("y"),),
    auto=Auto(lambda x, w: ("rowscale_eager",), portable="rowscale_eager"),
    autograd=Autograd(save=lambda inputs, y, kw: inputs, formula=backward),
))


@register("rowscale_eager", op="rowscale", backend="torch", dtypes=ALL_DTYPES,
          description="x * w in PyTorch")
def rowscale_eager(x, w):
    return x * w


@register("rowscale_loop", op="rowscale", backend="torch", dtypes=ALL_DTYPES,
          description="one column at a time (a second way, to race)")
def rowscale_loop(x, w):
    if x.dim() == 0:
        return x * w
    out = torch.empty_like(x, memory_format=torch.contiguous_format)
    for j in range(x.shape[-1]):
        out[..., j] = x[..., j] * w[j]
    return out


def rowscale(x, w, variant=None):
    """The toy op's drop-in function: differentiable and compilable like kernel_lab.softmax."""
    return custom_ops.call("rowscale", (x, w), {}, variant)
