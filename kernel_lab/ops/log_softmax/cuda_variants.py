"""Launchers for the CUDA C++ log_softmax kernels: ``cuda_src/log_softmax.cu`` (forward) and
``cuda_src/log_softmax_backward.cu``. Variants are named after their files.

The forward runs fast_softmax's kernel family (``cuda_src/row_softmax_kernels.cuh``) with the
log epilogue, so it is launched exactly like fast_softmax: the same ``fast_softmax_config``
(and ``FAST_CHOICES`` memo) picks the kernel and shape, the same ``fast_launch`` launches it,
only the kernel-name prefix (``log_softmax_*``) and source differ. The backward holds a
rows-on-chip kernel (templated on vectors per thread) and a streaming kernel for rows longer
than one block holds; its launch shape is softmax's ``vec_config`` applied to the row's
worst-case count of 16-byte windows. Everything else - declaring the sources so CI compiles
them, launching on torch's stream, dim/stride handling - is the lab's shared plumbing
(``cuda_common``, ``rows.rowwise``).
"""

from __future__ import annotations

import functools

import torch

from kernel_lab.cuda_common import (
    ALL_DTYPES,
    ctype,
    cuda_source,
    launch_rows,
    same_vector_phase,
    vec_aligned,
    vec_width,
)
from kernel_lab.interop import i32
from kernel_lab.ops.softmax.backward_config import BWD_MAX_THREADS
from kernel_lab.ops.softmax.cuda_variants import RowKernels, fast_choice, fast_launch, fast_plan
from kernel_lab.ops.softmax.fast_config import VPT, row_kernel_exprs, vec_config
from kernel_lab.registry import register
from kernel_lab.rows import rowwise

_T = [ctype(dt) for dt in ALL_DTYPES]
FORWARD = cuda_source("log_softmax.cu", row_kernel_exprs("log_softmax"))
FORWARD_KERNELS = RowKernels(FORWARD, "log_softmax")
BACKWARD = cuda_source(
    "log_softmax_backward.cu",
    [f"log_softmax_backward<{t}, {v}>" for t in _T for v in VPT]
    + [f"log_softmax_backward_stream<{t}>" for t in _T],
)


def row_config(n: int, dtype: torch.dtype, max_threads: int,
               aligned: bool = False) -> tuple[int, int | None]:
    """(threads, vectors per thread) for a row of ``n``, or (threads, None): stream it.

    ``aligned``: every row starts 16-byte aligned, so it spans exactly ceil(n / W) windows;
    otherwise one extra window is budgeted for a row starting mid-vector (odd N puts rows
    anywhere). Budgeting that window for aligned rows too (until the twentieth run) doubled the
    CTA of power-of-two rows - half its threads idle, bf16 65536x4096 at 86 % of copy against
    PyTorch's 101 % on the H200 - and sent fp32 16384 to the streaming kernel.
    """
    return vec_config(n if aligned else n + vec_width(dtype) - 1, dtype, max_threads)


@register(
    "log_softmax",
    op="log_softmax",
    backend="cuda",
    dtypes=ALL_DTYPES,
    description="fast_softmax's kernels with the log epilogue: lane groups / CTA / persistent "
    "prefetching CTAs or clusters / wide, one read + one write (see fast_softmax_config)",
    source="cuda_src/log_softmax.cu",
)
def log_softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    def launch(out, x2d):
        cfg, phase = fast_choice(out, x2d)
        fast_launch(out, x2d, cfg, phase, FORWARD_KERNELS)

    return rowwise(launch, x, dim=dim)


log_softmax.launch_plan = functools.partial(fast_plan, prefix="log_softmax")


@register(
    "log_softmax_backward",
    op="log_softmax_backward",
    backend="cuda",
    dtypes=ALL_DTYPES,
    description="y and dy in registers (16-byte aligned windows): read once, dx written once",
    source="cuda_src/log_softmax_backward.cu",
)
def log_softmax_backward(y: torch.Tensor, dy: torch.Tensor, dim: int = -1) -> torch.Tensor:
    def launch(dx, y2d, dy2d):
        m, n = dx.shape
        aligned = vec_aligned(dx, y2d, dy2d)
        threads, vpt = row_config(n, y2d.dtype, BWD_MAX_THREADS, aligned)
        t = ctype(y2d.dtype)
        if vpt:
            expr = f"log_softmax_backward<{t}, {vpt}>"
        else:
            expr, threads = f"log_softmax_backward_stream<{t}>", 1024
        launch_rows(BACKWARD, expr, dx, (y2d, dy2d), grid=m, block=threads,
                    extra=(i32(1 if aligned else same_vector_phase(dx, y2d, dy2d)),))

    return rowwise(launch, y, dy, dim=dim)
