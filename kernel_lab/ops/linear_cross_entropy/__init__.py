"""The LM-head loss: ``linear_cross_entropy`` (loss and lse of F.cross_entropy over
hidden @ weight.T + bias) and its backward (dhidden, dweight, dbias), the logits kept out of
memory by the chunked variant (cuBLAS over chunks of tokens, the lab's cross-entropy per
chunk).

Files: ``op.py`` (ops, float64 references, edge cases, checks), ``auto.py``, one file of
variants per backend, ``api.py`` (``kernel_lab.linear_cross_entropy``).
"""

# Order matters: the ops exist before their variants register.
# isort: off
from kernel_lab.ops.linear_cross_entropy import op  # noqa: F401
from kernel_lab.ops.linear_cross_entropy import torch_variants  # noqa: F401
from kernel_lab.ops.linear_cross_entropy import peer_variants  # noqa: F401  (Liger, Cut Cross-Entropy: skipped when not installed)
# isort: on
