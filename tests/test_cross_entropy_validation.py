"""Target validation without a host sync (``validate="async"``, the default), and a training
step that never waits on the host.

A bad class index (outside [0, C), not ignore_index) must never train silently: its row's loss
is NaN, and the next cross-entropy call raises naming the first bad index. On the CPU this runs
through the Triton kernel in Triton's interpreter (the flag words are CPU tensors there); on a
GPU through the CUDA and Triton kernels, plain, in place and under a CUDA-graph replay.
"""

import pytest
import torch
import torch.nn.functional as F
from conftest import DEVICE, HAS_CUDA, needs_cuda

import kernel_lab
from kernel_lab.cuda import deferred

FLAGGING = ["triton_cross_entropy"] + (["cuda_cross_entropy", None] if HAS_CUDA else [])


@pytest.fixture(autouse=True)
def _no_pending_flag():
    """Each test starts and ends with no flagged row (a leak would fail the next CE call)."""
    deferred.clear()
    yield
    deferred.clear()


def _case(m=13, c=37, dtype=torch.float32, device=DEVICE, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(m, c, generator=g) * 2).to(device, dtype)
    t = torch.randint(0, c, (m,), generator=g).to(device)
    t[::4] = -100
    return x, t


def test_pack_saturates_and_orders_by_row():
    assert deferred.unpack(deferred.pack(5, 67)) == (5, 67)
    assert deferred.unpack(deferred.pack(0, -3)) == (0, -3)
    assert deferred.unpack(deferred.pack(2**40, 2**40)) == (2**31 - 1, 2**31 - 1)
    assert deferred.unpack(deferred.pack(7, -2**40)) == (7, -2**31)
    assert deferred.pack(3, 2**31 - 1) < deferred.pack(4, -2**31) < deferred.SENTINEL


@pytest.mark.parametrize("variant", FLAGGING)
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_bad_target_gives_nan_then_the_next_call_raises(variant, reduction):
    x, t = _case()
    bad = t.clone()
    bad[9], bad[6] = -7, 1000  # two bad rows, the later one launched... anywhere: row 6 wins
    before = x.clone()
    loss = kernel_lab.cross_entropy(x, bad, reduction=reduction, variant=variant)
    assert torch.equal(x, before)  # nothing written to the logits
    if reduction == "none":
        nan = torch.isnan(loss).cpu()
        assert nan.tolist() == [i in (6, 9) for i in range(13)]
        ok = torch.where(nan.to(loss.device), 0, bad)
        ref = F.cross_entropy(x, ok, reduction="none")
        torch.testing.assert_close(loss[~nan], ref[~nan])
    else:
        assert torch.isnan(loss)
    with pytest.raises(kernel_lab.UnsupportedInputError, match=r"target\[6\] = 1000 is out"):
        kernel_lab.cross_entropy(x, t, variant=variant)  # good targets: the earlier call's error
    torch.testing.assert_close(kernel_lab.cross_entropy(x, t, variant=variant),
                               F.cross_entropy(x, t))  # reported once, then clean


def test_validate_sync_raises_at_the_call():
    x, t = _case()
    t[5] = 37
    with pytest.raises(kernel_lab.UnsupportedInputError, match=r"target\[5\] = 37 is out of "
                                                               r"range for 37 classes"):
        kernel_lab.cross_entropy(x, t, variant="triton_cross_entropy", validate="sync")
    deferred.raise_pending()  # nothing ran, nothing flagged


def test_run_by_name_and_torch_variants_still_check_before_launch():
    x, t = _case()
    t[2] = -5
    for name in ("triton_cross_entropy", "torch_cross_entropy"):
        with pytest.raises(kernel_lab.UnsupportedInputError, match=r"target\[2\] = -5"):
            kernel_lab.run(name, x, t)
    if not HAS_CUDA:  # the CPU drop-in runs PyTorch's variant: it checks at the call
        with pytest.raises(kernel_lab.UnsupportedInputError, match=r"target\[2\] = -5"):
            kernel_lab.cross_entropy(x, t)


def test_zero_classes_are_checked_at_the_call():
    """C = 0 launches no kernel that could flag: checked before, whatever ``validate``."""
    x = torch.empty(3, 0, device=DEVICE)
    t = torch.tensor([-100, 0, -100], device=DEVICE)
    with pytest.raises(kernel_lab.UnsupportedInputError, match=r"target\[1\] = 0"):
        kernel_lab.cross_entropy(x, t, variant="triton_cross_entropy")


# -- GPU ---------------------------------------------------------------------------------------
def _step(logits_leaf, t, **kw):
    loss = kernel_lab.cross_entropy(logits_leaf.view_as(logits_leaf), t, **kw)
    loss.backward()
    return loss


@needs_cuda
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("inplace", [False, True])
@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_training_step_makes_no_host_sync(dtype, inplace, reduction):
    """Forward + backward with default arguments under set_sync_debug_mode("error"): any
    synchronizing call in the step raises."""
    x, t = _case(64, 32000, dtype, "cuda")
    module = kernel_lab.CrossEntropyLoss(reduction=reduction, inplace_backward=inplace)
    leaf = x.clone().requires_grad_()
    _step(leaf, t, reduction=reduction, inplace_backward=inplace)  # warm: compile, plans, flags
    leaf.grad = None
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for fn in (lambda v: kernel_lab.cross_entropy(v, t, reduction=reduction,
                                                      inplace_backward=inplace),
                   lambda v: module(v, t)):
            for _ in range(3):
                leaf = x.clone().requires_grad_()
                loss = fn(leaf.view_as(leaf))
                loss.backward(torch.full_like(loss, 0.5))  # g != 1: scaled on the device
                loss2 = fn(leaf.detach().clone().requires_grad_())
                loss2.backward()
    finally:
        torch.cuda.set_sync_debug_mode(0)
    ref_x = x.clone().requires_grad_()
    ref = F.cross_entropy(ref_x.float(), t, reduction=reduction)
    (ref * 0.5).backward()
    torch.testing.assert_close(loss.float(), ref.detach(), rtol=2e-2, atol=1e-3)
    torch.testing.assert_close(leaf.grad.float(), ref_x.grad.float(), rtol=2e-2, atol=1e-5)


@needs_cuda
@pytest.mark.parametrize("g", [1.0, 3.0])
def test_inplace_bad_target_nan_rows_and_nothing_outside(g):
    """In place: the bad row's loss and gradient are NaN, the other rows are right, nothing is
    written outside the logits (guards around them in one buffer), then the next call raises."""
    m, c = 9, 50257
    x, t = _case(m, c, torch.float32, "cuda", seed=3)
    t[4] = c + 5
    buf = torch.full((m * c + 64,), 7.0, device="cuda")
    logits = buf[32:32 + m * c].view(m, c)
    logits.copy_(x)
    leaf = logits.detach().requires_grad_()
    loss = kernel_lab.cross_entropy(leaf * 1, t, reduction="none", inplace_backward=True)
    loss.backward(torch.full_like(loss, g))
    torch.cuda.synchronize()
    assert torch.isnan(loss).cpu().tolist() == [i == 4 for i in range(m)]
    assert torch.isnan(leaf.grad[4]).all()
    assert (buf[:32] == 7).all() and (buf[32 + m * c:] == 7).all()
    ok = t.clone()
    ok[4] = 0
    ref_x = x.clone().requires_grad_()
    F.cross_entropy(ref_x, ok, reduction="none").backward(torch.full((m,), g, device="cuda"))
    keep = torch.arange(m, device="cuda") != 4
    torch.testing.assert_close(leaf.grad[keep], ref_x.grad[keep], rtol=1e-4, atol=1e-7)
    with pytest.raises(kernel_lab.UnsupportedInputError, match=rf"target\[4\] = {c + 5}"):
        kernel_lab.cross_entropy(x, ok)


@needs_cuda
def test_cuda_graph_replay_flags_a_bad_target():
    x, t = _case(8, 4096, torch.bfloat16, "cuda")
    x.requires_grad_()
    kernel_lab.cross_entropy(x, t).backward()  # warm
    graph = torch.cuda.CUDAGraph()
    x.grad = None
    with torch.cuda.graph(graph):
        loss = kernel_lab.cross_entropy(x, t)
        loss.backward()
    graph.replay()
    torch.cuda.synchronize()
    deferred.raise_pending()  # good targets: nothing flagged
    good = t.clone()
    t[3] = -2  # after capture: the replay's kernel flags it
    graph.replay()
    torch.cuda.synchronize()
    assert torch.isnan(loss)
    with pytest.raises(kernel_lab.UnsupportedInputError, match=r"target\[3\] = -2"):
        kernel_lab.cross_entropy(x.detach(), good)


@pytest.mark.parametrize("create", [False, True], ids=["second", "create_graph"])
def test_the_in_place_mode_names_the_backward_it_cannot_run(create):
    """A retained graph's second backward (its gradient already handed out over the logits) and
    a double backward raise, saying which, instead of failing inside the scale."""
    import types

    from kernel_lab.ops.cross_entropy import api

    ctx = types.SimpleNamespace(dx=torch.zeros(2, 3) if create else None, none=False,
                                in_place=True)
    with torch.set_grad_enabled(create), pytest.raises(
            RuntimeError, match="double backward" if create else "second backward"):
        api._Fused.backward(ctx, torch.ones(()))


@needs_cuda
def test_the_in_place_mode_refuses_a_retained_graphs_second_backward():
    x = torch.randn(4, 100, device="cuda", requires_grad=True)
    loss = kernel_lab.cross_entropy(x * 1, torch.arange(4, device="cuda"), inplace_backward=True)
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="second backward"):
        loss.backward()
