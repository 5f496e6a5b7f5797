"""Cross-entropy as a model's loss: forward + backward through the drop-ins, against PyTorch.

    python bench/loss_step.py [--n 32000,50257,...] [--dtype float32,bfloat16] [--json FILE]
    python bench/loss_step.py --cells 256x262144,1024x262144 --dtype bfloat16 \
        --modes torch,lab,"lab fused" --profile     # given cells, some modes, their kernels
    python bench/loss_step.py --cells 256x262144,512x262144 --json F --append  # rows added
    python bench/loss_step.py --cells 256x262144 --graph   # steps replayed from a CUDA graph
    python bench/loss_step.py --cells 5341x50257 --dtype bfloat16 --modes lab,"lab fused" \
        --ab ON_CHIP_SLOTS=False                   # each lab mode beside itself with a constant

Per (N, dtype), M = 2^28 / N rows of logits that require grad: one training step's loss,
``loss = f(logits, target); loss.backward()``, timed with ``triton.testing.do_bench`` (L2
flushed between calls) for
  torch       F.cross_entropy (PyTorch's kernels; no target check);
  torch.compile  the same under ``torch.compile`` (inductor's kernels, forward and backward),
              compiled for each cell's shapes before the cell is timed;
  lab         kernel_lab.cross_entropy (variant "auto"; targets validated by the kernels, no
              host sync: ``validate="async"``);
  lab sync    the same with ``validate="sync"``: what the check before launch (one host
              sync) costs;
  lab fused   kernel_lab.cross_entropy(..., inplace_backward=True): dlogits written into the
              logits by the forward kernel;
  peers       QuACK / Liger through their own autograd functions, where they import.
Every mode runs a step once before its cell is timed (compiles and first-call JITs stay out of
the figures). Each mode is timed in ROUNDS rounds, the modes in turn within a round and the
order reversed every other round, so neither a mode's place in the run nor the machine's drift
favours one;
a cell shows the median, the min and the spread ((max - min) / median) of its rounds. "x bound"
is the median over the step's bound: the passes over the logits it must make (3 for a step
whose forward only reads them, the backward reading them and writing dlogits; 2 where the
forward writes dlogits: over them in the in-place modes, beside them in the lab's default
step, ``api.DEFAULT_FUSED``), each at the device-to-device copy's GB/s measured
in the same process. x torch is torch's median over the row's. [host] is the host time a step
takes to enqueue (:func:`host_us`); near the median, the cell is host-bound, and that mode's
step is timed once more replayed from a CUDA graph ("graph": the device's own time and its x
bound, as ``--graph`` times every mode; the row's ``graph_us``). ``--peers none``
leaves QuACK and Liger unimported: their import is said in the first line, and it can move the
lab's host time (H100, a run each way: the bf16 step's host gap 97 us without them, 260-312 us with
them, in ``bench/overhead.py``), so compare a cell's [host] with and without.
``--ab NAME=VALUE`` times every lab mode again in the same rounds (``"lab [NAME=VALUE]"``)
with that tuning constant of the launcher (``cuda_variants``), the drop-in (``api``) or the
occupancy rules (``kernel_lab.cuda.occupancy``, e.g. the first wave's phases) set: an A/B of a
rule on the same tensors, machine and minute; repeated, one twin a setting (A/B/C).
Needs a GPU.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import importlib.util
import json
import time
from datetime import datetime, timezone

if __name__ == "__main__":  # no GPU: one line and exit 2, before torch loads
    from gpu_check import require_gpu  # bench/ is sys.path[0] when a script runs

    require_gpu("it times a cross-entropy training step on CUDA tensors against PyTorch's")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from triton.testing import do_bench  # noqa: E402

import kernel_lab  # noqa: E402
from kernel_lab.checking.checker import parse_dtype  # noqa: E402
from kernel_lab.core import plans  # noqa: E402
from kernel_lab.cuda import occupancy  # noqa: E402
from kernel_lab.measure.benchmarking import VOCAB_N, copy_bandwidth  # noqa: E402
from kernel_lab.measure.profiled import kernel_table  # noqa: E402
from kernel_lab.measure.rounds import interleaved, one_line, pick_modes, stats  # noqa: E402
from kernel_lab.ops.cross_entropy import api, cuda_variants  # noqa: E402


def _peers() -> dict:
    out = {}
    if importlib.util.find_spec("quack") is not None:
        try:
            from quack.cross_entropy import cross_entropy as quack_ce

            out["QuACK"] = lambda x, t: quack_ce(x, t)
            out["QuACK in-place"] = lambda x, t: quack_ce(x, t, inplace_backward=True)
        except Exception as e:  # noqa: BLE001 - a broken peer is reported, not fatal
            print(f"QuACK does not import: {type(e).__name__}: {e}")
    if importlib.util.find_spec("liger_kernel") is not None:
        try:
            from liger_kernel.transformers.functional import liger_cross_entropy

            out["Liger (fused)"] = lambda x, t: liger_cross_entropy(x, t)
        except Exception as e:  # noqa: BLE001
            print(f"Liger does not import: {type(e).__name__}: {e}")
    return out


ROUNDS = 5


def earlier_rows(path: str) -> list[dict]:
    """The rows of an earlier ``--json`` file (none where it does not exist yet)."""
    try:
        with open(path) as f:
            rows = json.load(f)
    except FileNotFoundError:
        return []
    if not isinstance(rows, list):
        raise SystemExit(f"--append: {path} holds no loss_step rows")
    return rows


def merged(kept: list[dict], rows: list[dict]) -> list[dict]:
    """``kept`` and the new ``rows``, a cell (dtype, M, N) timed again taking its new row, in
    table order: by dtype (as first seen), N, then M; ``rows`` as timed when nothing is kept."""
    if not kept:
        return rows
    cells = {(r["dtype"], r["m"], r["n"]): r for r in kept + rows}
    dtypes = list(dict.fromkeys(r["dtype"] for r in kept + rows))
    return sorted(cells.values(), key=lambda r: (dtypes.index(r["dtype"]), r["n"], r["m"]))


DEVICE = "cuda"  # where the cells' tensors live (a CPU test of main() puts "cpu" here)


def _passes(mode: str, in_place: bool) -> int:
    """The passes over the logits a mode's step must make: 2 where the forward writes the
    gradient (in place, or beside the logits: the lab's steps while ``api.DEFAULT_FUSED``),
    else 3 (the forward reads; the backward reads and writes)."""
    return 2 if in_place or (mode.startswith("lab") and api.DEFAULT_FUSED) else 3


HOST_BOUND = " host-bound"


def host_bound(host: float, median: float) -> bool:
    """Whether a step whose enqueue takes ``host`` us and that timed ``median`` us waited on
    the host: its host time is within 10 % of its time (the device had little to run ahead)."""
    return host >= 0.9 * median


def bound_us(passes: int, nbytes: int, copy_gbps: float) -> float:
    """Microseconds of ``passes`` passes over ``nbytes`` at the copy's speed (its GB/s counts a
    copy's reads and writes, so one pass - a read, or a write - of B bytes takes B / GB/s)."""
    return passes * nbytes / (copy_gbps * 1e3)


def training_step(loss_fn, x: torch.Tensor, t: torch.Tensor, inplace: bool = False):
    """One forward + backward, as every timer here runs it: in-place modes get a fresh leaf over
    x's buffer (their forward overwrites it, so the timed inputs are the previous step's
    gradient). The loss sees a view of the leaf, as a model's loss sees a matmul's output: a
    gradient that is the logits' own tensor object would otherwise be copied by the leaf's
    AccumulateGrad."""
    leaf = x.detach().requires_grad_()

    def run():
        v = x.detach().requires_grad_() if inplace else leaf
        v.grad = None
        loss_fn(v.view_as(v), t).backward()

    return run


TUNABLE = (cuda_variants, api, occupancy)  # the modules whose constants --ab may set


def parse_ab(spec: str) -> tuple[object, str, object]:
    """(module, NAME, value) of an ``--ab`` spec ``NAME=VALUE``: an upper-case constant of a
    :data:`TUNABLE` module, VALUE a Python literal of the constant's own type. ValueError,
    saying what is wrong, otherwise."""
    name, sep, text = (part.strip() for part in spec.partition("="))
    if not sep or not name.isidentifier() or not name.isupper():
        raise ValueError(f"--ab takes NAME=VALUE with an upper-case NAME, got {spec!r}")
    module = next((m for m in TUNABLE if hasattr(m, name)), None)
    if module is None:
        raise ValueError(f"--ab: no constant {name} in "
                         + " or ".join(m.__name__ for m in TUNABLE))
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        raise ValueError(f"--ab: {text!r} is not a Python literal") from None
    now = getattr(module, name)
    if type(value) is not type(now):
        raise ValueError(f"--ab: {name} is {type(now).__name__} ({now!r}), got {value!r}")
    return module, name, value


@contextlib.contextmanager
def setting(ab: tuple | None):
    """The ``--ab`` constant set for the block (None: nothing set), the plan cache and the
    module's memoized rules cleared on the way in and out: both keep what a constant chose."""
    if ab is None:
        yield
        return
    module, name, value = ab
    before = getattr(module, name)
    setattr(module, name, value)
    plans.forget(module)
    try:
        yield
    finally:
        setattr(module, name, before)
        plans.forget(module)


def warm(modes: dict, x: torch.Tensor, t: torch.Tensor, ab_of=lambda name: None) -> None:
    """One step of every mode on this cell's tensors, untimed: ``torch.compile`` compiles for
    the cell's shapes (its caches reset first: the cells outnumber dynamo's recompile limit, past
    which it would run eager), peers JIT their kernels."""
    torch.compiler.reset()
    for name, (fn, inplace) in modes.items():
        try:
            with setting(ab_of(name)):
                training_step(fn, x, t, inplace)()
        except Exception:  # noqa: BLE001 - the timed rounds report and drop a failing mode
            pass
    torch.cuda.synchronize()


def step_ms(loss_fn, x: torch.Tensor, t: torch.Tensor, inplace: bool = False) -> float:
    """Median ms of one forward + backward (:func:`training_step`)."""
    return do_bench(training_step(loss_fn, x, t, inplace), warmup=5, rep=50,
                    return_mode="median")


def graph_step_ms(loss_fn, x: torch.Tensor, t: torch.Tensor, inplace: bool = False) -> float:
    """Median ms of one forward + backward (:func:`training_step`) replayed from a CUDA graph:
    the device's time for the step with no host in it, as a captured training loop runs it
    (``--graph``). Captured after two warm steps on a side stream; the graph (and its memory
    pool) is dropped after timing."""
    run = training_step(loss_fn, x, t, inplace)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        run()
        run()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    try:  # a step that syncs fails its capture: the caller says so and goes on
        with torch.cuda.graph(graph):
            run()
        return do_bench(graph.replay, warmup=5, rep=50, return_mode="median")
    finally:
        del graph
        torch.cuda.synchronize()
        torch.cuda.empty_cache()


def host_us(loss_fn, x: torch.Tensor, t: torch.Tensor, inplace: bool = False, steps: int = 20,
            sync=torch.cuda.synchronize) -> float:
    """Microseconds of host time a step takes to enqueue: ``steps`` steps back to back with no
    sync between them (as :func:`step_ms` runs them), after a warm one. Where it reaches the
    step's timed median the device waits on the host: the cell is host-bound, and its figure
    is the host's, not the kernels'."""
    run = training_step(loss_fn, x, t, inplace)
    run()
    sync()
    start = time.perf_counter()
    for _ in range(steps):
        run()
    took = time.perf_counter() - start
    sync()
    return took / steps * 1e6


def graph_us_or_none(name: str, loss_fn, inplace: bool, x: torch.Tensor, t: torch.Tensor,
                     uncapturable: set[str]) -> float | None:
    """A host-bound mode's step replayed from a CUDA graph, in us (:func:`graph_step_ms`), or
    None for a mode in ``uncapturable``, or whose capture fails (a host sync in the step: said,
    and the mode added there so no later cell tries it again)."""
    if name in uncapturable:
        return None
    try:
        return graph_step_ms(loss_fn, x, t, inplace) * 1e3
    except Exception as e:  # noqa: BLE001 - a mode that syncs cannot be captured
        print(f"  {name}: no graph replay: {one_line(e)}")
        uncapturable.add(name)
        return None


def cell_text(name: str, st: dict, bound: float, ref: float | None, host: float | None,
              graph: float | None) -> str:
    """One mode's cell of a printed row: median us (min, spread), x bound, x torch, then
    [host us, "host-bound" where it reaches the median, and the graph replay's us and x bound
    where one was timed]."""
    text = (f"{name} {st['median']:6.0f} us ({st['min']:.0f}, {st['spread']:.0%}) "
            f"x{st['median'] / bound:.2f}" + (f" x{ref / st['median']:.2f}" if ref else ""))
    if host is None:
        return text
    bound_by_host = HOST_BOUND if host_bound(host, st["median"]) else ""
    replay = f"; graph {graph:.0f} x{graph / bound:.2f}" if graph is not None else ""
    return f"{text} [host {host:.0f}{bound_by_host}{replay}]"


def profile_step(loss_fn, x: torch.Tensor, t: torch.Tensor, inplace: bool = False) -> str:
    """One forward + backward (after a warm one) under torch.profiler: its kernels by device
    time and the device's idle time between them, as :func:`step_ms` times it."""
    run = training_step(loss_fn, x, t, inplace)
    run()
    return kernel_table(run, rows=12)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", default=",".join(map(str, VOCAB_N)))
    p.add_argument("--dtype", default="float32,bfloat16")
    p.add_argument("--json", default=None, help="write the rows here")
    p.add_argument("--append", action="store_true",
                   help="keep the rows already in --json (a cell timed again replaces its row; "
                        "the table's few-row cells from a second process)")
    p.add_argument("--rounds", type=int, default=ROUNDS, help="rounds per mode (interleaved)")
    p.add_argument("--peers", choices=("auto", "none"), default="auto",
                   help="auto: QuACK and Liger where they import; none: not imported")
    p.add_argument("--cells", default="", metavar="MxN,...",
                   help='rows x classes to time instead of M = 2^28 / N (e.g. "256x262144")')
    p.add_argument("--modes", default="", metavar="NAMES",
                   help='comma-separated modes to time (e.g. "torch,lab,lab fused"; default all)')
    p.add_argument("--graph", action="store_true",
                   help="time each step replayed from a CUDA graph (the device's time alone, "
                        "no host: what a captured training loop sees); no [host] column")
    p.add_argument("--profile", action="store_true",
                   help="also one step of each mode under torch.profiler: its kernels a cell")
    p.add_argument("--ab", action="append", default=[], metavar="NAME=VALUE",
                   help="also every lab mode with this constant of cuda_variants, api or "
                        "occupancy set "
                        '(e.g. "ON_CHIP_SLOTS=False"), in the same rounds; repeat it for '
                        "one twin a setting")
    args = p.parse_args(argv)
    try:
        settings = [parse_ab(spec) for spec in args.ab]
    except ValueError as e:
        p.error(str(e))
    try:
        cells = [tuple(int(v) for v in c.split("x")) for c in args.cells.split(",") if c.strip()]
    except ValueError:
        p.error(f"--cells takes MxN pairs such as 256x262144, got {args.cells!r}")
    if any(len(c) != 2 or min(c) < 1 for c in cells):
        p.error(f"--cells takes MxN pairs of positive sizes, got {args.cells!r}")
    copy = copy_bandwidth(DEVICE)
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    gpu = torch.cuda.get_device_name()
    modes = {"torch": (F.cross_entropy, False),
             "torch.compile": (torch.compile(F.cross_entropy, dynamic=False), False),
             "lab": (kernel_lab.cross_entropy, False),
             "lab sync": (lambda x, t: kernel_lab.cross_entropy(x, t, validate="sync"), False),
             "lab fused": (lambda x, t: kernel_lab.cross_entropy(x, t, inplace_backward=True),
                           True)}
    peers = _peers() if args.peers == "auto" else {}
    for name, fn in peers.items():
        modes[name] = (fn, "in-place" in name or "fused" in name)
    everything = list(modes)
    modes, unknown = pick_modes(modes, args.modes)
    if unknown:
        p.error(f"--modes: unknown {unknown}; modes here: {', '.join(everything)}")
    twins = {f"{name} [{ab[1]}={ab[2]!r}]": (mode, ab) for ab in settings
             for name, mode in modes.items() if name.startswith("lab")}
    if settings and not twins:
        p.error("--ab: no lab mode among --modes to set it for")
    modes.update({name: mode for name, (mode, _) in twins.items()})

    def ab_of(name: str) -> tuple | None:
        return twins[name][1] if name in twins else None
    print(f"{gpu}: loss forward + backward, M*N = 2^28; copy {copy:,.0f} GB/s; "
          f"{args.rounds} interleaved rounds a mode; peers imported: "
          f"{', '.join(peers) or 'none'}")
    print("a cell: median us (min, spread) x bound (3 passes; 2 in place, and for the lab's "
          "default steps, api.DEFAULT_FUSED) x torch [host us a step to "
          f"enqueue; {HOST_BOUND}: host-bound, the figure is the host's; graph: then its "
          "step replayed from a CUDA graph, us and x bound]")
    if args.graph:
        print("--graph: every step replayed from a CUDA graph (the device's time, no host)")
    for module, name, value in settings:
        print(f"--ab: the modes marked [{name}={value!r}] run with {module.__name__}.{name} "
              f"= {value!r} (else {getattr(module, name)!r})")
    if args.append and not args.json:
        p.error("--append keeps the rows of a --json file: name one")
    kept = earlier_rows(args.json) if args.append else []
    # modes no CUDA graph can hold (a host sync in the step): "lab sync" by design, and any
    # whose capture failed once (said then), so no later cell tries again
    uncapturable = {name for name in modes if name.startswith("lab sync")}
    rows = []
    for dtype in map(parse_dtype, args.dtype.split(",")):
        for m, n in cells or [((1 << 28) // n, n) for n in map(int, args.n.split(","))]:
            gen = torch.Generator(device=DEVICE).manual_seed(n)
            x = torch.randn(m, n, device=DEVICE, dtype=dtype, generator=gen) * 2
            t = torch.randint(0, n, (m,), device=DEVICE, generator=gen)
            one_pass = x.numel() * x.element_size()
            warm(modes, x, t, ab_of)

            def timed(name, fn, inplace, x=x, t=t):
                with setting(ab_of(name)):
                    return (graph_step_ms if args.graph else step_ms)(fn, x, t, inplace) * 1e3

            timers = {name: (lambda name=name, mode=mode: timed(name, *mode))
                      for name, mode in modes.items()}
            errors: dict[str, str] = {}  # modes that raised: the row says why they are blank
            got = {name: stats(us)
                   for name, us in interleaved(timers, args.rounds, errors).items()}
            bounds, host, graph = {}, {}, {}
            for name in got:
                with setting(ab_of(name)):  # DEFAULT_FUSED, say, moves the bound too
                    bounds[name] = bound_us(_passes(name, modes[name][1]), one_pass, copy)
                    if not args.graph:  # a replay's host is the graph launch's
                        host[name] = host_us(modes[name][0], x=x, t=t, inplace=modes[name][1])
                        if host_bound(host[name], got[name]["median"]):  # the device's own
                            us = graph_us_or_none(name, *modes[name], x, t, uncapturable)
                            if us is not None:
                                graph[name] = us
            ref = got.get("torch", {}).get("median")
            line = "  ".join(cell_text(k, v, bounds[k], ref, host.get(k), graph.get(k))
                             for k, v in got.items())
            print(f"{str(dtype)[6:]:8s} {m:5d} x {n:6d}  {line}", flush=True)
            rows.append({"dtype": str(dtype)[6:], "m": m, "n": n, "gpu": gpu, "copy_gbps": copy,
                         "measured_utc": stamp, "rounds": args.rounds, "peers": list(peers),
                         "ab": args.ab or None,  # the --ab specs, as given
                         "graph": args.graph,  # CUDA-graph replays: no host in the figures
                         "us": {k: v["median"] for k, v in got.items()},
                         "stats_us": got, "bound_us": bounds, "host_us": host,
                         **({"graph_us": graph} if graph else {}),
                         **({"errors": errors} if errors else {})})
            if args.json:  # after every cell: a run cut short keeps the cells it timed
                with open(args.json, "w") as f:
                    json.dump(merged(kept, rows), f, indent=1)
            if args.profile:
                for name, (fn, inplace) in modes.items():
                    with setting(ab_of(name)):
                        table = profile_step(fn, x, t, inplace)
                    print(f"\n{name}, one step at {m} x {n} {str(dtype)[6:]} under "
                          f"torch.profiler:\n{table}\n", flush=True)
            del x, t, timers
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
