"""kernel_lab: write, check and race GPU kernels from Python, with no C++ build step.

    import kernel_lab
    kernel_lab.run("online_softmax", x)          # any registered variant, by name
    kernel_lab.variants("softmax")               # what is registered
    kernel_lab.softmax(x, dim=-1)                # differentiable drop-in for torch.softmax
    kernel_lab.cross_entropy(logits, target)     # ... and for F.cross_entropy
"""

from .errors import (
    DuplicateOpError,
    DuplicateVariantError,
    KernelCompileError,
    KernelLabError,
    UnknownVariantError,
    UnsupportedInputError,
)
from .ops.cross_entropy.api import CrossEntropyLoss, cross_entropy
from .ops.log_softmax.api import LogSoftmax, log_softmax
from .ops.softmax.api import Softmax, softmax
from .plans import run
from .registry import (
    Auto,
    Autograd,
    Input,
    Op,
    Output,
    Variant,
    get,
    get_op,
    op_names,
    register,
    register_op,
    variants,
)

__all__ = [
    "Auto",
    "Autograd",
    "CrossEntropyLoss",
    "DuplicateOpError",
    "DuplicateVariantError",
    "Input",
    "KernelCompileError",
    "KernelLabError",
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
    "log_softmax",
    "op_names",
    "register",
    "register_op",
    "run",
    "softmax",
    "variants",
]
__version__ = "0.1.0"
