"""Recorded launches, replayed (kernel_lab.core.plans): on CPU with a stand-in launch, on a
GPU with every CUDA variant, each replayed result checked against the reference."""

import types

import numpy as np
import pytest
import torch
from conftest import needs_cuda, stand_in_launches

import kernel_lab
from kernel_lab.core import plans
from kernel_lab.cuda import interop


class _Source:
    """A CudaSource and its CudaModule in one: ``fn`` is the loaded function; ``due_at`` and
    ``key`` the module's re-stat time and sources' key (always due unless a test says)."""

    def __init__(self):
        self.fn = types.SimpleNamespace(ptr=0)  # a loaded function (its CUfunction handle)
        self.due_at, self.key, self.asked = float("-inf"), "k0", 0

    def function(self, expr, dev):
        self.asked += 1
        return self.fn

    @property
    def module(self):
        return self


@pytest.fixture
def launched(monkeypatch):
    """interop.launch replaced: records what a real launch would (no GPU needed)."""
    return stand_in_launches(monkeypatch)


def _launcher(src, calls, extra_pointer=None):
    def fn(x, dim=-1):
        calls.append(x)
        out = torch.empty_like(x)
        more = (extra_pointer.data_ptr(),) if extra_pointer is not None else ()
        interop.launch(src.fn, (4,), (128,), (out.data_ptr(), x.data_ptr(), 4, 8, 8,
                       np.int32(1), *more), device_index=0,
                       signature="QQqi4xqi4x" + "Q" * len(more), source=(src, "k<float>"))
        return out

    return fn


def test_pointer_slots():
    assert plans.pointer_slots("QQqi4xqi4x") == [0, 1]
    assert plans.pointer_slots("Qf4xQdI4xQ") == [0, 2, 5]


def test_one_plain_launch_is_recorded_once_then_replayed(launched):
    src, calls = _Source(), []
    call = plans.ReplayingCall(_launcher(src, calls))
    x1, x2 = torch.randn(4, 8), torch.randn(4, 8)
    out1 = call((x1,), {})
    out2 = call((x2,), {})
    assert len(calls) == 1  # the launcher ran once; the second call was a replay
    assert launched[1].args[:2] == (out2.data_ptr(), x2.data_ptr())
    assert launched[1].args[2:] == launched[0].args[2:] and out2.shape == out1.shape
    src.fn = types.SimpleNamespace(ptr=1)  # a hot reload: a new function, recorded anew
    call((x1,), {})
    assert len(calls) == 2


def test_a_replay_asks_its_module_only_when_due_or_edited(launched, monkeypatch):
    """Between two re-stats (the module's ``due_at``) a replay trusts its function without a
    call; once due, or once the sources' key moved (another caller re-stat'd the edit), it asks
    the module, and a new function sends the call back to the launcher to be recorded."""
    from kernel_lab.cuda import jit

    now = [100.0]
    monkeypatch.setattr(jit, "clock", lambda: now[0])
    src, calls = _Source(), []
    call = plans.ReplayingCall(_launcher(src, calls))
    call((torch.randn(4, 8),), {})  # recorded
    src.due_at, src.asked = 101.0, 0
    for _ in range(3):
        call((torch.randn(4, 8),), {})
    assert src.asked == 0 and len(calls) == 1 and len(launched) == 4  # replayed, not asked
    now[0] = 101.0  # due: asked, same function, still replayed
    call((torch.randn(4, 8),), {})
    assert src.asked == 1 and len(calls) == 1
    src.key, src.fn = "k1", types.SimpleNamespace(ptr=1)  # an edit another call re-stat'd
    call((torch.randn(4, 8),), {})
    assert src.asked == 2 and len(calls) == 2  # the launcher ran: the new kernel is recorded
    assert launched[-1].fn is src.fn


def test_other_pointers_are_never_replayed(launched):
    src, calls = _Source(), []
    flags = torch.zeros(4)  # like the chunk kernels' flag words (per-launch epoch)
    call = plans.ReplayingCall(_launcher(src, calls, extra_pointer=flags))
    for _ in range(3):
        call((torch.randn(4, 8),), {})
    assert len(calls) == 3 and call.replay is None


def test_an_outer_recording_sees_every_launch(launched):
    src, calls = _Source(), []
    call = plans.ReplayingCall(_launcher(src, calls))
    call((torch.randn(4, 8),), {})
    with interop.record_launches() as rec:
        call((torch.randn(4, 8),), {})
    assert len(rec) == 1


CUDA_SHAPES = [(32, 1024), (3, 781), (64, 128), (4, 65536), (2, 262144), (2, 1 << 20)]


@needs_cuda
@pytest.mark.parametrize("shape", CUDA_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_replayed_cuda_launches_are_correct(shape):
    """Three calls each (record, replay, replay) on fresh inputs into poisoned memory."""
    for v in kernel_lab.variants():
        if v.backend != "cuda" or v.op not in ("softmax", "log_softmax"):
            continue
        ref_fn = torch.softmax if v.op == "softmax" else torch.log_softmax
        for dtype in (torch.float32, torch.bfloat16):
            x = torch.randn(shape, device="cuda", dtype=dtype)
            if v.supports(x) is not None:
                continue
            for _ in range(3):
                x = torch.randn(shape, device="cuda", dtype=dtype)
                torch.full(shape, float("nan"), device="cuda", dtype=dtype)  # poison
                out = kernel_lab.run(v.name, x)
                ref = ref_fn(x.float(), -1).to(dtype)
                torch.testing.assert_close(out, ref, atol=2e-2 if dtype != torch.float32
                                           else 1e-5, rtol=1.6e-2, msg=v.name)


def test_a_replay_is_one_driver_launch_with_new_pointers(monkeypatch):
    """With a current context (a fake driver here), a replayed launch skips interop.launch: its
    own argument buffer gets the new pointers, and cuLaunchKernel the recorded shape."""
    import ctypes

    src, calls, driver_calls = _Source(), [], []
    src.fn = types.SimpleNamespace(ptr=1234)

    def fake_launch_kernel(*a):  # read the pointer slots (0, 1) as the driver would, at once
        params = a[9]
        slot = [ctypes.c_uint64.from_address(ctypes.c_void_p.from_address(params + 8 * k).value)
                .value for k in range(2)]
        driver_calls.append((*a[:9], slot))

    monkeypatch.setattr(interop, "_driver", types.SimpleNamespace(launchKernel=fake_launch_kernel))
    monkeypatch.setattr(interop, "_runtime", types.SimpleNamespace(
        getDevice=lambda: 0, setDevice=lambda d: None))
    monkeypatch.setattr(interop, "_get_raw_stream", lambda dev: 77)
    monkeypatch.setattr(interop.THREAD, "ready", False, raising=False)  # restored after
    call = plans.ReplayingCall(_launcher(src, calls))
    call((torch.randn(4, 8),), {})  # recorded through interop.launch (which sets up the thread)
    monkeypatch.setattr(interop, "launch", None)  # the replay must not need it
    for _ in range(2):
        x = torch.randn(4, 8)
        out = call((x,), {})
        assert driver_calls[-1] == (1234, 4, 1, 1, 128, 1, 1, 0, 77,
                                    [out.data_ptr(), x.data_ptr()])
    assert len(calls) == 1 and len(driver_calls) == 3


def _native_cases(device):
    for op in ("softmax", "log_softmax"):
        for dtype in (torch.float32, torch.float16, torch.bfloat16, torch.float64):
            for shape in ((4, 16), (1024, 2048), (2048, 1024), (2049, 1024), (8, 1 << 18)):
                x = torch.randn(shape, device=device).to(dtype)
                yield op, x
                yield op, x.t()  # not contiguous: never native
                yield op, x.requires_grad_()


def _check_native_matches_the_plan(device):
    """Auto.native (the drop-ins' cheap test) says "native" only where the op's plan for "auto"
    runs the portable variant with PyTorch's autograd (it may be conservative), and says it for
    every small contiguous tensor PyTorch computes within tolerance."""
    checked = 0
    for op, x in _native_cases(device):
        auto = kernel_lab.get_op(op).auto
        plan = plans.for_op(op, "auto", "auto", (x,), {"dim": -1})
        said = auto.native(x, dim=-1)
        if said:
            assert plan.native and plan.variant.name == auto.portable, (op, x.shape, x.dtype)
        checked += said
        if x.is_contiguous() and x.numel() <= 1 << 21 and plan.native:
            assert said, (op, x.shape, x.dtype, x.device)
    assert checked  # the fast path is taken somewhere


def test_native_matches_the_plan_cpu():
    _check_native_matches_the_plan("cpu")


@needs_cuda
def test_native_matches_the_plan_cuda():
    _check_native_matches_the_plan("cuda")


def test_runs_decides_once_per_signature(monkeypatch):
    """plans.runs: the variant's check runs once per call signature (its verdict, a plan or a
    refusal, kept in the plan cache apart from run()'s plans), again after a registration."""
    from kernel_lab.core import dispatch, registry

    asked = []
    real = dispatch.can_run
    monkeypatch.setattr(dispatch, "can_run", lambda v, *t, **kw: asked.append(v.name)
                        or real(v, *t, **kw))
    plans.clear()
    x, t = torch.randn(4, 10), torch.tensor([1, 2, 3, 4])
    assert plans.runs("torch_cross_entropy", (x, t, None), {})
    assert plans.runs("torch_cross_entropy", (x, t, None), {})
    assert asked == ["torch_cross_entropy"]
    xi = x.int()  # integer logits: refused
    assert not plans.runs("torch_cross_entropy", (xi, t, None), {})
    assert not plans.runs("torch_cross_entropy", (xi, t, None), {})
    assert asked == ["torch_cross_entropy"] * 2
    out = kernel_lab.run("torch_cross_entropy", x, t, None)  # run()'s own plan, unaffected
    torch.testing.assert_close(out[0], torch.nn.functional.cross_entropy(x, t))
    registry.changed()  # what a registration tells the plans
    assert plans.runs("torch_cross_entropy", (x, t, None), {})
    assert asked == ["torch_cross_entropy"] * 3


def test_a_warm_named_drop_in_finds_its_plan_inline(monkeypatch):
    """A drop-in call by name looks its plan up inline (custom_ops.row_call) with for_op's key;
    autograd, a profiler and a wrong dim still take the full call, as before."""
    from kernel_lab.base.errors import InputTypeError
    from kernel_lab.core import custom_ops

    x = torch.randn(5, 7)
    first = kernel_lab.softmax(x, -1, "torch_naive")
    called = []
    for name in ("for_op", "call"):
        module = plans if name == "for_op" else custom_ops
        real = getattr(module, name)
        monkeypatch.setattr(module, name, lambda *a, real=real, name=name:
                            called.append(name) or real(*a))
    torch.testing.assert_close(kernel_lab.softmax(x, -1, "torch_naive"), first)
    assert not called
    xg = x.clone().requires_grad_()
    out = kernel_lab.softmax(xg, -1, "torch_naive")  # a new signature, and a node to make
    assert called == ["call", "for_op"]
    assert type(out.grad_fn).__name__ == "_EagerOpBackward"
    out = kernel_lab.softmax(xg, -1, "torch_naive")  # warm, and still a node to make
    assert type(out.grad_fn).__name__ == "_EagerOpBackward"
    out[:, 0].sum().backward()
    ref = x.clone().requires_grad_()
    torch.softmax(ref, -1)[:, 0].sum().backward()
    torch.testing.assert_close(xg.grad, ref.grad)
    with torch.no_grad():  # warm, no node: inline
        called.clear()
        assert kernel_lab.softmax(xg, -1, "torch_naive").grad_fn is None
        assert not called
    with torch.profiler.profile() as prof:  # warm, but profiled: the op is named
        kernel_lab.softmax(x, -1, "torch_naive")
    assert "kernel_lab::softmax" in {e.name for e in prof.events()}
    with pytest.raises(InputTypeError, match="dim"):  # True hashes as 1: refused all the same
        kernel_lab.softmax(x, True, "torch_naive")


def test_a_warm_run_finds_its_plan_inline(monkeypatch):
    """run()'s inline key is for_variant's: a warm call of one tensor never calls it; a new
    signature or keyword is planned by it."""
    x = torch.randn(5, 7)
    first = kernel_lab.run("torch_eager", x)
    called = []
    real = plans.for_variant
    monkeypatch.setattr(plans, "for_variant", lambda *a: called.append(a) or real(*a))
    again = kernel_lab.run("torch_eager", x)  # (a new tensor may sit elsewhere in its line)
    assert not called
    torch.testing.assert_close(again, first)
    kernel_lab.run("torch_eager", x.t())  # a new signature: planned by for_variant
    assert len(called) == 1
    out = kernel_lab.run("torch_eager", x, dim=0)
    assert len(called) == 2
    torch.testing.assert_close(out, torch.softmax(x, 0))
    kernel_lab.run("torch_eager", x, dim=0)
    assert len(called) == 2
