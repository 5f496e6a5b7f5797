"""fused_softmax_backward launch configs (CPU) and its persistent kernels (GPU), which
log_softmax_backward shares (the same body and shapes with the log rule, backward_persist.cuh).

CPU: ``backward_config`` and ``log_backward_config`` hold every row, name a declared
instantiation and take the persistent kernels only for rows in one 16-byte phase. GPU: every
persistent instantiation of both ops runs with more rows than resident clusters, so each
cluster loops (prefetch pipeline, partial sums exchanged as messages), checked against the
float64 reference through the op's own error scale.
"""

from __future__ import annotations

import pytest
import torch
from conftest import HAS_CUDA

import kernel_lab
from kernel_lab.cuda import occupancy as pc
from kernel_lab.cuda.rowkernels import backward_config as bc
from kernel_lab.cuda.rowkernels import forward_config as fc
from kernel_lab.cuda.rowkernels import launch as rk
from kernel_lab.cuda.sources import ALL_DTYPES, cdiv, ctype, vec_width
from kernel_lab.ops.log_softmax import cuda_variants as lcv
from kernel_lab.ops.softmax import cuda_variants as cv

NS = (1, 127, 4096, 16384, 16385, 20000, 32000, 50257, 65536, 151936, 262144, 524288, 1048576)
# Both ops on the persistent kernel: (op, variant, kernels for backward_launch, y from logits).
BACKWARDS = {
    "softmax_backward": ("fused_softmax_backward", cv.BACKWARD_KERNELS,
                         lambda x: torch.softmax(x, -1)),
    "log_softmax_backward": ("log_softmax_backward", lcv.BACKWARD_KERNELS,
                             lambda x: torch.log_softmax(x, -1)),
}
OPS = pytest.mark.parametrize("op_name", list(BACKWARDS))


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
@pytest.mark.parametrize("aligned", [True, False])
def test_backward_config_holds_the_row(dtype, aligned):
    declared = set(cv.BACKWARD.name_expressions)
    t = ctype(dtype)
    for n in NS:
        kind, threads, vpt, cl, stages = cfg = bc.backward_config(n, dtype, aligned)
        assert cfg.expr(t) in declared, (n, cfg)  # what backward_launch launches
        if kind == "chunks":
            assert 1 <= stages <= 4 and cfg.shared_mem() <= fc.MAX_CTA_SHARED, (n, cfg)
        else:
            assert stages in (1, 2) and (stages == 1 or kind == "persist"), (n, kind, stages)
        assert threads % 32 == 0 and 32 <= threads <= 1024, (n, kind, threads)
        nw = cdiv(n, vec_width(dtype))
        if kind == "persist":
            assert aligned and dtype in bc.BACKWARD_PERSIST_DTYPES, (n, dtype)
            assert f"fused_softmax_backward_persist<{t}, {vpt}, {cl}>" in declared
            assert threads * vpt * cl >= nw
            assert threads <= bc.backward_persist_max_threads(dtype, vpt)
        elif kind == "cluster":
            assert f"fused_softmax_backward_cluster<{t}, {vpt}, {cl}>" in declared
            assert threads * vpt * cl >= nw and threads <= 512
        elif kind == "block":
            assert f"fused_softmax_backward<{t}, {vpt}>" in declared
            assert threads * vpt >= nw
        elif kind == "chunks":  # rows past every persistent shape, in one phase
            assert aligned and dtype in bc.BACKWARD_PERSIST_DTYPES, (n, dtype)
            assert bc.backward_persist_config(n, dtype, aligned) is None, n
            assert threads <= bc.BACKWARD_CHUNK_MAX_THREADS and cl == 1


def test_chunk_config_keeps_the_chunk_count_with_full_chunks():
    """CPU: the chunk shape cuts a row into as many chunks as 512-thread chunks would (256 past
    64 of them), its CTA sized down so the chunks come out (nearly) full."""
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        for n in (307201, 327681, 400000, 524288, 1 << 20, 1000003, 1 << 21):
            cfg = bc.backward_chunk_config(n, dtype)
            nw = fc.line_windows(n, dtype)
            most = 512 if cdiv(nw, 2048) <= bc.BACKWARD_CHUNK_MAX_WIDE else 256
            full = cdiv(nw, most * bc.BACKWARD_CHUNK_VPT)
            chunks = cdiv(nw, cfg.threads * cfg.vpt)
            assert chunks == full and cfg.threads % 32 == 0, (n, dtype, cfg)
            assert (chunks - 1) * cfg.threads * cfg.vpt < nw <= chunks * cfg.threads * cfg.vpt
            assert (cfg.threads - 32) * cfg.vpt * chunks < nw, (n, dtype, cfg)  # no smaller CTA
            assert cfg.label() == f"chunks {cfg.threads}x4 ahead {bc.BACKWARD_CHUNK_AHEAD}"
            assert cfg.expr("float", "log_softmax_backward") == \
                "log_softmax_backward_chunks<float, 4>"
    f32, bf16 = torch.float32, torch.bfloat16
    assert bc.backward_chunk_config(524288, f32) == bc.BackwardConfig("chunks", 512, 4, 1, 2)
    assert bc.backward_chunk_config(1 << 20, bf16) == bc.BackwardConfig("chunks", 512, 4, 1, 2)
    assert bc.backward_chunk_config(1 << 20, f32) == bc.BackwardConfig("chunks", 256, 4, 1, 2)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
def test_odd_rows_in_one_phase_take_the_persistent_kernel(dtype):
    """Rows of y, dy and dx sharing their 16-byte phase (odd N such as 50257) go persistent,
    sized for one extra window (a row may start mid-slot)."""
    for n in (50257, 65537, 151937):
        cfg = bc.backward_config(n, dtype, aligned=False, phase=True)
        assert cfg.kind == "persist", (n, cfg)
        assert cfg.threads * cfg.vpt * cfg.cluster >= fc.vector_windows(n, dtype, aligned=False)
        assert bc.backward_config(n, dtype, aligned=False).kind != "persist"


def test_long_aligned_rows_take_the_persistent_kernel():
    def kind_and_cluster(n, dtype, aligned=True):
        cfg = bc.backward_config(n, dtype, aligned)
        return cfg.kind, cfg.cluster

    f32, bf16, f16 = torch.float32, torch.bfloat16, torch.float16
    # (N, dtype, rows on 16 bytes, (threads, vpt, cluster, stages)); % of copy: the pick vs the
    # runner-up
    picks = [
        (20000, f32, True, (640, 4, 2, 1)),
        (32000, f32, True, (1024, 4, 2, 1)),  # 97.8 vs 15x96x8 95.6
        (50257, f32, False, (416, 4, 8, 1)),  # odd rows: 96.8, two stages 95.2
        (65536, f32, True, (512, 4, 8, 2)),  # 97.9, one stage 96.6
        (131072, f32, True, (1024, 4, 8, 1)),  # two stages need 256 KB
        (151936, f32, True, (608, 4, 16, 2)),
        (163840, f32, True, (640, 4, 16, 2)),  # the last fp32 persistent row
        (32000, bf16, True, (256, 4, 4, 1)),  # persistent, not block
        (50257, bf16, False, (416, 4, 4, 2)),  # 100.1, one stage 91.4
        (65536, bf16, True, (512, 4, 4, 1)),  # 100.1, two stages 96.6
        (131072, bf16, True, (512, 4, 8, 1)),
        (151936, f16, True, (608, 4, 8, 1)),
        (262144, bf16, True, (512, 4, 16, 1)),  # 100.4, two stages 96.4
    ]
    for n, dtype, aligned, shape in picks:
        cfg = bc.backward_config(n, dtype, aligned, phase=True)
        assert (cfg.kind, *cfg[1:]) == ("persist", *shape), (n, dtype, cfg)
    assert kind_and_cluster(65536, f32, aligned=False)[0] == "cluster"  # phases differ
    assert kind_and_cluster(24000, bf16)[0] == "block"
    assert kind_and_cluster(32768, bf16, aligned=False)[0] == "block"
    for n, dtype in ((163841, f32), (196608, f32), (262144, f32), (307201, f32), (262152, bf16),
                     (327680, f16), (327688, bf16)):  # past 16 x 640 x 4 / 16 x 512 x 4
        assert bc.backward_config(n, dtype).kind == "chunks", (n, dtype)
    for n in (163848, 180000, 196608):  # 2-byte 16-CTA clusters of < 416 threads: chunks
        assert bc.backward_config(n, bf16).kind == "chunks", n
    assert bc.backward_config(196616, bf16)[:4] == ("persist", 416, 4, 16)
    assert bc.backward_config(307201, f32, aligned=False).kind == "stream"  # phases differ
    assert bc.backward_config(1 << 20, torch.float64).kind == "stream"  # no fp64 chunks


@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")
@pytest.mark.parametrize("dtype,n,cl", [
    (torch.float32, 20000, 2), (torch.float32, 65536, 8), (torch.float32, 151936, 16),
    (torch.float32, 163840, 16), (torch.bfloat16, 32000, 4), (torch.bfloat16, 131072, 8),
    (torch.bfloat16, 229376, 16), (torch.bfloat16, 262144, 16)],
    ids=str)
@OPS
def test_persistent_backward_loops_over_rows(op_name, dtype, n, cl):
    """Through the registered op: the config's persistent shapes, more rows than clusters."""
    variant, kernels, make_y = BACKWARDS[op_name]
    kind, threads, vpt, got_cl, stages = cfg = bc.backward_config(n, dtype)
    assert (kind, got_cl) == ("persist", cl)
    if kernels:
        assert lcv.log_backward_config(n, dtype, True, True) == cfg
    src = kernels.src if kernels else cv.BACKWARD
    expr = cfg.expr(ctype(dtype), kernels.prefix if kernels else "fused_softmax_backward")
    smem = stages * 2 * threads * vpt * 16
    groups = pc.resident_groups(src, expr, threads, cl, smem, 0)
    m = 2 * groups + 3  # every cluster loops over two or three rows
    gen = torch.Generator(device="cuda").manual_seed(n)
    x = torch.randn(m, n, device="cuda", generator=gen)
    y = make_y(x).to(dtype)
    dy = torch.randn(m, n, device="cuda", generator=gen).to(dtype)
    dx = kernel_lab.run(variant, y, dy)
    res = kernel_lab.get_op(op_name).check(dx, y, dy)
    assert res.ok, f"{variant} n={n} cl={cl} rows={m} groups={groups}: {res.message}"


def _persist_instantiations():
    """Every declared persistent backward kernel: (dtype, vectors per thread, cluster)."""
    for d, vpt, cl in bc.backward_persist_instantiations():
        yield pytest.param(d, vpt, cl, id=f"{d}-x{vpt}-cl{cl}")


def test_persist_instantiations_are_declared():
    declared = set(cv.BACKWARD.name_expressions) | set(lcv.BACKWARD.name_expressions)
    for d, vpt, cl in bc.backward_persist_instantiations():
        for prefix in ("fused_softmax_backward", "log_softmax_backward"):
            assert f"{prefix}_persist<{ctype(d)}, {vpt}, {cl}>" in declared
    assert (torch.float32, 8, 15) in bc.backward_persist_instantiations()
    assert bc.backward_persist_max_threads(torch.float32, 8) == 640
    assert bc.backward_persist_max_threads(torch.float32) == 1024
    assert bc.backward_persist_max_threads(torch.bfloat16) == 640


@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")
@pytest.mark.parametrize("dtype,vpt,cl", list(_persist_instantiations()))
@OPS
def test_every_persistent_backward_kernel_loops_over_rows(op_name, dtype, vpt, cl):
    """Each instantiation forced (backward_launch), at its largest CTA and a small one, with
    3 clusters for 23 rows: every cluster loops over ~8 rows (prefetch, message exchange), with
    one and two rows in flight (stages)."""
    _, kernels, make_y = BACKWARDS[op_name]
    w = vec_width(dtype)
    op = kernel_lab.get_op(op_name)
    gen = torch.Generator(device="cuda").manual_seed(cl)
    for threads in (bc.backward_persist_max_threads(dtype, vpt), 64):
        n = threads * vpt * cl * w - 2 * w  # whole windows (the persistent kernel's precondition)
        y = make_y(torch.randn(23, n, device="cuda", generator=gen)).to(dtype)
        dy = torch.randn(23, n, device="cuda", generator=gen).to(dtype)
        for groups, stages in ((3, 1), (3, 2), (None, 1), (None, 2)):
            if stages == 2 and threads * vpt * 16 * 4 > fc.MAX_CTA_SHARED:
                continue  # two stages of y and dy do not fit one SM's shared memory
            dx = torch.full_like(y, float("nan"))
            cfg = bc.BackwardConfig("persist", threads, vpt, cl, stages)
            rk.backward_launch(dx, y, dy, cfg, True, max_groups=groups, kernels=kernels)
            res = op.check(dx, y, dy)
            assert res.ok, f"{op_name} {dtype} {cfg.label()} groups={groups}: {res.message}"


def test_backward_config_names_its_fields_and_rejects_bad_stages():
    cfg = bc.backward_config(65536, torch.bfloat16)
    assert cfg.kind == "persist" and cfg.label() == "persist 4x512x4"
    assert tuple(cfg) == (cfg.kind, cfg.threads, cfg.vpt, cfg.cluster, cfg.stages)
    y = torch.zeros(2, 64)
    with pytest.raises(ValueError, match="stages"):
        rk.backward_launch(y, y, y, ("persist", 64, 4, 8, 3), True, kernels=cv.BACKWARD_KERNELS)


@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("n", [50257, 40001])
@OPS
def test_odd_rows_run_persistent_and_exact(op_name, dtype, n):
    """Odd N (rows start mid-slot): the persistent kernel through the registered op, every
    cluster looping over rows, and forced with 2 groups; also views whose rows start one
    element into their buffer (same phase for y and dy, dx contiguous: phase differs)."""
    variant, kernels, make_y = BACKWARDS[op_name]
    op = kernel_lab.get_op(op_name)
    gen = torch.Generator(device="cuda").manual_seed(n)
    m = 37
    y = make_y(torch.randn(m, n, device="cuda", generator=gen)).to(dtype)
    dy = torch.randn(m, n, device="cuda", generator=gen).to(dtype)
    cfg = bc.backward_config(n, dtype, aligned=False, phase=True)
    assert cfg.kind == "persist"
    dx = kernel_lab.run(variant, y, dy)
    assert op.check(dx, y, dy).ok
    for groups in (2, 5):
        dx = torch.full_like(y, float("nan"))
        rk.backward_launch(dx, y, dy, cfg, False, max_groups=groups, kernels=kernels)
        res = op.check(dx, y, dy)
        assert res.ok, f"{variant} {dtype} n={n} {cfg.label()} groups={groups}: {res.message}"
    ybuf = torch.empty(m * n + 1, device="cuda", dtype=dtype)
    dybuf = torch.empty(m * n + 1, device="cuda", dtype=dtype)
    ys, dys = ybuf[1:].view(m, n), dybuf[1:].view(m, n)
    ys.copy_(y)
    dys.copy_(dy)
    dx = kernel_lab.run(variant, ys, dys)  # dx's phase differs: not persistent
    assert op.check(dx, ys, dys).ok
    with pytest.raises(ValueError, match="phase"):
        rk.backward_launch(torch.empty_like(y), ys, dys, cfg, False, kernels=kernels)


@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("n", [50257, 50176])
@OPS
def test_line_heads_and_vector_heads_agree(op_name, dtype, n):
    """The persistent backward with line heads (y and dy rows in one 128-byte phase: here both
    start 16 bytes into a line, so even rows of 50176 are off lines) and with 16-byte heads (dy
    16 bytes further on: one 16-byte phase, another 128-byte phase), each looping over rows."""
    _, kernels, make_y = BACKWARDS[op_name]
    op = kernel_lab.get_op(op_name)
    gen = torch.Generator(device="cuda").manual_seed(n + 7)
    m, w = 29, vec_width(dtype)
    cfg = bc.backward_config(n, dtype, aligned=False, phase=True)
    for dy_off in (w, 2 * w):  # elements: 16 bytes (same line phase as y), 32 bytes (not)
        ybuf = torch.empty(m * n + w, device="cuda", dtype=dtype)
        dybuf = torch.empty(m * n + dy_off, device="cuda", dtype=dtype)
        y, dy = ybuf[w:].view(m, n), dybuf[dy_off:].view(m, n)
        y.copy_(make_y(torch.randn(m, n, device="cuda", generator=gen)))
        dy.copy_(torch.randn(m, n, device="cuda", generator=gen))
        assert rk._same_line_phase(y, dy) == (dy_off == w)
        for groups in (3, None):
            dx = torch.full((m, n), float("nan"), device="cuda", dtype=dtype)
            rk.backward_launch(dx, y, dy, cfg, False, max_groups=groups, kernels=kernels)
            res = op.check(dx, y, dy)
            assert res.ok, f"{dtype} n={n} dy +{dy_off} {cfg.label()} groups={groups}: " \
                           f"{res.message}"


def test_same_line_phase():
    """CPU: rows of two tensors share their offset within 128-byte lines (line heads)."""
    buf = torch.empty(4096)
    line0 = (-buf.data_ptr() % 128) // 4  # first fp32 element on a 128-byte line

    def rows(elem, stride=96):  # 4 fp32 rows of 96 elements from buf[line0 + elem]
        return buf.as_strided((4, 96), (stride, 1), line0 + elem)

    assert rk._same_line_phase(rows(0), rows(1024))
    assert rk._same_line_phase(rows(4), rows(1028))  # both 16 bytes into a line
    assert not rk._same_line_phase(rows(4), rows(1032))
    assert not rk._same_line_phase(rows(0, 100), rows(1024))  # strides differ by 16 bytes
    assert rk._same_line_phase(rows(0, 100)[:1], rows(1024)[:1])  # one row: bases only


def test_persistent_backward_shape_check():
    """CPU: the persistent backward's launch check takes aligned rows at their exact window
    count (the H200 suite caught a check that always budgeted a head window), wants one more
    for odd rows, and refuses rows of y, dy and dx in different phases."""
    for dtype in (torch.float32, torch.bfloat16):
        w = vec_width(dtype)
        cfg = bc.BackwardConfig("persist", 64, 4, 2)
        n = 64 * 4 * 2 * w  # exactly the shape's windows
        y = torch.zeros(3, n, dtype=dtype)
        rk.check_backward_persist(y, y, y, cfg)
        odd = torch.zeros(3, n - 1, dtype=dtype)  # rows 1, 2 start mid-slot: one more window
        with pytest.raises(ValueError, match="spans"):
            rk.check_backward_persist(odd, odd, odd, bc.BackwardConfig("persist", 64, 4, 2))
        rk.check_backward_persist(odd, odd, odd, bc.BackwardConfig("persist", 96, 4, 2))
        buf = torch.zeros(3 * n + 1, dtype=dtype)
        with pytest.raises(ValueError, match="phase"):
            rk.check_backward_persist(y, buf[1:].view(3, n), y, cfg)


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
@pytest.mark.parametrize("aligned,phase", [(True, True), (False, True), (False, False)])
def test_log_backward_config_holds_the_row(dtype, aligned, phase):
    """CPU: log_softmax_backward's launch holds every row with a kernel its file declares, is
    persistent exactly where the softmax backward is (plus rows one CTA cannot hold, in one
    phase), and streams only what no persistent shape takes."""
    declared = set(lcv.BACKWARD.name_expressions)
    t = ctype(dtype)
    for n in (*NS, 16383, 16387, 40001, 65537, 307200, 327680):
        cfg = lcv.log_backward_config(n, dtype, aligned, phase)
        assert cfg.expr(t, "log_softmax_backward") in declared, (n, cfg)
        need = fc.vector_windows(n, dtype, aligned)
        softmax_cfg = bc.backward_config(n, dtype, aligned, phase)
        if softmax_cfg.kind == "persist":
            assert cfg == softmax_cfg, (n, cfg, softmax_cfg)
        if softmax_cfg.kind == "chunks":
            assert cfg == softmax_cfg, (n, cfg, softmax_cfg)
        if cfg.kind == "persist":
            assert phase and dtype in bc.BACKWARD_PERSIST_DTYPES, (n, cfg)
            assert cfg.threads * cfg.vpt * cfg.cluster >= need, (n, cfg)
        elif cfg.kind == "chunks":
            assert phase and dtype in bc.BACKWARD_PERSIST_DTYPES, (n, cfg)
            assert bc.backward_persist_config(n, dtype, aligned) is None, (n, cfg)
        elif cfg.kind == "block":
            assert cfg.threads * cfg.vpt >= need and cfg.threads <= bc.BWD_MAX_THREADS
        else:
            assert cfg.kind == "stream", (n, cfg)
            assert not phase or dtype not in bc.BACKWARD_PERSIST_DTYPES, (n, cfg)
    f32, bf16 = torch.float32, torch.bfloat16
    if (dtype, aligned, phase) == (f32, True, True):  # the rows that were streamed before
        assert lcv.log_backward_config(16384, f32, True, True).kind == "block"
        for n in (16385, 32768, 65536, 131072, 163840):
            assert lcv.log_backward_config(n, f32, True, True).kind == "persist", n
        for n in (196608, 262144, 524288):
            assert lcv.log_backward_config(n, f32, True, True).kind == "chunks", n
        assert lcv.log_backward_config(32768, bf16, True, True).kind == "persist"
        assert lcv.log_backward_config(16387, f32, False, True).kind == "persist"  # odd, phase
        assert lcv.log_backward_config(16387, f32, False, False).kind == "stream"
        assert lcv.log_backward_config(65536, torch.float64, True, True).kind == "stream"


@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_log_backward_persistent_edge_rows(dtype):
    """log_softmax_backward on persistent rows with -inf in y (dx = dy exactly there), a NaN
    row (stays NaN, its neighbours do not), huge dy, and every cluster looping over rows."""
    n, m = 65536, 300
    cfg = lcv.log_backward_config(n, dtype, True, True)
    assert cfg.kind == "persist"
    gen = torch.Generator(device="cuda").manual_seed(5)
    x = torch.randn(m, n, device="cuda", generator=gen)
    x[1, ::3] = float("-inf")  # masked logits: y = -inf
    x[2] = float("nan")
    y = torch.log_softmax(x, -1).to(dtype)
    dy = torch.randn(m, n, device="cuda", generator=gen).to(dtype)
    dy[4] *= 1e3
    dx = kernel_lab.run("log_softmax_backward", y, dy)
    assert torch.equal(dx[1, ::3], dy[1, ::3])
    assert torch.isnan(dx[2]).all() and not torch.isnan(dx[[0, 1, 3, 4]]).any()
    keep = torch.ones(m, dtype=torch.bool)
    keep[2] = False
    res = kernel_lab.get_op("log_softmax_backward").check(dx[keep], y[keep], dy[keep])
    assert res.ok, res.message


def _chunk_inputs(make_y, m, n, dtype, gen, y_off=0, dy_off=0):
    """y (from logits) and dy of (m, n), their rows starting y_off / dy_off elements into their
    buffers (0: PyTorch's own alignment)."""
    ybuf = torch.empty(m * n + y_off, device="cuda", dtype=dtype)
    dybuf = torch.empty(m * n + dy_off, device="cuda", dtype=dtype)
    y, dy = ybuf[y_off:].view(m, n), dybuf[dy_off:].view(m, n)
    y.copy_(make_y(torch.randn(m, n, device="cuda", generator=gen)))
    dy.copy_(torch.randn(m, n, device="cuda", generator=gen))
    return y, dy


@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@OPS
def test_chunk_backward_forced_shapes(op_name, dtype):
    """The chunk kernel forced (backward_launch) on rows of several chunks: small CTAs, 1-4
    chunks in flight, grids of a few CTAs (each loops over many chunks; chunks <= CTAs + 1 is
    the kernel's limit, met exactly on chunks - 1 CTAs) and the full resident grid; aligned
    rows, odd rows (rows start mid-slot), rows off their 128-byte lines with y and dy in one
    line phase (line heads) and in two (16-byte heads). dx is poisoned first."""
    _, kernels, make_y = BACKWARDS[op_name]
    op = kernel_lab.get_op(op_name)
    w = vec_width(dtype)
    gen = torch.Generator(device="cuda").manual_seed(11)
    cases = [  # (n, y offset, dy offset) in elements
        (64 * 4 * w * 6, 0, 0),  # 6 whole chunks of 64 x 4 windows
        (64 * 4 * w * 6 - 3, 0, 0),  # odd: rows start mid-slot, last chunk partial
        (64 * 4 * w * 5 + 1, w, w),  # off lines, one line phase: line heads
        (64 * 4 * w * 5 + 1, w, 2 * w),  # one 16-byte phase, two line phases
    ]
    for n, y_off, dy_off in cases:
        y, dy = _chunk_inputs(make_y, 13, n, dtype, gen, y_off, dy_off)
        chunks = rk.backward_row_chunks(bc.BackwardConfig("chunks", 64, 4), n, y,
                                        rk._same_line_phase(y, dy))
        assert chunks >= 6
        for ahead, groups in ((1, chunks - 1), (2, chunks - 1), (3, chunks + 1), (4, None),
                              (1, None)):
            cfg = bc.BackwardConfig("chunks", 64, 4, 1, ahead)
            dx = torch.full(y.shape, float("nan"), device="cuda", dtype=dtype)
            rk.backward_launch(dx, y, dy, cfg, y_off == 0 and n % w == 0, max_groups=groups,
                               kernels=kernels)
            res = op.check(dx, y, dy)
            assert res.ok, f"{op_name} {dtype} n={n} +{y_off}/+{dy_off} {cfg.label()} " \
                           f"groups={groups}: {res.message}"


@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")
@pytest.mark.parametrize("dtype,n", [(torch.float32, 196608), (torch.float32, 307201),
                                     (torch.float32, 1 << 20), (torch.bfloat16, 196608),
                                     (torch.bfloat16, 327688),
                                     (torch.bfloat16, 1 << 20), (torch.float16, 327680),
                                     (torch.float16, 1000003)], ids=str)
@OPS
def test_chunk_backward_through_the_op(op_name, dtype, n):
    """Rows past every persistent shape through the registered op: the config's chunk shape,
    more chunks than resident CTAs, every CTA looping; edge rows: -inf in y (softmax: y = 0 /
    log: y = -inf) and a NaN row that stays NaN without touching its neighbours."""
    variant, kernels, make_y = BACKWARDS[op_name]
    cfg = bc.backward_config(n, dtype, n * dtype.itemsize % 16 == 0, phase=True)
    assert cfg.kind == "chunks", cfg
    m = 7
    gen = torch.Generator(device="cuda").manual_seed(n % 1000)
    x = torch.randn(m, n, device="cuda", generator=gen)
    x[1, ::5] = float("-inf")
    x[3] = float("nan")
    y = make_y(x).to(dtype)
    dy = torch.randn(m, n, device="cuda", generator=gen).to(dtype)
    dx = kernel_lab.run(variant, y, dy)
    assert torch.isnan(dx[3]).all() and not torch.isnan(dx[[0, 1, 2, 4, 5, 6]]).any()
    keep = torch.ones(m, dtype=torch.bool)
    keep[3] = False
    res = kernel_lab.get_op(op_name).check(dx[keep], y[keep], dy[keep])
    assert res.ok, f"{variant} {dtype} n={n} {cfg.label()}: {res.message}"


@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")
@OPS
def test_chunk_backward_too_few_ctas(op_name):
    """A row of more chunks than the grid's CTAs + 1 would wait on itself: a caller's own shape
    is refused; the registered op's launch (phase known) streams it instead, still exact."""
    _, kernels, make_y = BACKWARDS[op_name]
    op = kernel_lab.get_op(op_name)
    gen = torch.Generator(device="cuda").manual_seed(3)
    y, dy = _chunk_inputs(make_y, 4, 64 * 4 * 4 * 8, torch.float32, gen)  # 8 chunks
    cfg = bc.BackwardConfig("chunks", 64, 4, 1, 2)
    dx = torch.full_like(y, float("nan"))
    with pytest.raises(ValueError, match="wait on itself"):
        rk.backward_launch(dx, y, dy, cfg, True, max_groups=6, kernels=kernels)
    rk.backward_launch(dx, y, dy, cfg, True, max_groups=6, phase=True, kernels=kernels)
    res = op.check(dx, y, dy)
    assert res.ok, res.message
    rk.backward_launch(dx, y, dy, cfg, True, max_groups=7, kernels=kernels)  # 8 <= 7 + 1
    assert op.check(dx, y, dy).ok
    buf = torch.empty(y.numel() + 1, device="cuda")
    with pytest.raises(ValueError, match="phase"):
        rk.backward_launch(dx, buf[1:].view(y.shape), dy, cfg, False, kernels=kernels)


def test_backward_row_chunks_cover_every_row():
    """CPU: the chunk count the launcher passes covers each row's windows from its own head (line
    heads when y and dy share their line phase, 16-byte heads otherwise), for rows on lines, off
    lines and starting mid-slot: chunks * span >= the most windows any row spans."""
    cfg = bc.BackwardConfig("chunks", 64, 4, 1, 2)
    span = 64 * 4
    for dtype in (torch.float32, torch.bfloat16):
        w, es = vec_width(dtype), dtype.itemsize
        for n in (span * w * 3, span * w * 3 + 1, span * w * 3 - w + 1):
            for off in (0, 1, w, 3 * w):  # elements into the buffer
                buf = torch.empty(5 * n + 128, dtype=dtype)
                lead = (-buf.data_ptr() % 128) // es  # first element on a 128-byte line
                y = buf[lead + off:lead + off + 5 * n].view(5, n)
                for line in (True, False):
                    chunks = rk.backward_row_chunks(cfg, n, y, line)
                    unit = 128 if line else 16
                    most = max((r.data_ptr() % unit // es + n + w - 1) // w for r in y)
                    assert most <= chunks * span, (dtype, n, off, line, chunks)
                    assert (chunks - 1) * span < most + (128 // es if line else w), \
                        (dtype, n, off, line, chunks)  # no more than one chunk to spare
