"""Triton code paths the generic suite's small CPU shapes do not reach (interpreter on CPU)."""

import pytest
import torch
from conftest import DEVICE

import kernel_lab
from kernel_lab.checking.checker import run_checked


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_online_softmax_over_several_tiles(dtype):
    """N = 9000 > the 4096-wide tile: the running (max, sum) merges across tiles and lanes."""
    x = torch.randn(3, 9000, device=DEVICE).to(dtype)
    x[0, :5000] = float("-inf")  # a whole first tile of -inf: the -inf - -inf guard
    x[1, -1] = 40.0  # the max arrives in the last tile: earlier sums must be rescaled
    x[2] = float("-inf")  # all -inf: NaN, like torch
    result, out = run_checked(kernel_lab.get("triton_online"), (x,), {})
    assert result.ok, result.message
    assert torch.isnan(out[2]).all() and (out[0, :5000] == 0).all()


@pytest.mark.parametrize("name", ["triton_backward", "triton_log_softmax_backward"])
@pytest.mark.parametrize("n", [100, 20000], ids=["16-rows-per-program", "tiled"])
def test_backward_rows_per_program_and_tiles(name, n):
    """N = 100: 16 rows per program and 37 rows, so the last program masks 11 of its rows;
    N = 20000 > the 16K tile: one row per program, two passes."""
    variant = kernel_lab.get(name)
    m = 37 if n == 100 else 3
    x = torch.randn(m, n, device=DEVICE, dtype=torch.float64)
    log = "log" in name
    y = (torch.log_softmax if log else torch.softmax)(x, -1).float()
    dy = torch.randn(m, n, device=DEVICE)
    result, dx = run_checked(variant, (y, dy), {})
    assert result.ok, result.message
    assert dx.shape == (m, n) and torch.isfinite(dx).all()


_COMPILE_BACKWARD = """
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from triton_src import log_softmax, softmax
for fn in (softmax.softmax_backward_kernel, log_softmax.log_softmax_backward_kernel):
    for t in ("fp32", "bf16"):
        sig = {"dx_ptr": "*" + t, "y_ptr": "*" + t, "dy_ptr": "*" + t, "M": "i32", "N": "i32",
               "y_row_stride": "i32", "dy_row_stride": "i32", "BLOCK_N": "constexpr",
               "ROWS": "constexpr", "IS_FP64": "constexpr"}
        for block, rows in ((128, 16), (16384, 1)):
            src = ASTSource(fn=fn, signature=sig,
                            constexprs={"BLOCK_N": block, "ROWS": rows, "IS_FP64": False})
            assert triton.compile(src, target=GPUTarget("cuda", 90, 32)).asm["ptx"]
print("compiled")
"""


def test_backward_kernels_compile_for_sm90():
    """The interpreter runs Python, not Triton's compiler: compile the backward kernels (several
    rows per program, and tiles) for sm_90 like a GPU would, in a process without
    TRITON_INTERPRET."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    r = subprocess.run([sys.executable, "-c", _COMPILE_BACKWARD], env=env, text=True,
                       capture_output=True, timeout=600, cwd=Path(__file__).parents[1])
    assert r.returncode == 0 and "compiled" in r.stdout, r.stderr[-2000:]
