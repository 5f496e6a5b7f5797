"""fast_softmax / log_softmax launch configs (CPU); every block / block_slots / persistent / wide /
chunk shape (GPU).

CPU: ``fast_softmax_config`` always returns a shape that holds the row, names an instantiation
both sources declare, and respects the kernels' limits. GPU: each persistent instantiation runs
forced (``fast_launch(..., max_groups=...)``) so every CTA / cluster loops over several rows -
the prefetch pipeline and the parity-buffered message exchange - on odd and aligned rows with
-inf / NaN rows, for softmax and log_softmax. The generic suite (test_correctness.py) only ever
gives a persistent group one or two rows.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import HAS_CUDA

from kernel_lab import occupancy as pc
from kernel_lab.cuda_common import ALL_DTYPES, vec_width
from kernel_lab.ops.log_softmax import cuda_variants as lcv
from kernel_lab.ops.log_softmax import op as log_op
from kernel_lab.ops.softmax import cuda_variants as cv
from kernel_lab.reference import check
from kernel_lab.rowkernels import backward_config as bc
from kernel_lab.rowkernels import forward_config as fc
from kernel_lab.rowkernels import launch as rk

NS = sorted({1, 3, 7, 31, 127, 128, 129, 512, 781, 1023, 1024, 1823, 2048, 4096, 4097, 8192,
             16384, 16385, 24001, 32000, 32768, 50257, 65536, 90000, 128256, 131072, 151936, 262144,
             262145, 524288, 1048576, 1048577, 2097152})


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
@pytest.mark.parametrize("aligned,vec", [(True, True), (False, True), (False, False)])
def test_config_holds_the_row(dtype, aligned, vec):
    fast = set(cv.FAST.name_expressions)
    log = set(lcv.FORWARD.name_expressions)
    t = cv.ctype(dtype)
    for n, line in [(n, line) for n in NS for line in (None, False)]:
        c = fc.fast_softmax_config(n, dtype, aligned, vec, line)
        assert c.kind not in ("persist", "chunks") or (vec and dtype in fc.PERSIST_DTYPES), (n, c)
        if c.kind == "chunks":
            assert c.shared_mem() <= fc.MAX_CTA_SHARED and c.threads * c.vpt > 0, (n, c)
        assert c.capacity() >= fc.vector_windows(n, dtype, aligned), (n, c)
        if c.kind in ("persist", "pipe"):  # heads up to 127 bytes unless rows are on lines
            assert c.capacity() >= fc.line_windows(n, dtype, aligned, line), (n, line, c)
        if c.kind == "wide":
            assert c.shared_mem() <= fc.WIDE_KEEP_BYTES and c.cluster in fc.WIDE_CL, (n, c)
        assert c.threads % 32 == 0 and 32 <= c.threads <= 1024, (n, c)
        if c.kind == "persist":
            assert c.threads <= fc.persist_max_threads(c.vpt, dtype), (n, c)
            assert c.shared_mem() <= fc.MAX_CTA_SHARED, (n, c)
        assert c.expr(t) in fast, (n, c.expr(t))
        assert c.expr(t, "log_softmax") in log, (n, c.expr(t, "log_softmax"))


def test_rows_of_up_to_1kb_take_a_lane_group():
    """WARP_MAX_WINDOWS: fp32 N = 256 (64 windows) runs one warp per row (a 32-thread CTA per
    row ran at 79 % of copy); bf16 N = 1024 (128 windows) a CTA per row."""
    assert fc.fast_softmax_config(256, torch.float32).label() == "warp g32x2"
    assert fc.fast_softmax_config(512, torch.bfloat16).label() == "warp g32x2"
    assert fc.fast_softmax_config(257, torch.float32).kind == "block"
    assert fc.fast_softmax_config(1024, torch.bfloat16).label() == "block 32x4"


def test_long_rows_take_the_retuned_cluster_shapes():
    """PERSIST_SHAPES as retuned in the eleventh run (fp32: 8 or 16 CTAs, no 15-CTA clusters, no
    pipe: 65536 8x128x16 late 94.4 % of copy vs the pipe's 91.7) and the twelfth (2-byte rows on
    lines: small CTAs x 8 vectors, 151936 16x160x8 late s2 86.4 vs 15x320x4 late 80.7; odd rows
    and 131072-524288 keep 4 vectors) and the thirteenth (max on packed pairs: 151936 16x160x8
    one stage, not late, 91.0 vs late s2 88.3; fp16 2^20 x 16 76.2 vs wide 72.2) and the
    sixteenth (2-byte exps kept in T: 151936 8x160x16 late, the same windows, 91.9 vs 90.1;
    131072 8x128x16 late 94.1 vs 4x1024x4 92.1) and the seventeenth (rows past 8 CTAs run in
    chunks, below)."""
    f32, bf16, f16 = torch.float32, torch.bfloat16, torch.float16
    picks = [  # (N, dtype, rows on 16 bytes, the launch)
        (50257, f32, False, "block_slots 1024x8+5"),  # twenty-fifth run: see below
        (53249, f32, True, "block_slots 2x512x8+6"),  # twenty-eighth run: kernel 3b, below
        (65536, f32, True, "block_slots 2x512x8+8"),
        (81920, f32, True, "block_slots 2x512x8+12"),
        (81921, f32, True, "block_slots 2x1024x8+3"),
        (100000, f32, True, "block_slots 2x1024x8+5"),
        (106496, f32, True, "block_slots 2x1024x8+5"),
        (106497, f32, True, "block_slots 2x1024x8+6"),  # twenty-ninth run: kernel 3b, below
        (122880, f32, True, "block_slots 2x1024x8+7"),
        (128256, f32, True, "block_slots 2x1024x8+8"),
        (131072, f32, True, "block_slots 2x1024x8+8"),
        (131073, f32, True, "persist 8x288x16 late"),  # past kernel 3b's rule: kernel 5
        (151936, f32, True, "persist 8x320x16 late"),
        (32000, bf16, True, "block 512x8"),  # twenty-fourth run: block x 8, see below
        (32768, f16, True, "block 512x8"),
        (36864, bf16, True, "block_slots 512x8+1"),  # twenty-fifth run: see below
        (50257, bf16, False, "block_slots 512x8+5"),
        (44000, f16, True, "block_slots 512x8+3"),
        (53248, bf16, True, "block_slots 512x8+5"),
        (55000, bf16, True, "block_slots 512x8+6"),  # 53001: level with 2x832x4
        (56000, bf16, True, "block 896x8"),
        (65536, bf16, True, "block 1024x8"),
        (65537, f16, True, "block_slots 1024x8+1"),
        (106496, bf16, True, "block_slots 1024x8+5"),
        (128256, bf16, True, "block_slots 2x512x8+8"),  # twenty-seventh run: kernel 3b
        (131072, bf16, True, "block_slots 2x512x8+8"),
        (131072, f16, True, "block_slots 2x512x8+8"),
        (110000, bf16, True, "block_slots 2x512x8+6"),
        (151936, bf16, True, "block_slots 2x512x8+11"),
        (151936, f16, True, "block_slots 2x512x8+11"),
        (163840, bf16, True, "block_slots 2x512x8+12"),
        (163841, bf16, True, "chunks_reg 448x8 ahead 1"),  # 2-byte 163841-212992: chunks
        (212992, f16, True, "chunks_reg 480x8 ahead 1"),
        (212993, f16, True, "block_slots 4x512x8+6"),  # twenty-ninth run: kernel 3b on 4 CTAs
        (229376, bf16, True, "block_slots 4x512x8+6"),
        (262144, bf16, True, "block_slots 4x512x8+8"),
        (262144, f16, True, "block_slots 4x512x8+8"),
        (262145, bf16, True, "chunks_reg 480x8 ahead 1"),
        (1048576, bf16, True, "chunks_reg 512x8 ahead 1"),  # 2 MB rows: 32 full chunks
        (1048576, f16, True, "chunks_reg 512x8 ahead 1"),
    ]
    for n, dtype, aligned, label in picks:
        assert fc.fast_softmax_config(n, dtype, aligned=aligned).label() == label, (n, dtype)
    # beyond every rule: rows in chunks; fp64 and rows in another 16-byte phase than the output
    # keep the wide kernel. Rows of <= 65 chunks of 512 x 8 vectors (fifteenth run: fp32 2^20
    # 90.2 % of copy vs kernel 7's 87.3, 524288 92.7 vs 90.9; bf16 2^20 80.8 vs x 16 76.1,
    # 2^21 79.7 vs 75.2) keep the waiting chunk in registers, longer ones (fp32 2^21: 74.6 vs
    # 82.4) run kernel 7. Seventeenth run: rows past 8-CTA clusters too (fp32 262144 93.6 vs
    # 16x256x16 late 91.0; bf16 / fp16 524288 93.0 / 91.7 vs 16x1024x4 90.2 / 88.8), and 2-byte
    # rows past 4 x 1024 x 4 but for the x 16 rule (200000: 86.4 / 86.9 vs 8x800x4 84.2 / 85.2
    # and 15x448x4 late 77.5 / 78.3; 151937 90.7 / 91.0 vs 15x320x4 83.6 / 84.6)
    for n, dtype in ((1048577, bf16), (1 << 20, f32), (1 << 20, bf16), (1 << 21, f16),
                     (327681, f32), (524288, f32), ((1 << 20) + 1, f32), ((1 << 21) + 1, bf16),
                     (163841, f32), (262144, f32), (327680, f32), (262145, bf16),
                     (524288, f16), (524288, bf16), (196608, bf16), (200000, f16),
                     (163841, bf16), (170001, f16)):
        assert_fitted_chunks(n, dtype)
    # eighteenth run: the CTA sized down so that the row's chunks come out full (bf16 200000:
    # 7 chunks of 448 x 8, 89.8 % of copy vs 512 x 8's 87.3; 245760: 480 x 8, 92.5 vs 91.3; 2-byte
    # 212993-262144 run kernel 3b on 4 CTAs since the twenty-ninth run)
    for n, dtype, threads in ((200000, bf16, 448), (262145, bf16, 480), (180000, f16, 480),
                              (1 << 20, f32, 512), (524288, bf16, 512), (163841, f32, 480)):
        assert fc.fast_softmax_config(n, dtype).threads == threads, (n, dtype)
    for n, dtype in ((1 << 21, f32), (1200000, f32), (2500000, f16), (1 << 22, bf16)):
        assert fc.fast_softmax_config(n, dtype) == fc.CHUNK_DEFAULT, (n, dtype)
    assert fc.fast_softmax_config(1 << 20, f32, aligned=False, vec=False).kind == "wide"
    assert fc.fast_softmax_config(1 << 20, torch.float64).kind == "wide"
    for n in range(131073, 163841, 7919):  # every fp32 cluster row: 8 CTAs, late
        c = fc.fast_softmax_config(n, f32)
        assert (c.kind, c.cluster, c.late) == ("persist", 8, True), (n, c)


def test_rows_past_one_ctas_registers_keep_a_few_windows_in_shared_memory():
    """BLOCK_SLOTS_RULES (twenty-fifth run, % of copy): fp16 / bf16 rows of 32769-57344 run 512
    x 8 + 1-6 slots (two CTAs an SM: 50257 95.1 / 95.4 vs 2x800x4 late s2 92.2 / 93.4; odd 57001
    94.6 / 94.8 vs 93.0 / 92.8) where block x 8 does not take them, 65537-106496 1024 x 8 + 1-5
    (80000 95.3 / 95.8 vs 4x640x4 82-84); fp32 32769-53248 1024 x 8 + 1-5 (50257 95.7 vs
    8x128x16 late 92.3). Twenty-sixth run: the odd fp16 / bf16 rows of ~20.5k-26.6k that block x 8
    leaves (352-416 threads) run 256 x 8 + 3-6 (24001 96.6 / 95.8 vs 1x768x4 92.4 / 91.8).
    Twenty-seventh run: fp16 / bf16 rows past 1024 x 8 + 5 up to 2 x 512 x 8 + 12 (N ~106.5K-
    163.8K) run kernel 3b, 2 x 512 x 8 + 6-12 (151936 93.8 vs kernel 5's 92.3). Twenty-eighth
    run (kernel 3b's fp32 exps kept): fp32 rows past 1024 x 8 + 13 run kernel 3b, 2 x 512 x 8 +
    5-12 up to N ~81.9K (61001 96.1 vs kernel 5's 93.1), then 2 x 1024 x 8 + 1-5 up to ~106.5K
    (90000 94.9 vs 93.4). Twenty-ninth run (first wave in phases): fp32 up to 2 x 1024 x 8 + 8
    (131072 96.2 vs kernel 5's 95.1), 2-byte ~213K-262144 on 4 x 512 x 8 + 6-8 (262144 bf16 94.7
    vs chunks_reg 94.0). Never more slots than that, never in another 16-byte phase than the
    output, and the rows between stay on block x 8 / persistent / chunks."""
    for dtype in (torch.float16, torch.bfloat16, torch.float32):
        w = vec_width(dtype)
        for n in list(range(16385, 270000, 997)) + list(range(20400, 26700, 7)):
            for aligned, vec in ((True, True), (False, True), (False, False)):
                c = fc.fast_softmax_config(n, dtype, aligned, vec)
                if c.kind != "block_slots":
                    continue
                two_byte_256 = dtype.itemsize == 2 and n <= 32768
                two_byte_512 = dtype.itemsize == 2 and 32768 < n <= 57344
                assert vec and c.vpt == fc.BLOCK_SLOTS_VPT, (n, c)
                nwl = fc.line_windows(n, dtype, aligned)
                if c.cluster == 4:  # kernel 3b on 4 CTAs: 2-byte rows past 4 x 512 x 8 + 5
                    assert w == 8 and c.threads == 512, (n, c)
                    assert 212992 - 64 < n <= 262144 and 6 <= c.slots <= 8, (n, c)
                    assert c.capacity() >= nwl > c.capacity() - 4 * c.threads, (n, c)
                    continue
                if c.cluster > 1 and w == 8:  # kernel 3b: 2-byte rows past 1024 x 8 + 5
                    assert (c.cluster, c.threads) == (2, 512), (n, c)
                    assert 106496 < n <= 163840 and 6 <= c.slots <= 12, (n, c)
                    assert c.capacity() >= nwl > c.capacity() - 2 * c.threads, (n, c)
                    continue
                if c.cluster > 1:  # kernel 3b: fp32 rows past 1024 x 8 + 13
                    assert c.cluster == 2 and 53248 - 32 < n <= 131072, (n, c)
                    if c.threads == 512:
                        assert 5 <= c.slots <= 12 and n <= 81920, (n, c)
                    else:
                        assert c.threads == 1024 and 1 <= c.slots <= 8 and n > 81920 - 32, (n, c)
                    assert c.capacity() >= nwl > c.capacity() - 2 * c.threads, (n, c)
                    continue
                assert 1 <= c.slots <= (6 if two_byte_256 or two_byte_512 else 5), (n, c)
                assert c.threads == (256 if two_byte_256 else 512 if two_byte_512 else 1024), \
                    (n, c)
                assert c.capacity() >= nwl > c.capacity() - c.threads, (n, c)
                if two_byte_256:  # only the odd rows block x 8 leaves at 352-416 threads
                    assert not aligned and 20472 < n < 26624, (n, c)
                    assert 352 <= fc.round32(-(-fc.vector_windows(n, dtype, aligned) // 8)) <= 416
                    assert c.slots >= 3, (n, c)
                else:
                    assert 32768 < n <= (106496 if w == 8 else 53248), (n, dtype)
        for n in (50257, 80000, 24001):
            assert fc.fast_softmax_config(n, dtype, False, False).kind != "block_slots"
    assert fc.fast_softmax_config(57001, torch.bfloat16, False).label() == "block_slots 512x8+6"
    assert fc.fast_softmax_config(24001, torch.float16, False).label() == "block_slots 256x8+4"
    assert fc.fast_softmax_config(24000, torch.float16, True).label() == "block 384x8"
    assert fc.fast_softmax_config(56000, torch.float16).label() == "block 896x8"


def assert_fitted_chunks(n: int, dtype: torch.dtype) -> None:
    """Row n takes kernel 7b: CHUNK_REG_DEFAULT's vectors and chunks in flight, as many chunks
    as CHUNK_REG_DEFAULT cuts the row into, and the fewest threads (a multiple of 32) that
    keep that count."""
    c, d = fc.fast_softmax_config(n, dtype), fc.CHUNK_REG_DEFAULT
    line = n * dtype.itemsize % 128 == 0
    assert (c.kind, c.vpt, c.ahead, c.threads % 32) == ("chunks_reg", d.vpt, d.ahead, 0), (n, c)
    chunks = fc.row_chunks(d, n, dtype, line)
    assert fc.row_chunks(c, n, dtype, line) == chunks, (n, c)
    smaller = fc.FastConfig("chunks_reg", threads=c.threads - 32, vpt=d.vpt, ahead=d.ahead)
    assert c.threads == d.threads or fc.row_chunks(smaller, n, dtype, line) > chunks, (n, c)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("aligned,vec", [(True, True), (False, True), (False, False)])
def test_2byte_rows_of_16k_to_64k_take_one_cta_of_8_vectors(dtype, aligned, vec):
    """block x 8 (twenty-fourth run: 94-99 % of copy) from 2049 windows where its CTA size is
    one that beat the persistent shapes (rows on 16 bytes: <= 512 threads, 896-1024; odd rows:
    <= 320, 448-512, 960-1024); the others run kernel 2b (twenty-fifth / twenty-sixth runs) or
    stay persistent (or, off phase, a cluster)."""
    sizes = {True: [*range(32, 513, 32), *range(896, 1025, 32)],
             False: [*range(32, 321, 32), 448, 480, 512, 960, 992, 1024]}[aligned]
    for n in range(16385, 65537 + 4096, 331):
        nw = fc.vector_windows(n, dtype, aligned)
        threads = fc.round32(-(-nw // 8))
        c = fc.fast_softmax_config(n, dtype, aligned, vec)
        x8 = threads in sizes
        assert (c.kind == "block" and c.vpt == 8) == x8, (n, nw, c)
        if x8:
            assert c.threads == threads and c.capacity() >= nw, (n, c)
    assert fc.fast_softmax_config(16384, dtype).label() == "block 512x4"  # 99 % of copy
    assert fc.fast_softmax_config(16385, dtype).label() == "block 288x8"
    # odd: block 384x8 90 vs 92 % (persist 1x768x4), then 256 x 8 + 4 96 % (twenty-sixth run)
    assert fc.fast_softmax_config(24001, dtype, False).label() == "block_slots 256x8+4"
    assert fc.fast_softmax_config(24001, dtype, False, False).label() == "block 768x4"  # off phase
    assert fc.fast_softmax_config(24576, dtype).label() == "block 384x8"  # 96-97 vs 89-90


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_odd_rows_skip_the_rules_for_rows_on_lines(dtype):
    """8 vectors per thread lost on rows off 128-byte lines (bf16 50257: 72-76 % of copy vs
    2x800x4's 84, at 77 % fill and before the warp-uniform checks: the two causes are not
    separated yet), 16 were never timed there: a row that does not start on a line never takes
    a ``lines_only`` rule (16 vectors; the 8-vector one went in the twenty-fifth run, its rows
    on one CTA, the 16-vector one in the twenty-seventh, its rows on kernel 3b), only 4
    vectors."""
    assert {r.vpt for r in fc.PERSIST_SHAPES[2]} == {4}
    for n in range(4097, 1048576, 7001):
        for aligned, line in ((True, False), (False, None)):
            c = fc.fast_softmax_config(n, dtype, aligned, True, line)
            assert c.kind != "persist" or c.vpt == 4, (n, aligned, c)
        if n * dtype.itemsize % fc.LINE_BYTES:  # the default: odd N is off its line
            c = fc.fast_softmax_config(n, dtype)
            assert c.kind != "persist" or c.vpt == 4, (n, c)


def test_both_sources_declare_the_same_family():
    fast = [e.replace("fast_softmax_", "", 1) for e in cv.FAST.name_expressions]
    log = [e.replace("log_softmax_", "", 1) for e in lcv.FORWARD.name_expressions]
    assert fast == log


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
    """(dtype, vpt, threads) for every one-CTA-per-row instantiation (kernel 2) at its largest
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
    dtype: kRowOnChipKept)."""
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
# kernel 3b's 2 x 512 x 8 + 6 of the 2-byte 110000 rule: the shared-memory opt-in), the 1024-thread
# CTA with 8 and with 13 slots (> 200 KB), each cluster size with few and many slots (kernel 3b's
# rule: 2 x 512 x 8 + 6-12).
SLOTS_SHAPES = ((96, 1, 1), (96, 9, 1), (256, 6, 1), (512, 5, 1), (1024, 3, 1), (1024, 8, 1),
                (1024, 13, 1), (96, 3, 2), (512, 6, 2), (512, 8, 2), (512, 12, 2), (1024, 3, 2),
                (1024, 8, 2), (64, 5, 4), (512, 6, 4), (512, 8, 4))
# (1024, 3, 2) / (1024, 8, 2): the fp32 rule's 2 x 1024 x 8 + 1-8; (512, 6-8, 4): the 2-byte
# rule's 4 x 512 x 8 + 6-8


def _slots_cases():
    """(dtype, threads, slots, cluster) for kernels 2b / 3b and 2c / 3c: SLOTS_SHAPES in every
    dtype they are built for."""
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
    """(dtype, config): kernels 2b / 3b at their rules' shapes, kernels 2 / 3 (block, cluster)."""
    for dt in (torch.float32, torch.bfloat16):
        cluster_vpt = 16 if dt == torch.float32 else 4  # kernel 3's instantiations
        for cfg in (fc.FastConfig("block_slots", threads=1024, vpt=8, slots=5),
                    fc.FastConfig("block_slots", threads=512, vpt=8, slots=8, cluster=2),
                    fc.FastConfig("block", threads=1024, vpt=8),
                    fc.FastConfig("cluster", threads=256, vpt=cluster_vpt, cluster=4)):
            yield pytest.param(dt, cfg, id=f"{dt}-{cfg.label()}")


@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")
@pytest.mark.parametrize("dtype,cfg", list(_stagger_cases()))
def test_first_wave_phases_change_no_result(monkeypatch, dtype, cfg):
    """Kernels 2, 3, 2b, 3b with more rows than are resident at once: the first wave starts in
    phases, the later rows at once. softmax and log_softmax match the float64 references and are
    the same bits as every row launched at once (the kind outside STAGGERED_KINDS); outputs
    poisoned with NaN first."""
    n = cfg.capacity() * vec_width(dtype) - fc.LINE_BYTES // dtype.itemsize - 3  # any line head
    gen = torch.Generator(device="cuda").manual_seed(1357 + cfg.threads)
    for kernels, ref_fn, tol in BOTH_OPS:
        expr = cfg.expr(cv.ctype(dtype), kernels.prefix)
        m = pc.resident_groups(kernels.src, expr, cfg.threads, cfg.cluster, cfg.shared_mem(),
                               0) + 29
        xs = torch.randn(m, n, device="cuda", generator=gen).to(dtype)
        outs = []
        for kinds in ({cfg.kind}, set()):
            monkeypatch.setattr(cv, "STAGGERED_KINDS", kinds)
            out = torch.full_like(xs, float("nan"))
            rk.fast_launch(out, xs, cfg, kernels=kernels)
            outs.append(out)
        res = check(outs[0], ref_fn(xs), dtype, tol)
        assert res.ok, f"{kernels.prefix} {cfg.label()} m={m}: {res.message}"
        assert torch.equal(outs[0], outs[1]), f"{kernels.prefix} {cfg.label()}: phases changed bits"


@pytest.mark.parametrize("threads,slots,cl", [(1024, 3, 1), (512, 6, 1), (512, 6, 2), (256, 1, 1)])
def test_block_slots_launch_opts_in_to_its_shared_memory(monkeypatch, threads, slots, cl):
    """The block_slots launch raises the kernel's dynamic shared-memory limit for any slots: 48 KB
    of slots exactly (1024 x 8 + 3, 512 x 8 + 6, kernel 3b's 2 x 512 x 8 + 6 for 2-byte 110000)
    plus the kernel's static shared memory is past the default limit, and the launch failed with
    CUDA_ERROR_INVALID_VALUE on the H200 in a process that had not launched more slots first
    (twenty-seventh run). The opt-in lives in launch_rows, for every row launch with dynamic
    shared memory. CPU: the driver calls are recorded, not made."""
    from kernel_lab import cuda_common

    calls = []
    monkeypatch.setattr(cuda_common.jit, "set_max_dynamic_shared",
                        lambda fn, n: calls.append(("opt", n)))
    monkeypatch.setattr(cuda_common.interop, "launch",
                        lambda *a, **k: calls.append(("launch", {**k, "args": a[3]})))
    monkeypatch.setattr(cuda_common, "device_index", lambda t: 0)
    monkeypatch.setattr(cv, "device_index", lambda t: 0)
    monkeypatch.setattr(cv, "first_wave", lambda *a: (2, 1234))  # no occupancy API on a CPU
    monkeypatch.setattr(cv, "_WAVES", {})

    class Src:
        def function(self, expr, dev):
            return expr

    cfg = fc.FastConfig("block_slots", threads=threads, vpt=8, slots=slots, cluster=cl)
    n = cfg.capacity() * 8 - 128  # bf16, inside the shape
    x = torch.zeros(2, n, dtype=torch.bfloat16)
    rk.fast_launch(torch.empty_like(x), x, cfg, 1, rk.RowKernels(Src(), "fast_softmax"))
    assert calls[0] == ("opt", threads * slots * 16)
    assert calls[1][0] == "launch" and calls[1][1]["shared_mem"] == threads * slots * 16
    assert calls[1][1]["args"][-3:] == (slots, 2, 1234)  # slots, then the first wave's phases


def test_block_slots_first_wave_in_phases(monkeypatch):
    """Kernels 2b / 3b get (wave_rows, wave_ns): the rows resident at once (at most M) and their
    load time at FIRST_WAVE_BYTES_PER_NS; kinds outside STAGGERED_KINDS and rows under
    STAGGER_MIN_ROW_BYTES launch every row at once (0, 0). CPU: the occupancy answer and the
    launch are stubs."""
    from kernel_lab import cuda_common
    from kernel_lab import occupancy as persistent

    monkeypatch.setattr(persistent, "resident_groups", lambda *a: 132)
    row = 131072 * 2
    assert persistent.first_wave(None, "k", 512, 2, 65536, 2048, row, 0) == (
        132, 132 * row // persistent.FIRST_WAVE_BYTES_PER_NS)
    assert persistent.first_wave(None, "k", 512, 2, 65536, 7, row, 0) == (
        7, 7 * row // persistent.FIRST_WAVE_BYTES_PER_NS)

    launches = []
    monkeypatch.setattr(cuda_common.jit, "set_max_dynamic_shared", lambda fn, n: None)
    monkeypatch.setattr(cuda_common.interop, "launch", lambda *a, **k: launches.append(a[3]))
    monkeypatch.setattr(cuda_common, "device_index", lambda t: 0)
    monkeypatch.setattr(cv, "device_index", lambda t: 0)
    asked = []
    monkeypatch.setattr(cv, "first_wave", lambda src, expr, t, cl, smem, m, rb, dev:
                        asked.append(m) or (m, rb))
    monkeypatch.setattr(cv, "_WAVES", {})

    class Src:
        loaded = "v1"  # the loaded function: a hot reload gives another

        def function(self, expr, dev):
            return (expr, self.loaded)

    src = Src()
    cfg = fc.FastConfig("block_slots", threads=512, vpt=8, slots=8, cluster=2)
    x = torch.zeros(5, 131072, dtype=torch.bfloat16)
    rk.fast_launch(torch.empty_like(x), x, cfg, 1, rk.RowKernels(src, "fast_softmax"))
    assert launches[-1][-2:] == (5, 131072 * 2)  # the launch's rows and one row's bytes
    rk.fast_launch(torch.empty_like(x), x, cfg, 1, rk.RowKernels(src, "fast_softmax"))
    assert launches[-1][-2:] == (5, 131072 * 2) and asked == [5]  # memoized per launch shape
    src.loaded = "v2"  # reloaded: asked again (its registers, so its residency, may differ)
    rk.fast_launch(torch.empty_like(x), x, cfg, 1, rk.RowKernels(src, "fast_softmax"))
    assert asked == [5, 5]
    monkeypatch.setattr(cv, "STAGGERED_KINDS", set())
    rk.fast_launch(torch.empty_like(x), x, cfg, 1, rk.RowKernels(src, "fast_softmax"))
    assert launches[-1][-2:] == (0, 0)
    monkeypatch.setattr(cv, "STAGGERED_KINDS", {"block"})  # kernel 2: rows of >= 8 KB only
    for n, wave in ((4096, (5, 8192)), (4095, (0, 0)), (1024, (0, 0))):
        x = torch.zeros(5, n, dtype=torch.float16 if n == 4095 else torch.bfloat16)
        x = x.float() if n == 1024 else x
        cfg = fc.FastConfig("block", threads=128, vpt=4)
        rk.fast_launch(torch.empty_like(x), x, cfg, 1, rk.RowKernels(src, "fast_softmax"))
        assert launches[-1][-2:] == wave, n


@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")
@pytest.mark.parametrize("dtype,threads,slots,cl", list(_slots_cases()))
def test_persist_slots_kernels_roll_rows_through_them(dtype, threads, slots, cl):
    """softmax and log_softmax through kernels 2c / 3c, whose resident CTAs (clusters of ``cl``)
    refill each window with the next row's as soon as it is stored: 23 rows over 3 groups (each
    rolls ~8 rows, 3c: through the parity-buffered messages) and over as many as are resident;
    a row that fills registers and slots, odd rows (consecutive rows
    on different line heads, so a row may span one window more than the one before it), a row
    the registers alone hold, rows of a wider tensor; -inf / NaN / +1e4 rows; outputs poisoned
    with NaN first."""
    cfg = fc.FastConfig("persist_slots", threads=threads, vpt=fc.BLOCK_SLOTS_VPT, slots=slots,
                        cluster=cl)
    _slots_rows_match(cfg, dtype, seed=8642, m=23, groups=(3, None))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_persist_slots_sizes_and_refusals(dtype):
    """Kernels 2c / 3c are kernel 2b's / 3b's shapes on resident CTAs / clusters: the same
    capacity, slots and shared memory, their own instantiations in both sources; clusters of
    SLOTS_CL only; rows in another 16-byte phase than the output and more slots than a CTA may
    take are refused before any launch."""
    w = vec_width(dtype)
    for threads in (256, 1024):
        nwl = fc.line_windows(threads * 8 * w * 2 - 7, dtype, line=False)
        b = fc.block_slots_config(nwl, threads)
        c = fc.block_slots_config(nwl, threads, kind="persist_slots")
        assert (c.capacity(), c.slots, c.shared_mem()) == (b.capacity(), b.slots, b.shared_mem())
        assert c.label() == f"persist_slots {threads}x8+{b.slots}"
        assert c.expr("T", "log_softmax") == "log_softmax_persist_slots<T, 8>"
        assert c.expr(cv.ctype(dtype)) in cv.FAST.name_expressions
        assert c.expr(cv.ctype(dtype), "log_softmax") in lcv.FORWARD.name_expressions
        for cl in fc.SLOTS_CL:  # kernel 3c: the same on a cluster of cl CTAs
            c = fc.block_slots_config(nwl, threads // cl, cluster=cl, kind="persist_slots")
            assert c.capacity() >= nwl > c.capacity() - threads, (cl, c)
            assert c.label() == f"persist_slots {cl}x{threads // cl}x8+{c.slots}"
            assert c.expr("T") == f"fast_softmax_persist_cluster_slots<T, 8, {cl}>"
            assert c.expr(cv.ctype(dtype)) in cv.FAST.name_expressions
    with pytest.raises(ValueError, match="1 CTA a row or clusters of"):
        fc.FastConfig("persist_slots", threads=256, vpt=8, slots=2, cluster=3)
    with pytest.raises(ValueError, match="more than a CTA may take"):
        fc.FastConfig("persist_slots", threads=1024, vpt=8, slots=15)
    cfg = fc.block_slots_config(fc.line_windows(4000, dtype, line=False), 128,
                                kind="persist_slots")
    x = torch.zeros(3 * 4000 + 1, dtype=dtype)[1:].view(3, 4000)  # off the output's phase
    with pytest.raises(ValueError, match="same 16-byte phase"):
        rk.fast_launch(torch.empty(3, 4000, dtype=dtype), x, cfg, kernels=cv.FAST_KERNELS)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_block_slots_sizes_and_refusals(dtype):
    """block_slots_config covers the row with the fewest slots; the launcher refuses rows in
    another 16-byte phase than the output (the slots copy whole aligned 16-byte windows) and
    more slots than a CTA's shared memory (CPU tensors: refused before any launch)."""
    w = vec_width(dtype)
    for threads in (256, 512, 1024):
        for n in (threads * 8 * w + 1, 2 * threads * 8 * w - 7):  # 1 and 8 slots a thread
            nwl = fc.line_windows(n, dtype, line=False)
            cfg = fc.block_slots_config(nwl, threads)
            assert cfg.capacity() >= nwl > cfg.capacity() - threads
            assert cfg.shared_mem() == cfg.slots * threads * 16
            assert cfg.expr("T") == f"fast_softmax_block_slots<T, {fc.BLOCK_SLOTS_VPT}>"
            for cl in fc.SLOTS_CL:  # kernel 3b: the same on a cluster of cl CTAs
                c = fc.block_slots_config(nwl, threads // cl, cluster=cl)
                assert c.capacity() >= nwl > c.capacity() - threads, (cl, c)
                assert c.label() == f"block_slots {cl}x{threads // cl}x8+{c.slots}"
                assert c.expr("T") == f"fast_softmax_cluster_slots<T, 8, {cl}>"
                assert c.expr(cv.ctype(dtype)) in cv.FAST.name_expressions
    with pytest.raises(ValueError, match="clusters of"):
        fc.FastConfig("block_slots", threads=256, vpt=8, slots=2, cluster=3)
    cfg = fc.block_slots_config(fc.line_windows(4000, dtype, line=False), 128)
    buf = torch.zeros(3 * 4000 + 1, dtype=dtype)
    x = buf[1:].view(3, 4000)  # one element off the output's phase
    with pytest.raises(ValueError, match="same 16-byte phase"):
        rk.fast_launch(torch.empty(3, 4000, dtype=dtype), x, cfg, kernels=cv.FAST_KERNELS)
    x = torch.zeros(2, 1024 * 20 * w, dtype=dtype)
    with pytest.raises(ValueError, match="more than a CTA may take"):  # refused where it is made
        big = fc.FastConfig("block_slots", threads=1024, vpt=8, slots=15)  # 240 KB of slots
        rk.fast_launch(torch.empty_like(x), x, big, kernels=cv.FAST_KERNELS)


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


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_a_config_too_small_for_the_row_is_refused(dtype):
    """fast_launch with a caller's config checks that it holds the row before launching (the
    kernel would leave the row's tail unwritten). CPU tensors: the check comes before any launch.
    A row one element too long, and rows that start mid-window and need one window of slack."""
    cfg = fc.FastConfig("block", threads=64, vpt=2)
    w = vec_width(dtype)
    for n in (cfg.capacity() * w + 1, cfg.capacity() * w - 1):
        x = torch.zeros(3, n, dtype=dtype)
        with pytest.raises(ValueError, match="spans"):
            rk.fast_launch(torch.empty_like(x), x, cfg, kernels=cv.FAST_KERNELS)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_persistent_shapes_budget_a_line_head(dtype):
    """The persistent kernels measure a row's head from its 128-byte line: a shape exactly as
    large as a row on lines holds it there, and is refused for the same row 16 bytes off a line
    (up to 7 more windows); the config then picks a shape with the slack."""
    w = vec_width(dtype)
    n = 65536 if w == 4 else 131072  # 2-byte 65536 runs one CTA (block 1024x8: 16-byte heads)
    vpt = 16
    cfg = fc.FastConfig("persist", threads=n // w // (vpt * 8), vpt=vpt, cluster=8)
    assert cfg.capacity() == n // w
    buf = torch.zeros(2 * n + 256, dtype=dtype)
    off = -buf.data_ptr() % fc.LINE_BYTES // buf.element_size()
    for shift, ok in ((0, True), (w, False)):
        x = buf[off + shift:off + shift + 2 * n].view(2, n)
        assert rk._rows_on_lines(x) == ok
        if ok:
            assert fc.config_windows(cfg, n, dtype, True, True) == cfg.capacity()
        else:
            with pytest.raises(ValueError, match="spans"):
                rk.fast_launch(torch.empty_like(x), x, cfg, kernels=cv.FAST_KERNELS)
    off_line = fc.fast_softmax_config(n, dtype, True, True, line=False)
    assert off_line.capacity() >= n // w + 7
    assert off_line.kind in ("persist", "block_slots", "chunks_reg")  # line heads


def test_two_stage_persistent_config_doubles_its_slots():
    one = fc.FastConfig("persist", threads=256, vpt=4, cluster=8)
    two = fc.FastConfig("persist", threads=256, vpt=4, cluster=8, stages=2)
    assert two.shared_mem() == 2 * one.shared_mem() == 2 * 256 * 4 * 16
    assert two.label() == "persist 8x256x4 s2" and one.label() == "persist 8x256x4"
    assert two.expr("float") == one.expr("float")  # one kernel: stages is a launch argument
    with pytest.raises(ValueError, match="stages"):
        fc.FastConfig("persist", threads=256, vpt=4, cluster=8, stages=3)
    with pytest.raises(ValueError, match="stages"):
        fc.FastConfig("wide", threads=1024, vpt=8, cluster=8, stages=2)


def test_wide_config_keeps_what_shared_memory_holds():
    bf16 = fc.wide_config(fc.vector_windows(1 << 20, torch.bfloat16), cluster=16)  # 8 per thread
    assert (bf16.cluster, bf16.threads, bf16.vpt) == (16, 1024, 8)  # all kept
    fp32 = fc.wide_config(fc.vector_windows(1 << 20, torch.float32), cluster=8)  # 32 per thread
    assert (fp32.cluster, fp32.vpt, fp32.shared_mem()) == (8, 14, 14 * 1024 * 16)  # 14 fit
    assert fp32.label() == "wide 8x1024 keep 14" and fp32.capacity() >= 1 << 30
    # Default: 8 CTAs unless they would keep under 3/4 of each chunk, then 16.
    nw_bf16, nw_fp32 = (fc.vector_windows(1 << 20, dt) for dt in (torch.bfloat16, torch.float32))
    assert fc.wide_config(nw_bf16).label() == "wide 8x1024 keep 14"
    assert fc.wide_config(nw_fp32).label() == "wide 16x1024 keep 14"
    assert fc.wide_config(100, cluster=8, threads=64).vpt == 1  # short rows: one window each


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
            least = max(1, -(-(chunks - 1) // lag))
            for kernels, ref_fn, tol in BOTH_OPS:
                ref = ref_fn(x)
                for groups in (least, None):
                    out = torch.full(x.shape, float("nan"), device="cuda", dtype=dtype)
                    rk.fast_launch(out, x, cfg, kernels=kernels, max_groups=groups)
                    res = check(out, ref, dtype, tol)
                    assert res.ok, (f"{kernels.prefix} {cfg.label()} n={n} {x.stride()} "
                                    f"groups={groups}: {res.message}")


def test_chunk_launch_checks_the_grid(monkeypatch):
    """CPU: the chunk kernel launches min(chunks of all rows, resident) CTAs with a pair of
    flagged words per chunk and the launch's epoch (flag_words.py); a caller's own config whose
    rows have more chunks than lag x CTAs + 1 is refused (the kernel would wait on itself), the
    default pick falls back to the wide kernel."""
    launched = []
    monkeypatch.setattr(pc, "resident_groups", lambda src, expr, threads, cl, smem, dev: 5)
    monkeypatch.setattr(cv, "device_index", lambda t: 0)
    monkeypatch.setattr(cv, "launch_rows", lambda src, expr, out, ins, grid, block, extra,
                        shared_mem=0: launched.append((expr, grid, block, extra, shared_mem)))
    cfg = fc.FastConfig("chunks", threads=64, vpt=2, lag=2, ahead=1)
    assert cfg.shared_mem() == 4 * 64 * 2 * 16 and cfg.label() == "chunks 64x2 lag 2 ahead 1"
    x = torch.randn(3, 64 * 2 * 4 * 6)  # 6 chunks (rows on lines: CPU tensors are 64-byte
    # aligned, so budget a head): 7 <= 2 * 5 + 1
    rk.fast_launch(torch.empty_like(x), x, cfg, kernels=cv.FAST_KERNELS)
    expr, grid, block, extra, smem = launched[-1]
    chunks = fc.row_chunks(cfg, x.shape[1], x.dtype, line=rk._rows_on_lines(x))
    assert expr == "fast_softmax_chunks<float, 2>" and (grid, block, smem) == (5, 64, 8192)
    assert [int(e) for e in extra[:2]] == [1, chunks] and [int(e) for e in extra[-2:]] == [2, 1]
    assert isinstance(extra[3], np.uint32) and extra[3] >= 1  # the epoch, after the words
    with pytest.raises(ValueError, match="wait on itself"):
        # 128+ chunks
        rk.fast_launch(torch.empty(3, 65536), torch.randn(3, 65536), cfg, kernels=cv.FAST_KERNELS)
    # the default path
    rk.fast_launch(torch.empty(3, 65536), torch.randn(3, 65536), cfg, 1, kernels=cv.FAST_KERNELS)
    assert "_wide<" in launched[-1][0]
    with pytest.raises(ValueError, match="lag >= 1"):
        fc.FastConfig("chunks", threads=64, vpt=2, lag=0)
    reg = fc.FastConfig("chunks_reg", threads=512, vpt=8, ahead=3)  # only chunks in flight
    assert reg.shared_mem() == 3 * 512 * 8 * 16 and reg.label() == "chunks_reg 512x8 ahead 3"
    rk.fast_launch(torch.empty_like(x), x, reg, kernels=cv.FAST_KERNELS)
    expr, grid, block, extra, smem = launched[-1]
    assert expr == "fast_softmax_chunks_reg<float, 8>" and len(extra) == 5  # no lag argument
    with pytest.raises(ValueError, match="chunks_reg needs"):
        fc.FastConfig("chunks_reg", threads=1024, vpt=4)


def test_persistent_launches_size_their_grid(monkeypatch):
    """CPU: persist, pipe, wide and the persistent backward launch min(M, resident) groups
    times the cluster, capped by max_groups (the launch itself is recorded, not run)."""
    launched = []
    monkeypatch.setattr(pc, "resident_groups", lambda src, expr, threads, cl, smem, dev: 5)
    monkeypatch.setattr(cv, "device_index", lambda t: 0)
    extras = []
    monkeypatch.setattr(cv, "launch_rows", lambda src, expr, out, ins, grid, block, extra,
                        shared_mem=0: (launched.append((expr, grid, block, shared_mem)),
                                       extras.append(tuple(int(e) for e in extra))))
    buf = torch.randn(7 * 65536 + 32)  # rows on 128-byte lines, as the CUDA allocator gives
    off = -buf.data_ptr() % fc.LINE_BYTES // buf.element_size()
    x = buf[off:off + 7 * 65536].view(7, 65536)
    nw = fc.vector_windows(65536, torch.float32)
    persist = fc.persist_config(nw, 16, 8, late=True)
    pipe = fc.FastConfig("pipe", threads=128, vpt=16, cluster=8, stages=2)  # tune-only kernel
    wide = fc.wide_config(nw, cluster=16)
    backward = bc.backward_config(65536, torch.float32)
    assert backward.kind == "persist"
    for groups, want in ((None, 5), (2, 2), (9, 5)):
        launched.clear()
        for cfg in (persist, pipe, wide):
            rk.fast_launch(torch.empty_like(x), x, cfg, max_groups=groups, kernels=cv.FAST_KERNELS)
        rk.backward_launch(torch.empty_like(x), x, x, backward, True, max_groups=groups,
            kernels=cv.BACKWARD_KERNELS)
        assert [g for _, g, _, _ in launched] == [want * persist.cluster, want * pipe.cluster,
                                                  want * 16, want * backward.cluster], launched
        smem = [c.shared_mem() for c in (persist, pipe, wide)]
        assert [sm for _, _, _, sm in launched[:3]] == smem
        # kernel arguments after (y, x, rows, n, stride): vec, then persist: late, stages;
        # pipe: stages; wide: kept windows; backward: vec, stages
        assert extras[-4:-1] == [(1, 1, 1), (1, 2), (1, wide.vpt)], extras
    launched.clear()
    # fewer rows than groups
    rk.fast_launch(torch.empty(3, 65536), torch.randn(3, 65536), wide, kernels=cv.FAST_KERNELS)
    assert launched[0][1] == 3 * 16


def test_placement_counts_clusters_that_started_late():
    """persistent.Placement on synthetic records (SM, cluster, rank, start, end): a cluster
    whose CTAs start after another CTA has finished did not run alongside the rest."""
    recs = ((0, 0, 0, 0, 100), (1, 0, 1, 5, 100), (2, 1, 0, 3, 90), (3, 1, 1, 4, 95),
            (0, 2, 0, 120, 200), (1, 2, 1, 121, 210))
    p = pc.Placement(cluster=2, threads=128, smem=0, resident=2, records=recs)
    assert (p.clusters(), p.sms(), p.late_clusters()) == (3, 4, 1)
    assert "2 resident by the occupancy API, 3 launched on 4 SMs, 1 started after" in p.summary()
    with pytest.raises(ValueError, match="instantiated"):
        pc.cluster_placement(4)


@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")
@pytest.mark.parametrize("cl", [8, 16])
def test_resident_clusters_run_at_once_and_one_more_waits(cl):
    """cluster_probe: a grid of the clusters the occupancy API calls resident (one CTA per SM)
    - every CTA on its own SM, each cluster's ranks 0..CL-1; one cluster more must start late
    (the probe can see it). Whether all the resident ones start together is what
    bench/cluster_probe.py reports (a measurement, not asserted here)."""
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
