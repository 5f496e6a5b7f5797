"""kernel_lab: write, check and race GPU kernels from Python, with no C++ build step.

    import kernel_lab
    kernel_lab.run("online_softmax", x)          # any registered variant, by name
    kernel_lab.variants("softmax")               # what is registered
    kernel_lab.softmax(x, dim=-1)                # differentiable drop-in for torch.softmax
    kernel_lab.cross_entropy(logits, target)     # ... and for F.cross_entropy
    kernel_lab.linear_cross_entropy(h, W, t)     # the LM head + loss, logits never whole
"""

# The subpackage kernel_lab.ops (the op implementations) is imported first so that the name
# ``kernel_lab.ops`` ends up bound to the public function ``ops()`` below, whatever imports later.
from . import ops as _ops_package  # noqa: F401
from .errors import (
    DuplicateVariantError,
    KernelCompileError,
    KernelLabError,
    UnknownVariantError,
    UnsupportedInputError,
)
from .ops.cross_entropy.api import CrossEntropyLoss, cross_entropy
from .ops.linear_cross_entropy.api import LinearCrossEntropyLoss, linear_cross_entropy
from .ops.log_softmax.api import LogSoftmax, log_softmax
from .ops.softmax.api import Softmax, softmax
from .registry import (
    Auto,
    Autograd,
    Input,
    Op,
    Output,
    Variant,
    get,
    get_op,
    ops,
    register,
    register_op,
    run,
    variants,
)

__all__ = [
    "Auto",
    "Autograd",
    "CrossEntropyLoss",
    "DuplicateVariantError",
    "Input",
    "KernelCompileError",
    "KernelLabError",
    "LinearCrossEntropyLoss",
    "LogSoftmax",
    "Op",
    "Output",
    "Softmax",
    "UnknownVariantError",
    "UnsupportedInputError",
    "Variant",
    "cross_entropy",
    "get",
    "get_op",
    "linear_cross_entropy",
    "log_softmax",
    "ops",
    "register",
    "register_op",
    "run",
    "softmax",
    "variants",
]
__version__ = "0.1.0"
