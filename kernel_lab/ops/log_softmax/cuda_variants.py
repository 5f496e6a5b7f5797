"""Launchers for the CUDA C++ log_softmax kernels: ``cuda_src/fast_log_softmax.cu`` (forward) and
``cuda_src/fused_log_softmax_backward.cu``. Variants are named after their files.

The forward runs fast_softmax's kernel family (``cuda_src/row_softmax_kernels.cuh``) with the
log epilogue, so it is launched exactly like fast_softmax: the same ``fast_softmax_config``
picks the kernel and shape, the same ``fast_launch`` launches it, only the kernel-name prefix
(``log_softmax_*``) and source differ. The backward (:func:`log_backward_config`) holds a
rows-on-chip kernel (templated on vectors per thread, sized by softmax's ``vec_config`` for the
row's 16-byte windows), the softmax backward's persistent clusters and, past them, its rows in
chunks, both with the log rule (same shapes, same launcher: ``backward_config`` and
``backward_launch``), and a streaming kernel for the rest. Everything else - declaring the
sources so CI compiles them, launching on torch's stream, dim/stride handling -
is the lab's shared plumbing (``cuda.sources``, ``rows.per_row``).
"""

from __future__ import annotations

import functools

import torch

from kernel_lab.core.registry import alias, registrar
from kernel_lab.core.rows import as_rows, per_row
from kernel_lab.cuda.archs import Arch, device_arch
from kernel_lab.cuda.interop import i32
from kernel_lab.cuda.rowkernels.backward_config import (
    BWD_MAX_THREADS,
    BackwardConfig,
    backward_chunk_instantiations,
    backward_config,
    backward_persist_config,
    backward_persist_instantiations,
)
from kernel_lab.cuda.rowkernels.forward_config import TUNED_ARCH, VPT, row_kernel_exprs, vec_config
from kernel_lab.cuda.rowkernels.launch import (
    RowKernels,
    backward_launch,
    backward_shape_note,
    fast_choice,
    fast_launch,
    fast_shape,
    fast_shape_missing,
)
from kernel_lab.cuda.sources import (
    ALL_DTYPES,
    ctype,
    cuda_source,
    device_index,
    launch_rows,
    same_vector_phase,
    vec_aligned,
    vec_width,
)

cuda_variant = registrar(op="log_softmax", backend="cuda", dtypes=ALL_DTYPES)
_T = [ctype(dt) for dt in ALL_DTYPES]
FORWARD = cuda_source("fast_log_softmax.cu", row_kernel_exprs("log_softmax"))
FORWARD_KERNELS = RowKernels(FORWARD, "log_softmax")
BACKWARD = cuda_source(
    "fused_log_softmax_backward.cu",
    [f"log_softmax_backward<{t}, {v}>" for t in _T for v in VPT]
    + [f"log_softmax_backward_persist<{ctype(d)}, {v}, {c}>"
       for d, v, c in backward_persist_instantiations()]
    + [f"log_softmax_backward_chunks<{ctype(d)}, {v}>" for d, v in backward_chunk_instantiations()]
    + [f"log_softmax_backward_stream<{t}>" for t in _T],
)
BACKWARD_KERNELS = RowKernels(BACKWARD, "log_softmax_backward")


def row_config(n: int, dtype: torch.dtype, max_threads: int,
               aligned: bool = False) -> tuple[int, int | None]:
    """(threads, vectors per thread) for a row of ``n``, or (threads, None): stream it.

    ``aligned``: every row starts 16-byte aligned, so it spans exactly ceil(n / W) windows;
    otherwise one extra window is budgeted for a row starting mid-vector (odd N puts rows
    anywhere). Budgeting that window for aligned rows too doubled the
    CTA of power-of-two rows - half its threads idle, bf16 65536x4096 at 86 % of copy against
    PyTorch's 101 % on the H200 - and sent fp32 16384 to the streaming kernel.
    """
    return vec_config(n if aligned else n + vec_width(dtype) - 1, dtype, max_threads)


def log_backward_config(n: int, dtype: torch.dtype, aligned: bool,
                        phase: bool, arch: Arch = TUNED_ARCH) -> BackwardConfig:
    """The launch of log_softmax_backward for rows of ``n``: ``persist`` or ``chunks`` wherever
    the softmax backward takes them (:func:`backward_config`: fp32 rows past one CTA, 2-byte
    aligned rows of >= 4000 windows; chunks past the persistent shapes), and ``persist`` for
    rows of y, dy and dx in one 16-byte phase (``phase``) that one CTA cannot hold; else
    ``block`` (one CTA per row, :func:`row_config`) or ``stream`` (two passes: fp64, rows in
    different phases). ``aligned``: every row starts on 16 bytes. ``arch``: as backward_config."""
    cfg = backward_config(n, dtype, aligned, phase, arch)
    if cfg.kind_of.grid != "rows":  # persistent or chunks: the softmax backward's kernels
        return cfg
    threads, vpt = row_config(n, dtype, BWD_MAX_THREADS, aligned)
    if vpt:
        return BackwardConfig("block", threads, vpt)
    return (phase and backward_persist_config(n, dtype, aligned, arch)) or \
        BackwardConfig("stream", 1024, None)


def _shape_on_this_gpu(x: torch.Tensor, dim: int = -1) -> str | None:
    """None, or why no fast-kernel shape holds these rows on x's GPU (launch.fast_shape_missing)."""
    return fast_shape_missing(as_rows(x, dim)[0]) if x.numel() and x.dim() else None


@cuda_variant(
    "fast_log_softmax",
    description="fast_softmax's kernels with the log epilogue: lane groups / CTA / persistent "
    "prefetching CTAs or clusters / wide, one read + one write (see fast_softmax_config)",
    source="cuda_src/fast_log_softmax.cu",
    check=_shape_on_this_gpu,
)
@per_row
def fast_log_softmax(out, x2d):
    cfg, phase = fast_choice(out, x2d)
    fast_launch(out, x2d, cfg, phase, FORWARD_KERNELS)


fast_log_softmax.launch_shape = functools.partial(fast_shape, prefix="log_softmax")


@cuda_variant(
    "fused_log_softmax_backward",
    op="log_softmax_backward",
    description="y and dy in registers (16-byte aligned windows), longer rows in "
    "fused_softmax_backward's persistent clusters: read once, dx written once",
    source="cuda_src/fused_log_softmax_backward.cu",
)
@per_row(inputs=2)
def fused_log_softmax_backward(dx, y2d, dy2d):
    aligned = vec_aligned(dx, y2d, dy2d)
    phase = aligned or bool(same_vector_phase(dx, y2d, dy2d))
    cfg = log_backward_config(dx.shape[1], y2d.dtype, aligned, phase,
                              device_arch(device_index(dx)))
    if cfg.kind_of.grid != "rows":  # the shared persistent / chunk launch
        backward_launch(dx, y2d, dy2d, cfg, aligned, phase=phase, kernels=BACKWARD_KERNELS)
    else:
        launch_rows(BACKWARD, cfg.expr(ctype(y2d.dtype), BACKWARD_KERNELS.prefix), dx,
                    (y2d, dy2d), grid=dx.shape[0], block=cfg.threads,
                    extra=(i32(int(phase)),))


def log_backward_shape(n: int, dtype: torch.dtype, arch: Arch = TUNED_ARCH) -> str:
    """What log_softmax_backward launches for contiguous rows of n on ``arch`` (``python -m
    kernel_lab picks``): y, dy and dx share their 16-byte phase there."""
    cfg = log_backward_config(n, dtype, n * dtype.itemsize % 16 == 0, True, arch)
    return (f"{cfg.label()}: {cfg.expr(ctype(dtype), BACKWARD_KERNELS.prefix)}"
            f"{backward_shape_note(cfg, n, dtype)}")


fused_log_softmax_backward.launch_shape = log_backward_shape

# the names these variants had when they shared their ops' names
alias("log_softmax", "fast_log_softmax")
alias("log_softmax_backward", "fused_log_softmax_backward")
