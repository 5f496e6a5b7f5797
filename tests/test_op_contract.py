"""The op contract: an op of another shape registers from one test module and passes the
lab's correctness checker, custom-op factory and autograd - with no edit to kernel_lab.

It runs in a fresh process so the toy op never joins the registry other tests iterate.
"""

import subprocess
import sys
from pathlib import Path

import pytest
import torch

import kernel_lab
from kernel_lab.core import contract

PROGRAM = r"""
import torch
import toy_rowscale as toy
from kernel_lab.core import custom_ops, registry
from kernel_lab.checking.checker import cases_for, make_case_inputs, run_checked

op = registry.get_op("rowscale")
checked = 0
for v in registry.variants("rowscale"):
    for dtype in (torch.float32, torch.bfloat16, torch.float64):
        gen = torch.Generator().manual_seed(0)
        for case in cases_for("cpu", op):
            inputs, kw = make_case_inputs(op, case, dtype, "cpu", gen)
            assert v.supports(*inputs, **kw) is None, (v.name, case.label)
            res, _ = run_checked(v, inputs, kw)
            assert res.ok, (v.name, case.label, res.message)
            checked += 1
assert all(c.dim == -1 for c in cases_for("cpu", op))  # no dim keyword: last dim only

x = torch.randn(3, 5, dtype=torch.float64, requires_grad=True)
w = torch.randn(5, dtype=torch.float64, requires_grad=True)
bad = registry.get("rowscale_eager").supports(x, torch.randn(4, dtype=torch.float64))
assert bad == "w must be a (5,) tensor of x's dtype", bad
torch.autograd.gradcheck(lambda a, b: toy.rowscale(a, b), (x, w))
torch.autograd.gradcheck(lambda a, b: custom_ops.define("rowscale")(a, b, "rowscale_loop"),
                         (x, w))
torch.library.opcheck(custom_ops.define("rowscale"), (x, w, "auto"))
out = torch.compile(lambda a, b: toy.rowscale(a, b), fullgraph=True, backend="eager")(x, w)
torch.testing.assert_close(out, x * w)
print("checked", checked)
"""


def test_toy_op_of_another_shape_needs_no_core_edit():
    here = Path(__file__).parent
    done = subprocess.run([sys.executable, "-c", PROGRAM], cwd=here, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert int(done.stdout.split()[-1]) >= 2 * 3 * 10  # variants x dtypes x cases, all checked


def test_input_roles_are_checked_before_launch():
    op = contract.Op("probe", reference=None, make_inputs=None, bytes_moved=None,
                     inputs=(contract.Input("x"), contract.Input("t", role="index")))
    x = torch.randn(4, 6)
    check = contract.input_contract_error
    assert check(op.inputs, (x, torch.zeros(4, dtype=torch.int64)), -1) is None
    assert "integer" in check(op.inputs, (x, torch.zeros(4)), -1)
    assert "shape (4,)" in check(op.inputs, (x, torch.zeros(6, dtype=torch.int64)), -1)
    with pytest.raises(ValueError, match="role"):
        contract.Input("w", role="weights")


def test_optional_per_row_and_free_inputs():
    """What cross_entropy's backward declares: an optional column, a float per-row statistic,
    a tensor of any shape (only its device is checked)."""
    specs = (contract.Input("x"), contract.Input("w", role="column", optional=True),
             contract.Input("s", role="per_row"), contract.Input("g", role="free"))
    x, s = torch.randn(4, 6), torch.randn(4)
    check = contract.input_contract_error
    assert check(specs, (x, None, s, torch.ones(())), -1) is None
    assert check(specs, (x, torch.ones(6), s, torch.ones(4)), -1) is None
    assert "floating" in check(specs, (x, None, torch.zeros(4, dtype=torch.int64), s), -1)
    assert "shape (4,)" in check(specs, (x, None, torch.zeros(6), s), -1)
    required = (contract.Input("x"), contract.Input("w", role="column"))
    assert "not None" in check(required, (x, None), -1)
    if torch.cuda.is_available():
        assert "is on" in check(specs, (x, None, s, torch.ones((), device="cuda")), -1)


def test_outputs_declare_shape_dtype_and_gradient():
    """cross_entropy's fake kernel and checker come from its Output declarations alone."""
    from kernel_lab.core import custom_ops

    op = kernel_lab.get_op("cross_entropy")
    x, t = torch.randn(5, 7), torch.randint(0, 7, (5,))
    for red, shape in (("mean", ()), ("none", (5,))):
        loss, lse = custom_ops._fake_outputs(op, (x, t, None), {"reduction": red})
        assert loss.shape == shape and lse.shape == (5,) and lse.dtype == torch.float64
    assert [o.differentiable for o in op.outputs] == [True, False]
    loss = torch.nn.functional.cross_entropy(x, t)
    bad = op.check((loss, torch.logsumexp(x, 1)), x, t)  # lse must be float64 for fp32 logits
    assert not bad.ok and "lse: dtype" in bad.message


def test_no_variant_shares_its_ops_name_and_old_names_still_resolve():
    for op in kernel_lab.op_names():
        assert op not in {v.name for v in kernel_lab.variants()}
    assert kernel_lab.get("log_softmax").name == "fast_log_softmax"
    assert kernel_lab.get("log_softmax_backward").name == "fused_log_softmax_backward"
