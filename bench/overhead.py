"""Per-call overhead: wall time of back-to-back calls on a small (launch-bound) tensor.

    python bench/overhead.py [--variant online_softmax] [--shape 32x1024]
    python bench/overhead.py --step-profile    # + a cross-entropy step's host by function

Prints microseconds per call, and the ratio to the row's own torch call (:func:`reference`:
``torch.softmax``, ``torch.log_softmax``, or ``torch.softmax`` recording for autograd where the
row records; taken in each round, median over rounds), for torch, the drop-ins on "auto" (with
and without autograd recording), every CUDA variant through ``kernel_lab.run``, torch.compile
and the peers that import; then fp32 rows of 128 under ``do_bench``. First, a bf16 cross-entropy
step alone, its wall time against its kernels' sum (:func:`step_gap`; beside F.cross_entropy's
step and one that launches nothing, the host's floor; and a step's share of back-to-back
steps, as a training loop runs them), and again after the table
where its rows imported a peer (a peer's import has moved the host's figures). Targets: the
drop-ins on auto <= 1.15x, ``run`` of a CUDA variant and a drop-in by name <= 1.3x, a step's gap
<= 30 us.
The table's rows are the ``host`` group of ``pytest bench`` (``test_host.py``), where
``--benchmark-compare`` gates them.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Any, Callable, Sequence

if __name__ == "__main__":  # no GPU: one line and exit 2, before torch loads
    from gpu_check import require_gpu  # bench/ is sys.path[0] when a script runs

    require_gpu("it times the lab's per-call overhead on CUDA tensors against torch.softmax")

import torch  # noqa: E402

import kernel_lab  # noqa: E402
from kernel_lab.core import dispatch  # noqa: E402
from kernel_lab.measure.rounds import interleaved, within_rounds  # noqa: E402


def per_call_us(fn, calls: int = 2000, rounds: int = 7) -> float:
    """Median over rounds of (wall time of ``calls`` back-to-back calls + one sync) / calls."""
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
        samples.append((time.perf_counter() - t0) / calls * 1e6)
    return statistics.median(samples)


def pieces(v, x) -> dict[str, float]:
    """Each step of a warm ``run(v.name, x)`` timed alone (``v``: a CUDA row variant), in the
    order the call takes them: where its microseconds go beside torch's own call."""
    from cupy.cuda import driver, runtime

    from kernel_lab.core import plans
    from kernel_lab.cuda import deferred, interop, jit

    kernel_lab.run(v.name, x)  # plan made, launch recorded
    plan = plans.for_variant(v.name, (x,), {})
    replay = getattr(plan.replaying, "replay", None)
    if replay is None:
        raise SystemExit(f"--pieces: {v.name} is not replayed on this tensor (several launches, "
                         "or not a CUDA row variant): name one that is, e.g. online_softmax")
    key = replay.module.key
    out = torch.empty_like(x)
    pointers = [(out if w < 0 else x).data_ptr() for w in replay.owners]
    rec = replay.launch.launch
    stream = interop.current_stream_ptr(rec.device_index)
    args = list(rec.args)  # the recorded arguments on live tensors (out, x): never a freed one
    for i, p in zip(replay.launch.slots, pointers):
        args[i] = p
    args = tuple(args)
    steps = {
        "torch.softmax (the reference call)": lambda: torch.softmax(x, -1),
        f'run("{v.name}") (all of it)': lambda: kernel_lab.run(v.name, x),
        "deferred.raise_pending": deferred.raise_pending,
        "plans.for_variant (signature key, lookup)": lambda: plans.for_variant(v.name, (x,), {}),
        "replay: the reload check (inline, not due)": lambda: (
            jit.clock() >= replay.module.due_at or replay.module.key != key),
        "replay: the loaded function (once due)": lambda: replay.load(replay.expr,
                                                                     replay.device_index),
        "replay: torch.empty_like": lambda: torch.empty_like(x),
        "replay: the data pointers": lambda: (out.data_ptr(), x.data_ptr()),
        "PreparedLaunch(pointers) (the replay's full path)": lambda: replay.launch(pointers),
        "  runtime.getDevice": runtime.getDevice,
        "  current_stream_ptr": lambda: interop.current_stream_ptr(rec.device_index),
        "  driver.launchKernel (raw)": lambda: driver.launchKernel(
            replay.launch.ptr, *replay.launch.shape, stream, replay.launch.params, 0),
        "  torch.neg(x, out=) (torch's own launch, no allocation)": lambda: torch.neg(x, out=out),
        "replay (all of it)": lambda: plan.call((x,), {}),  # (last: it re-points the buffer)
        "interop.launch (an unrecorded launch)": lambda: interop.launch(
            rec.fn, rec.grid, rec.block, args, device_index=rec.device_index,
            shared_mem=rec.shared_mem, signature=rec.signature),
    }
    return {name: per_call_us(f, calls=5000, rounds=5) for name, f in steps.items()}


HOST_SHAPE = (32, 1024)  # fp32: launch-bound on any GPU; the table's and the host group's tensor
PEERS = ("peer_quack", "peer_liger")


def host_cells(ops: Sequence[str] | None = None, chosen: Sequence[str] | None = None,
               ) -> dict[str, tuple[str, str | None]]:
    """The table's rows without a device: label -> (op, variant it runs by name, or None).

    ``ops``: only rows of these ops; ``chosen``: only by-name rows of these variants or
    backends (None: all). The pytest-benchmark ``host`` group is parametrized from this."""
    rows: dict[str, tuple[str, str | None]] = {
        "torch.softmax": ("softmax", None),
        "kernel_lab.softmax (auto)": ("softmax", None),
        "torch.log_softmax": ("log_softmax", None),
        "kernel_lab.log_softmax (auto)": ("log_softmax", None),
        "torch.softmax, autograd recording": ("softmax", None),
        "kernel_lab.softmax (auto), autograd recording": ("softmax", None),
        'kernel_lab.softmax(x, variant="fast_softmax")': ("softmax", "fast_softmax"),
    }
    for op in ("softmax", "log_softmax"):
        for v in kernel_lab.variants(op, backend="cuda"):
            rows[f'run("{v.name}")'] = (op, v.name)
    rows["torch.compile(torch.softmax)"] = ("softmax", "compile_naive")  # with `compile` chosen
    for name in PEERS:
        try:
            v = kernel_lab.get(name)
        except kernel_lab.UnknownVariantError:
            continue
        rows[f"{name} (its own launch path)"] = (v.op, name)

    def keep(op: str, name: str | None) -> bool:
        if ops is not None and op not in ops:
            return False
        if name is None or chosen is None:
            return True
        return name in chosen or kernel_lab.get(name).backend in chosen

    return {label: spec for label, spec in rows.items() if keep(*spec)}


def reference(label: str) -> str:
    """The row a host cell's time is divided by: its op's torch call, the one that records for
    autograd where the row records (the ``host`` group's figure, ``test_host.py``)."""
    if label.endswith("autograd recording"):
        return "torch.softmax, autograd recording"
    op = host_cells().get(label, ("softmax",))[0]
    return "torch.log_softmax" if op == "log_softmax" else "torch.softmax"


def candidates(x: torch.Tensor, labels: Sequence[str] | None = None,
               ) -> dict[str, Callable[[], Any]]:
    """The table's calls, each on the same tensor: torch, the lab's drop-ins (auto), every CUDA
    variant by name, torch.compile, and the peers that import and take ``x``; only ``labels``
    (:func:`host_cells`) when given."""
    rows = _all_candidates(x, labels)
    return {k: f for k, f in rows.items() if labels is None or k in labels}


def _all_candidates(x: torch.Tensor, labels: Sequence[str] | None) -> dict:
    xg = x.detach().clone().requires_grad_()
    rows = {
        "torch.softmax": lambda: torch.softmax(x, -1),
        "kernel_lab.softmax (auto)": lambda: kernel_lab.softmax(x),
        "torch.log_softmax": lambda: torch.log_softmax(x, -1),
        "kernel_lab.log_softmax (auto)": lambda: kernel_lab.log_softmax(x),
        "torch.softmax, autograd recording": lambda: torch.softmax(xg, -1),
        "kernel_lab.softmax (auto), autograd recording": lambda: kernel_lab.softmax(xg),
    }
    if kernel_lab.get("fast_softmax").supports(x) is None:
        rows['kernel_lab.softmax(x, variant="fast_softmax")'] = \
            lambda: kernel_lab.softmax(x, -1, "fast_softmax")
    for v in kernel_lab.variants():
        if v.backend == "cuda" and v.op in ("softmax", "log_softmax") and v.supports(x) is None:
            rows[f'run("{v.name}")'] = lambda v=v: kernel_lab.run(v.name, x)
    wanted = labels is None or "torch.compile(torch.softmax)" in labels
    if x.is_cuda and wanted:  # (inductor on a CPU compiles for many seconds; compile only asked)
        compiled = torch.compile(lambda t: torch.softmax(t, -1), fullgraph=True)
        rows["torch.compile(torch.softmax)"] = lambda: compiled(x)
    for name in PEERS:
        try:
            v = kernel_lab.get(name)
        except kernel_lab.UnknownVariantError:
            continue
        if v.supports(x) is None:
            rows[f"{name} (its own launch path)"] = lambda v=v: v.fn(x)
    return rows


def table(x: torch.Tensor, repeats: int) -> dict[str, tuple[float, float]]:
    """Per candidate: (median us per call, median of its time over its reference's) over
    ``repeats`` rounds, each timing every candidate once (order reversed every other round).
    The ratio is taken round by round: a busy host slows a round's calls alike, so the ratio
    holds where absolute times drift by 20 % between rounds."""
    rows = candidates(x)
    samples = interleaved({name: (lambda fn=fn: per_call_us(fn, calls=500, rounds=1))
                           for name, fn in rows.items()}, repeats)
    return {k: (t["median"], t["ratio"]) for k, t in within_rounds(samples, reference).items()}


def launch_bound(ns_rows=(256, 512, 1024, 1536, 2048, 2432), n: int = 128) -> None:
    """fp32 rows of 128 back to back under triton.testing.do_bench: lab vs torch throughput,
    and what "auto" picks."""
    from triton.testing import do_bench

    print(f"launch-bound rows x {n} fp32 (do_bench, ms; lab / torch throughput):")
    for m in ns_rows:
        x = torch.randn(m, n, device="cuda")
        t_torch = do_bench(lambda x=x: torch.softmax(x, -1))
        t_lab = do_bench(lambda x=x: kernel_lab.softmax(x))
        pick = dispatch.choose_variant("softmax", x, dim=-1).name
        print(f"  {m:5d} x {n}: torch {t_torch * 1e3:6.2f} us  lab {t_lab * 1e3:6.2f} us  "
              f"{t_torch / t_lab:4.2f}x  (auto: {pick})")


DEVICE = "cuda"  # where the step gap's tensors live (a CPU test of it puts "cpu" here)
CE_STEPS = ((4096, 32000), (512, 32000))  # bf16 (rows, classes): device-bound, then short
STEP_GAP_US = 30.0  # the goal: a step's wall time <= its kernels' sum + this


class NoKernelStep(torch.autograd.Function):
    """A loss that launches nothing: its forward allocates a gradient like the input and a 0-d
    loss, its backward returns that gradient. Timed as a step, it is the host's floor for any
    Python autograd step on this machine (allocations, the autograd engine, and the one fill
    kernel of ``loss.backward()``'s ``ones_like``)."""

    @staticmethod
    def forward(ctx, x, t):
        ctx.dx = torch.empty_like(x)
        return x.new_empty((), dtype=torch.float32)

    @staticmethod
    def backward(ctx, g):
        dx, ctx.dx = ctx.dx, None
        return dx, None


def step_gap(rows: int, n: int, rounds: int = 21, profiled: int = 5,
             loop: int = 50) -> dict[str, dict]:
    """A bf16 cross-entropy training step (``loss.backward()`` included) on its own, the device
    idle before and after: the median wall time from the call to the last kernel's end (synced),
    against the sum of the step's kernel times (torch.profiler, device events, per step). The
    gap is what the host adds a step: launch latency, Python, any bubble or sync between
    kernels. ``host_us``: the median time until the step returns, before the sync: near the
    wall, the step is host-bound (or waited in a sync); far below it with a large gap, the
    device idled between kernels. ``forward_us``: the part of it until the loss returns (the
    lab's forward also enqueues the gradient's kernels, which torch's backward does).
    ``F.cross_entropy``'s own step, timed the same way, is the reference;
    :class:`NoKernelStep`'s is the host's floor (its gap is all host). ``loop_us``: a step's
    share of ``loop`` back-to-back steps (one sync at the end, as in a training loop, where the
    host runs ahead while the device is busy), median of ``rounds // 3`` such loops;
    ``loop_gap_us``: that less the kernels."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    x = torch.randn(rows, n, device=DEVICE, dtype=torch.bfloat16).requires_grad_()
    t = torch.randint(0, n, (rows,), device=DEVICE)
    out = {}
    for name, loss in (("kernel_lab.cross_entropy", kernel_lab.cross_entropy),
                       ("F.cross_entropy", torch.nn.functional.cross_entropy),
                       ("no-kernel autograd step", NoKernelStep.apply)):
        def step(loss=loss) -> float:
            x.grad = None
            out = loss(x, t)
            forward_done = time.perf_counter()
            out.backward()
            return forward_done

        for _ in range(10):
            step()
        walls, hosts, forwards = [], [], []
        for _ in range(rounds):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            forward_done = step()
            t1 = time.perf_counter()  # the host is done enqueuing (or was held in a sync)
            torch.cuda.synchronize()
            walls.append((time.perf_counter() - t0) * 1e6)
            hosts.append((t1 - t0) * 1e6)
            forwards.append((forward_done - t0) * 1e6)
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(profiled):
                step()
            torch.cuda.synchronize()
        kernels = sum(e.device_time_total for e in prof.events()
                      if e.device_type == DeviceType.CUDA) / profiled
        loops = []
        for _ in range(max(1, rounds // 3)):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(loop):
                step()
            torch.cuda.synchronize()
            loops.append((time.perf_counter() - t0) / loop * 1e6)
        wall, looped = statistics.median(walls), statistics.median(loops)
        out[name] = {"wall_us": wall, "kernels_us": kernels, "gap_us": wall - kernels,
                     "host_us": statistics.median(hosts),
                     "forward_us": statistics.median(forwards),
                     "loop_us": looped, "loop_gap_us": looped - kernels}
    return out


def step_host_profile(rows: int, n: int, steps: int = 300, top: int = 25) -> str:
    """Where a bf16 cross-entropy step's host time goes: ``steps`` back-to-back training steps
    of ``kernel_lab.cross_entropy`` (after warm ones) under cProfile, its ``top`` calls by own
    time, C calls (allocations, driver launches, stream queries) each their own row. cProfile
    adds to every Python call, so read the rows against each other, not as the step's time."""
    import cProfile
    import io
    import pstats

    x = torch.randn(rows, n, device=DEVICE, dtype=torch.bfloat16).requires_grad_()
    t = torch.randint(0, n, (rows,), device=DEVICE)

    def run(k: int) -> None:
        for _ in range(k):
            x.grad = None
            kernel_lab.cross_entropy(x, t).backward()

    run(20)
    torch.cuda.synchronize()
    prof = cProfile.Profile()
    prof.runcall(run, steps)
    torch.cuda.synchronize()
    out = io.StringIO()
    stats = pstats.Stats(prof, stream=out)
    stats.sort_stats("tottime").print_stats(top)
    return (f"{rows} x {n} bf16 cross-entropy step, host by function over {steps} steps "
            f"(cProfile; us a step = tottime / {steps} x 1e6):\n" + out.getvalue())


PEER_PACKAGES = ("quack", "liger_kernel", "cut_cross_entropy")


def peers_imported() -> list[str]:
    """The peers' packages this process has imported so far."""
    return [name for name in PEER_PACKAGES if name in sys.modules]


def print_step_gaps(when: str) -> None:
    """:func:`step_gap` of every :data:`CE_STEPS` cell, ``when`` said in the heading."""
    print(f"a bf16 cross-entropy step alone, {when} (synced; goal: wall <= kernels + "
          f"{STEP_GAP_US:.0f} us), and a step's share of back-to-back steps (loop):")
    for rows, n in CE_STEPS:
        got = step_gap(rows, n)
        ref = got["F.cross_entropy"]["gap_us"]  # the same host's own step: what it can reach
        for name, r in got.items():
            lab = name == "kernel_lab.cross_entropy"
            mark = ("" if not lab else
                    ("  ok" if r["gap_us"] <= STEP_GAP_US else "  OVER")
                    + f" ({r['gap_us'] - ref:+.1f} us on F.cross_entropy's gap)")
            loop_mark = "" if not lab else "  ok" if r["loop_gap_us"] <= STEP_GAP_US else "  OVER"
            print(f"  {rows:5d} x {n} {name:<25} wall {r['wall_us']:7.1f} us  kernels "
                  f"{r['kernels_us']:7.1f} us  gap {r['gap_us']:6.1f} us  host "
                  f"{r['host_us']:6.1f} us (forward {r['forward_us']:5.1f}){mark}; loop "
                  f"{r['loop_us']:7.1f} us a step, gap {r['loop_gap_us']:6.1f} us{loop_mark}",
                  flush=True)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--variant", default="online_softmax")
    p.add_argument("--shape", default="32x1024")
    p.add_argument("--repeats", type=int, default=15, help="interleaved rounds of the table")
    p.add_argument("--profile", action="store_true", help="cProfile the launcher: top 15 calls")
    p.add_argument("--pieces", action="store_true",
                   help="time each step of a warm run(VARIANT, x) on its own")
    p.add_argument("--step-profile", action="store_true",
                   help="cProfile a bf16 cross-entropy step (the first CE_STEPS cell): its "
                        "host time by function")
    args = p.parse_args(argv)
    m, n = (int(s) for s in args.shape.split("x"))
    x = torch.randn(m, n, device="cuda")
    v = kernel_lab.get(args.variant)
    # the step first: the table imports every installed peer (its rows), and a peer's import
    # has been seen to move the host's figures; the step again after, where one was imported
    before = peers_imported()
    print_step_gaps("no peer imported" if not before else "peers imported: " + ", ".join(before))
    print(f"{torch.cuda.get_device_name()}, {m}x{n} fp32, back-to-back calls, medians of "
          f"{args.repeats} interleaved rounds (the ratio: of each round's own ratios):")
    for name, (us, ratio) in table(x, args.repeats).items():
        print(f"  {name:<48} {us:7.2f} us/call  {ratio:5.2f}x {reference(name)}")
    launch_bound()
    after = peers_imported()
    if after != before:
        print_step_gaps("again, peers imported: " + ", ".join(after))
    if args.pieces:
        print("pieces of the launch path (us per call, back-to-back, no profiler):")
        for name, us in pieces(v, x).items():
            print(f"  {name:<45} {us:7.2f}")
    if args.step_profile:
        print(step_host_profile(*CE_STEPS[0]))
    if args.profile:
        import cProfile
        import pstats

        prof = cProfile.Profile()
        prof.runcall(lambda: [kernel_lab.run(v.name, x) for _ in range(5000)])
        pstats.Stats(prof).sort_stats("tottime").print_stats(15)


if __name__ == "__main__":
    main()
