"""A cross-entropy step's plans replayed (kernel_lab.core.plans, fresh tensors): its forward
(row kernel + reduction) and backward (coefficients + dlogits) launch twice each, on outputs and
scratch the launchers declare fresh. On CPU with stand-in launches: the replay launches what the
launcher would, re-pointed; on a GPU: replayed steps against float64."""

import types

import pytest
import torch
from conftest import Recorder, needs_cuda, stand_in_launches

import kernel_lab
from kernel_lab.core import plans, registry
from kernel_lab.cuda import interop
from kernel_lab.ops.cross_entropy import cuda_variants as cv
from kernel_lab.ops.cross_entropy.op import deferred_targets

NAMES = {"variant": "cuda_cross_entropy", "backward_variant": "cuda_cross_entropy_backward"}


class _Module:
    """A loaded module's stand-in: one function object per name expression."""

    def __init__(self):
        self.fns = {}
        self.due_at, self.key = float("-inf"), "k0"  # always due a re-stat: every call asks

    def function(self, expr, dev):
        return self.fns.setdefault(expr, types.SimpleNamespace(ptr=len(self.fns) + 1, expr=expr))


@pytest.fixture
def stand_in(monkeypatch):
    """The CUDA cross-entropy launchers on CPU tensors: their launches recorded (into the
    yielded list, and for the plans), not run. Counts the launchers' own runs."""
    seen, runs = stand_in_launches(monkeypatch, cv), {"forward": 0, "backward": 0}

    def counted(name):
        real = getattr(cv, name)

        def fn(*a, **k):
            runs[name] += 1
            return real(*a, **k)

        return fn

    monkeypatch.setattr(cv, "device_index", lambda t: 0)
    # no device to ask how many blocks fit at once: every row in one wave
    monkeypatch.setattr(cv.occupancy, "resident_groups", lambda *a: 1 << 30)
    for src in (cv.FORWARD, cv.BACKWARD):
        monkeypatch.setattr(src, "_module", _Module())
    for name in ("forward", "backward"):
        monkeypatch.setattr(cv, name, counted(name))
    real_supports = registry.Variant.supports

    def supports(v, *a, **k):  # CPU tensors: the two variants' device check let through
        return None if v.name in NAMES.values() else real_supports(v, *a, **k)

    monkeypatch.setattr(registry.Variant, "supports", supports)
    # the CPU allocator aligns to 64 bytes, the CUDA one to 512: a fresh lse's offset in a
    # 128-byte line (in the plan key) is taken as the GPU's, 0
    real_signature = plans.signature
    monkeypatch.setattr(plans, "signature", lambda tensors: tuple(
        (*s[:4], 0, s[5]) if type(s) is tuple else s for s in real_signature(tensors)))
    plans.clear()
    yield types.SimpleNamespace(launches=seen, runs=runs)
    plans.clear()


def _step(x, t, w, reduction, eps=0.0, ignore_index=-100):
    x.grad = None
    loss = kernel_lab.cross_entropy(x, t, w, ignore_index, reduction, eps, **NAMES)
    loss.backward(torch.ones_like(loss))
    return loss, x.grad


def _match_float64(loss, dx, x, t, w, reduction: str, eps: float) -> None:
    """A step's loss and dlogits against F.cross_entropy in float64 (unit upstream gradient)."""
    xd = x.detach().double().requires_grad_()
    ref = torch.nn.functional.cross_entropy(xd, t, w.double() if w is not None else None,
                                            reduction=reduction, label_smoothing=eps)
    ref.backward(torch.ones_like(ref))
    tol = {"atol": 1e-5, "rtol": 1e-5} if x.dtype == torch.float32 else \
        {"atol": 2e-2, "rtol": 2e-2}
    torch.testing.assert_close(loss.double(), ref.detach(), **tol)
    torch.testing.assert_close(dx.double(), xd.grad, **tol)


def _args_by_role(launch, roles):
    """The launch's arguments with every pointer named by its role (or kept if unnamed)."""
    return tuple(roles.get(a, a) if isinstance(a, int) and not isinstance(a, bool) else a
                 for a in launch.args)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("weighted", [False, True], ids=["plain", "weighted"])
def test_a_step_is_recorded_once_then_replayed_launch_for_launch(stand_in, reduction, weighted):
    m, c = 6, 40
    t = torch.randint(0, c, (m,))
    w = torch.rand(c) if weighted else None
    steps = []
    for _ in range(4):
        x = torch.randn(m, c).requires_grad_()
        before = len(stand_in.launches)
        loss, dx = _step(x, t, w, reduction)
        steps.append((x, loss, dx, stand_in.launches[before:]))
    # the launchers ran for the first step only: the others were replays
    assert stand_in.runs == {"forward": 1, "backward": 1}
    names = [[la.source[1] for la in s[3]] for s in steps]
    assert all(n == names[0] for n in names) and len(names[0]) == (3 if reduction == "none"
                                                                 else 4)
    first = None
    for x, loss, dx, launches in steps:
        # every pointer an input, an output, or scratch named in order of first use; forward
        # and backward named apart (the allocator may hand a freed forward block to the
        # backward), the forward's lse handed on to the backward by name
        fwd, bwd = launches[:len(launches) - 2], launches[-2:]
        inputs = {x.data_ptr(): "x", t.data_ptr(): "t", 0: "null"}
        if w is not None:
            inputs[w.data_ptr()] = "w"
        got = _by_role(fwd, {**inputs, loss.data_ptr(): "loss"})
        got += _by_role(bwd, {**inputs, dx.data_ptr(): "dx", fwd[0].args[2]: "lse"})
        first = first or got
        assert got == first  # same kernels, shapes and arguments, each pointer in its role


# what a recorded launcher may run beside its launches: allocations a replay makes anew and
# views that move no data (a replay repeats launches and fresh allocations alone)
REPLAYABLE_OPS = ("aten.empty.", "aten.empty_strided.", "aten.new_empty.", "aten.as_strided.",
                  "aten.view.", "aten.alias.", "aten.detach.")


def log_replayed_ops(monkeypatch) -> list:
    """From now on, the torch ops each recorded call ran, appended to the list returned here
    for every call whose launches a plan then replays."""
    import contextlib

    real_record, real_replay_of = interop.record_launches, plans._replay_of
    accepted = []

    @contextlib.contextmanager
    def logged():
        with real_record() as rec, Recorder() as ops:
            yield rec
        rec.ops = ops.seen

    def replay_of(launches, tensors, out, fn):
        replay = real_replay_of(launches, tensors, out, fn)
        if replay is not None:
            accepted.append(launches.ops)
        return replay

    monkeypatch.setattr(interop, "record_launches", logged)
    monkeypatch.setattr(plans, "_replay_of", replay_of)
    return accepted


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("weighted", [False, True], ids=["plain", "weighted"])
def test_a_replayed_launcher_runs_nothing_a_replay_would_skip(stand_in, monkeypatch, reduction,
                                                              weighted):
    """Inside each recorded call whose launches are then replayed, every torch op is an
    allocation or a view: an op that writes (a scale, a fill) would be skipped by every
    replay, silently."""
    # a first step elsewhere makes the process's flag words (kept for good: a replay needs none)
    _step(torch.randn(3, 8).requires_grad_(), torch.zeros(3, dtype=torch.int64), None, "sum")
    accepted = log_replayed_ops(monkeypatch)
    t = torch.randint(0, 40, (6,))
    w = torch.rand(40) if weighted else None
    for _ in range(2):
        _step(torch.randn(6, 40).requires_grad_(), t, w, reduction)
    assert len(accepted) == 2  # the forward's and the backward's recorded calls, replayed
    for ops in accepted:
        assert ops and all(op.startswith(REPLAYABLE_OPS) for op in ops), ops


def _by_role(launches, roles):
    """(kernel, grid, block, arguments) of each launch, every pointer named by its role; one
    not in ``roles`` is named scratch, in order of first use."""
    for la in launches:
        for i in plans.pointer_slots(la.signature):
            roles.setdefault(la.args[i], f"scratch{len(roles)}")
    return [(la.source[1], la.grid, la.block, _args_by_role(la, roles)) for la in launches]


def _one_kernel():
    """(function, (source, expr)) of a stand-in module holding one kernel, never reloaded: what a
    hand-built :class:`interop.Launch` carries."""
    fn = types.SimpleNamespace(ptr=1)
    module = types.SimpleNamespace(function=lambda expr, dev: fn, due_at=float("inf"), key="")
    return fn, (types.SimpleNamespace(module=module), "k")


def test_a_pointer_a_later_fresh_tensor_took_was_a_temporary():
    """A launch's pointer at an address a fresh tensor made after it holds was a temporary's (a
    copy of an input, freed: the caching allocator hands the block on): not replayed, where
    the same fresh tensor made before the launch is."""
    x, made = torch.randn(8), torch.empty(8)
    fn, source = _one_kernel()

    def recorded(fresh_first):
        with interop.record_launches() as rec:
            if fresh_first:
                interop.fresh(made)
            rec.append(interop.Launch(fn, (1, 1, 1), (32, 1, 1), 0,
                                      (made.data_ptr(), x.data_ptr()), "QQ", source, 0))
            if not fresh_first:
                interop.fresh(made)
        return plans._fresh_replay_of(rec, (x,), made, lambda *a: None)

    assert recorded(fresh_first=True) is not None
    assert recorded(fresh_first=False) is None


def test_a_replays_scratch_shares_one_allocation_at_aligned_offsets(monkeypatch):
    """The fresh tensors a call does not return (scratch) share one allocation in a replay,
    each at a 512-byte-aligned offset past the one before (the caching allocator's alignment:
    every pointer keeps its address class), apart from each other; the outputs get their own,
    returned in the launcher's order, and every launch is re-pointed at the call's tensors."""
    fn, source = _one_kernel()
    # before the replay is prepared: its launches then take launch()'s path (a thread that
    # launched real kernels is ready)
    monkeypatch.setattr(interop.THREAD, "ready", False, raising=False)
    made, seen = [], []
    real_empty = torch.empty
    monkeypatch.setattr(torch, "empty", lambda *a, **k: made.append((a, k)) or
                        real_empty(*a, dtype=k["dtype"]))

    def launcher(x):  # two outputs and three scratch tensors, made in this order
        s0, out_a, s1 = (interop.fresh(torch.empty(shape, dtype=dt, device=x.device))
                         for shape, dt in (((3,), torch.float64), ((10,), torch.float32),
                                           ((200,), torch.float32)))
        out_b, s2 = (interop.fresh(torch.empty(shape, dtype=dt, device=x.device))
                     for shape, dt in (((), torch.float32), ((5,), torch.int32)))
        rec = interop.current_recording()
        for args, sig in (((x, s0, s1, out_a), "QQQQ"), ((s1, s2, out_b), "QQQ")):
            launch = interop.Launch(fn, (1, 1, 1), (32, 1, 1), 0,
                                    tuple(t.data_ptr() for t in args), sig, source, 0)
            if rec is None:
                seen.append(launch.args)
            else:
                rec.append(launch)
        return out_a, out_b

    call = plans.ReplayingCall(launcher)
    call((torch.randn(10),), {})  # recorded
    assert call.replay is not None and len(call.replay.makers) == 3  # two outputs, one arena
    del made[:]
    monkeypatch.setattr(interop, "launch", lambda fn, grid, block, args, **kw: seen.append(args))
    x2 = torch.randn(10)
    a, b = call((x2,), {})  # replayed
    assert (a.shape, a.dtype, b.shape) == ((10,), torch.float32, ())
    assert made[2] == ((2048,), {"dtype": torch.uint8, "device": torch.device("cpu")})
    (x_p, s0, s1, a_p), (s1_again, s2, b_p) = seen
    assert (x_p, a_p, b_p) == (x2.data_ptr(), a.data_ptr(), b.data_ptr())
    # in the order made: 24 B in 512, 800 B in 1024, then the 20 B of int32s
    assert (s1 - s0, s2 - s1, s1_again) == (512, 1024, s1)
    assert [p for _, p in call.replay.places] == [0, 0, 512, 0, 1536]


def test_a_launcher_that_writes_into_its_inputs_replays_on_them():
    """A launcher that returns None (cuda_variants.scale: dx *= g in place) replays its launch
    re-pointed at each call's inputs; a pointer that is no input (a copy of g) is refused."""
    fn, source = _one_kernel()

    def recorded(dx, g, copied):
        with interop.record_launches() as rec:
            gp = torch.empty(1).data_ptr() if copied else g.data_ptr()
            rec.append(interop.Launch(fn, (1, 1, 1), (32, 1, 1), 0, (dx.data_ptr(), 8, gp),
                                      "QqQ", source, 0))
        return plans._replay_of(rec, (dx, g), None, lambda *a: None)

    seen = []
    with pytest.MonkeyPatch.context() as mp:
        # before the replay is prepared: its launches then take launch()'s path, never the
        # driver's with the stand-in's function (a thread that launched real kernels is ready)
        mp.setattr(interop.THREAD, "ready", False, raising=False)
        mp.setattr(interop, "launch", lambda fn, grid, block, args, **kw: seen.append(args))
        dx, g = torch.randn(8), torch.ones(())
        assert recorded(dx, g, copied=True) is None
        replay = recorded(dx, g, copied=False)
        assert replay is not None and replay.outputs == [] and not replay.makers
        dx2, g2 = torch.randn(8), torch.ones(())
        assert replay.call(None)((dx2, g2), {}) is None
    assert seen == [(dx2.data_ptr(), 8, g2.data_ptr())]


def test_a_replay_holds_only_in_the_mode_it_was_recorded_in(stand_in):
    """Recorded under deferred targets (the drop-in's default), a plan replays only there: a
    call that trusts its inputs runs the launcher (its guard), and a call that checks the
    targets' values (kernel_lab.run outside both modes) never replays."""
    x, t = torch.randn(4, 16), torch.tensor([1, 2, 3, 4])
    for _ in range(3):
        with deferred_targets():
            kernel_lab.run("cuda_cross_entropy", x, t)
    assert stand_in.runs["forward"] == 1
    from kernel_lab.core.registry import trusted_inputs

    with trusted_inputs(), deferred_targets():
        kernel_lab.run("cuda_cross_entropy", x, t)
    assert stand_in.runs["forward"] == 2
    plans.clear()
    for _ in range(3):
        kernel_lab.run("cuda_cross_entropy", x, t)  # checks the targets every call
    assert stand_in.runs["forward"] == 5
    bad = torch.tensor([1, 2, 3, 99])
    with pytest.raises(kernel_lab.UnsupportedInputError, match="target"):
        kernel_lab.run("cuda_cross_entropy", x, bad)


def test_a_replay_declines_what_it_cannot_repoint(stand_in):
    """An upstream gradient the backward copies first (expanded: stride 0) is not an input the
    replay can point at: that backward keeps running its launcher, and stays right."""
    t = torch.randint(0, 16, (4,))
    for _ in range(3):
        x = torch.randn(4, 16).requires_grad_()
        kernel_lab.cross_entropy(x, t, reduction="none", **NAMES).sum().backward()
    assert stand_in.runs == {"forward": 1, "backward": 3}


def test_scan_blocks_one_block_then_a_block_a_chunk_up_to_one_part_a_thread():
    """The small kernels' row scans: one block to SCAN_ONE_BLOCK rows, then a block a
    SCAN_BLOCK_ROWS chunk, at most MAX_SCAN_PARTS (the final block sums one part a thread)."""
    assert cv.scan_blocks(0) == cv.scan_blocks(8388) == cv.scan_blocks(cv.SCAN_ONE_BLOCK) == 1
    assert cv.scan_blocks(cv.SCAN_ONE_BLOCK + 1) == -(-(cv.SCAN_ONE_BLOCK + 1)
                                                      // cv.SCAN_BLOCK_ROWS)
    assert cv.scan_blocks(1 << 20) == 128  # 2^28 logits of 256 classes
    assert cv.scan_blocks(1 << 28) == cv.MAX_SCAN_PARTS == 1024


@pytest.fixture
def few_scan_rows(monkeypatch):
    """The row scans split past 4 rows, 2 a block: the parts path on small tensors."""
    monkeypatch.setattr(cv, "SCAN_ONE_BLOCK", 4)
    monkeypatch.setattr(cv, "SCAN_BLOCK_ROWS", 2)
    plans.clear()
    yield
    plans.clear()


@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_many_rows_are_scanned_in_parts_and_replayed(stand_in, few_scan_rows, reduction):
    """Past SCAN_ONE_BLOCK rows the reduction sums a block a chunk first (reduce_parts, then
    reduce over the parts) and the coefficients take the mean's denominator in parts (den_parts,
    "sum" needs none) on as many blocks; the plans replay the extra launches on fresh parts."""
    m, c = 9, 16  # 5 blocks of 2 rows, the last of 1
    t = torch.randint(0, c, (m,))
    for _ in range(3):
        x = torch.randn(m, c).requires_grad_()
        before = len(stand_in.launches)
        loss, dx = _step(x, t, None, reduction)
        launches = stand_in.launches[before:]
    assert stand_in.runs == {"forward": 1, "backward": 1}  # the others replayed
    got = [(la.source[1].split("<")[0], la.grid) for la in launches]
    den = [("cross_entropy_den_parts", (5,))] if reduction == "mean" else []
    assert got == [("cross_entropy_fwd", (m,)), ("cross_entropy_reduce_parts", (5,)),
                   ("cross_entropy_reduce", (1,)), *den,
                   ("cross_entropy_coefs", (5,)), ("cross_entropy_bwd", (m, 1))]
    parts, final = launches[1], launches[2]
    assert parts.args[4:] == (m, 2)  # rows, chunk
    assert final.args[1:4] == (parts.args[0], parts.args[1], 5)  # the parts, not the rows
    coefs = launches[-2]
    assert coefs.args[-1] == (5 if reduction == "mean" else 0)
    if reduction == "mean":
        assert coefs.args[-2] == launches[3].args[0]  # den_parts' parts


@needs_cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("case", ["mean", "sum", "weighted", "smoothed", "ignored", "fused"])
@pytest.mark.parametrize("size", ["lowered", "real"])
def test_rows_scanned_in_parts_match_float64(monkeypatch, dtype, case, size):
    """Many rows, the row scans in parts, against float64: loss and dlogits of plain and fused
    (kernel_lab.cross_entropy's default step: coefficients before the forward) steps, outputs
    into poisoned memory. "lowered": the thresholds lowered so 3,001 rows take 16 blocks of 188
    (small enough for the race tools: .ci/gpu sanitize); "real": 40,000 rows, 5 blocks."""
    if size == "lowered":
        monkeypatch.setattr(cv, "SCAN_ONE_BLOCK", 1000)
        monkeypatch.setattr(cv, "SCAN_BLOCK_ROWS", 200)
    m, c = (3001, 7) if size == "lowered" else (40000, 3)
    assert cv.scan_blocks(m) == (16 if size == "lowered" else 5)
    reduction = "sum" if case == "sum" else "mean"
    eps = 0.1 if case == "smoothed" else 0.0
    w = torch.rand(c, device="cuda", dtype=dtype) if case == "weighted" else None
    t = torch.randint(0, c, (m,), device="cuda")
    if case == "ignored":
        t[::3] = -100
    x = torch.randn(m, c, device="cuda", dtype=dtype).requires_grad_()
    torch.full((4 * m * c,), float("nan"), device="cuda")  # poison the freed blocks
    plans.clear()
    try:
        if case == "fused":
            x.grad = None
            loss = kernel_lab.cross_entropy(x, t)
            loss.backward()
            dx = x.grad
        else:
            loss, dx = _step(x, t, w, reduction, eps)
    finally:
        plans.clear()  # no plan of the lowered thresholds outlives the test
    _match_float64(loss, dx, x, t, w, reduction, eps)


@needs_cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("case", ["mean", "sum", "none", "weighted", "smoothed", "ignored"])
def test_replayed_steps_are_correct(dtype, case):
    """Three steps each (record, replay, replay) on fresh logits, outputs into poisoned memory,
    against float64."""
    m, c = 37, 1031
    reduction = case if case in ("mean", "sum", "none") else "mean"
    eps = 0.1 if case == "smoothed" else 0.0
    w = torch.rand(c, device="cuda", dtype=dtype) if case == "weighted" else None
    for _ in range(3):
        t = torch.randint(0, c, (m,), device="cuda")
        if case == "ignored":
            t[::3] = -100
        x = torch.randn(m, c, device="cuda", dtype=dtype).requires_grad_()
        torch.full((4 * m * c,), float("nan"), device="cuda")  # poison the freed blocks
        loss, dx = _step(x, t, w, reduction, eps)
        _match_float64(loss, dx, x, t, w, reduction, eps)


@pytest.mark.parametrize("path", ["eager", "custom op"])
def test_a_step_makes_no_zeros_for_the_unused_lse_gradient(path):
    """The loss's second output (lse) takes no gradient: its backward gets None, not a tensor
    of zeros that autograd would fill (a fill kernel a step on a GPU). Eager calls run the
    lab's own autograd node, calls a dispatch mode watches run the custom op's."""
    from torch.profiler import profile

    x = torch.randn(7, 11, requires_grad=True)
    t = torch.randint(0, 11, (7,))
    if path == "eager":
        loss = kernel_lab.cross_entropy(x, t, variant="torch_cross_entropy")
        assert type(loss.grad_fn).__name__ == "_EagerOpBackward"
        with profile() as prof:
            loss.backward()
        ops = [e.name.removeprefix("aten::") for e in prof.events()]
    else:
        with Recorder() as rec:
            loss = kernel_lab.cross_entropy(x, t, variant="torch_cross_entropy")
            ops_before = len(rec.seen)
            loss.backward()
        ops = [str(op).removeprefix("aten.").split(".")[0] for op in rec.seen[ops_before:]]
    assert ops, "nothing was seen: the check would pass vacuously"
    assert not {"zeros", "zero_", "zeros_like"} & set(ops), ops
    ref = x.detach().double().requires_grad_()
    torch.nn.functional.cross_entropy(ref, t).backward()
    torch.testing.assert_close(x.grad.double(), ref.grad, rtol=1e-5, atol=1e-6)
