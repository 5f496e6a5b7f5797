"""``variant="auto"`` for cross_entropy and its backward: the CUDA kernels on CUDA tensors, then
Triton's, then PyTorch's (the only one off CUDA)."""

from __future__ import annotations

from kernel_lab.core import contract

PREFERENCES = {
    "cross_entropy": ("cuda_cross_entropy", "triton_cross_entropy", "torch_cross_entropy"),
    "cross_entropy_backward": ("cuda_cross_entropy_backward", "triton_cross_entropy_backward",
                               "torch_cross_entropy_backward"),
}

CROSS_ENTROPY_AUTO = contract.Auto(lambda *inputs, **kw: PREFERENCES["cross_entropy"],
                                   "torch_cross_entropy")
CROSS_ENTROPY_BACKWARD_AUTO = contract.Auto(
    lambda *inputs, **kw: PREFERENCES["cross_entropy_backward"], "torch_cross_entropy_backward")
