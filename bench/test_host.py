"""The ``host`` group: host time per call of ``bench/overhead.py``'s rows on one launch-bound
fp32 tensor - torch.softmax, the drop-ins on "auto" with and without autograd recording, every
CUDA variant by name, torch.compile, the peers that import - as pytest-benchmark cells, so
``--benchmark-compare`` gates a host-time regression like a kernel one.

Each cell: rounds of back-to-back calls (about ``HOST_ROUND_S`` each, then a sync), the clock
counting in calls; before each round, a shorter burst of the other rows, so the rounds
interleave as in ``overhead.py``'s table; the median of ``HOST_ROUNDS`` rounds, gc off.
"""

from __future__ import annotations

import itertools

import pytest

from kernel_lab.measure import benchmarking as bm
from kernel_lab.measure import timing


def test_host(benchmark, bench_clock, host_candidates, host_cell):
    fn = host_candidates.get(host_cell)
    if fn is None:
        pytest.skip(f"{host_cell}: does not take this tensor here")
    if isinstance(fn, str):  # its warm-up call raised: that is a failure of the row
        pytest.fail(fn, pytrace=False)
    clock = bench_clock if bench_clock is not None else bm.Clock(timing.host_reader)
    clock.reader, clock.calls = timing.host_reader, 1
    s = timing.host_schedule(fn, clock)
    others = itertools.cycle([f for name, f in host_candidates.items()
                              if name != host_cell and callable(f)] or [fn])
    between = max(1, s.k // 5)

    def interleave() -> None:  # another row's burst before each round: rounds interleave
        timing.burst(next(others), between)()
        timing.host_reader()

    clock.calls = s.k
    benchmark.pedantic(timing.burst(fn, s.k), setup=interleave, rounds=s.rounds,
                       iterations=1, warmup_rounds=2)
    benchmark.extra_info.update({"method": "host", "k": s.k, "rounds": s.rounds,
                                 "interleaved_calls": between})
