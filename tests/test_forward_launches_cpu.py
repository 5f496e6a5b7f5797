"""fast_softmax's launches on a CPU: what the launcher hands the driver (grid, shared memory and
its opt-in, kernel arguments, the first wave's phases), with the driver calls and the occupancy
API stubbed; and the cluster placement's bookkeeping on synthetic records.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import stagger_only

from kernel_lab.cuda import occupancy as pc
from kernel_lab.cuda.rowkernels import backward_config as bc
from kernel_lab.cuda.rowkernels import forward_config as fc
from kernel_lab.cuda.rowkernels import launch as rk
from kernel_lab.ops.softmax import cuda_variants as cv


@pytest.mark.parametrize("threads,slots,cl", [(1024, 3, 1), (512, 6, 1), (512, 6, 2), (256, 1, 1)])
def test_block_slots_launch_opts_in_to_its_shared_memory(monkeypatch, threads, slots, cl):
    """The block_slots launch raises the kernel's dynamic shared-memory limit for any slots: 48 KB
    of slots exactly (1024 x 8 + 3, 512 x 8 + 6, 2 x 512 x 8 + 6 on a cluster for 2-byte 110000)
    plus the kernel's static shared memory is past the default limit, and the launch failed with
    CUDA_ERROR_INVALID_VALUE on the H200 in a process that had not launched more slots first.
    The opt-in lives in launch_rows, for every row launch with dynamic shared memory. CPU: the
    driver calls are recorded, not made."""
    from kernel_lab.cuda import sources

    calls = []
    monkeypatch.setattr(sources.jit, "set_max_dynamic_shared",
                        lambda fn, n: calls.append(("opt", n)))
    monkeypatch.setattr(sources.interop, "launch",
                        lambda *a, **k: calls.append(("launch", {**k, "args": a[3]})))
    monkeypatch.setattr(sources, "device_index", lambda t: 0)
    monkeypatch.setattr(rk, "device_index", lambda t: 0)
    monkeypatch.setattr(rk, "first_wave", lambda *a: (2, 1234))  # no occupancy API on a CPU

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


def test_copy_speed_from_the_drivers_memory_clock_and_bus(monkeypatch):
    """copy_bytes_per_ns: COPY_OF_PEAK of the DRAM peak the driver's attributes give (an H100
    SXM: 2,619 MHz x 2 x 5,120 bits; an H200: 3,201 MHz x 6,144 bits), kept per device;
    FIRST_WAVE_BYTES_PER_NS where the driver gives no answer or an implausible one; first_wave
    takes it."""
    from cupy.cuda import runtime

    from kernel_lab.cuda import occupancy as persistent

    cards = {0: (2_619_000, 5120), 1: (3_201_000, 6144), 3: (0, 5120), 4: (2_619_000, 1 << 20)}
    asked = []

    def attribute(attr, dev):
        asked.append(dev)
        if dev not in cards:
            raise runtime.CUDARuntimeError(100)  # cudaErrorNoDevice
        return cards[dev][attr == runtime.cudaDevAttrGlobalMemoryBusWidth]

    monkeypatch.setattr(runtime, "deviceGetAttribute", attribute)
    persistent.copy_bytes_per_ns.cache_clear()
    assert persistent.copy_bytes_per_ns(0) == 2950  # 3,352 GB/s peak; 2,981 measured
    assert persistent.copy_bytes_per_ns(1) == 4327  # 4,917 GB/s peak; 4,170-4,300 measured
    for dev in (2, 3, 4):  # no device; a clock of 0; a bus no DRAM has
        assert persistent.copy_bytes_per_ns(dev) == persistent.FIRST_WAVE_BYTES_PER_NS
    assert persistent.copy_bytes_per_ns(0) == 2950 and asked.count(0) == 2  # kept
    persistent.copy_bytes_per_ns.cache_clear()  # not the fakes' answers for later tests
    monkeypatch.setattr(persistent, "resident_groups", lambda *a: 62)
    assert persistent.first_wave(None, "k", 512, 4, 0, 256, 524288, 0, 2950) == \
        (62, 62 * 524288 // 2950)


def test_block_slots_first_wave_in_phases(monkeypatch):
    """block_slots (one CTA or a cluster) gets (wave_rows, wave_ns): the rows resident at once
    (at most M) and their load time at FIRST_WAVE_BYTES_PER_NS; kinds not staggered and rows
    under STAGGER_MIN_ROW_BYTES launch every row at once (0, 0). CPU: the occupancy
    answer and the launch are stubs."""
    from kernel_lab.cuda import occupancy as persistent
    from kernel_lab.cuda import sources

    monkeypatch.setattr(persistent, "resident_groups", lambda *a: 132)
    row = 131072 * 2
    assert persistent.first_wave(None, "k", 512, 2, 65536, 2048, row, 0) == (
        132, 132 * row // persistent.FIRST_WAVE_BYTES_PER_NS)
    assert persistent.first_wave(None, "k", 512, 2, 65536, 7, row, 0) == (
        7, 7 * row // persistent.FIRST_WAVE_BYTES_PER_NS)

    launches = []
    monkeypatch.setattr(sources.jit, "set_max_dynamic_shared", lambda fn, n: None)
    monkeypatch.setattr(sources.interop, "launch", lambda *a, **k: launches.append(a[3]))
    monkeypatch.setattr(sources, "device_index", lambda t: 0)
    monkeypatch.setattr(rk, "device_index", lambda t: 0)
    asked = []
    monkeypatch.setattr(rk, "first_wave", lambda src, expr, t, cl, smem, m, rb, dev:
                        asked.append(m) or (m, rb))

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
    # asked on each launch the launcher makes (a plan records one, its replays ask nothing);
    # occupancy keeps the driver's residency answer per loaded function
    assert launches[-1][-2:] == (5, 131072 * 2) and asked == [5, 5]
    stagger_only(monkeypatch, ())
    rk.fast_launch(torch.empty_like(x), x, cfg, 1, rk.RowKernels(src, "fast_softmax"))
    assert launches[-1][-2:] == (0, 0)
    stagger_only(monkeypatch, ("block",))  # block: rows of >= 8 KB only
    for n, wave in ((4096, (5, 8192)), (4095, (0, 0)), (1024, (0, 0))):
        x = torch.zeros(5, n, dtype=torch.float16 if n == 4095 else torch.bfloat16)
        x = x.float() if n == 1024 else x
        cfg = fc.FastConfig("block", threads=128, vpt=4)
        rk.fast_launch(torch.empty_like(x), x, cfg, 1, rk.RowKernels(src, "fast_softmax"))
        assert launches[-1][-2:] == wave, n


def test_chunk_launch_checks_the_grid(monkeypatch):
    """CPU: the chunk kernel launches min(chunks of all rows, resident) CTAs with a pair of
    flagged words per chunk and the launch's epoch (flag_words.py); a caller's own config whose
    rows have more chunks than lag x CTAs + 1 is refused (the kernel would wait on itself), the
    default pick falls back to the wide kernel."""
    launched = []
    monkeypatch.setattr(pc, "resident_groups", lambda src, expr, threads, cl, smem, dev: 5)
    monkeypatch.setattr(rk, "device_index", lambda t: 0)
    monkeypatch.setattr(rk, "launch_rows", lambda src, expr, out, ins, grid, block, extra,
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
    monkeypatch.setattr(rk, "device_index", lambda t: 0)
    extras = []
    monkeypatch.setattr(rk, "launch_rows", lambda src, expr, out, ins, grid, block, extra,
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
