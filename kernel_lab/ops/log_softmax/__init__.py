"""log_softmax over one dim: forward (``log_softmax``) and backward (``log_softmax_backward``).

The lab's second op, added with new files only (README: "Adding a kernel, adding an op"):
``op.py`` (ops, float64 references, edge cases), then one file per backend of variants. Row
handling is the lab's ``rows.py``.
"""

# Order matters: the ops are registered before their variants.
# isort: off
from kernel_lab.ops.log_softmax import op  # noqa: F401
from kernel_lab.ops.log_softmax import torch_variants  # noqa: F401
from kernel_lab.ops.log_softmax import triton_variants  # noqa: F401
from kernel_lab.ops.log_softmax import cuda_variants  # noqa: F401
# isort: on
