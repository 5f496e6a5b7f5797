"""The checker itself: known-wrong kernels fail, the tolerance table and NaN rules hold."""

import pytest
import torch
from conftest import DEVICE
from known_wrong import WRONG

import kernel_lab
from kernel_lab.checking.checker import cases_for, fresh_seed, make_case_inputs, run_checked
from kernel_lab.core.reference import TOLERANCES, check


@pytest.mark.parametrize("wrong", WRONG, ids=lambda v: v.name)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_known_wrong_is_rejected(wrong, dtype):
    """Run the SAME cases the real variants pass; at least one must fail for each wrong kernel."""
    op = kernel_lab.get_op("softmax")
    gen = torch.Generator().manual_seed(fresh_seed())
    todo = [(c.label, *make_case_inputs(op, c, dtype, DEVICE, gen)) for c in cases_for(DEVICE)]
    todo += op.edge_cases(dtype, DEVICE, gen)
    failures = []
    for label, inputs, kw in todo:
        result, _ = run_checked(wrong, inputs, kw)
        if not result.ok:
            failures.append(label)
    assert failures, f"{wrong.name} passed every case: the checker is blind"


def test_every_real_variant_passes_what_wrong_ones_fail():
    """Sanity: the reference passes its own check on the cases (no flaky tolerance)."""
    op = kernel_lab.get_op("softmax")
    x = op.make_inputs((4, 781), torch.float32)[0]
    ref = op.reference(x)
    assert check(ref.float(), ref, torch.float32).ok


def test_nan_where_reference_is_finite_fails():
    ref = torch.tensor([[0.25, 0.75]], dtype=torch.float64)
    out = torch.tensor([[0.25, float("nan")]])
    assert not check(out, ref, torch.float32).ok
    assert "NaN" in check(out, ref, torch.float32).message


def test_finite_where_reference_is_nan_fails():
    ref = torch.tensor([[float("nan"), float("nan")]], dtype=torch.float64)
    assert not check(torch.tensor([[0.5, 0.5]]), ref, torch.float32).ok
    assert check(torch.tensor([[float("nan")] * 2]), ref, torch.float32).ok


def test_wrong_shape_or_dtype_fails():
    ref = torch.rand(2, 3, dtype=torch.float64)
    assert not check(ref.float()[:, :2], ref, torch.float32).ok
    assert not check(ref.half(), ref, torch.float32).ok


@pytest.mark.parametrize("dtype", list(TOLERANCES), ids=str)
def test_tolerance_is_tight_enough_to_see_one_percent(dtype):
    """A 1% error in every element must fail for every dtype but bf16's 2^-8 rounding grid."""
    ref = torch.rand(64, 64, dtype=torch.float64) + 0.5
    off = (ref * 1.02).to(dtype)
    assert not check(off, ref, dtype).ok
