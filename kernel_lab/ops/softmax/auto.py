"""``variant="auto"`` for softmax and its backward: which variant runs which tensor on CUDA.

Measured on one H200 (``bench/auto_check.py`` through the public functions for the size rules;
the forward and backward sweeps at M*N = 2^28 for the row-length rules; numbers in
``cuda_src/README.md``). Re-measure and edit when kernels change.
"""

from __future__ import annotations

import torch

from kernel_lab.core import contract, registry

PREFERENCES = {
    "softmax": ("fast_softmax", "triton_fused", "triton_online", "torch_eager"),
    "softmax_backward": ("fused_softmax_backward", "triton_backward", "torch_eager_backward"),
}
PORTABLE = {"softmax": "torch_eager", "softmax_backward": "torch_eager_backward"}
# Tensors of at most this many elements are host-bound: PyTorch's own kernel (launched from
# C++) wins there. Rows of <= 1024 columns stream at copy speed in PyTorch up to the second limit.
SMALL_NUMEL = {"softmax": 1 << 22, "softmax_backward": 1 << 21}
SMALL_NUMEL_SHORT_ROWS = {"softmax": 1 << 23}
TRITON_MIN_NUMEL = 1 << 25  # Triton's whole-row kernels only from here (longer host path)


def _row_length(x: torch.Tensor, dim: int) -> int:
    return x.shape[dim] if x.dim() else 1


def prefers_pytorch(op: str, x: torch.Tensor, n: int) -> bool:
    """Whether a tensor this small runs faster in PyTorch's own kernel, and that kernel is
    within the lab's tolerance for its dtype (PyTorch's fp16 / bf16 softmax backward is not)."""
    limit = SMALL_NUMEL_SHORT_ROWS.get(op, 0) if n <= 1024 else 0
    return x.numel() <= max(limit, SMALL_NUMEL[op]) and \
        x.dtype not in registry.get(PORTABLE[op]).known_inexact


def softmax_preferences(x: torch.Tensor, dim: int = -1) -> tuple[str, ...]:
    """PyTorch's kernel for host-bound tensors; Triton's whole-row kernel for 2-byte rows of
    <= 256 or 1024-2048 and fp32 rows of 16384-32768 in tensors of >= 2^25 elements (level or
    up to 2 % ahead there); fast_softmax everywhere else."""
    prefs = PREFERENCES["softmax"]
    n = _row_length(x, dim)
    if prefers_pytorch("softmax", x, n):
        return (PORTABLE["softmax"], *prefs)
    if x.dim() == 0:
        return prefs
    two_byte = x.element_size() == 2
    triton_rows = (two_byte and (n <= 256 or 1024 <= n <= 2048)) or (
        not two_byte and 16384 <= n <= 32768)
    if triton_rows and x.numel() >= TRITON_MIN_NUMEL:
        return ("triton_fused", *prefs)
    return prefs


def softmax_backward_preferences(y: torch.Tensor, dy: torch.Tensor | None = None,
                                 dim: int = -1) -> tuple[str, ...]:
    """PyTorch's kernel for host-bound tensors; Triton's for rows under 512 (its programs take
    several short rows: 104 % of copy at N = 128 against the CUDA kernel's 30-60 %); the fused
    CUDA kernel from 512."""
    prefs = PREFERENCES["softmax_backward"]
    n = _row_length(y, dim)
    if prefers_pytorch("softmax_backward", y, n):
        return (PORTABLE["softmax_backward"], *prefs)
    if y.dim() and n < 512:
        return ("triton_backward", *prefs)
    return prefs


SOFTMAX_AUTO = contract.Auto(
    softmax_preferences, PORTABLE["softmax"], portable_autograd=True,
    native=registry.NativeBelow(SMALL_NUMEL["softmax_backward"], PORTABLE["softmax"],
                                 PORTABLE["softmax_backward"]))
SOFTMAX_BACKWARD_AUTO = contract.Auto(softmax_backward_preferences, PORTABLE["softmax_backward"])
