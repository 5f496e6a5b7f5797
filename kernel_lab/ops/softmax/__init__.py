"""Softmax over one dim: forward (``softmax``) and backward (``softmax_backward``).

Files: ``op.py`` (the op definitions and float64 references), then one file of variants per
backend. Row/dim handling is shared by every op: ``kernel_lab/core/rows.py``.
"""

# Order matters: the ops exist before their variants register.
# isort: off
from kernel_lab.ops.softmax import op  # noqa: F401
from kernel_lab.ops.softmax import torch_variants  # noqa: F401
from kernel_lab.ops.softmax import triton_variants  # noqa: F401
from kernel_lab.ops.softmax import cuda_variants  # noqa: F401
from kernel_lab.ops.softmax import peer_variants  # noqa: F401  (Liger, QuACK: skipped when not installed)
# isort: on
