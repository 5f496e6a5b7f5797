"""Whether the lab's Triton kernels are compiled for a GPU or run in Triton's interpreter.

Triton fixes this when it is imported (``TRITON_INTERPRET``: its own library functions such as
``tl.max`` are ``@triton.jit`` objects made at import), so it cannot be chosen per call. The
lab decides once, when ``kernel_lab`` is imported, before it imports triton: on a machine with
no usable CUDA GPU, and when the user has neither set the variable nor imported triton already,
it sets ``TRITON_INTERPRET=1``, so ``run("triton_fused", cpu_x)`` and the drop-ins run the Triton
variants on CPU tensors with nothing to export. On a GPU machine the kernels are compiled, and
a Triton variant refuses a CPU tensor in one line that names the variable.
"""

from __future__ import annotations

import os
import sys

import torch

HINT = "Triton variants run on CPU tensors only with TRITON_INTERPRET=1 set before triton loads"


def interpret_without_gpu() -> bool:
    """Set ``TRITON_INTERPRET=1`` if this machine has no CUDA GPU and triton is not loaded yet
    and the user left the variable unset; True when Triton runs interpreted from here on."""
    if "TRITON_INTERPRET" not in os.environ and "triton" not in sys.modules:
        if not torch.cuda.is_available():
            os.environ["TRITON_INTERPRET"] = "1"
    return interpreting()


def interpreting() -> bool:
    """Whether Triton kernels run in its interpreter (the variable as the lab's kernels saw it)."""
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


interpret_without_gpu()  # at import: kernel_lab/__init__.py imports this module before triton
