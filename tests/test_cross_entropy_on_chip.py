"""The in-place mode's on-chip forward (``cross_entropy_row``, cuda_src/cuda_cross_entropy.cu):
its shape rule on the CPU; on a GPU every CTAs-a-row shape against float64 and against the
L2 re-read kernel it replaces, with smoothing, weights, ignored rows, odd and misaligned rows,
and nothing written outside the logits."""

import pytest
import torch
import torch.nn.functional as F
from conftest import needs_cuda
from test_plans_cross_entropy import stand_in  # noqa: F401 - the fixture

import kernel_lab
from kernel_lab.core import plans
from kernel_lab.cuda.archs import ARCHS, as_if_on
from kernel_lab.ops.cross_entropy import cuda_variants as cv

GPU_N = [700, 32000, 50257, 100000, 151936, 262140]  # row lengths of the GPU test


def test_row_shape_holds_the_row_in_one_cta_else_the_fewest_clustered():
    assert cv.row_shape(4000) == (512, 1)  # bf16 32000: one CTA of 512, two an SM
    assert cv.row_shape(6283) == (800, 1)  # bf16 50257 off 16 bytes: one CTA, not 2 x 416
    assert cv.row_shape(8192) == (1024, 1)  # bf16 65536
    assert cv.row_shape(8193) == (288, 4)  # past one CTA: clusters of <= 512 threads
    assert cv.row_shape(16032) == (512, 4)  # bf16 128256
    assert cv.row_shape(32768) == (512, 8)  # bf16 262144 on 16 bytes
    assert cv.row_shape(32769) == (544, 8)  # ... off 16 bytes: one window more
    assert cv.row_shape(65536) == (1024, 8)  # fp32 262144
    assert cv.row_shape(65537) is None
    assert cv.row_shape(8192, cluster=False) == (1024, 1)
    assert cv.row_shape(8193, cluster=False) is None
    for w in range(1, 66000, 89):
        shape = cv.row_shape(w)
        if shape is not None:
            threads, cl = shape
            assert threads * cl * cv.ROW_VECTORS >= w and threads % 32 == 0
            assert 64 <= threads <= 1024 and cl in cv.ROW_CLUSTERS


def test_the_gpu_cases_reach_every_shape_kind():
    """The GPU test's rows (off 16 bytes) launch one CTA of 64 to 1024 threads, register
    clusters of 4 and 8 with 320 to 1024 threads, and slot clusters of 2, 4 and 8."""
    shapes = {dt: [cv.row_shape(cv._windows(n, dt)) for n in GPU_N]
              for dt in (torch.bfloat16, torch.float32)}
    assert shapes[torch.bfloat16] == [(64, 1), (512, 1), (800, 1), (416, 4), (320, 8), (544, 8)]
    assert shapes[torch.float32] == [(64, 1), (1024, 1), (416, 4), (416, 8), (608, 8), (1024, 8)]
    lines = {dt: [cv.slots_shape(-(-(n + 128 // dt.itemsize - 1) // (16 // dt.itemsize)))
                  for n in GPU_N[3:]] for dt in (torch.bfloat16, torch.float32)}
    assert lines[torch.bfloat16] == [(2, 5), (2, 11), (4, 9)]
    assert lines[torch.float32] == [(4, 5), (4, 11), (8, 9)]


def test_row_windows_count_the_worst_phase_only_off_16_bytes():
    x = torch.empty(4, 32008, dtype=torch.bfloat16)
    assert cv.row_windows(x[:, :32000]) == 4000 + (x.data_ptr() % 16 != 0)
    assert cv.row_windows(x[:, 1:32001]) == 4001  # rows start 2 bytes past 16


def test_the_in_place_forward_takes_the_row_on_chip_where_it_fits(monkeypatch):
    bf16, f32, f64 = torch.bfloat16, torch.float32, torch.float64
    assert cv.forward_pick(32000, bf16, 4000, True, True) == ("cross_entropy_row<__nv_bfloat16>",
                                                              1, 512, 0)
    # past one CTA: registers and slots, the softmax family's block_slots shapes
    assert cv.forward_pick(128256, bf16, 16032, True, True, 16032) == (
        "cross_entropy_row_cluster_slots<__nv_bfloat16, 2>", 2, 512, 8)
    assert cv.forward_pick(262144, bf16, 32768, True, True, 32768) == (
        "cross_entropy_row_cluster_slots<__nv_bfloat16, 4>", 4, 512, 8)
    assert cv.forward_pick(524288, bf16, 65536, True, True, 65536) == (
        "cross_entropy_row_cluster_slots<__nv_bfloat16, 8>", 8, 512, 8)
    assert cv.forward_pick(151936, f32, 37984, True, True, 37984) == (
        "cross_entropy_row_cluster_slots<float, 4>", 4, 512, 11)
    monkeypatch.setattr(cv, "ON_CHIP_SLOTS", False)  # registers only
    assert cv.forward_pick(65536, bf16, 8193, True, True) == (
        "cross_entropy_row_cluster<__nv_bfloat16, 4>", 4, 288, 0)
    assert cv.forward_pick(262144, bf16, 32768, True, True) == (
        "cross_entropy_row_cluster<__nv_bfloat16, 8>", 8, 512, 0)
    assert cv.forward_pick(262144, bf16, 32768, True, False) == (
        "cross_entropy_fwd<__nv_bfloat16, false>", 1, 128, 0)  # the plain forward: a block a row
    # no clusters (before sm_90), rows past 8 CTAs, or float64: a block a row
    assert cv.forward_pick(262144, bf16, 32768, False, True)[0] == \
        "cross_entropy_fwd<__nv_bfloat16, true>"
    assert cv.forward_pick(1 << 20, bf16, 1 << 17, True, True)[0] == \
        "cross_entropy_fwd<__nv_bfloat16, true>"
    assert cv.forward_pick(262144, f64, 131072, True, True)[0] == "cross_entropy_fwd<double, true>"


def test_slots_shape_and_line_windows():
    assert cv.slots_shape(16032) == (2, 8) and cv.slots_shape(18992) == (2, 11)
    assert cv.slots_shape(8192) is None  # a thread's registers hold its share
    assert cv.slots_shape(8 * 512 * 20 + 1) is None  # 8 CTAs' slots do not
    x = torch.empty(3, 262144 + 64, dtype=torch.bfloat16)
    lined = x.data_ptr() % 128 == 0
    assert cv.line_windows(x[:, :262144]) == (32768 if lined else 32776)
    assert cv.line_windows(x[:, 1:262145]) == 32776  # rows 2 bytes past a line


def test_no_cluster_row_kernel_launchable_before_sm90():
    old = cv._launchable_forward(ARCHS["sm_80"])
    assert "cross_entropy_row<__nv_bfloat16>" in old
    assert not [e for e in old if "_cluster" in e]
    assert "cross_entropy_row_cluster<float, 8>" in cv._launchable_forward(ARCHS["sm_90"])
    assert set(cv._launchable_forward(ARCHS["sm_90"])) == set(cv.FORWARD.name_expressions)


@pytest.fixture(autouse=True)
def _forget_picks():
    """After each test (and its monkeypatch's undo: an autouse fixture is torn down last), the
    plan cache and the memoized shapes forget what a patched constant chose."""
    yield
    _forget()


def _forget():
    plans.forget(cv)  # a recorded launch replays for its signature whatever the constants say


# the on-chip kinds the GPU test reaches, by the constants that pick them
KINDS = {"slots": {}, "registers": {"ON_CHIP_SLOTS": False}}


def test_rows_past_512_threads_of_one_cta_take_one_cta_of_512_with_slots(monkeypatch):
    """Rows that need 513-1024 threads of one CTA: one CTA of 512 with slots
    (cross_entropy_row_slots, two rows an SM); SLOTS_PAST = 1024 or no slots: one CTA of
    registers. Rows within 512 threads keep one CTA of registers either way."""
    bf16, f32 = torch.bfloat16, torch.float32
    assert cv.forward_pick(40000, bf16, 5000, True, True, 5008) == (
        "cross_entropy_row_slots<__nv_bfloat16>", 1, 512, 2)
    assert cv.forward_pick(50257, bf16, 6283, True, True, 6290) == (
        "cross_entropy_row_slots<__nv_bfloat16>", 1, 512, 5)
    assert cv.forward_pick(65536, bf16, 8192, False, True, 8192) == (  # no cluster needed
        "cross_entropy_row_slots<__nv_bfloat16>", 1, 512, 8)
    assert cv.forward_pick(32000, f32, 8000, True, True, 8000) == (
        "cross_entropy_row_slots<float>", 1, 512, 8)
    assert cv.forward_pick(32000, bf16, 4000, True, True, 4000)[0] == \
        "cross_entropy_row<__nv_bfloat16>"
    assert "cross_entropy_row_slots<float>" in cv._launchable_forward(ARCHS["sm_80"])
    monkeypatch.setattr(cv, "SLOTS_PAST", 1024)
    _forget()
    assert cv.forward_pick(50257, bf16, 6283, True, True, 6290) == (
        "cross_entropy_row<__nv_bfloat16>", 1, 800, 0)
    monkeypatch.setattr(cv, "SLOTS_PAST", 512)
    monkeypatch.setattr(cv, "ON_CHIP_SLOTS", False)
    _forget()
    assert cv.forward_pick(50257, bf16, 6283, True, True, 6290) == (
        "cross_entropy_row<__nv_bfloat16>", 1, 800, 0)


def test_the_gpu_cases_reach_every_kernel_kind():
    """Off 16 bytes and off their line, the GPU test's rows reach one CTA of registers, one CTA
    with slots, and slot clusters of 2, 4 and 8 (with slots: KINDS' "slots"); register clusters
    are its "registers" kind (test_the_gpu_cases_reach_every_shape_kind)."""
    def pick(n, dt):
        w = 16 // dt.itemsize
        return cv.forward_pick(n, dt, -(-(n + w - 1) // w), True, True,
                               -(-(n + 128 // dt.itemsize - 1) // w))[:2]
    row, one = "cross_entropy_row<", "cross_entropy_row_slots<"
    cl = "cross_entropy_row_cluster_slots<"
    kinds = {dt: [(e.split("<")[0] + "<", c) for e, c in (pick(n, dt) for n in GPU_N)]
             for dt in (torch.bfloat16, torch.float32)}
    assert kinds[torch.bfloat16] == [(row, 1), (row, 1), (one, 1), (cl, 2), (cl, 2), (cl, 4)]
    assert kinds[torch.float32] == [(row, 1), (one, 1), (cl, 2), (cl, 4), (cl, 4), (cl, 8)]


def _inplace(x, t, w, eps, reduction, g, on_chip, monkeypatch, kind="slots"):
    """(loss, dlogits, the buffer around the logits) of the in-place mode with or without the
    on-chip kernel (of ``kind``: KINDS); the logits sit inside a guarded buffer with `pad`
    columns between rows."""
    monkeypatch.setattr(cv, "ON_CHIP_IN_PLACE", on_chip)
    monkeypatch.setattr(cv, "ON_CHIP_SLOTS", True)
    for name, value in KINDS[kind].items():
        monkeypatch.setattr(cv, name, value)
    _forget()
    m, n = x.shape
    pad = 3
    buf = torch.full((m * (n + pad) + 16,), 7.0, device="cuda", dtype=x.dtype)
    logits = buf[1:1 + m * (n + pad)].view(m, n + pad)[:, :n]  # off 16 bytes, strided rows
    logits.copy_(x)
    expr = cv.forward_pick(n, x.dtype, cv.row_windows(logits), True, True,
                           cv.line_windows(logits))[0]
    assert expr.startswith("cross_entropy_row") == on_chip, expr
    leaf = logits.detach().requires_grad_()
    view = leaf * 1
    loss = kernel_lab.cross_entropy(view, t, w, reduction=reduction, label_smoothing=eps,
                                    inplace_backward=True)
    loss.backward(g)
    torch.cuda.synchronize()
    return loss.detach(), leaf.grad, buf


@needs_cuda
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32],
                         ids=str)
@pytest.mark.parametrize("n", GPU_N)
@pytest.mark.parametrize("smooth", [False, True], ids=["plain", "smoothed-weighted"])
@pytest.mark.parametrize("kind", KINDS)
def test_on_chip_matches_float64_and_the_l2_kernel(dtype, n, smooth, kind, monkeypatch):
    m = 6
    gen = torch.Generator().manual_seed(n)
    x = (torch.randn(m, n, generator=gen) * 3).to("cuda", dtype)
    t = torch.randint(0, n, (m,), generator=gen).cuda()
    t[2] = -100
    w = (torch.rand(n, generator=gen) + 0.5).to("cuda", dtype) if smooth else None
    eps = 0.1 if smooth else 0.0
    reduction = "mean" if smooth else "none"
    g = torch.tensor(1.0, device="cuda", dtype=dtype) if smooth else \
        (torch.rand(m, generator=gen) + 0.5).to("cuda", dtype)
    loss, grad, buf = _inplace(x, t, w, eps, reduction, g, True, monkeypatch, kind)
    guard = buf.clone().view(-1)
    guard[1:1 + m * (n + 3)].view(m, n + 3)[:, :n] = 7
    assert (guard == 7).all(), "written outside the logits"
    loss_l2, grad_l2, _ = _inplace(x, t, w, eps, reduction, g, False, monkeypatch)

    ref_x = x.double().requires_grad_()
    ref = F.cross_entropy(ref_x, t, None if w is None else w.double(), reduction=reduction,
                          label_smoothing=eps)
    ref.backward(g.double())
    tol = dict(rtol=2e-2, atol=1e-3) if dtype != torch.float32 else dict(rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(loss.double(), ref.detach(), **tol)
    torch.testing.assert_close(loss, loss_l2, **tol)
    scale = ref_x.grad.abs().max().item()
    gtol = dict(rtol=2e-2, atol=2e-3 * scale) if dtype != torch.float32 else \
        dict(rtol=1e-4, atol=1e-6 * scale)
    torch.testing.assert_close(grad.double(), ref_x.grad, **gtol)
    torch.testing.assert_close(grad, grad_l2, **gtol)
    assert (grad[2] == 0).all()  # the ignored row


def test_few_long_rows_take_fewer_threads_to_run_in_one_wave(monkeypatch):
    """An H100's residency at 80 registers a thread (6 blocks of 128 an SM, 8 of 96, 12 of 64,
    25 of 32): every row in the first wave where fewer threads make room, else 128."""
    monkeypatch.setattr(cv.occupancy, "resident_groups", lambda src, expr, threads, cluster,
                        smem, dev: 132 * min(32, 2048 // threads, 65536 // (80 * threads)))
    picks = {m: cv.one_wave_threads(m, 262144, torch.bfloat16, "e", 0)
             for m in (700, 792, 1024, 1584, 1766, 3300, 4096, 8388)}
    assert picks == {700: 128, 792: 128, 1024: 96, 1584: 64, 1766: 32, 3300: 32, 4096: 128,
                     8388: 128}
    monkeypatch.setattr(cv, "FEW_ROWS_ONE_WAVE", False)
    assert cv.one_wave_threads(1024, 262144, torch.bfloat16, "e", 0) == 128
    assert cv.one_wave_threads(1024, 200, torch.bfloat16, "e", 0) == 32  # short rows: as before


@needs_cuda
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=str)
def test_few_row_threads_match_float64(dtype, monkeypatch):
    """Just over one wave of 128-thread blocks (1,100 rows): the forward's fewer threads a row
    give the loss and lse of 128 threads and of float64."""
    gen = torch.Generator().manual_seed(11)
    x = (torch.randn(1100, 4096, generator=gen) * 3).to("cuda", dtype)
    t = torch.randint(0, 4096, (1100,), generator=gen).cuda()
    dev = x.device.index
    expr = f"cross_entropy_fwd<{'__nv_bfloat16' if dtype == torch.bfloat16 else 'float'}, false>"
    assert cv.one_wave_threads(1100, 4096, dtype, expr, dev) < 128  # the case is the few-row one
    out = {}
    for one_wave in (True, False):
        monkeypatch.setattr(cv, "FEW_ROWS_ONE_WAVE", one_wave)
        plans.clear()
        out[one_wave] = kernel_lab.cross_entropy(x, t, reduction="none")
    ref = F.cross_entropy(x.double(), t, reduction="none")
    tol = dict(rtol=1e-2, atol=1e-2) if dtype == torch.bfloat16 else dict(rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(out[True].double(), ref, **tol)
    torch.testing.assert_close(out[True], out[False], **tol)


def test_a_slot_launch_carries_its_shared_memory_and_slots(stand_in, monkeypatch):  # noqa: F811
    """The in-place forward of bf16 rows of 128256 on sm_90: 2 CTAs of 512 a row with 8 slots
    (64 KB), the kernel's shared-memory limit raised first, the slots its last argument."""
    raised = []
    monkeypatch.setattr(cv.jit, "set_max_dynamic_shared", lambda fn, n: raised.append(n))
    monkeypatch.setattr(cv, "unit", lambda device, dtype: torch.ones((), dtype=dtype))
    x = torch.zeros(3, 128256 + 64, dtype=torch.bfloat16)
    x = x[:, (-x.data_ptr() % 128) // 2:][:, :128256]  # rows on 128-byte lines
    with as_if_on(ARCHS["sm_90"]):
        cv.fused_forward(x, torch.zeros(3, dtype=torch.int64), None, -100, "mean", 0.0)
    (row,) = [la for la in stand_in.launches if la.source[1].startswith("cross_entropy_row")]
    assert row.source[1] == "cross_entropy_row_cluster_slots<__nv_bfloat16, 2>"
    assert (row.grid, row.block, row.shared_mem) == ((6,), (512,), 8 * 512 * 16)
    assert row.signature == cv.SLOTS_SIG and row.args[-1] == 8 and raised == [8 * 512 * 16]


@pytest.mark.parametrize("n", [700, 32000, 50257, 151936, 262144, 600000])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=str)
def test_picks_shows_what_a_training_step_launches(n, dtype, stand_in, monkeypatch):  # noqa: F811
    """`python -m kernel_lab picks`'s training-step line (step_forward_shape) names the kernel,
    CTAs, threads and slots the fused forward launches for contiguous rows on sm_90."""
    monkeypatch.setattr(cv.jit, "set_max_dynamic_shared", lambda fn, n: None)
    monkeypatch.setattr(cv, "unit", lambda device, dtype: torch.ones((), dtype=dtype))
    buf = torch.zeros(3 * n + 64, dtype=dtype)
    start = (-buf.data_ptr() % 128) // dtype.itemsize
    x = buf[start:start + 3 * n].view(3, n)  # contiguous rows from a 128-byte line, as allocated
    with as_if_on(ARCHS["sm_90"]):
        cv.fused_forward(x, torch.zeros(3, dtype=torch.int64), None, -100, "mean", 0.0)
    (fwd,) = [la for la in stand_in.launches if la.source[1].startswith("cross_entropy_row")
              or la.source[1].startswith("cross_entropy_fwd")]
    name, ctas = fwd.source[1].split("<")[0], fwd.grid[0] // 3
    text = cv.step_forward_shape(n, dtype, ARCHS["sm_90"])
    assert f"gradient): {name}," in text
    if name == "cross_entropy_fwd":
        assert f", {fwd.block[0]} threads a row" in text
    else:
        assert f"{ctas} CTA{'s' if ctas > 1 else ''} of {fwd.block[0]} threads a row" in text
        slots = fwd.args[-1] if name.endswith("slots") else 0
        assert (f", {slots} slots a thread" in text) == bool(slots)
    assert text in cv.launch_shape(n, dtype)
    assert "float64 has no fused step" in cv.launch_shape(n, torch.float64)
