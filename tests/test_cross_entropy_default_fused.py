"""The default step's gradient written in the forward (api.DEFAULT_FUSED: _Fused, not in place):
on the CPU the buffer it writes (rows_like), which launches carry it, and which calls take the
path; on a GPU the step against float64, the double backward, and the logits left untouched."""

import types

import pytest
import torch
import torch.nn.functional as F
from conftest import needs_cuda
from test_plans_cross_entropy import (  # noqa: F401 - stand_in: the fixture
    REPLAYABLE_OPS,
    _by_role,
    log_replayed_ops,
    stand_in,
)

import kernel_lab
from kernel_lab.core import plans
from kernel_lab.ops.cross_entropy import api
from kernel_lab.ops.cross_entropy import cuda_variants as cv


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=str)
def test_rows_like_keeps_the_row_stride_and_the_line_phase(dtype):
    buf = torch.empty(4 * 1000 + 64, dtype=dtype)
    for start, n, stride in ((0, 1000, 1000), (3, 997, 1000), (5, 1000, 1000)):
        x = buf[start:start + 4 * stride].view(4, stride)[:, :n]
        dx = cv.rows_like(x)
        assert dx.shape == x.shape and dx.stride() == x.stride()
        assert dx.data_ptr() % 128 == x.data_ptr() % 128
        assert dx.untyped_storage().data_ptr() != x.untyped_storage().data_ptr()
    one = cv.rows_like(buf[7:7 + 300].view(1, 300))
    assert one.shape == (1, 300) and one.data_ptr() % 128 == buf[7:].data_ptr() % 128


def test_the_fresh_buffer_is_what_the_forward_writes(stand_in, monkeypatch):  # noqa: F811
    # its kept 1 asks whether a CUDA graph is being captured: no CUDA here
    monkeypatch.setattr(cv, "unit", lambda device, dtype: torch.ones((), dtype=dtype))
    x = torch.randn(6, 4000, dtype=torch.bfloat16)
    t = torch.randint(0, 4000, (6,))
    loss, lse, dx = cv.fused_forward(x, t, None, -100, "mean", 0.0, in_place=False)
    assert dx.data_ptr() != x.data_ptr() and dx.shape == x.shape
    row = [launch for launch in stand_in.launches if launch.source[1].startswith(
        "cross_entropy_row")]
    assert len(row) == 1 and row[0].args[4] == dx.data_ptr() and row[0].args[6] == x.data_ptr()
    stand_in.launches.clear()
    _, _, same = cv.fused_forward(x, t, None, -100, "mean", 0.0)  # in place: over the logits
    assert same.data_ptr() == x.data_ptr()
    assert [launch.args[4] for launch in stand_in.launches
            if launch.source[1].startswith("cross_entropy_row")] == [x.data_ptr()]


def _lined(m, n, dtype):
    """(m, n) contiguous logits starting a 128-byte line, as a CUDA allocation does (the CPU
    allocator aligns to 64 bytes), leaf of a step."""
    buf = torch.empty(m * n + 128, dtype=dtype)
    skip = (-buf.data_ptr()) % 128 // buf.element_size()
    return buf[skip:skip + m * n].view(m, n).normal_().requires_grad_()


@pytest.mark.parametrize("in_place", [False, True], ids=["beside", "in_place"])
@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_the_fused_step_is_recorded_once_then_replayed(stand_in, monkeypatch,  # noqa: F811
                                                       in_place, reduction):
    """The fused step's forward and its backward's scale go through plans: each launcher runs
    on the first step, later steps replay its launches, re-pointed at their logits, fresh
    buffers and dlogits."""
    one = torch.ones((), dtype=torch.bfloat16)
    monkeypatch.setattr(cv, "unit", lambda device, dtype: one)
    monkeypatch.setattr(api, "_fused_applies", lambda *a: True)
    scales, real_scale = [], cv.scale
    monkeypatch.setattr(cv, "scale", lambda dx, g: scales.append(dx) or real_scale(dx, g))
    t = torch.randint(0, 4000, (6,))
    steps = []
    for _ in range(4):
        x = _lined(6, 4000, torch.bfloat16)
        ptr = x.data_ptr()
        before = len(stand_in.launches)
        loss = kernel_lab.cross_entropy(x, t, reduction=reduction, inplace_backward=in_place)
        loss.backward(torch.ones_like(loss))
        steps.append((ptr, x.grad.data_ptr(), loss.data_ptr(), stand_in.launches[before:]))
    assert stand_in.runs["forward"] == 1  # the launcher ran once: the others replayed it
    assert len(scales) == (reduction == "mean")  # the backward's scale too (none: a torch mul_)
    # a replayed step allocates the loss, dlogits (unless in place) and one arena for the
    # scratch (coefficients, lse, w_t, the rows' losses)
    (step,) = [c for key, c in plans.PLANS.items() if key[0] is cv.fused_step]
    assert len(step.replay.makers) == 2 + (not in_place)
    names = [[la.source[1] for la in launches] for *_, launches in steps]
    assert all(n == names[0] for n in names)
    assert names[0][1].startswith("cross_entropy_row")
    assert names[0][-1].startswith("cross_entropy_scale") == (reduction == "mean")
    first = None
    for ptr, grad, loss_ptr, launches in steps:
        row = launches[1]
        assert row.args[6] == ptr and row.args[4] == grad  # reads x, writes its dlogits
        assert (grad == ptr) == in_place
        assert launches[0].args[7] == one.data_ptr()  # every row's upstream gradient: 1
        # launch for launch the first step's, every pointer in its role (scratch named in
        # order of first use; forward and backward apart: the allocator may hand a freed
        # forward block to the backward): same kernels, grids, blocks and scalar arguments
        roles = {ptr: "x", t.data_ptr(): "t", one.data_ptr(): "one", grad: "dx",
                 loss_ptr: "loss", 0: "null"}
        fwd = launches[:-1] if reduction == "mean" else launches
        got = _by_role(fwd, dict(roles)) + _by_role(launches[len(fwd):], dict(roles))
        first = first or got
        assert got == first


def test_the_fused_steps_recorded_call_runs_nothing_a_replay_would_skip(stand_in,  # noqa: F811
                                                                          monkeypatch):
    """As the plain step's launchers (test_plans_cross_entropy): inside the fused step's
    recorded call every torch op is an allocation or a view."""
    one = torch.ones((), dtype=torch.bfloat16)
    monkeypatch.setattr(cv, "unit", lambda device, dtype: one)
    monkeypatch.setattr(api, "_fused_applies", lambda *a: True)
    t = torch.randint(0, 4000, (6,))
    kernel_lab.cross_entropy(_lined(3, 800, torch.bfloat16), t[:3]).backward()  # flag words
    accepted = log_replayed_ops(monkeypatch)
    for _ in range(2):
        kernel_lab.cross_entropy(_lined(6, 4000, torch.bfloat16), t).backward()
    assert len(accepted) == 2  # the fused forward's recorded call and its backward's scale
    for ops in accepted:
        assert all(op.startswith(REPLAYABLE_OPS) for op in ops), ops


def test_an_unlined_fused_step_runs_its_launcher_each_time(stand_in, monkeypatch):  # noqa: F811
    """Logits off a 128-byte line write dx into rows_like's buffer, which a replay could not
    make anew: every step runs the launcher."""
    monkeypatch.setattr(cv, "unit", lambda device, dtype: torch.ones((), dtype=dtype))
    monkeypatch.setattr(api, "_fused_applies", lambda *a: True)
    t = torch.randint(0, 4000, (6,))
    for _ in range(3):
        x = _lined(6, 4001, torch.bfloat16)[:, 1:].detach().requires_grad_()  # 2 bytes on
        before = len(stand_in.launches)
        kernel_lab.cross_entropy(x, t).backward()
        row = stand_in.launches[before + 1]
        assert row.args[6] == x.data_ptr() and row.args[4] % 128 == x.data_ptr() % 128 == 2
    assert stand_in.runs["forward"] == 3


def test_which_calls_take_the_fused_step(monkeypatch):
    taken = []
    monkeypatch.setattr(api, "_fused_applies", lambda *a: True)
    monkeypatch.setattr(api, "_fused_step", lambda *a: (object(), None))
    monkeypatch.setattr(api._Fused, "apply",
                        lambda *a: taken.append(a[5]["in_place"]) or torch.zeros(()))
    x, t = torch.randn(3, 5), torch.tensor([0, 1, 2])
    kernel_lab.cross_entropy(x, t)
    kernel_lab.cross_entropy(x, t, inplace_backward=True)
    assert taken == [False, True]  # in_place: only when asked
    monkeypatch.setattr(api, "DEFAULT_FUSED", False)
    kernel_lab.cross_entropy(x, t)  # the plain op (PyTorch's here, on the CPU)
    kernel_lab.cross_entropy(x, t, inplace_backward=True)  # asked: still fused
    assert taken == [False, True, True]


def test_overlapping_rows_never_take_it():
    x = torch.randn(1, 8).expand(4, 8)
    assert x.stride(0) == 0
    assert not api._fused_applies(x, torch.zeros(4, dtype=torch.long), None, None, None)


@needs_cuda
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=str)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("n", [1000, 50257, 151936])
def test_the_fused_step_matches_float64_and_leaves_the_logits(dtype, reduction, n):
    m = 5
    buf = torch.randn(m * (n + 3) + 1, device="cuda").to(dtype) * 3
    x = buf[1:1 + m * (n + 3)].view(m, n + 3)[:, :n]  # off 16 bytes, padded rows
    before = x.clone()
    t = torch.randint(0, n, (m,), device="cuda")
    t[1] = -100
    leaf = x.detach().requires_grad_()
    loss = kernel_lab.cross_entropy(leaf, t, reduction=reduction, label_smoothing=0.05)
    g = torch.rand_like(loss) + 0.5
    loss.backward(g)
    ref_x = before.double().requires_grad_()
    ref = F.cross_entropy(ref_x, t, reduction=reduction, label_smoothing=0.05)
    ref.backward(g.double())
    tol = dict(rtol=1e-5, atol=1e-6) if dtype == torch.float32 else dict(rtol=2e-2, atol=1e-3)
    torch.testing.assert_close(loss.double(), ref.detach(), **tol)
    scale = ref_x.grad.abs().max().item()
    torch.testing.assert_close(leaf.grad.double(), ref_x.grad, rtol=tol["rtol"],
                               atol=tol["atol"] * scale * 10)
    assert torch.equal(leaf.detach(), before)  # the default step writes beside the logits


@needs_cuda
def test_the_fused_step_has_a_double_backward():
    x = torch.randn(4, 33, device="cuda", dtype=torch.float64, requires_grad=True)
    t = torch.tensor([0, 5, 32, 7], device="cuda")
    x32 = x.float().detach().requires_grad_()
    (g,) = torch.autograd.grad(kernel_lab.cross_entropy(x32, t), x32, create_graph=True)
    (gg,) = torch.autograd.grad(g.sum(), x32)
    ref = x.detach().float().requires_grad_()
    (rg,) = torch.autograd.grad(F.cross_entropy(ref, t), ref, create_graph=True)
    (rgg,) = torch.autograd.grad(rg.sum(), ref)
    torch.testing.assert_close(g, rg, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(gg, rgg, rtol=1e-4, atol=1e-6)


def _ctx(x, t, in_place, dx=None):
    ctx = types.SimpleNamespace(dx=dx, none=False, in_place=in_place, saved_tensors=(x, t, None),
                                kw={"ignore_index": -100, "reduction": "mean",
                                    "label_smoothing": 0.0})
    return ctx


@pytest.mark.parametrize("create", [False, True], ids=["again", "create_graph"])
def test_a_second_or_double_backward_recomputes_through_the_plain_op(create):
    x = torch.randn(4, 9, dtype=torch.float64, requires_grad=True)
    t = torch.tensor([0, 3, 8, -100])
    g = torch.tensor(0.5, dtype=torch.float64)
    ref = x.detach().requires_grad_()
    (want,) = torch.autograd.grad(F.cross_entropy(ref, t), ref, g)
    ctx = _ctx(x, t, False, dx=None if not create else torch.zeros(4, 9, dtype=torch.float64))
    with torch.set_grad_enabled(create):
        dx = api._Fused.backward(ctx, g)[0]
    torch.testing.assert_close(dx, want)
    assert dx.requires_grad == create and ctx.dx is None


@pytest.mark.parametrize("create", [False, True], ids=["again", "create_graph"])
def test_in_place_refuses_a_second_or_double_backward(create):
    x, t = torch.randn(2, 3), torch.tensor([0, 1])
    ctx = _ctx(x, t, True, dx=None if not create else x)
    with torch.set_grad_enabled(create), pytest.raises(RuntimeError, match=(
            "double backward" if create else "second backward")):
        api._Fused.backward(ctx, torch.ones(()))


@needs_cuda
def test_the_fused_step_backward_twice_through_a_retained_graph():
    x = torch.randn(6, 1000, device="cuda", requires_grad=True)
    t = torch.randint(0, 1000, (6,), device="cuda")
    loss = kernel_lab.cross_entropy(x, t)
    loss.backward(retain_graph=True)
    first = x.grad.clone()
    loss.backward()
    torch.testing.assert_close(x.grad, 2 * first, rtol=1e-5, atol=1e-7)
