"""``variant="auto"`` for linear_cross_entropy and its backward: the chunked variant (cuBLAS
matmuls over chunks of tokens, the lab's cross-entropy kernel per chunk) wherever it runs, which
is every device; the baseline (logits in memory) after it."""

from __future__ import annotations

from kernel_lab.core import contract

PREFERENCES = {
    "linear_cross_entropy": ("torch_chunked_linear_cross_entropy",
                             "torch_linear_cross_entropy"),
    "linear_cross_entropy_backward": ("torch_chunked_linear_cross_entropy_backward",
                                      "torch_linear_cross_entropy_backward"),
}

FORWARD_AUTO = contract.Auto(lambda *inputs, **kw: PREFERENCES["linear_cross_entropy"],
                             "torch_chunked_linear_cross_entropy")
BACKWARD_AUTO = contract.Auto(lambda *inputs, **kw: PREFERENCES["linear_cross_entropy_backward"],
                              "torch_chunked_linear_cross_entropy_backward")
