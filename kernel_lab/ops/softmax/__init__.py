"""Softmax over one dim: forward (``softmax``) and backward (``softmax_backward``).

Files: ``op.py`` (the op definitions and float64 references), then one file of variants per
backend. Row/dim handling is shared by every op: ``kernel_lab/rows.py``.
"""

# Order matters: the ops exist before their variants register.
# isort: off
from . import op  # noqa: F401
from . import torch_variants  # noqa: F401
from . import triton_variants  # noqa: F401
from . import cuda_variants  # noqa: F401
from . import peer_variants  # noqa: F401  (Liger, QuACK: skipped when not installed)
# isort: on
