"""Every registered variant against its op's float64 reference: parametrized over the registry.

A new variant is tested the moment it is registered. Inputs are fresh random data every run (the
seed is in the failure message); outputs land in NaN-poisoned memory; unsupported inputs skip
with the variant's own ``supports()`` reason.
"""

import pytest
import torch
from conftest import DEVICE

import kernel_lab
from kernel_lab.checking.checker import (
    cases_for,
    dtype_name,
    fresh_seed,
    make_case_inputs,
    run_checked,
)
from kernel_lab.cli.check import PER_SHAPE_BACKENDS

TEST_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)


# torch.compile compiles each new (shape, dtype): on an H100 beside 12 other workers 14-23 s a
# shape case, and 71-138 s a variant's edge cases over its dtypes (each case a new signature; the
# linear cross-entropy's backward the longest). Its shape cases other than the smoke one and its
# edge cases are `slow`: the full tier and the README's plain run take them; `.ci/gpu`'s
# default tier keeps each compile variant's smoke case in every dtype.


def _params():
    for op in kernel_lab.op_names():
        for v in kernel_lab.variants(op):
            for dtype in TEST_DTYPES:
                if dtype not in v.dtypes:
                    continue
                for case in cases_for(DEVICE, kernel_lab.get_op(op)):
                    slow = v.backend in PER_SHAPE_BACKENDS and "smoke" not in case.tags
                    yield pytest.param(v.name, dtype, case,
                                       id=f"{v.name}-{dtype_name(dtype)}-{case.label}",
                                       marks=[pytest.mark.slow] if slow else [])


def _edge_params():
    for op_name in kernel_lab.op_names():
        if kernel_lab.get_op(op_name).edge_cases is None:
            continue
        for v in kernel_lab.variants(op_name):
            slow = [pytest.mark.slow] if v.backend in PER_SHAPE_BACKENDS else []
            for dtype in TEST_DTYPES:
                if dtype in v.dtypes:
                    yield pytest.param(v.name, dtype, id=f"{v.name}-{dtype_name(dtype)}",
                                       marks=slow)


def _skip_if_unsupported(v, inputs, kw):
    reason = v.supports(*inputs, **kw)
    if reason is not None:
        pytest.skip(f"{v.name}: {reason}")


@pytest.mark.parametrize("name,dtype,case", list(_params()))
def test_matches_reference(name, dtype, case):
    v = kernel_lab.get(name)
    op = kernel_lab.get_op(v.op)
    seed = fresh_seed()
    gen = torch.Generator().manual_seed(seed)
    inputs, kw = make_case_inputs(op, case, dtype, DEVICE, gen)
    _skip_if_unsupported(v, inputs, kw)
    result, out = run_checked(v, inputs, kw)
    if not result.ok and dtype in v.known_inexact:
        pytest.xfail(f"{name}: {v.known_inexact[dtype]}; here: {result.message}")
    assert result.ok, f"{name} {dtype_name(dtype)} {case.label} (seed {seed}): {result.message}"
    ref = op.reference(*inputs, **kw)
    outs, refs = (out, ref) if len(op.outputs) > 1 else ((out,), (ref,))
    for o, r in zip(outs, refs):  # the reference's shapes; the first output in the input dtype
        assert o.shape == r.shape and o.device == inputs[0].device
    assert outs[0].dtype == dtype


@pytest.mark.parametrize("name,dtype", list(_edge_params()))
def test_edge_cases(name, dtype):
    v = kernel_lab.get(name)
    op = kernel_lab.get_op(v.op)
    seed = fresh_seed()
    cases = op.edge_cases(dtype, DEVICE, torch.Generator().manual_seed(seed))
    ran = 0
    for label, inputs, kw in cases:
        if v.supports(*inputs, **kw) is not None:
            continue
        result, _ = run_checked(v, inputs, kw)
        if not result.ok and dtype in v.known_inexact:
            pytest.xfail(f"{name}: {v.known_inexact[dtype]}; here: {result.message}")
        assert result.ok, f"{name} {dtype_name(dtype)} {label} (seed {seed}): {result.message}"
        ran += 1
    if ran == 0:
        pytest.skip(f"{name}: no edge case is supported ({v.supports(*cases[0][1])})")


@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.bool])
def test_integer_inputs_get_the_labs_one_line_error(op, dtype):
    """PyTorch refuses integer logits (without a dtype= cast); every variant and the drop-in
    refuse them before any launch, naming the variant, the input and the reason."""
    x = torch.ones(3, 4, dtype=dtype, device=DEVICE)
    for v in kernel_lab.variants(op):
        with pytest.raises(kernel_lab.UnsupportedInputError, match=f"{v.name}: .*not supported"):
            kernel_lab.run(v.name, x)
    with pytest.raises(kernel_lab.UnsupportedInputError, match="not supported"):
        getattr(kernel_lab, op)(x)


@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
def test_zero_dim_tensors_match_pytorch(op):
    x = torch.tensor(1.5, device=DEVICE, requires_grad=True)
    ref = getattr(torch, op)(x, 0)
    for dim in (0, -1):
        out = getattr(kernel_lab, op)(x, dim)
        assert out.shape == () and torch.equal(out, ref)
        out.backward()
    with pytest.raises(IndexError, match="Dimension out of range"):
        getattr(kernel_lab, op)(x, 1)
