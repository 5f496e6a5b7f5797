"""Softmax in plain PyTorch: the library op, the textbook decomposition, and that under compile.

These run anywhere torch runs (CPU included) and are the baselines every kernel races.
"""

from __future__ import annotations

import torch

from kernel_lab.core.compiling import CompiledPerSignature
from kernel_lab.core.registry import registrar
from kernel_lab.core.rows import normalize_dim, row_op
from kernel_lab.ops.softmax.op import ALL_DTYPES

variant = registrar(op="softmax", dtypes=ALL_DTYPES,
                    source="kernel_lab/ops/softmax/torch_variants.py")


@variant(
    "torch_eager",
    backend="torch",
    description="torch.softmax: PyTorch's own fused kernel",
)
def torch_eager(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    normalize_dim(dim, x.dim())
    return torch.softmax(x, dim=dim)


def naive_softmax_math(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """max, subtract, exp, sum, divide: five ops, each a full pass over memory in eager mode.

    Accumulates in fp32 for fp16/bf16 (float64 stays float64).
    """
    acc = x if x.dtype == torch.float64 else x.float()
    m = acc.amax(dim=dim, keepdim=True)
    e = torch.exp(acc - m)
    return (e / e.sum(dim=dim, keepdim=True)).to(x.dtype)


torch_naive = variant(
    "torch_naive",
    backend="torch",
    description="decomposed max/exp/sum/divide, launched as separate eager ops",
)(row_op(naive_softmax_math))

_compiled_naive = CompiledPerSignature(naive_softmax_math)  # its signature count: tests

compile_naive = variant(
    "compile_naive",
    backend="compile",
    description="the decomposition under torch.compile (inductor fuses it into one kernel)",
)(row_op(_compiled_naive))


# -- backward ---------------------------------------------------------------------------------
@variant(
    "torch_eager_backward",
    op="softmax_backward",
    backend="torch",
    description="PyTorch's own softmax backward kernel (_softmax_backward_data)",
    known_inexact={
        torch.bfloat16: "PyTorch's CUDA bf16 softmax backward misses the tolerance on short rows "
        "(H200, 2097152x128: |err| 4.7e-4 where 6.6e-5 is allowed)",
        torch.float16: "PyTorch's CUDA fp16 softmax backward misses the tolerance on short rows "
        "(H200, 1024x128: |err| 3.7e-4 where 1.8e-4 was allowed)",
    },
)
def torch_eager_backward(y: torch.Tensor, dy: torch.Tensor, dim: int = -1) -> torch.Tensor:
    d = normalize_dim(dim, y.dim())
    if y.numel() == 0:
        return torch.empty_like(y)
    return torch._softmax_backward_data(dy, y, d, y.dtype)


def naive_softmax_backward_math(y: torch.Tensor, dy: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """y * (dy - sum(dy * y)), accumulated in fp32 (fp64 stays fp64)."""
    acc_y = y if y.dtype == torch.float64 else y.float()
    acc_dy = dy if dy.dtype == torch.float64 else dy.float()
    return (acc_y * (acc_dy - (acc_dy * acc_y).sum(dim=dim, keepdim=True))).to(y.dtype)


compile_backward = variant(
    "compile_backward",
    op="softmax_backward",
    backend="compile",
    description="y * (dy - sum(dy * y)) under torch.compile",
)(row_op(CompiledPerSignature(naive_softmax_backward_math), inputs=2))
