"""Timing, bytes, GB/s and the copy roofline: what `pytest bench` and `kernel_lab bench` share.

Decisions (see DESIGN.md "Measuring"):

* **Device time per call** is the figure pytest-benchmark stores and compares, and the one the
  sweep's GB/s come from. :func:`prepare` picks the method per cell from measured times
  (:mod:`kernel_lab.measure.timing`): eager back-to-back calls read with CUDA events where the
  device is the slower side, a CUDA graph of K calls replayed and event-timed where launching is
  (the launch-bound presets ``small`` and ``seed``); a launch-bound variant that cannot be captured
  (peers) stays eager. Rounds last >= ``ROUND_S`` (20 ms) and >= ``HOST_LATENCY_ROUNDS`` x one
  call's host time: each round starts from an idle GPU, so the first call's host latency is idle
  time inside it. (A torch.compile wrapper spends ~0.5 ms of host time per call; 5 ms rounds
  read 6-10 % slow against CUDA events on an H200: hence 20 ms.) The method, K, rounds and the
  host time per call go into the record.
* **Host time** is measured apart, in the ``host`` group of ``pytest bench``
  (``bench/test_host.py``); :func:`calibrate` keeps the wall-time schedule (host included) for
  tools that race what a caller pays (``bench/auto_check.py``).
* **Cross-check.** :func:`cuda_event_median` brackets short bursts of back-to-back calls with
  CUDA events, one call queued ahead so the stream is busy when the start event fires, and
  takes the median per call. (Bracketing single calls, do_bench style, puts host launch gaps
  inside the events: two-kernel variants read up to 20 % slow on an H200.) A large gap between
  it and a device-bound cell's figure means a host sync inside the variant.
* **Memory** (:mod:`kernel_lab.measure.peak_memory`): each record carries the variant's peak device
  memory above its inputs, for the forward and, for ops with a backward, a step.
* **Same inputs for every variant** of one (op, dtype, shape): :class:`WorkloadCache` builds
  them once from ``Op.make_inputs`` (random normals, never zeros) with a fixed seed. Inputs
  smaller than twice the L2 are cloned into several copies that calls rotate through, so no
  variant is timed out of a warm L2. The float64 reference is computed once per workload.
* **Roofline.** :func:`copy_bandwidth` times a device-to-device copy once per process (read +
  write bytes / time); GB/s of a variant is reported as a % of it.
* **CPU mode** (``device="cpu"``) runs the same code path with a plain ``perf_counter`` timer:
  it exercises the harness on a GPU-less machine; its numbers say nothing about kernels.
"""

from __future__ import annotations

import functools
import math
import statistics
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Sequence

import torch

from kernel_lab.checking.checker import DTYPE_NAMES, dtype_name, parse_dtype  # noqa: F401  (re-exported)
from kernel_lab.core.contract import Op
from kernel_lab.core.reference import CheckResult
from kernel_lab.core.registry import Variant, get_op, trusted_inputs, variants
from kernel_lab.measure import timing
from kernel_lab.measure.machine import (  # noqa: F401  (re-exported: the sweep and bench/ use bm.<name>)
    NO_GPU,
    PEER_DISTRIBUTIONS,
    device_label,
    device_mismatch,
    driver_version,
    gpu_info,
    library_versions,
    machine_info,
)
from kernel_lab.measure.peak_memory import Peak, measure
from kernel_lab.measure.timing import (  # noqa: F401  (re-exported: bench/ and the tests use bm.<name>)
    BUDGET_S,
    HOST_LATENCY_ROUNDS,
    MAX_ITERATIONS,
    MAX_ROUNDS,
    MIN_ROUNDS,
    ROUND_S,
    Clock,
    Schedule,
    Timing,
    schedule,
    time_rounds,
)

EVENT_BUDGET_S = 0.05  # work bracketed by events for the cross-check
MAX_COPIES = 1024  # rotation copies for tiny inputs (launch-bound anyway)
SEED = 0

DTYPES = DTYPE_NAMES  # every accepted spelling, one table (kernel_lab.checking.checker)


def has_cuda() -> bool:
    """Whether a CUDA GPU is usable here (queried when called, never at import)."""
    return torch.cuda.is_available()


# -- shapes: presets and cases (kernel_lab.measure.presets) ----------------------------------------
from kernel_lab.measure.presets import (  # noqa: E402,F401  (re-exported: the sweep, bench/ and tests use bm.<name>)
    CPU_BUDGET_S,
    DEFAULT_PRESET,
    ELEMENTS,
    LOSS_OPS,
    PRESETS,
    ROW_OPS,
    SWEEP_N,
    VOCAB_N,
    Cell,
    CpuShare,
    Preset,
    cpu_share,
    parse_shape,
    run_cost_s,
    select,
    share_cost_s,
    split_tokens,
)


def peer_missing(variant: Variant) -> str | None:
    """Why a peer variant's package does not import here (None: it does, or no probe).

    Protocol: a peer's launcher may carry ``fn.peer_missing() -> reason | None``.
    """
    probe = getattr(variant.fn, "peer_missing", None)
    return probe() if probe is not None else None


def add_peers(pairs: Sequence[tuple[Cell, Variant]], *, importable_only: bool = True,
              ) -> list[tuple[Cell, Variant]]:
    """``pairs`` plus, in each cell, every peer variant (backend ``peer``) of its op not chosen
    yet, after the cell's own variants; ``importable_only``: only peers whose package imports
    here (:func:`peer_missing`), else all of them (a missing one is then skipped, its reason in
    its column). Cell-major order is kept."""
    by_cell: dict[Cell, list[Variant]] = {}
    for cell, v in pairs:
        by_cell.setdefault(cell, []).append(v)
    out = []
    for cell, chosen in by_cell.items():
        names = {v.name for v in chosen}
        peers = [v for v in variants(cell.op, backend="peer") if v.name not in names
                 and (not importable_only or peer_missing(v) is None)]
        out.extend((cell, v) for v in (*chosen, *peers))
    return out


# -- inputs -----------------------------------------------------------------------------------
def working_set_bytes(device: str) -> int:
    """Bytes the rotated inputs must span: twice the L2 on a GPU, nothing on a CPU."""
    if not device.startswith("cuda"):
        return 0
    l2 = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0) or 60 * 2**20
    return 2 * l2


@dataclass
class Workload:
    """The inputs of one cell on one device, shared by every variant timed on it."""

    cell: Cell
    op: Op
    device: str
    copies: list[tuple]  # rotation sets; copies[0] is the one checked against the reference
    kwargs: dict
    bytes_moved: int
    checked: tuple | None = None  # what the float64 check runs on (Op.check_slice); None: inputs
    flops: int | None = None  # a matmul-bound op's floating-point operations a call (Op.flops)
    _ref: torch.Tensor | None = field(default=None, repr=False)

    @property
    def inputs(self) -> tuple:
        return self.copies[0]

    @property
    def check_inputs(self) -> tuple:
        return self.inputs if self.checked is None else self.checked

    def reference(self) -> torch.Tensor:
        if self._ref is None:
            self._ref = self.op.reference(*self.check_inputs, **self.kwargs)
        return self._ref

    def caller(self, variant: Variant) -> Callable[[], Any]:
        """A no-argument call of ``variant`` that moves to the next input copy each time. Time
        it inside ``registry.trusted_inputs()`` (:func:`calibrate` does): the inputs are
        ``Op.make_inputs``', so value checks that sync the host stay out of the timing."""
        copies, kw, fn = self.copies, self.kwargs, variant.fn
        if len(copies) == 1:
            (args,) = copies
            return lambda: fn(*args, **kw)
        state = [0]

        def call() -> Any:
            i = state[0] = (state[0] + 1) % len(copies)
            return fn(*copies[i], **kw)

        return call


def make_workload(cell: Cell, device: str) -> Workload:
    op = get_op(cell.op)
    gen = torch.Generator().manual_seed(SEED)
    inputs = tuple((op.bench_inputs or op.make_inputs)(cell.shape, cell.dtype, device, gen))
    nbytes = sum(t.numel() * t.element_size() for t in inputs if isinstance(t, torch.Tensor))
    n = min(MAX_COPIES, max(1, math.ceil(working_set_bytes(device) / max(1, nbytes))))
    copies = [inputs] + [
        tuple(t.clone() if isinstance(t, torch.Tensor) else t for t in inputs) for _ in range(n - 1)
    ]
    kw = dict(op.kwargs)
    checked = op.check_slice(inputs) if op.check_slice is not None else None
    flops = int(op.flops(*inputs, **kw)) if op.flops is not None else None
    return Workload(cell, op, device, copies, kw, int(op.bytes_moved(*inputs, **kw)), checked,
                    flops)


class WorkloadCache:
    """Keeps the latest workload only: cells arrive cell-major, so memory stays one cell."""

    def __init__(self, device: str) -> None:
        self.device = device
        self._key: Cell | None = None
        self._work: Workload | None = None

    def get(self, cell: Cell) -> Workload:
        if self._key != cell:
            self._work = self._key = None  # free the previous cell before allocating the next
            if self.device.startswith("cuda"):
                torch.cuda.empty_cache()
            self._work, self._key = make_workload(cell, self.device), cell
        return self._work  # type: ignore[return-value]


def check_variant(variant: Variant, work: Workload) -> CheckResult:
    """Run ``variant`` once on the checked copy (also its warm-up / compile) and compare; where
    the check runs on a slice of the cell (``Op.check_slice``), one more call on the whole cell
    warms it up (a per-shape compile stays out of the timing)."""
    out = variant.fn(*work.check_inputs, **work.kwargs)
    result = work.op.check(out, *work.check_inputs, ref=work.reference(), **work.kwargs)
    if work.checked is not None:
        del out
        variant.fn(*work.inputs, **work.kwargs)
    return result


TIMED = ("ok", "inexact")  # statuses whose records carry timings


def vet(variant: Variant, work: Workload) -> "Record | None":
    """None (time it), or a record saying why not as is: ``skipped`` (its ``supports()``
    reason), ``wrong``, or ``inexact`` - a miss the variant declares in ``known_inexact`` (a
    peer we do not control, e.g. PyTorch's own bf16 backward): still timed, since users run it,
    but marked, never the best of a shape, and never a failure.

    Exceptions from the variant propagate: the caller decides how an error is reported.
    """
    reason = variant.supports(*work.inputs, **work.kwargs)
    if reason is not None:
        return Record.start(work.cell, variant, "skipped", reason)
    result = check_variant(variant, work)
    if not result:
        known = variant.known_inexact.get(work.cell.dtype)
        if known is not None:
            return Record.start(work.cell, variant, "inexact", f"{known}; here: {result.message}")
        return Record.start(work.cell, variant, "wrong", result.message)
    return None


# -- timing (kernel_lab.measure.timing: the schedule, the clocks, the method per cell) -------------
def cuda_sync_timer() -> float:
    """Wall time once the GPU is idle: synchronize, then read the clock (``calibrate``'s
    timer: host-inclusive time per call, what ``bench/auto_check.py`` races)."""
    torch.cuda.synchronize()
    return time.perf_counter()


def timer_for(device: str) -> Callable[[], float]:
    return cuda_sync_timer if device.startswith("cuda") else time.perf_counter


def host_latency(fn: Callable[[], Any]) -> float:
    """Host seconds one call takes to return, started on an idle GPU (median of 5)."""
    return timing.CudaStopwatch().host_latency(fn)


def calibrate(variant: Variant, work: Workload) -> tuple[Callable[[], Any], Schedule, float | None]:
    """The rotating call, its wall-time schedule (``cuda_sync_timer``: host time included, as
    a caller pays it) and, on a GPU, the CUDA-event median cross-check. Time ``fn`` inside
    ``registry.trusted_inputs()`` too, as this does. The benchmarks time cells with
    :func:`prepare` instead (device time per call)."""
    fn = work.caller(variant)
    cuda = work.device.startswith("cuda")
    with trusted_inputs():
        s = schedule(fn, timer_for(work.device), host_latency(fn) if cuda else 0.0)
        event = cuda_event_median(fn, s.estimate_s) if cuda else None
    return fn, s, event


def prepare(variant: Variant, work: Workload, clock: Clock | None = None,
            stopwatch: timing.Stopwatch | None = None,
            cpu_rounds: int | None = None,
            pin: tuple[str, int] | None = None) -> tuple[Timing, float | None]:
    """How a benchmark cell is timed (:func:`kernel_lab.measure.timing.prepare`: device time per
    call, eager calls or a CUDA graph per cell) and the CUDA-event median of eager bursts beside it.
    ``clock``: the timer pytest-benchmark holds for this cell (configured here);
    ``cpu_rounds``: off CUDA, time that many short rounds (``bench``'s CPU share); ``pin``: the
    (method, K) of the run this one is compared with."""
    fn = work.caller(variant)
    with trusted_inputs():
        if not work.device.startswith("cuda"):
            return timing.prepare_cpu(fn, cpu_rounds), None
        t = timing.prepare(fn, copies=len(work.copies), backend=variant.backend,
                           stopwatch=stopwatch, clock=clock, pin=pin)
        event = cuda_event_median(fn, t.schedule.estimate_s) if stopwatch is None else None
    return t, event


def cuda_event_median(fn: Callable[[], Any], estimate_s: float) -> float:
    """Median seconds per call from CUDA events around bursts of back-to-back calls.

    Each sample queues one call first (the stream is then busy when the start event fires, so
    the host's launch latency stays outside), then records events around ``burst`` calls
    (~1 ms of work, at least 2) and divides. One sync at the end. Where launching is slower
    than the kernel, this is the launch rate.
    """
    est = max(estimate_s, 1e-9)
    burst = max(2, min(64, math.ceil(1e-3 / est)))
    samples = max(5, min(200, math.ceil(EVENT_BUDGET_S / (burst * est))))
    events = []
    for _ in range(samples):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        fn()
        start.record()
        for _ in range(burst):
            fn()
        end.record()
        events.append((start, end))
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in events) * 1e-3 / burst


@functools.lru_cache(maxsize=None)
def copy_bandwidth(device: str = "cuda") -> float:
    """Device-to-device copy bandwidth in GB/s (read + write bytes), measured once per process.

    512 MiB (capped at 1/16 of device memory) copied with ``Tensor.copy_``: far past L2, so it
    is the practical HBM ceiling (~4.25 TB/s on an H200, ~88 % of the datasheet's 4.8).
    """
    nbytes = 512 * 2**20
    if device.startswith("cuda"):
        nbytes = min(nbytes, torch.cuda.get_device_properties(device).total_memory // 16)
    else:
        nbytes = 64 * 2**20
    src = torch.randn(nbytes // 4, device=device)
    dst = torch.empty_like(src)
    timer = timer_for(device)
    times = time_rounds(lambda: dst.copy_(src), timer, schedule(lambda: dst.copy_(src), timer))
    return gbps(2 * src.numel() * src.element_size(), statistics.median(times))


def gbps(nbytes: int, seconds: float) -> float:
    return nbytes / seconds / 1e9


# -- what gets recorded ----------------------------------------------------------------------
def kernel_attributes(variant: Variant, work: Workload) -> dict[str, Any]:
    """Registers / spill bytes of the variant's kernel and what it launched, if known.

    Protocol: a launcher may carry ``fn.kernel_attributes(*inputs, **kw) -> dict`` returning
    :func:`kernel_lab.cuda.jit.function_attributes` of the kernel it would launch for these inputs
    (``num_regs``, ``local_size_bytes`` = spills, ...) and optionally ``launches`` (text).
    CUDA variants without it run once while :func:`kernel_lab.cuda.interop.record_launches` records
    every launch: the worst kernel's registers and spills, and ``launches``, each launch as
    ``name <<<grid, block, shared bytes>>>`` (e.g. ``fast_softmax_persist_cluster<float, 16,
    15> <<<315, 160, 40960>>>``), so a saved sweep says which kernel and shape ran per cell.
    Other variants: nothing is recorded.
    """
    hook = getattr(variant.fn, "kernel_attributes", None)
    if hook is not None:
        return dict(hook(*work.inputs, **work.kwargs))
    if variant.backend != "cuda":
        return {}
    from kernel_lab.cuda import interop, jit

    with interop.record_launches() as launched:
        variant.fn(*work.inputs, **work.kwargs)
    attrs = [jit.function_attributes(launch.fn) for launch in launched]
    if not attrs:
        return {}
    return {
        "num_regs": max(a["num_regs"] for a in attrs),
        "local_size_bytes": max(a["local_size_bytes"] for a in attrs),
        "kernels_per_call": len(attrs),
        "launches": "; ".join(describe_launch(launch, jit.kernel_name(launch.fn))
                              for launch in launched),
    }


def describe_launch(launch, name: str | None) -> str:
    """``name <<<grid, block, shared bytes>>>`` of one recorded launch (1-D sizes as numbers)."""

    def dims(d: tuple[int, ...]) -> str:  # trailing 1s dropped: (315, 1, 1) -> "315"
        d = list(d)
        while len(d) > 1 and d[-1] == 1:
            d.pop()
        return "x".join(map(str, d))

    return (f"{name or 'kernel'} <<<{dims(launch.grid)}, {dims(launch.block)}, "
            f"{launch.shared_mem}>>>")


@dataclass
class Record:
    """One (variant, cell) outcome: a table cell, a CSV row, a point on the plot."""

    op: str
    dtype: str
    m: int
    n: int
    variant: str
    backend: str
    status: str  # ok | skipped | wrong | error
    reason: str = ""
    bytes_moved: int | None = None
    median_s: float | None = None
    event_median_s: float | None = None
    gbps: float | None = None
    event_gbps: float | None = None
    pct_of_copy: float | None = None
    copy_gbps: float | None = None
    rounds: int | None = None
    iterations: int | None = None
    registers: int | None = None
    spill_bytes: int | None = None
    kernels: str | None = None  # what one call launched (kernel_attributes' ``launches``)
    method: str | None = None  # how median_s was timed: events | graph | cpu (measure.timing)
    k: int | None = None  # calls per graph replay (graph), 1 otherwise
    host_s: float | None = None  # host seconds of one call from an idle GPU
    mem_fwd_bytes: int | None = None  # peak device memory above the inputs: one forward call
    mem_step_bytes: int | None = None  # ... one forward + backward (ops with a backward)
    mem_note: str = ""  # why a memory figure is missing ("n/a: not a CUDA device", ...)
    shape: str = ""  # the cell's whole shape (the lm-head's T x d x V: m = T, n = V)
    flops: int | None = None  # a matmul-bound op's (Op.flops): its cells read ms and TFLOP/s
    tflops: float | None = None

    @classmethod
    def start(cls, cell: Cell, variant: Variant, status: str = "ok", reason: str = "") -> "Record":
        return cls(cell.op, dtype_name(cell.dtype), cell.shape[0], cell.shape[-1], variant.name,
                   variant.backend, status, reason, shape=cell.shape_id)

    @classmethod
    def crashed(cls, cell: Cell, variant: Variant, exc: BaseException) -> "Record":
        """An ``error`` record: the exception's type and first line (an NVRTC log is long)."""
        first = (str(exc).strip().splitlines() or [""])[0]
        return cls.start(cell, variant, "error", f"{type(exc).__name__}: {first}")

    def fill(self, work: Workload, median_s: float, event_s: float | None, copy: float,
             attrs: dict[str, Any], p: Schedule | None = None, peak: Peak | None = None,
             host_s: float | None = None) -> "Record":
        """Add the numbers: GB/s from the median per call, its share of the copy roofline (and
        TFLOP/s for a matmul-bound op), how it was timed and the memory column."""
        self.bytes_moved, self.median_s, self.event_median_s = work.bytes_moved, median_s, event_s
        self.gbps = gbps(work.bytes_moved, median_s)
        self.event_gbps = gbps(work.bytes_moved, event_s) if event_s else None
        self.copy_gbps, self.pct_of_copy = copy, 100.0 * self.gbps / copy
        if work.flops is not None:
            self.flops, self.tflops = work.flops, work.flops / median_s / 1e12
        self.registers = attrs.get("num_regs")
        self.spill_bytes = attrs.get("local_size_bytes")
        self.kernels = attrs.get("launches")
        if p is not None:
            self.rounds, self.iterations, self.method, self.k = (p.rounds, p.iterations,
                                                                 p.method, p.k)
        self.host_s = host_s
        if peak is not None:
            self.mem_fwd_bytes, self.mem_step_bytes, self.mem_note = (peak.forward, peak.step,
                                                                      peak.note)
        return self

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def memory(variant: Variant, work: Workload) -> Peak:
    """The memory column of ``variant`` on the workload's checked inputs (outside timing)."""
    with trusted_inputs():
        return measure(variant, work.inputs, work.kwargs)


# extra_info of a pytest-benchmark cell: how it was timed, what it moved, its memory
EXTRA = ("backend", "method", "k", "rounds", "iterations", "median_s", "host_s",
         "event_median_s", "bytes_moved", "gbps", "pct_of_copy", "copy_gbps", "event_gbps",
         "flops", "tflops", "mem_fwd_bytes", "mem_step_bytes", "mem_note", "registers",
         "spill_bytes", "kernels")


def extra_info(rec: Record) -> dict[str, Any]:
    """The record's fields for ``benchmark.extra_info`` (unset ones left out; ``median_s`` as
    ``device_s`` on a GPU: the compared figure, named for what it is)."""
    info = {k: v for k, v in rec.as_dict().items() if k in EXTRA and v not in (None, "")}
    if rec.method in ("events", "graph") and "median_s" in info:
        info["device_s"] = info.pop("median_s")
    if rec.mem_fwd_bytes is None and not rec.mem_note:
        info.pop("mem_note", None)
    return info
