"""One benchmark per (op, dtype, shape, variant), parametrized from the registry by conftest.py.

Each test: skip with the variant's own ``supports()`` reason if it cannot run the input; run it
once and compare with the float64 reference (fail if wrong, unless the variant declares that
miss in ``known_inexact``: then it is timed and marked ``inexact``); then time it with
``benchmark.pedantic``: device time per call on a GPU, as eager calls or a CUDA graph of K calls
chosen per cell (``kernel_lab.measure.timing``; under ``--benchmark-compare``, the compared
run's), read by the cell's clock. ``extra_info`` records
the method and K, the device and host time per call, bytes, GB/s, % of copy bandwidth, the
CUDA-event median, kernel registers / spills and the memory column.
"""

from __future__ import annotations

import pytest

import kernel_lab
from kernel_lab.measure import benchmarking as bm


def test_variant(benchmark, bench_clock, compared_timing, workloads, copy_gbps, bench_records,
                 op, dtype, shape, variant):
    cell = bm.Cell.parse(op, dtype, shape)
    v = kernel_lab.get(variant)
    work = workloads.get(cell)
    try:
        rec = bm.vet(v, work)
    except Exception as e:  # a crash: show it in the GB/s table too, then fail with its traceback
        bench_records.append(bm.Record.crashed(cell, v, e))
        raise
    if rec is not None and rec.status != "inexact":
        bench_records.append(rec)
        if rec.status == "skipped":
            pytest.skip(f"{variant}: {rec.reason}")
        pytest.fail(f"{variant} is wrong on {cell.id}: {rec.reason}", pytrace=False)
    inexact = ("inexact", rec.reason) if rec is not None else ()  # a known miss: timed, marked

    peak = bm.memory(v, work)  # before any graph holds memory
    timing, event = bm.prepare(v, work, clock=bench_clock, pin=compared_timing)
    s = timing.schedule
    with bm.trusted_inputs():  # Op.make_inputs' values: no checks timed
        benchmark.pedantic(timing.target, rounds=s.rounds, iterations=s.iterations,
                           warmup_rounds=1)
    timing.close()
    if benchmark.stats is None:  # --benchmark-disable: checked, not timed
        return
    rec = bm.Record.start(cell, v, *inexact).fill(
        work, benchmark.stats.stats.median, event, copy_gbps, bm.kernel_attributes(v, work), s,
        peak, timing.host_s)
    benchmark.extra_info.update(bm.extra_info(rec))
    benchmark.extra_info["source"] = v.source
    if compared_timing is not None:
        benchmark.extra_info["method_from"] = "the compared run"
    if timing.note:
        benchmark.extra_info["timing_note"] = timing.note
    if inexact:
        benchmark.extra_info["inexact"] = inexact[1]
    bench_records.append(rec)
