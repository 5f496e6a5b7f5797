"""The ``host`` group: host time per call of ``bench/overhead.py``'s rows on one launch-bound
fp32 tensor - torch.softmax, the drop-ins on "auto" with and without autograd recording, every
CUDA variant by name, torch.compile, the peers that import - as pytest-benchmark cells, so
``--benchmark-compare`` gates a host-time regression like a kernel one.

A cell's figure is a ratio: its host time over its reference's (``overhead.reference``: the op's
torch call, with autograd recording where the row records), both timed back to back in every
round (``timing.RatioRounds``), so what drifts on a shared machine cancels; the absolute
microseconds go to ``extra_info``. Each round runs ``k`` calls of each (about ``HOST_ROUND_S``)
and a sync; before each round, a shorter burst of another row, so the rows interleave as in
``overhead.py``'s table; the median of ``HOST_ROUNDS`` rounds, gc off.
"""

from __future__ import annotations

import itertools
import statistics

import overhead  # bench/ is on sys.path (pytest put it there for bench/conftest.py)
import pytest

from kernel_lab.measure import benchmarking as bm
from kernel_lab.measure import timing


def test_host(benchmark, bench_clock, host_candidates, host_cell):
    fn = host_candidates.get(host_cell)
    if fn is None:
        pytest.skip(f"{host_cell}: does not take this tensor here")
    if isinstance(fn, str):  # its warm-up call raised: that is a failure of the row
        pytest.fail(fn, pytrace=False)
    ref_label = overhead.reference(host_cell)
    ref = host_candidates.get(ref_label)
    if not callable(ref):
        pytest.fail(f"{host_cell}: its reference {ref_label} does not run here: {ref}",
                    pytrace=False)
    clock = bench_clock if bench_clock is not None else bm.Clock(timing.host_reader)
    clock.reader, clock.calls = timing.host_reader, 1
    s = timing.host_schedule(fn, clock)
    others = itertools.cycle([f for name, f in host_candidates.items()
                              if name not in (host_cell, ref_label) and callable(f)] or [fn])
    between = max(1, s.k // 5)

    def interleave() -> None:  # another row's burst before each round: rounds interleave
        timing.burst(next(others), between)()
        timing.host_reader()

    rounds = timing.RatioRounds(timing.burst(fn, s.k), timing.burst(ref, s.k), timing.host_reader)
    clock.reader, clock.calls = rounds.reader, 1  # the figure: fn's time / ref's, per round
    benchmark.pedantic(rounds.round, setup=interleave, rounds=s.rounds, iterations=1,
                       warmup_rounds=2)
    benchmark.extra_info.update({
        "method": "host", "figure": f"host time / {ref_label}'s", "reference": ref_label,
        "k": s.k, "rounds": s.rounds, "interleaved_calls": between,
        "host_us": statistics.median(rounds.fn_s) / s.k * 1e6,
        "reference_us": statistics.median(rounds.ref_s) / s.k * 1e6})
