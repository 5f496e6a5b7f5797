"""Launchers for the Triton log_softmax kernels in ``triton_src/log_softmax.py``.

One forward variant covers every row length: rows up to ``ROWS_MAX_N`` are held whole in
registers (several narrow rows per program), longer rows take the tiled online kernel. Row
handling (any dim, strides, empty tensors) is :func:`kernel_lab.core.rows.per_row`'s.
"""

from __future__ import annotations

import torch
import triton

from kernel_lab.core import triton_rows
from kernel_lab.core.registry import registrar
from kernel_lab.core.rows import per_row
from kernel_lab.core.triton_rows import rows_per_program
from kernel_lab.ops.log_softmax.op import ALL_DTYPES
from kernel_lab.triton_src import log_softmax as kernels

SOURCE = "triton_src/log_softmax.py"
triton_variant = registrar(op="log_softmax", backend="triton", dtypes=ALL_DTYPES,
                            source=SOURCE)
ROWS_MAX_N = 16384  # past this a whole row in one program's registers starts to spill
ONLINE_BLOCK = 4096
BACKWARD_BLOCK = 16384


@triton_variant(
    "triton_log_softmax",
    description="whole rows in registers up to 16K columns, tiled online (max, sum) beyond",
)
@per_row
def triton_log_softmax(out, x2d):
    m, n = x2d.shape
    common = dict(IS_FP64=x2d.dtype == torch.float64)
    if n <= ROWS_MAX_N:
        block = triton.next_power_of_2(n)
        rows = max(1, min(16, 2048 // block))
        kernels.log_softmax_rows_kernel[(triton.cdiv(m, rows),)](
            out, x2d, m, n, x2d.stride(0), BLOCK_N=block, ROWS=rows,
            num_warps=triton_rows.num_warps(block * rows), **common,
        )
    else:
        kernels.log_softmax_online_kernel[(m,)](
            out, x2d, m, n, x2d.stride(0), BLOCK_N=ONLINE_BLOCK,
            num_warps=triton_rows.num_warps(ONLINE_BLOCK), **common,
        )


@triton_variant(
    "triton_log_softmax_backward",
    op="log_softmax_backward",
    description="whole rows per program (several narrow ones), one read of y and dy when the "
    "row fits a 16K tile",
)
@per_row(inputs=2)
def triton_log_softmax_backward(dx, y2d, dy2d):
    m, n = y2d.shape
    block = min(triton.next_power_of_2(n), BACKWARD_BLOCK)
    rows = rows_per_program(n, block)
    kernels.log_softmax_backward_kernel[(triton.cdiv(m, rows),)](
        dx, y2d, dy2d, m, n, y2d.stride(0), dy2d.stride(0), BLOCK_N=block, ROWS=rows,
        IS_FP64=y2d.dtype == torch.float64, num_warps=triton_rows.num_warps(block * rows),
    )
