"""How a benchmark cell is timed: the schedule of rounds, the clock, and the method per cell.

The figure pytest-benchmark stores and ``--benchmark-compare`` compares (its min / median /
mean) is the time per call that :func:`prepare` chooses to measure, read through a
:class:`Clock` handed to pytest-benchmark as its timer. Decisions:

* **Device time per call on a GPU.** The clock reads CUDA events (record, wait for it, add the
  time since the previous reading), so a round's duration is GPU time, with no host wake-up
  latency. Two methods, chosen per cell from measured times:

  - ``events``: back-to-back eager calls, rounds of >= :data:`ROUND_S`. Where one call's device
    time is >= :data:`DEVICE_BOUND` x its host time, the host queues ahead and the events see
    only kernels: device time per call.
  - ``graph``: launch-bound cells (the host is the slower side). ``K`` back-to-back calls are
    captured in a CUDA graph (K >= the workload's rotation copies, replays of about
    :data:`GRAPH_REPLAY_S`), replays are timed with the same event clock, and the clock counts
    in units of one call (1 / K). Host jitter no longer reaches the figure.

  A compare (``pytest bench --benchmark-compare``) times each cell with the method and K its
  compared run stored: the two methods' figures differ on a real GPU (eager launches cost the
  device time that a graph's do not), and a cell near the rule's edge may choose either.

  A launch-bound variant that cannot be captured (a peer, whose library may launch off the
  current stream or sync the host; or any capture that raises) falls back to ``events``: then
  the figure is the launch rate, and the record says so (``method`` = ``events``, host time
  per call beside it).
* **Host time** is its own group (``bench/test_host.py``): rounds of :data:`HOST_ROUND_S` over
  ``synchronize + perf_counter``, each cell timed with its op's torch call in the same round;
  the stored figure is their ratio (:class:`RatioRounds`), the microseconds beside it.
* The GPU side sits behind :class:`CudaStopwatch`; tests drive :func:`prepare` with a fake one
  (a virtual host and device timeline), so the choice and the figures are checked on a CPU.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass, replace
from typing import Any, Callable, Protocol

import torch

ROUND_S = 20e-3  # one timed round (one clock reading each end) covers at least this much work
HOST_LATENCY_ROUNDS = 100  # ... and at least this many times one call's host time
BUDGET_S = 0.25  # timed work per cell, split into rounds
MIN_ROUNDS, MAX_ROUNDS = 10, 50
MAX_ITERATIONS = 10_000
DEVICE_BOUND = 2.0  # device time >= this x host time per call: eager back-to-back calls
GRAPH_REPLAY_S = 1e-3  # work in one graph replay
MIN_GRAPH_CALLS, MAX_GRAPH_CALLS = 16, 4096
HOST_ROUND_S = 5e-3  # host group: one round of back-to-back calls
HOST_ROUNDS = 41  # a median that holds: host rounds vary more than device ones
CPU_ROUNDS = 3  # ``bench --device cpu`` without --full-cpu: rounds a cell (its figure means
CPU_ROUND_S = 5e-3  # nothing about kernels: the run exercises the harness) of >= this each

METHODS = ("events", "graph", "host", "cpu")


@dataclass(frozen=True)
class Schedule:
    """How one cell is timed: ``rounds`` of ``iterations`` target calls; each target call runs
    ``k`` calls of the variant (a graph replay: k > 1); ``estimate_s``: seconds per variant
    call from the calibration."""

    rounds: int
    iterations: int
    estimate_s: float
    method: str = "events"
    k: int = 1

    @property
    def calls_per_round(self) -> int:
        return self.iterations * self.k


def per_call_estimate(fn: Callable[[], Any], timer: Callable[[], float]) -> float:
    """Seconds a call: 1, 4, 16 ... calls until a burst lasts 1 ms (or MAX_ITERATIONS)."""
    n = 1
    while True:
        t0 = timer()
        for _ in range(n):
            fn()
        dt = timer() - t0
        if dt >= 1e-3 or n >= MAX_ITERATIONS:
            return max(dt / n, 1e-9)
        n *= 4


def schedule(fn: Callable[[], Any], timer: Callable[[], float], host_s: float = 0.0,
             round_s: float = ROUND_S) -> Schedule:
    """Calibrate: iterations so one round lasts ``round_s`` and HOST_LATENCY_ROUNDS x
    ``host_s`` (one call's host latency: each round starts from an idle GPU), rounds so all
    fit BUDGET_S (at least MIN_ROUNDS)."""
    est = per_call_estimate(fn, timer)
    round_s = max(round_s, HOST_LATENCY_ROUNDS * host_s)
    iterations = max(1, min(MAX_ITERATIONS, math.ceil(round_s / est)))
    rounds = max(MIN_ROUNDS, min(MAX_ROUNDS, math.ceil(BUDGET_S / (iterations * est))))
    return Schedule(rounds, iterations, est)


def time_rounds(fn: Callable[[], Any], timer: Callable[[], float], s: Schedule) -> list[float]:
    """Per-call seconds of each round, exactly as pytest-benchmark's pedantic mode measures
    (one warm-up target call first; ``timer`` already counts in calls when ``s.k`` > 1)."""
    fn()
    out = []
    for _ in range(s.rounds):
        t0 = timer()
        for _ in range(s.iterations):
            fn()
        out.append((timer() - t0) / s.iterations)
    return out


class Clock:
    """A pytest-benchmark timer that counts in units of one variant call: ``reader()`` seconds
    (cumulative) divided by ``calls`` (the K calls one target call runs). Set ``reader`` and
    ``calls`` before timing; pytest-benchmark only ever subtracts two readings."""

    def __init__(self, reader: Callable[[], float] | None = None, calls: int = 1,
                 name: str = "device_clock") -> None:
        self.reader, self.calls = reader, calls
        self.__name__ = name  # what pytest-benchmark's JSON names the timer

    def __call__(self) -> float:
        if self.reader is None:
            self.reader = EventReader()
        return self.reader() / self.calls


class EventReader:
    """Device time at the moment the GPU reaches this reading (a CUDA event on the current
    stream, waited for), summed from the previous reading's event: float precision stays that of
    one interval, however long the session."""

    def __init__(self) -> None:
        self._last: Any = None
        self._t = 0.0

    def __call__(self) -> float:
        e = torch.cuda.Event(enable_timing=True)
        e.record()
        e.synchronize()
        if self._last is not None:
            self._t += self._last.elapsed_time(e) * 1e-3
        self._last = e
        return self._t


def host_reader() -> float:
    """Wall time once the GPU is idle: the host group's clock (the CPU's plain clock off CUDA)."""
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()
    return time.perf_counter()


class Stopwatch(Protocol):
    """What :func:`prepare` needs from a device: a clock, one call's host time, a capture."""

    def reader(self) -> Callable[[], float]: ...
    def host_latency(self, fn: Callable[[], Any]) -> float: ...
    def capture(self, fn: Callable[[], Any], k: int) -> Callable[[], Any]: ...


class CudaStopwatch:
    """The real GPU: CUDA-event clock, host latency from an idle GPU, CUDA-graph capture."""

    def reader(self) -> Callable[[], float]:
        return EventReader()

    def host_latency(self, fn: Callable[[], Any]) -> float:
        """Host seconds one call takes to return, started on an idle GPU (median of 5)."""
        samples = []
        for _ in range(5):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            fn()
            samples.append(time.perf_counter() - t0)
        torch.cuda.synchronize()
        return statistics.median(samples)

    def capture(self, fn: Callable[[], Any], k: int) -> Callable[[], Any]:
        """``k`` calls of ``fn`` captured in one CUDA graph (warmed up on the capture's side
        stream first, as torch.cuda.graph asks); its ``replay``. Raises if capture fails."""
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                fn()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(k):
                fn()
        torch.cuda.synchronize()
        return graph.replay


@dataclass
class Timing:
    """A cell ready to time: call ``target`` ``schedule.iterations`` times per round and read
    ``clock`` around each round; ``host_s``: one call's host time (None off CUDA);
    ``note``: why a launch-bound cell is not graph-timed."""

    target: Callable[[], Any]
    schedule: Schedule
    clock: Callable[[], float]
    host_s: float | None = None
    note: str = ""

    def close(self) -> None:
        """Drop the graph (and its memory pool) once timed."""
        self.target = _released


def _released() -> None:
    raise RuntimeError("this timing was closed")


def capture_refusal(backend: str) -> str | None:
    """Why a variant's calls are not captured in a CUDA graph, or None (try it)."""
    if backend == "peer":
        return "a peer's own launch path (its stream and host syncs are not ours)"
    return None


def choose_method(per_call_s: float, host_s: float, refusal: str | None) -> str:
    """``events`` where the device is the slower side (per call >= DEVICE_BOUND x host time),
    else ``graph``, unless capture is refused."""
    if per_call_s >= DEVICE_BOUND * host_s or refusal is not None:
        return "events"
    return "graph"


def graph_calls(device_s: float, copies: int) -> int:
    """K for one replay: about GRAPH_REPLAY_S of work, and at least every rotation copy once."""
    k = max(MIN_GRAPH_CALLS, copies, math.ceil(GRAPH_REPLAY_S / max(device_s, 1e-9)))
    return min(MAX_GRAPH_CALLS, k)


def prepare(fn: Callable[[], Any], *, copies: int = 1, backend: str = "",
            stopwatch: Stopwatch | None = None, clock: Clock | None = None,
            pin: tuple[str, int] | None = None) -> Timing:
    """Choose and set up how ``fn`` (one rotating call of a variant) is timed on a GPU.

    ``clock``: the timer pytest-benchmark was given (configured here); ``stopwatch``: the
    device (default :class:`CudaStopwatch`); ``pin``: (method, K) to time it with instead of
    choosing - a compared run's, so both figures are the same measurement (a borderline cell's
    two methods differ on a GPU: eager launches cost the device time a graph's do not). Run it
    inside ``registry.trusted_inputs()``.
    """
    sw = stopwatch or CudaStopwatch()
    clock = clock if clock is not None else Clock()
    clock.reader, clock.calls = sw.reader(), 1
    host_s = sw.host_latency(fn)
    eager = schedule(fn, clock, host_s)
    refusal = capture_refusal(backend)
    method = pin[0] if pin is not None and pin[0] in ("events", "graph") else \
        choose_method(eager.estimate_s, host_s, refusal)
    if method == "events" or refusal is not None:
        note = f"launch-bound, not captured: {refusal}" if refusal else ""
        return Timing(fn, eager, clock, host_s, note)
    try:
        k = max(1, int(pin[1])) if pin is not None else graph_calls(eager.estimate_s, copies)
        replay = sw.capture(fn, k)
        if pin is None:
            device_s = _replay_seconds(replay, clock) / k
            if k * device_s < GRAPH_REPLAY_S / 2 and k < MAX_GRAPH_CALLS:  # calls were quicker
                k2 = graph_calls(device_s, copies)
                if k2 > k:
                    k, replay = k2, sw.capture(fn, k2)
    except Exception as e:  # noqa: BLE001 - a host sync or a foreign stream: time it eagerly
        first = (str(e).strip().splitlines() or [""])[0]
        return Timing(fn, eager, clock, host_s,
                      f"launch-bound, capture failed: {type(e).__name__}: {first[:120]}")
    s = schedule(replay, clock)  # rounds of replays, read in seconds per replay
    clock.calls = k  # from here on the clock counts in calls: pytest-benchmark's figure
    return Timing(replay, replace(s, method="graph", k=k, estimate_s=s.estimate_s / k),
                  clock, host_s)


def _replay_seconds(replay: Callable[[], Any], clock: Clock, n: int = 3) -> float:
    """Median seconds of one replay (after a warm-up replay), read with ``clock`` at K = 1."""
    replay()
    samples = []
    for _ in range(n):
        t0 = clock()
        replay()
        samples.append(clock() - t0)
    return statistics.median(samples)


def prepare_cpu(fn: Callable[[], Any], rounds: int | None = None) -> Timing:
    """Off CUDA: the same rounds on ``perf_counter`` (exercises the harness; no kernel figure).
    ``rounds``: exactly that many rounds of >= CPU_ROUND_S (``bench``'s CPU share) instead."""
    s = (schedule(fn, time.perf_counter) if rounds is None
         else short_schedule(fn, time.perf_counter, rounds))
    return Timing(fn, replace(s, method="cpu"), time.perf_counter)


def short_schedule(fn: Callable[[], Any], timer: Callable[[], float], rounds: int,
                   round_s: float = CPU_ROUND_S) -> Schedule:
    """``rounds`` rounds of about ``round_s`` each (at least one call): a slow call (an
    interpreted Triton kernel on a CPU) costs calibration + warm-up + ``rounds`` calls."""
    est = per_call_estimate(fn, timer)
    return Schedule(max(1, rounds), max(1, min(MAX_ITERATIONS, math.ceil(round_s / est))), est)


def host_schedule(fn: Callable[[], Any], timer: Callable[[], float]) -> Schedule:
    """Host group: calls per round so a round lasts HOST_ROUND_S; HOST_ROUNDS rounds."""
    s = schedule(fn, timer, round_s=HOST_ROUND_S)
    calls = max(1, min(MAX_ITERATIONS, math.ceil(HOST_ROUND_S / s.estimate_s)))
    return Schedule(HOST_ROUNDS, 1, s.estimate_s, "host", calls)


class RatioRounds:
    """Host-group rounds that time ``fn`` and its reference ``ref`` back to back - the order
    alternating round by round - and advance a virtual clock by their ratio. pytest-benchmark,
    reading :meth:`reader` around each :meth:`round`, then stores and compares ``fn``'s time as
    a multiple of ``ref``'s taken in the same moments: a busy machine slows both, the ratio holds.
    ``read``: the real clock (:func:`host_reader`); ``fn_s`` / ``ref_s``: each round's seconds."""

    def __init__(self, fn: Callable[[], Any], ref: Callable[[], Any],
                 read: Callable[[], float]) -> None:
        self.fn, self.ref, self.read = fn, ref, read
        self.now = 0.0
        self.fn_s: list[float] = []
        self.ref_s: list[float] = []

    def reader(self) -> float:
        return self.now

    def round(self) -> None:
        flip = len(self.fn_s) % 2 == 1
        first, second = (self.ref, self.fn) if flip else (self.fn, self.ref)
        t0 = self.read()
        first()
        t1 = self.read()
        second()
        t2 = self.read()
        fn_s, ref_s = (t2 - t1, t1 - t0) if flip else (t1 - t0, t2 - t1)
        self.fn_s.append(fn_s)
        self.ref_s.append(ref_s)
        self.now += fn_s / ref_s


def burst(fn: Callable[[], Any], calls: int) -> Callable[[], None]:
    """One target call that runs ``fn`` ``calls`` times back to back (a host-group round)."""

    def run() -> None:
        for _ in range(calls):
            fn()

    return run
