"""``variant="auto"`` for log_softmax and its backward: which variant runs which tensor on CUDA.

Measured on one H200 (``bench/auto_check.py`` for the size rules, the sweeps at M*N = 2^28 for
the row-length rules; numbers in ``cuda_src/README.md``). Re-measure when kernels change.
"""

from __future__ import annotations

import torch

from kernel_lab.core import contract, registry

PREFERENCES = {
    "log_softmax": ("fast_log_softmax", "triton_log_softmax", "torch_log_softmax"),
    "log_softmax_backward": (
        "fused_log_softmax_backward", "triton_log_softmax_backward", "torch_log_softmax_backward",
    ),
}
PORTABLE = {"log_softmax": "torch_log_softmax",
            "log_softmax_backward": "torch_log_softmax_backward"}
# Host-bound sizes (elements) where PyTorch's own kernel wins; rows of <= 1024: the second.
SMALL_NUMEL = {"log_softmax": 1 << 22, "log_softmax_backward": 1 << 22}
SMALL_NUMEL_SHORT_ROWS = {"log_softmax": 1 << 23, "log_softmax_backward": 1 << 23}


def _small(op: str, x: torch.Tensor, dim: int) -> bool:
    n = x.shape[dim] if x.dim() else 1
    limit = SMALL_NUMEL_SHORT_ROWS[op] if n <= 1024 else 0
    return x.numel() <= max(limit, SMALL_NUMEL[op]) and \
        x.dtype not in registry.get(PORTABLE[op]).known_inexact


def log_softmax_preferences(x: torch.Tensor, dim: int = -1) -> tuple[str, ...]:
    """PyTorch's kernel for host-bound tensors, else the CUDA row family."""
    prefs = PREFERENCES["log_softmax"]
    return (PORTABLE["log_softmax"], *prefs) if _small("log_softmax", x, dim) else prefs


def log_softmax_backward_preferences(y: torch.Tensor, dy: torch.Tensor | None = None,
                                     dim: int = -1) -> tuple[str, ...]:
    """PyTorch's kernel for host-bound tensors; Triton's for rows under 512 (103 % of copy at
    N = 128 against the CUDA kernel's 30-60 %); the CUDA kernel from 512."""
    op = "log_softmax_backward"
    prefs = PREFERENCES[op]
    if _small(op, y, dim):
        return (PORTABLE[op], *prefs)
    if y.dim() and y.shape[dim] < 512:
        return ("triton_log_softmax_backward", *prefs)
    return prefs


LOG_SOFTMAX_AUTO = contract.Auto(
    log_softmax_preferences, PORTABLE["log_softmax"], portable_autograd=True,
    native=registry.NativeBelow(SMALL_NUMEL["log_softmax_backward"], PORTABLE["log_softmax"],
                                 PORTABLE["log_softmax_backward"]))
LOG_SOFTMAX_BACKWARD_AUTO = contract.Auto(log_softmax_backward_preferences,
                                          PORTABLE["log_softmax_backward"])
