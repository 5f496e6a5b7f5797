"""log_softmax specifics the generic suite (test_correctness.py) cannot reach on a CPU.

The generic suite already checks every log_softmax variant against the float64 reference on
random and edge-case inputs. Here: the Triton kernels' long-row paths (forced onto small rows by
shrinking the tile limits, so the interpreter stays fast), and proof that the op's edge cases
and tolerances catch the classic log_softmax mistakes.
"""

import pytest
import torch
from conftest import DEVICE

import kernel_lab
from kernel_lab.checking.checker import run_checked
from kernel_lab.core.reference import check
from kernel_lab.ops.log_softmax import op as log_softmax_op
from kernel_lab.ops.log_softmax import triton_variants


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_triton_long_row_paths(monkeypatch, dtype):
    """Online forward and two-pass backward, on rows spanning several tiles (and a tail)."""
    monkeypatch.setattr(triton_variants, "ROWS_MAX_N", 64)
    monkeypatch.setattr(triton_variants, "ONLINE_BLOCK", 128)
    monkeypatch.setattr(triton_variants, "BACKWARD_BLOCK", 128)
    gen = torch.Generator().manual_seed(0)
    for name in ("triton_log_softmax", "triton_log_softmax_backward"):
        v = kernel_lab.get(name)
        op = kernel_lab.get_op(v.op)
        cases = [("random", op.make_inputs((3, 781), dtype, DEVICE, gen), {})]
        cases += op.edge_cases(dtype, DEVICE, gen)
        for label, inputs, kw in cases:
            if v.supports(*inputs, **kw) is not None:
                pytest.skip(f"{name}: {v.supports(*inputs, **kw)}")
            result, _ = run_checked(v, inputs, kw)
            assert result.ok, f"{name} {label}: {result.message}"


def _max_plus_log_sum(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Wrong: x - (max + log(sum)) rounds to ulp(max) before the subtraction."""
    a = x.float()
    m = a.amax(dim, keepdim=True)
    return (a - (m + torch.log(torch.exp(a - m).sum(dim, keepdim=True)))).to(x.dtype)


def _no_max(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Wrong: no max subtracted, exp overflows."""
    a = x.float()
    return (a - torch.log(torch.exp(a).sum(dim, keepdim=True))).to(x.dtype)


@pytest.mark.parametrize("wrong", [_max_plus_log_sum, _no_max])
def test_edge_cases_catch_wrong_kernels(wrong):
    gen = torch.Generator().manual_seed(0)
    for label, (x,), kw in log_softmax_op.log_softmax_edge_cases(torch.float32, "cpu", gen):
        if label == "inf_nan_rows":
            ref = log_softmax_op.log_softmax_reference(x, **kw)
            assert not check(wrong(x, **kw), ref, torch.float32, log_softmax_op.TOLERANCES)


def test_reference_overflows_like_torch():
    """fp16 logits +-65504 give a log-probability below -65504: -inf, as torch.log_softmax."""
    x = torch.tensor([[65504.0, -65504.0, 0.0]], dtype=torch.float16)
    ref = log_softmax_op.log_softmax_reference(x)
    assert ref[0, 1] == float("-inf") and torch.isfinite(ref[0, [0, 2]]).all()
    assert check(torch.log_softmax(x, -1), ref, torch.float16, log_softmax_op.TOLERANCES)


def test_cuda_backward_fits_aligned_rows_exactly():
    """The CUDA backward's CTA covers an aligned row's ceil(N / W) windows with no idle half
    (one spare window only when rows may start mid-vector), and keeps fp32 16384 on chip."""
    from kernel_lab.cuda.rowkernels.backward_config import BWD_MAX_THREADS
    from kernel_lab.cuda.rowkernels.forward_config import vector_windows
    from kernel_lab.ops.log_softmax.cuda_variants import row_config

    assert row_config(4096, torch.bfloat16, BWD_MAX_THREADS, aligned=True) == (128, 4)
    assert row_config(4096, torch.bfloat16, BWD_MAX_THREADS) == (256, 4)
    assert row_config(16384, torch.float32, BWD_MAX_THREADS, aligned=True) == (512, 8)
    assert row_config(16384, torch.float32, BWD_MAX_THREADS)[1] is None  # streamed
    for dt in (torch.float32, torch.bfloat16, torch.float16):
        for n in (1, 7, 128, 1000, 4096, 8192, 20000, 32000):
            for aligned in (True, False):
                threads, vpt = row_config(n, dt, BWD_MAX_THREADS, aligned)
                need = vector_windows(n, dt, aligned)
                if vpt is not None:
                    assert need <= threads * vpt < 2 * need + 32 * vpt, (n, dt, aligned)
