"""Cross-entropy over (rows, classes): forward (``cross_entropy``: loss and lse) and backward
(``cross_entropy_backward``: dlogits from logits and lse).

The lab's third op, of another shape than the row ops: an integer index input (target), an
optional per-class weight, a scalar or per-row loss, a saved statistic (lse) that is not the
loss. Files: ``op.py`` (ops, float64 references, edge cases, the target check), ``auto.py``,
one file of variants per backend, ``api.py`` (``kernel_lab.cross_entropy``).
"""

# Order matters: the ops exist before their variants register.
# isort: off
from kernel_lab.ops.cross_entropy import op  # noqa: F401
from kernel_lab.ops.cross_entropy import torch_variants  # noqa: F401
from kernel_lab.ops.cross_entropy import triton_variants  # noqa: F401
from kernel_lab.ops.cross_entropy import cuda_variants  # noqa: F401
from kernel_lab.ops.cross_entropy import peer_variants  # noqa: F401  (QuACK, Liger: skipped when not installed)
# isort: on
