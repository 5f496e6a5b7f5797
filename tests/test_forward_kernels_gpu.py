"""Every block / block_slots / persist_slots / persistent / pipelined / wide / chunk
instantiation of fast_softmax and log_softmax on a GPU, against the float64 references.

Each persistent instantiation runs forced (``fast_launch(..., max_groups=...)``) so every CTA /
cluster loops over several rows - the prefetch pipeline and the parity-buffered message
exchange - on odd and aligned rows with -inf / NaN rows, for softmax and log_softmax. The
generic suite (test_correctness.py) only ever gives a persistent group one or two rows. The
configs' rules are checked on a CPU in test_forward_configs_cpu.py.
"""

from __future__ import annotations

import pytest
import torch
from conftest import HAS_CUDA, stagger_only

from kernel_lab.core.reference import check
from kernel_lab.cuda import occupancy as pc
from kernel_lab.cuda.rowkernels import forward_config as fc
from kernel_lab.cuda.rowkernels import launch as rk
from kernel_lab.cuda.sources import ALL_DTYPES, cdiv, vec_width
from kernel_lab.ops.log_softmax import cuda_variants as lcv
from kernel_lab.ops.log_softmax import op as log_op
from kernel_lab.ops.softmax import cuda_variants as cv


def _persist_cases():
    """(dtype, vpt, cluster, threads, late, stages) for every persistent instantiation and
    schedule: a small CTA (many rows, quick) with one and two rows in flight and, for clusters
    1, 15 and 16, the largest CTA (> 48 KB of shared memory) and the largest whose two stages
    fit."""
    for dt in fc.PERSIST_DTYPES:
        for vpt in fc.PERSIST_VPT[dt.itemsize]:
            big = fc.persist_max_threads(vpt, dt)
            big2 = min(big, fc.MAX_CTA_SHARED // (2 * vpt * 16) // 32 * 32)
            for cl in fc.PERSIST_CL:
                for late in (False, True) if cl > 1 else (False,):
                    tag = "-late" if late else ""
                    large = [(big, 1), (big2, 2)] if cl in (1, 15, 16) else []
                    shapes = [(64, 1), (64, 2)] + large
                    for threads, stages in shapes:
                        yield pytest.param(dt, vpt, cl, threads, late, stages,
                                           id=f"{dt}-v{vpt}-cl{cl}-t{threads}{tag}-s{stages}")


# The two ops of the row-softmax family: (kernels, float64 reference, tolerances or None).
BOTH_OPS = (
    (cv.FAST_KERNELS, lambda a: torch.softmax(a.double(), -1), None),
    (lcv.FORWARD_KERNELS, lambda a: torch.log_softmax(a.double(), -1), log_op.TOLERANCES),
)


def _edge_rows(x: torch.Tensor) -> torch.Tensor:
    x[0] = float("-inf")  # all -inf: NaN
    x[1, ::3] = float("-inf")  # -inf entries: 0 / -inf
    x[2, x.shape[1] // 2] = float("nan")  # NaN reaches its row
    x[3, : x.shape[1] // 2] = float("-inf")  # a long -inf prefix
    x[4] += 1e4 if x.dtype == torch.float32 else 3e3  # skipping the max would overflow
    return x


def _loops_over_rows_exactly(cfg: fc.FastConfig, dtype: torch.dtype) -> None:
    """softmax and log_softmax through ``cfg`` on rows that fill it, rows that start anywhere in
    a 128-byte line (up to 7 windows before the row) and shorter ones, with -inf / NaN / +1e4
    rows; 23 rows over 3 groups (each loops ~8 times) and over as many groups as are resident."""
    w = vec_width(dtype)
    cap = cfg.threads * cfg.vpt * cfg.cluster * w  # elements the shape holds
    gen = torch.Generator(device="cuda").manual_seed(1234 + cfg.vpt * 100 + cfg.cluster)
    line = fc.LINE_BYTES // dtype.itemsize  # elements: heads up to a 128-byte line
    for n in (cap, cap - line - 3, cap - cap // 3 - 5):  # aligned, odd rows (every line head)
        m = 23
        x = torch.randn(m, n, device="cuda", dtype=torch.float32, generator=gen).to(dtype)
        x = _edge_rows(x)
        for kernels, ref_fn, tol in BOTH_OPS:
            ref = ref_fn(x)
            for groups in (3, None):  # 3 groups: each loops over ~8 rows
                out = torch.full_like(x, float("nan"))
                rk.fast_launch(out, x, cfg, kernels=kernels, max_groups=groups)
                res = check(out, ref, dtype, tol)
                assert res.ok, f"{kernels.prefix} {cfg} n={n} groups={groups}: {res.message}"


@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")
@pytest.mark.parametrize("dtype,vpt,cl,threads,late,stages", list(_persist_cases()))
def test_persistent_kernels_loop_over_rows(dtype, vpt, cl, threads, late, stages):
    cfg = fc.FastConfig("persist", threads=threads, vpt=vpt, cluster=cl, late=late,
                        stages=stages)
    _loops_over_rows_exactly(cfg, dtype)


def _block_cases():
    """(dtype, vpt, threads) for every one-CTA-per-row instantiation (``block``) at its largest
    CTA and at a small one."""
    for dt in ALL_DTYPES:
        for vpt in fc.FAST_BLOCK_VPT:
            for threads in (96, fc.block_max_threads(vpt)):
                yield pytest.param(dt, vpt, threads, id=f"{dt}-v{vpt}-t{threads}")


@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")
@pytest.mark.parametrize("dtype,vpt,threads", list(_block_cases()))
def test_block_kernels_hold_rows_that_fill_them(dtype, vpt, threads):
    """softmax and log_softmax through one CTA a row (``block``), on a row that fills it, odd
    rows and a short one, with -inf / NaN / +1e4 rows (2-byte x 8 keeps its exps rounded to the
    dtype: kBlockKept)."""
    cfg = fc.FastConfig("block", threads=threads, vpt=vpt)
    w = vec_width(dtype)
    cap = threads * vpt * w
    gen = torch.Generator(device="cuda").manual_seed(4321 + vpt * 10 + threads)
    for n in (cap, cap - w - 3, cap - cap // 3 - 5):  # odd rows start anywhere in a window
        x = torch.randn(9, n, device="cuda", dtype=torch.float32, generator=gen).to(dtype)
        x = _edge_rows(x)
        for kernels, ref_fn, tol in BOTH_OPS:
            out = torch.full_like(x, float("nan"))
            rk.fast_launch(out, x, cfg, kernels=kernels)
            res = check(out, ref_fn(x), dtype, tol)
            assert res.ok, f"{kernels.prefix} {cfg.label()} n={n}: {res.message}"


def _slots_rows_match(cfg: fc.FastConfig, dtype: torch.dtype, seed: int, m: int,
                      groups: tuple) -> None:
    """softmax and log_softmax through a slots kernel (block_slots / persist_slots) on ``m`` rows
    of each length - one that fills registers and slots, odd rows at every line head, one the
    registers alone hold (slots past the row), rows of a wider tensor (stride > N, every row on
    another head) - with -inf / NaN / +1e4 rows, outputs poisoned with NaN, on each of ``groups``
    (fast_launch's max_groups) against the float64 references."""
    w = vec_width(dtype)
    cl, threads = cfg.cluster, cfg.threads
    cap, regs = cfg.capacity() * w, cl * threads * cfg.vpt * w
    line = fc.LINE_BYTES // dtype.itemsize
    gen = torch.Generator(device="cuda").manual_seed(seed + threads + cfg.slots + cl)
    for n in (cap, cap - line - 3, cap - line + 1, cap - cl * threads * w - 1, regs - 5,
              regs + w + 1):
        for wide in (0, 3 * w) if n <= cap - line + 1 else (0,):  # same 16-byte phase
            base = torch.randn(m, n + wide, device="cuda", generator=gen).to(dtype)
            x = _edge_rows(base[:, wide:] if wide else base)
            for kernels, ref_fn, tol in BOTH_OPS:
                ref = ref_fn(x)
                for g in groups:
                    out = torch.full((m, n), float("nan"), device="cuda", dtype=dtype)
                    rk.fast_launch(out, x, cfg, kernels=kernels, max_groups=g)
                    res = check(out, ref, dtype, tol)
                    assert res.ok, (f"{kernels.prefix} {cfg.label()} n={n} wide={wide} "
                                    f"groups={g}: {res.message}")


# (threads, slots, cluster) of the slots kernels' GPU tests: a small CTA with one and with many
# slots, the 512-thread CTA two of which share an SM, 48 KB of slots exactly (1024 x 8 + 3, and
# the cluster's 2 x 512 x 8 + 6 of the 2-byte 110000 rule: the shared-memory opt-in), the
# 1024-thread CTA with 8 and with 13 slots (> 200 KB), each cluster size with few and many slots
# (the 2-byte cluster rule: 2 x 512 x 8 + 6-12).
SLOTS_SHAPES = ((96, 1, 1), (96, 9, 1), (256, 6, 1), (512, 5, 1), (1024, 3, 1), (1024, 8, 1),
                (1024, 13, 1), (96, 3, 2), (512, 6, 2), (512, 8, 2), (512, 12, 2), (1024, 3, 2),
                (1024, 8, 2), (64, 5, 4), (512, 6, 4), (512, 8, 4))
# (1024, 3, 2) / (1024, 8, 2): the fp32 rule's 2 x 1024 x 8 + 1-8; (512, 6-8, 4): the 2-byte
# rule's 4 x 512 x 8 + 6-8


def _slots_cases():
    """(dtype, threads, slots, cluster) for block_slots and persist_slots, on one CTA and on
    clusters: SLOTS_SHAPES in every dtype they are built for."""
    for dt in fc.PERSIST_DTYPES:
        for threads, slots, cl in SLOTS_SHAPES:
            yield pytest.param(dt, threads, slots, cl, id=f"{dt}-t{threads}-s{slots}-cl{cl}")


@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")
@pytest.mark.parametrize("dtype,threads,slots,cl", list(_slots_cases()))
def test_block_slots_kernels_hold_rows_that_fill_them(dtype, threads, slots, cl):
    """softmax and log_softmax through one CTA (or a cluster of ``cl``) a row with part of the
    row in shared memory (``block_slots``): a row that fills registers and slots, odd rows at
    every line head, a row the registers alone hold (slots past the row), rows of a wider tensor
    (stride > N), with -inf / NaN / +1e4 rows; outputs poisoned with NaN first."""
    cfg = fc.FastConfig("block_slots", threads=threads, vpt=fc.BLOCK_SLOTS_VPT, slots=slots,
                        cluster=cl)
    _slots_rows_match(cfg, dtype, seed=2468, m=7, groups=(None,))


def _stagger_cases():
    """(dtype, config): block_slots at its rules' shapes (one CTA, a cluster), block, cluster."""
    for dt in (torch.float32, torch.bfloat16):
        cluster_vpt = 16 if dt == torch.float32 else 4  # the cluster kernel's instantiations
        for cfg in (fc.FastConfig("block_slots", threads=1024, vpt=8, slots=5),
                    fc.FastConfig("block_slots", threads=512, vpt=8, slots=8, cluster=2),
                    fc.FastConfig("block", threads=1024, vpt=8),
                    fc.FastConfig("cluster", threads=256, vpt=cluster_vpt, cluster=4)):
            yield pytest.param(dt, cfg, id=f"{dt}-{cfg.label()}")


@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")
@pytest.mark.parametrize("dtype,cfg", list(_stagger_cases()))
def test_first_wave_phases_change_no_result(monkeypatch, dtype, cfg):
    """block, cluster and block_slots with more rows than are resident at once: the first wave
    starts in phases, the later rows at once. softmax and log_softmax match the float64
    references and are the same bits as every row launched at once (the kind not staggered);
    outputs poisoned with NaN first."""
    n = cfg.capacity() * vec_width(dtype) - fc.LINE_BYTES // dtype.itemsize - 3  # any line head
    gen = torch.Generator(device="cuda").manual_seed(1357 + cfg.threads)
    for kernels, ref_fn, tol in BOTH_OPS:
        expr = cfg.expr(cv.ctype(dtype), kernels.prefix)
        m = pc.resident_groups(kernels.src, expr, cfg.threads, cfg.cluster, cfg.shared_mem(),
                               0) + 29
        xs = torch.randn(m, n, device="cuda", generator=gen).to(dtype)
        outs = []
        for kinds in ({cfg.kind}, set()):
            stagger_only(monkeypatch, kinds)
            out = torch.full_like(xs, float("nan"))
            rk.fast_launch(out, xs, cfg, kernels=kernels)
            outs.append(out)
        res = check(outs[0], ref_fn(xs), dtype, tol)
        assert res.ok, f"{kernels.prefix} {cfg.label()} m={m}: {res.message}"
        assert torch.equal(outs[0], outs[1]), f"{kernels.prefix} {cfg.label()}: phases changed bits"


@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")
@pytest.mark.parametrize("dtype,threads,slots,cl", list(_slots_cases()))
def test_persist_slots_kernels_roll_rows_through_them(dtype, threads, slots, cl):
    """softmax and log_softmax through persist_slots, whose resident CTAs (clusters of ``cl``)
    refill each window with the next row's as soon as it is stored: 23 rows over 3 groups (each
    rolls ~8 rows; a cluster through the parity-buffered messages) and over as many as are resident;
    a row that fills registers and slots, odd rows (consecutive rows
    on different line heads, so a row may span one window more than the one before it), a row
    the registers alone hold, rows of a wider tensor; -inf / NaN / +1e4 rows; outputs poisoned
    with NaN first."""
    cfg = fc.FastConfig("persist_slots", threads=threads, vpt=fc.BLOCK_SLOTS_VPT, slots=slots,
                        cluster=cl)
    _slots_rows_match(cfg, dtype, seed=8642, m=23, groups=(3, None))


def _pipe_cases():
    """(dtype, vpt, cluster, threads, stages) for every pipelined instantiation, one and two
    rows of slots: a small CTA, and the largest whose slots fit shared memory."""
    for dt in fc.PERSIST_DTYPES:
        for vpt in fc.pipe_vpts(dt):
            for stages in (1, 2):
                big = min(fc.persist_max_threads(vpt, dt),
                          fc.MAX_CTA_SHARED // (stages * vpt * 16) // 32 * 32)
                for cl in fc.PIPE_CL:
                    for threads in (64, big):
                        yield pytest.param(dt, vpt, cl, threads, stages,
                                           id=f"{dt}-v{vpt}-cl{cl}-t{threads}-s{stages}")


@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")
@pytest.mark.parametrize("dtype,vpt,cl,threads,stages", list(_pipe_cases()))
def test_pipelined_kernels_loop_over_rows(dtype, vpt, cl, threads, stages):
    cfg = fc.FastConfig("pipe", threads=threads, vpt=vpt, cluster=cl, stages=stages)
    _loops_over_rows_exactly(cfg, dtype)


@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")
@pytest.mark.parametrize("dtype", fc.PERSIST_DTYPES, ids=str)
def test_small_cta_does_not_shrink_a_large_ctas_shared_memory(dtype):
    """One persistent instantiation launched large, then small, then large again: the dynamic
    shared-memory limit is one attribute of the function, and the small launch must not lower
    it under the large one (that failed with CUDA_ERROR_INVALID_VALUE on the H200)."""
    vpt = fc.PERSIST_VPT[dtype.itemsize][0]
    big = fc.persist_max_threads(vpt, dtype)
    for threads in (big, 64, big):
        cfg = fc.FastConfig("persist", threads=threads, vpt=vpt, cluster=1)
        line = fc.LINE_BYTES // dtype.itemsize  # odd rows start mid-line: 7 windows of slack
        x = torch.randn(5, cfg.capacity() * vec_width(dtype) - line - 3, device="cuda").to(dtype)
        out = torch.full_like(x, float("nan"))
        rk.fast_launch(out, x, cfg, kernels=cv.FAST_KERNELS)
        res = check(out, torch.softmax(x.double(), -1), dtype)
        assert res.ok, f"{cfg} n={x.shape[1]}: {res.message}"


def _wide_cases():
    """(dtype, cluster, threads, keep): every wide instantiation with nothing, part or all of
    each thread's windows kept in shared memory."""
    for dt in ALL_DTYPES:
        for cl in fc.WIDE_CL:
            for keep in (0, 2, 64):
                yield pytest.param(dt, cl, 64, keep, id=f"{dt}-cl{cl}-t64-keep{keep}")


@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")
@pytest.mark.parametrize("dtype,cl,threads,keep", list(_wide_cases()))
def test_wide_kernel_any_row(dtype, cl, threads, keep):
    """The wide kernel on rows of 1 to ~5 windows per thread, odd lengths (each row its own
    16-byte head, so consecutive rows of one cluster differ in windows per thread) and a
    misaligned input (vector phase 0), -inf / NaN rows, softmax and log_softmax, output
    poisoned; once with a cluster per row and once with 2 clusters looping over the 7 rows
    (the next row's kept windows requested during this row's stores)."""
    gen = torch.Generator(device="cuda").manual_seed(cl * 10 + keep)
    w = vec_width(dtype)
    for n in (cl * threads * w * 5 - 3, cl * threads * w, cl * threads * w // 2 + 1, 2 * w + 1):
        buf = torch.randn(7, n + 1, device="cuda", generator=gen).to(dtype)
        for x in (buf[:, :n].contiguous(), buf[:, 1:]):  # aligned rows; rows off by one element
            x = _edge_rows(x.clone() if x.is_contiguous() else x)
            per = fc.wide_per_thread(fc.vector_windows(n, dtype, False), cl, threads)
            cfg = fc.FastConfig("wide", threads=threads, vpt=min(keep, per), cluster=cl)
            for kernels, ref_fn, tol in BOTH_OPS:
                for groups in (None, 2):
                    out = torch.full(x.shape, float("nan"), device="cuda", dtype=dtype)
                    rk.fast_launch(out, x, cfg, kernels=kernels, max_groups=groups)
                    res = check(out, ref_fn(x), dtype, tol)
                    assert res.ok, (f"{kernels.prefix} {cfg.label()} n={n} {x.stride()} "
                                    f"groups={groups}: {res.message}")


def _chunk_cases():
    """(kind, dtype, vpt, threads, lag, ahead): every chunks instantiation, small CTAs (many
    chunks per row, many steps per CTA) with the least and more lag, no chunk in flight and
    several, and the largest CTA; every chunks_reg instantiation (lag 1, the waiting chunk in
    registers) with one to three chunks in flight, and a CTA sized down to fit its row (448)."""
    for dt in fc.PERSIST_DTYPES:
        for vpt in fc.CHUNK_VPT:
            for threads, lag, ahead in ((64, 1, 1), (64, 2, 0), (96, 1, 3), (1024, 1, 1)):
                yield pytest.param("chunks", dt, vpt, threads, lag, ahead,
                                   id=f"{dt}-v{vpt}-t{threads}-lag{lag}-ahead{ahead}")
        for vpt in fc.CHUNK_REG_VPT:
            for threads, ahead in ((64, 1), (96, 3), (448, 1), (512, 2)):
                yield pytest.param("chunks_reg", dt, vpt, threads, 1, ahead,
                                   id=f"reg-{dt}-v{vpt}-t{threads}-ahead{ahead}")


@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")
@pytest.mark.parametrize("kind,dtype,vpt,threads,lag,ahead", list(_chunk_cases()))
def test_chunk_kernel_any_row(kind, dtype, vpt, threads, lag, ahead):
    """Rows cut into chunks of one CTA each, (max, sum) through global memory: rows of whole
    chunks, odd rows (every 128-byte line head, so chunk counts differ by row), a row shorter than
    one chunk and non-contiguous rows, with -inf / NaN / +1e4 rows, softmax and log_softmax,
    output poisoned; over the fewest CTAs that may hold the rows (each loops over many chunks of
    several rows) and over every resident CTA."""
    cfg = fc.FastConfig(kind, threads=threads, vpt=vpt, lag=lag, ahead=ahead)
    w = vec_width(dtype)
    cap = threads * vpt * w  # elements per chunk
    gen = torch.Generator(device="cuda").manual_seed(threads + 10 * vpt + 100 * lag + ahead)
    for n in (3 * cap, 3 * cap - 67, cap // 2 + 1, 5 * cap + 7):
        # rows apart by a 128-byte line plus 16 bytes: the output's 16-byte phase, other heads
        buf = torch.randn(23, n + (128 + 16) // dtype.itemsize, device="cuda",
                          generator=gen).to(dtype)
        for x in (buf[:, :n].contiguous(), buf[:, :n]):  # dense rows; rows apart
            x = _edge_rows(x.clone() if x.is_contiguous() else x)
            chunks = fc.row_chunks(cfg, n, dtype, line=False)
            least = max(1, cdiv(chunks - 1, lag))
            for kernels, ref_fn, tol in BOTH_OPS:
                ref = ref_fn(x)
                for groups in (least, None):
                    out = torch.full(x.shape, float("nan"), device="cuda", dtype=dtype)
                    rk.fast_launch(out, x, cfg, kernels=kernels, max_groups=groups)
                    res = check(out, ref, dtype, tol)
                    assert res.ok, (f"{kernels.prefix} {cfg.label()} n={n} {x.stride()} "
                                    f"groups={groups}: {res.message}")


@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")
@pytest.mark.parametrize("cl", [8, 16])
def test_resident_clusters_run_at_once_and_one_more_waits(cl):
    """cluster_probe: a grid of the clusters the occupancy API calls resident (one CTA per SM)
    - every CTA on its own SM, each cluster's ranks 0..CL-1; one cluster more must start late
    (the probe can see it). Whether all the resident ones start together is a measurement
    (``Placement.summary()``), not asserted here."""
    p = pc.cluster_placement(cl, spin_us=50)
    assert p.clusters() == p.resident and p.sms() == len(p.records)
    for c in range(p.clusters()):
        assert sorted(r[2] for r in p.records if r[1] == c) == list(range(cl))
    extra = pc.cluster_placement(cl, clusters=p.resident + 1, spin_us=50)
    assert extra.late_clusters() >= 1, f"one cluster over the API's count ran at once: " \
        f"the API undercounts ({extra.summary()})"


def _ulps_off(out: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    """|out - ref| in units in the last place of out's dtype at ref (fp16 below 2^-14: the
    subnormal step 2^-24), element by element; NaN where out and ref disagree on NaN."""
    bits = {torch.float16: 10, torch.bfloat16: 7}[out.dtype]
    _, exp = torch.frexp(ref)  # ref = m * 2^exp, 0.5 <= |m| < 1
    ulp = torch.ldexp(torch.ones_like(ref), exp - 1 - bits)
    if out.dtype == torch.float16:
        ulp = ulp.clamp_min(2.0 ** -24)
    return (out.double() - ref).abs() / ulp


@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("cfg", [fc.FastConfig("chunks_reg", threads=512, vpt=8, ahead=1),
                                 fc.FastConfig("block", threads=1024, vpt=8),
                                 fc.FastConfig("persist", threads=64, vpt=16, cluster=1),
                                 fc.FastConfig("persist", threads=64, vpt=16, cluster=16)],
                         ids=lambda c: c.label())
def test_exps_kept_in_the_2byte_type_cost_at_most_one_more_ulp(dtype, cfg):
    """Softmax configs that keep e = exp(x - m_thread) rounded to fp16 / bf16 (too many
    elements a thread for fp32 exps) round twice: every output within 1.5 ulp of the float64
    softmax (the nearest value of the dtype or the next one; one rounding: 0.5), tiny
    probabilities included - rows spread over 60 (bf16: probabilities down to 1e-29, which bf16
    holds and fp16 flushes), a peaked row and an ordinary one."""
    w = vec_width(dtype)
    line = fc.LINE_BYTES // dtype.itemsize  # odd rows: budget a head of up to a line
    n = cfg.threads * cfg.vpt * w * cfg.cluster * (3 if cfg.kind == "chunks_reg" else 1) - line - 3
    gen = torch.Generator(device="cuda").manual_seed(77)
    rows = [torch.randn(n, device="cuda", generator=gen) * 3,
            torch.rand(n, device="cuda", generator=gen) * -60,
            torch.randn(n, device="cuda", generator=gen)]
    rows[2][n // 3] = 30.0  # one element takes almost all the mass
    x = torch.stack(rows).to(dtype)
    ref = torch.softmax(x.double(), -1)
    out = torch.full_like(x, float("nan"))
    rk.fast_launch(out, x, cfg, kernels=cv.FAST_KERNELS)
    off = _ulps_off(out, ref)
    worst = off.max().item()
    assert worst <= 1.5, f"{cfg.label()}: {worst:.2f} ulp at {off.argmax().item()}"
    if dtype == torch.bfloat16:  # the spread row's probabilities reach e^-60 / S and are kept
        assert (out[1] > 0).all() and ref[1].min() < 1e-25
