"""kernel_lab: write, check and race GPU kernels from Python, with no C++ build step.

    import kernel_lab
    kernel_lab.run("online_softmax", x)          # any registered variant, by name
    kernel_lab.variants("softmax")               # what is registered
    kernel_lab.runs_here("triton_fused")         # ... and whether it runs on this machine
    kernel_lab.softmax(x, dim=-1)                # differentiable drop-in for torch.softmax
    kernel_lab.cross_entropy(logits, target)     # ... and for F.cross_entropy
    kernel_lab.linear_cross_entropy(h, W, t)     # the LM head + loss, logits never whole
"""

# First: Triton's compiled-or-interpreted mode is fixed when triton is imported, and with no GPU
# here the lab picks the interpreter (triton_mode.py), so Triton variants run on CPU tensors.
from kernel_lab.core import triton_mode  # noqa: F401, I001
from kernel_lab.checking.checker import runs_here, why_not_here
from kernel_lab.base.errors import (
    DimRangeError,
    DuplicateOpError,
    DuplicateVariantError,
    InputTypeError,
    KernelCompileError,
    KernelLabError,
    UnknownVariantError,
    UnsupportedInputError,
)
from kernel_lab.ops.cross_entropy.api import CrossEntropyLoss, cross_entropy
from kernel_lab.ops.linear_cross_entropy.api import LinearCrossEntropyLoss, linear_cross_entropy
from kernel_lab.ops.log_softmax.api import LogSoftmax, log_softmax
from kernel_lab.ops.softmax.api import Softmax, softmax
from kernel_lab.core.plans import run
from kernel_lab.ops import OP_MODULES
from kernel_lab.core.contract import Auto, Autograd, Input, Op, Output
from kernel_lab.core.registry import (
    Variant,
    get,
    get_op,
    load_ops_from,
    op_names,
    register,
    register_op,
    variants,
)

load_ops_from(OP_MODULES)  # imported on the registry's first use
del triton_mode, load_ops_from, OP_MODULES  # the package root keeps the public API only

__all__ = [
    "Auto",
    "Autograd",
    "CrossEntropyLoss",
    "DimRangeError",
    "DuplicateOpError",
    "DuplicateVariantError",
    "Input",
    "InputTypeError",
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
    "op_names",
    "register",
    "register_op",
    "run",
    "softmax",
    "runs_here",
    "variants",
    "why_not_here",
]
__version__ = "0.1.0"
