"""kernel_lab: write, check and race GPU kernels from Python, with no C++ build step.

    import kernel_lab
    kernel_lab.run("online_softmax", x)          # any registered variant, by name
    kernel_lab.variants("softmax")               # what is registered
    kernel_lab.softmax(x, dim=-1)                # differentiable drop-in for torch.softmax
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
from .nn import LogSoftmax, Softmax
from .registry import Op, Variant, get, get_op, ops, register, register_op, run, variants
from .torch_ops import log_softmax, softmax  # torch.library custom ops: ~10 ms to import

__all__ = [
    "DuplicateVariantError",
    "KernelCompileError",
    "KernelLabError",
    "LogSoftmax",
    "Op",
    "Softmax",
    "UnknownVariantError",
    "UnsupportedInputError",
    "Variant",
    "get",
    "get_op",
    "log_softmax",
    "ops",
    "register",
    "register_op",
    "run",
    "softmax",
    "variants",
]
__version__ = "0.1.0"
