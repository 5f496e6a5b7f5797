"""log_softmax in plain PyTorch: the library ops, and the decomposition under ``torch.compile``.

The compile variants use :class:`kernel_lab.core.compiling.CompiledPerSignature` (one compiled graph
per input signature, never a silent eager fallback).
"""

from __future__ import annotations

import torch

from kernel_lab.core.compiling import CompiledPerSignature
from kernel_lab.core.registry import registrar
from kernel_lab.core.rows import normalize_dim, row_op
from kernel_lab.ops.log_softmax.op import ALL_DTYPES

SOURCE = "kernel_lab/ops/log_softmax/torch_variants.py"
variant = registrar(op="log_softmax", dtypes=ALL_DTYPES, source=SOURCE)


@variant(
    "torch_log_softmax",
    backend="torch",
    description="torch.log_softmax: PyTorch's own fused kernel",
)
def torch_log_softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    normalize_dim(dim, x.dim())
    return torch.log_softmax(x, dim=dim)


def log_softmax_math(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """(x - max) - log(sum(exp(x - max))), accumulated in fp32 (fp64 stays fp64).

    Subtracting in that order keeps log-probabilities near 0 exact when the max is huge.
    """
    acc = x if x.dtype == torch.float64 else x.float()
    shifted = acc - acc.amax(dim=dim, keepdim=True)
    return (shifted - torch.log(torch.exp(shifted).sum(dim=dim, keepdim=True))).to(x.dtype)


compile_log_softmax = variant(
    "compile_log_softmax",
    backend="compile",
    description="the decomposition under torch.compile (inductor fuses it into one kernel)",
)(row_op(CompiledPerSignature(log_softmax_math)))


# -- backward ---------------------------------------------------------------------------------
@variant(
    "torch_log_softmax_backward",
    op="log_softmax_backward",
    backend="torch",
    description="PyTorch's own log_softmax backward kernel (_log_softmax_backward_data)",
)
def torch_log_softmax_backward(y: torch.Tensor, dy: torch.Tensor, dim: int = -1) -> torch.Tensor:
    d = normalize_dim(dim, y.dim())
    if y.numel() == 0:
        return torch.empty_like(y)
    return torch._log_softmax_backward_data(dy, y, d, y.dtype)


def log_softmax_backward_math(y: torch.Tensor, dy: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """dy - exp(y) * sum(dy), accumulated in fp32 (fp64 stays fp64)."""
    acc_y = y if y.dtype == torch.float64 else y.float()
    acc_dy = dy if dy.dtype == torch.float64 else dy.float()
    return (acc_dy - torch.exp(acc_y) * acc_dy.sum(dim=dim, keepdim=True)).to(y.dtype)


compile_log_softmax_backward = variant(
    "compile_log_softmax_backward",
    op="log_softmax_backward",
    backend="compile",
    description="dy - exp(y) * sum(dy) under torch.compile",
)(row_op(CompiledPerSignature(log_softmax_backward_math), inputs=2))
