"""Triton code paths the generic suite's small CPU shapes do not reach (interpreter on CPU)."""

import pytest
import torch
from conftest import DEVICE

import kernel_lab
from kernel_lab.checking import run_checked


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
