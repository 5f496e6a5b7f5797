"""One benchmark per (op, dtype, shape, variant), parametrized from the registry by conftest.py.

Each test: skip with the variant's own ``supports()`` reason if it cannot run the input; run it
once and compare with the float64 reference (fail if wrong, unless the variant declares that
miss in ``known_inexact``: then it is timed and marked ``inexact``); then time it with
``benchmark.pedantic`` (rounds x iterations chosen by calibration, synchronizing timer) and
record bytes, GB/s, % of copy bandwidth, the CUDA-event median and kernel registers/spills.
"""

from __future__ import annotations

import pytest

import kernel_lab
from kernel_lab import benchmarking as bm

EXTRA = ("backend", "bytes_moved", "gbps", "pct_of_copy", "copy_gbps", "event_median_s",
         "event_gbps", "registers", "spill_bytes", "kernels", "rounds", "iterations")


def test_variant(benchmark, workloads, copy_gbps, bench_records, op, dtype, shape, variant):
    case = bm.Case.parse(op, dtype, shape)
    v = kernel_lab.get(variant)
    work = workloads.get(case)
    try:
        rec = bm.vet(v, work)
    except Exception as e:  # a crash: show it in the GB/s table too, then fail with its traceback
        bench_records.append(bm.Record.crashed(case, v, e))
        raise
    if rec is not None and rec.status != "inexact":
        bench_records.append(rec)
        if rec.status == "skipped":
            pytest.skip(f"{variant}: {rec.reason}")
        pytest.fail(f"{variant} is wrong on {case.id}: {rec.reason}", pytrace=False)
    inexact = ("inexact", rec.reason) if rec is not None else ()  # a known miss: timed, marked

    fn, plan, event = bm.calibrate(v, work)
    with bm.trusted_inputs():  # Op.make_inputs' values: no checks timed
        benchmark.pedantic(fn, rounds=plan.rounds, iterations=plan.iterations, warmup_rounds=1)
    if benchmark.stats is None:  # --benchmark-disable: checked, not timed
        return
    rec = bm.Record.start(case, v, *inexact).fill(
        work, benchmark.stats.stats.median, event, copy_gbps, bm.kernel_attributes(v, work), plan
    )
    info = rec.as_dict()
    benchmark.extra_info.update({k: info[k] for k in EXTRA if info[k] is not None})
    benchmark.extra_info["source"] = v.source
    if inexact:
        benchmark.extra_info["inexact"] = inexact[1]
    bench_records.append(rec)
