"""Softmax over one dim: forward (``softmax``) and backward (``softmax_backward``).

Files: ``op.py`` (the op definitions and float64 references), ``rows.py`` (dim/stride handling
shared by every hand-written kernel), then one file per backend of variants.
"""

# Order matters: the ops exist before their variants register.
# isort: off
from . import op  # noqa: F401
from . import torch_variants  # noqa: F401
from . import triton_variants  # noqa: F401
from . import cuda_variants  # noqa: F401
from . import peer_variants  # noqa: F401  (Liger, QuACK: skipped when not installed)
# isort: on
