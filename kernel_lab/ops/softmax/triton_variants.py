"""Launchers for the Triton softmax kernels in ``triton_src/softmax.py``.

On a GPU they compile and run as usual; on a CPU-only machine they run in Triton's interpreter
when ``TRITON_INTERPRET=1`` was set before triton was imported (the test suite does this).
"""

from __future__ import annotations

import torch
import triton

from kernel_lab.core import triton_rows
from kernel_lab.core.registry import registrar
from kernel_lab.core.rows import per_row
from kernel_lab.core.triton_rows import rows_per_program
from kernel_lab.ops.softmax.op import ALL_DTYPES
from kernel_lab.triton_src import softmax as kernels

SOURCE = "triton_src/softmax.py"
triton_variant = registrar(op="softmax", backend="triton", dtypes=ALL_DTYPES, source=SOURCE)
FUSED_MAX_N = 65536  # beyond this one program's registers spill so badly it is pointless


def _fused_limit(x: torch.Tensor, dim: int = -1) -> str | None:
    n = x.shape[dim] if x.dim() else 0
    if n > FUSED_MAX_N:
        return f"row length {n} > {FUSED_MAX_N}: a whole row no longer fits one program"
    return None


@triton_variant(
    "triton_fused",
    description="whole row per program in registers, several narrow rows per program",
    check=_fused_limit,
)
@per_row
def triton_fused(out, x2d):
    m, n = x2d.shape
    block = triton.next_power_of_2(n)
    rows = max(1, min(16, 2048 // block))
    grid = (triton.cdiv(m, rows),)
    kernels.softmax_fused_kernel[grid](
        out, x2d, m, n, x2d.stride(0), BLOCK_N=block, ROWS=rows,
        IS_FP64=x2d.dtype == torch.float64, num_warps=triton_rows.num_warps(block * rows),
    )


@triton_variant(
    "triton_online",
    description="row tiled over columns with a running (max, sum): any row length",
)
@per_row
def triton_online(out, x2d):
    m, n = x2d.shape
    block = min(triton.next_power_of_2(n), 4096)
    kernels.softmax_online_kernel[(m,)](
        out, x2d, m, n, x2d.stride(0), BLOCK_N=block,
        IS_FP64=x2d.dtype == torch.float64, num_warps=triton_rows.num_warps(block),
    )


@triton_variant(
    "triton_backward",
    op="softmax_backward",
    description="whole rows per program (several narrow ones), one read of y and dy when the "
    "row fits a 16K tile",
)
@per_row(inputs=2)
def triton_backward(dx, y2d, dy2d):
    m, n = y2d.shape
    block = min(triton.next_power_of_2(n), 16384)
    rows = rows_per_program(n, block)
    kernels.softmax_backward_kernel[(triton.cdiv(m, rows),)](
        dx, y2d, dy2d, m, n, y2d.stride(0), dy2d.stride(0), BLOCK_N=block, ROWS=rows,
        IS_FP64=y2d.dtype == torch.float64, num_warps=triton_rows.num_warps(block * rows),
    )
