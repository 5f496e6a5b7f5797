"""fast_softmax / log_softmax launch configs on a CPU: the rules that pick a kernel kind and
shape per (N, dtype, alignment), and the limits every config keeps.

``fast_softmax_config`` always returns a shape that holds the row, names an instantiation both
sources declare, and respects the kernels' limits; the picks for long rows are the measured
ones (numbers in the docstrings: % of copy on an H200, the pick against the runner-up). The
kernels themselves run in test_forward_kernels_gpu.py, their launches in
test_forward_launches_cpu.py.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from kernel_lab.cuda.rowkernels import forward_config as fc
from kernel_lab.cuda.rowkernels import launch as rk
from kernel_lab.cuda.sources import ALL_DTYPES, cdiv, vec_width
from kernel_lab.ops.log_softmax import cuda_variants as lcv
from kernel_lab.ops.softmax import cuda_variants as cv

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
    """The picks for rows past one CTA's registers (numbers: % of copy on an H200, the pick
    against the runner-up). PERSIST_SHAPES: fp32 clusters of 8 or 16 CTAs, no 15-CTA clusters, no
    pipe (65536 8x128x16 late 94.4 vs the pipe's 91.7); 2-byte rows on lines: small CTAs x 16
    vectors with the exps kept in T (131072 8x128x16 late 94.1 vs 4x1024x4 92.1); odd rows keep 4
    vectors. block x 8 and block_slots (one CTA, or a cluster of 2 or 4 CTAs, part of the row in
    shared memory) take most rows up to 262144 (the tests below); rows past 8-CTA clusters run in
    chunks."""
    f32, bf16, f16 = torch.float32, torch.bfloat16, torch.float16
    picks = [  # (N, dtype, rows on 16 bytes, the launch)
        (50257, f32, False, "block_slots 1024x8+5"),  # block_slots: the next test
        (53249, f32, True, "block_slots 2x512x8+6"),  # on a cluster of 2: the next test
        (65536, f32, True, "block_slots 2x512x8+8"),
        (81920, f32, True, "block_slots 2x512x8+12"),
        (81921, f32, True, "block_slots 2x1024x8+3"),
        (100000, f32, True, "block_slots 2x1024x8+5"),
        (106496, f32, True, "block_slots 2x1024x8+5"),
        (106497, f32, True, "block_slots 2x1024x8+6"),  # on a cluster of 2: the next test
        (122880, f32, True, "block_slots 2x1024x8+7"),
        (128256, f32, True, "block_slots 2x1024x8+8"),
        (131072, f32, True, "block_slots 2x1024x8+8"),
        (131073, f32, True, "persist 8x288x16 late"),  # past the cluster block_slots rule
        (151936, f32, True, "persist 8x320x16 late"),
        (32000, bf16, True, "block 512x8"),  # block x 8: see test_2byte_rows_of_16k_to_64k_...
        (32768, f16, True, "block 512x8"),
        (36864, bf16, True, "block_slots 512x8+1"),  # block_slots: the next test
        (50257, bf16, False, "block_slots 512x8+5"),
        (44000, f16, True, "block_slots 512x8+3"),
        (53248, bf16, True, "block_slots 512x8+5"),
        (55000, bf16, True, "block_slots 512x8+6"),  # 53001: level with 2x832x4
        (56000, bf16, True, "block 896x8"),
        (65536, bf16, True, "block 1024x8"),
        (65537, f16, True, "block_slots 1024x8+1"),
        (106496, bf16, True, "block_slots 1024x8+5"),
        (128256, bf16, True, "block_slots 2x512x8+8"),  # block_slots on a cluster of 2
        (131072, bf16, True, "block_slots 2x512x8+8"),
        (131072, f16, True, "block_slots 2x512x8+8"),
        (110000, bf16, True, "block_slots 2x512x8+6"),
        (151936, bf16, True, "block_slots 2x512x8+11"),
        (151936, f16, True, "block_slots 2x512x8+11"),
        (163840, bf16, True, "block_slots 2x512x8+12"),
        (163841, bf16, True, "chunks_reg 448x8 ahead 1"),  # 2-byte 163841-212992: chunks
        (212992, f16, True, "chunks_reg 480x8 ahead 1"),
        (212993, f16, True, "block_slots 4x512x8+6"),  # block_slots on a cluster of 4
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
    # keep the wide kernel. Rows of <= 65 chunks of 512 x 8 vectors keep the waiting chunk in
    # registers (chunks_reg; fp32 2^20 90.2 % of copy vs chunks' 87.3, 524288 92.7 vs 90.9; bf16
    # 2^20 80.8 vs x 16 76.1, 2^21 79.7 vs 75.2), longer ones run ``chunks`` (fp32 2^21: 82.4 vs
    # chunks_reg's 74.6). Rows past 8-CTA clusters too (fp32 262144 93.6 vs 16x256x16 late
    # 91.0; bf16 / fp16 524288 93.0 / 91.7 vs 16x1024x4 90.2 / 88.8), and 2-byte
    # rows past 4 x 1024 x 4 but for the x 16 rule (200000: 86.4 / 86.9 vs 8x800x4 84.2 / 85.2
    # and 15x448x4 late 77.5 / 78.3; 151937 90.7 / 91.0 vs 15x320x4 83.6 / 84.6)
    for n, dtype in ((1048577, bf16), (1 << 20, f32), (1 << 20, bf16), (1 << 21, f16),
                     (327681, f32), (524288, f32), ((1 << 20) + 1, f32), ((1 << 21) + 1, bf16),
                     (163841, f32), (262144, f32), (327680, f32), (262145, bf16),
                     (524288, f16), (524288, bf16), (196608, bf16), (200000, f16),
                     (163841, bf16), (170001, f16)):
        assert_fitted_chunks(n, dtype)
    # the CTA sized down so that the row's chunks come out full (bf16 200000: 7 chunks of
    # 448 x 8, 89.8 % of copy vs 512 x 8's 87.3; 245760: 480 x 8, 92.5 vs 91.3; 2-byte
    # 212993-262144 run block_slots on 4 CTAs instead)
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
    """BLOCK_SLOTS_RULES (% of copy, the pick against the runner-up): fp16 / bf16 rows of
    32769-57344 run 512 x 8 + 1-6 slots (two CTAs an SM: 50257 95.1 / 95.4 vs 2x800x4 late s2
    92.2 / 93.4; odd 57001 94.6 / 94.8 vs 93.0 / 92.8) where block x 8 does not take them,
    65537-106496 1024 x 8 + 1-5 (80000 95.3 / 95.8 vs 4x640x4 82-84); fp32 32769-53248 1024 x 8 +
    1-5 (50257 95.7 vs 8x128x16 late 92.3). The odd fp16 / bf16 rows of ~20.5k-26.6k that block
    x 8 leaves (352-416 threads) run 256 x 8 + 3-6 (24001 96.6 / 95.8 vs 1x768x4 92.4 / 91.8).
    On a cluster of 2 CTAs (exps kept in T, the first wave in phases): fp16 / bf16 rows past
    1024 x 8 + 5 up to 2 x 512 x 8 + 12 (N ~106.5K-163.8K; 151936 93.8 vs persist's 92.3); fp32
    rows past 1024 x 8 + 13, 2 x 512 x 8 + 5-12 up to N ~81.9K (61001 96.1 vs persist's 93.1),
    then 2 x 1024 x 8 + 1-8 up to 131072 (90000 94.9 vs 93.4; 131072 96.2 vs 95.1). On 4 CTAs:
    2-byte ~213K-262144, 4 x 512 x 8 + 6-8 (262144 bf16 94.7 vs chunks_reg 94.0). Never more
    slots than that, never in another 16-byte phase than the output, and the rows between stay
    on block x 8 / persistent / chunks."""
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
                if c.cluster == 4:  # on 4 CTAs: 2-byte rows past 4 x 512 x 8 + 5
                    assert w == 8 and c.threads == 512, (n, c)
                    assert 212992 - 64 < n <= 262144 and 6 <= c.slots <= 8, (n, c)
                    assert c.capacity() >= nwl > c.capacity() - 4 * c.threads, (n, c)
                    continue
                if c.cluster > 1 and w == 8:  # on 2 CTAs: 2-byte rows past 1024 x 8 + 5
                    assert (c.cluster, c.threads) == (2, 512), (n, c)
                    assert 106496 < n <= 163840 and 6 <= c.slots <= 12, (n, c)
                    assert c.capacity() >= nwl > c.capacity() - 2 * c.threads, (n, c)
                    continue
                if c.cluster > 1:  # on 2 CTAs: fp32 rows past 1024 x 8 + 13
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
                    assert 352 <= fc.round32(cdiv(fc.vector_windows(n, dtype, aligned), 8)) <= 416
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
    """Row n takes chunks_reg: CHUNK_REG_DEFAULT's vectors and chunks in flight, as many chunks
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
    """block x 8 (94-99 % of copy) from 2049 windows where its CTA size is one that beat the
    persistent shapes (rows on 16 bytes: <= 512 threads, 896-1024; odd rows: <= 320, 448-512,
    960-1024); the others run block_slots or stay persistent (or, off phase, a cluster)."""
    sizes = {True: [*range(32, 513, 32), *range(896, 1025, 32)],
             False: [*range(32, 321, 32), 448, 480, 512, 960, 992, 1024]}[aligned]
    for n in range(16385, 65537 + 4096, 331):
        nw = fc.vector_windows(n, dtype, aligned)
        threads = fc.round32(cdiv(nw, 8))
        c = fc.fast_softmax_config(n, dtype, aligned, vec)
        x8 = threads in sizes
        assert (c.kind == "block" and c.vpt == 8) == x8, (n, nw, c)
        if x8:
            assert c.threads == threads and c.capacity() >= nw, (n, c)
    assert fc.fast_softmax_config(16384, dtype).label() == "block 512x4"  # 99 % of copy
    assert fc.fast_softmax_config(16385, dtype).label() == "block 288x8"
    # odd: block 384x8 90 vs 92 % (persist 1x768x4), block_slots 256 x 8 + 4 96 %
    assert fc.fast_softmax_config(24001, dtype, False).label() == "block_slots 256x8+4"
    assert fc.fast_softmax_config(24001, dtype, False, False).label() == "block 768x4"  # off phase
    assert fc.fast_softmax_config(24576, dtype).label() == "block 384x8"  # 96-97 vs 89-90


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_odd_rows_skip_the_rules_for_rows_on_lines(dtype):
    """8 vectors per thread lost on rows off 128-byte lines (bf16 50257: 72-76 % of copy vs
    2x800x4's 84, at 77 % fill and before the warp-uniform checks: the two causes are not
    separated yet), 16 were never timed there: a row that does not start on a line never takes
    a ``lines_only`` rule (16 vectors), only 4 vectors. (The rows of the former 8- and 16-vector
    rules run block_slots, on one CTA and on a cluster.)"""
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


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_persist_slots_sizes_and_refusals(dtype):
    """persist_slots is block_slots' shapes on resident CTAs / clusters: the same
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
        for cl in fc.SLOTS_CL:  # the same on a cluster of cl CTAs
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
            for cl in fc.SLOTS_CL:  # the same on a cluster of cl CTAs
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


def test_kind_names_are_compared_only_in_the_kind_table():
    """What differs by kind (its rule, staggering, grid, shared memory ...) is an attribute of its
    object in rowkernels/kinds.py: no other module of the package tests a config's kind name."""
    root = Path(fc.__file__).resolve().parents[2]  # kernel_lab/
    compares = re.compile(r'\.kind (==|!=|in |not in )|\bkind (==|!=) "')
    hits = [f"{p.relative_to(root)}:{i}" for p in sorted(root.rglob("*.py")) if p.name != "kinds.py"
            for i, line in enumerate(p.read_text().splitlines(), 1) if compares.search(line)]
    assert not hits, hits

