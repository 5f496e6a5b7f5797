"""``python -m kernel_lab bench``: sweep shapes, print a GB/s table, save JSON + CSV + a plot.

Decisions:

* The same selection (:func:`kernel_lab.measure.benchmarking.select`), inputs, correctness gate and
  timing (:func:`kernel_lab.measure.benchmarking.prepare`: device time per call, eager or a CUDA
  graph per cell) as ``pytest bench``, so the two never disagree on what was measured.
* The memory column: each timed cell's second line is the variant's peak device memory above
  its inputs, forward / step (:mod:`kernel_lab.measure.peak_memory`); the JSON and CSV carry it as
  ``mem_fwd_bytes`` / ``mem_step_bytes``, the plot's legend as a multiple of one M x N tensor.
  Off CUDA each table's title says "memory n/a".
* Output goes to ``bench/results/`` (gitignored) under one stem per run
  (``bench-<preset>-<device>-<UTC time>``, ``bench-shapes-...`` when ``--shape`` picks the
  shapes); the paths are printed last.
* A wrong or crashing variant does not stop the sweep: it shows as ``WRONG`` / ``error`` in the
  table, is listed with its message, and makes the exit code 1 (files are written anyway).
* Peers race whenever they can: on a GPU, ``--peers auto`` (the default) adds every peer
  variant (backend ``peer``: QuACK, Liger) of the chosen ops whose package imports, whatever
  ``--variants`` says; ``all`` adds them even when missing, ``none`` keeps the selection as is.
  A peer's skipped cell shows its ``supports()`` reason (e.g. ``N=50257 not a multiple of 8``):
  why a yardstick is absent from a shape is part of the comparison.
* **On a CPU** (``--device cpu``) a preset is cut to a share that ends within
  ``CPU_BUDGET_S`` (2 min) on 2 cores (:func:`kernel_lab.measure.presets.cpu_share`: the first
  dtype, rows cut, as many row lengths as a cost model fits, 3 short rounds a run), said in one line
  first; ``--full-cpu`` times every cell with the GPU's rounds. A ``--shape`` the share cannot
  fit is refused in one line naming ``--full-cpu``. Progress: :mod:`kernel_lab.measure.progress` (an
  ETA weighted by the share's costs; one line a minute in a pipe). A CPU run that times nothing
  exits 1; ``bench`` without a GPU and without ``--device cpu`` exits 2, in one line. The GPU
  path is unchanged.
* :func:`render_tables`, :func:`write_results` and :func:`plot_results` take plain
  :class:`~kernel_lab.measure.benchmarking.Record` lists, so they are testable on a CPU with fake
  data.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from collections import defaultdict
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterable, Sequence

from kernel_lab.base.errors import KernelLabError
from kernel_lab.measure import benchmarking as bm
from kernel_lab.measure.benchmarking import Record
from kernel_lab.measure.peak_memory import format_bytes
from kernel_lab.measure.presets import CPU_COMPILE_WARMUP_S, minutes_text, runs_on_cpu

STATUS_CELL = {"skipped": "[dim]skip[/]", "wrong": "[bold red]WRONG[/]", "error": "[red]error[/]"}
PEER_REASON_CHARS = 48  # a peer's skip reason in its cell is cut here (problems() has it whole)


# What to run: the options ``python -m kernel_lab bench`` and ``pytest bench`` share (argparse
# and pytest's addoption take the same keywords).
SELECTION_OPTIONS: tuple[tuple[str, dict], ...] = (
    ("--preset", dict(default=bm.DEFAULT_PRESET, choices=sorted(bm.PRESETS),
                      help="shape set: " + "; ".join(f"{k}: {v.description}"
                                                     for k, v in bm.PRESETS.items()))),
    ("--op", dict(action="append", help="only these ops (comma-separated/repeatable)")),
    ("--variants", dict(action="append",
                        help="only these variants or backends, e.g. triton,torch_eager")),
    ("--dtype", dict(action="append", help="dtypes, e.g. float32,bf16 (default: preset's)")),
    ("--shape", dict(action="append",
                     help="shapes instead of the preset's: N (M = 2^28 / N) or MxN, "
                          "e.g. 262144,1024x50257 (comma-separated/repeatable)")),
    ("--device", dict(default="cuda", choices=("cuda", "cpu"),
                      help="cpu exercises the harness on a GPU-less machine "
                           "(numbers meaningless)")),
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Options of ``python -m kernel_lab bench``: the shared selection plus ``--out``."""
    for flag, kw in SELECTION_OPTIONS:
        p.add_argument(flag, **kw)
    p.add_argument("--out", type=Path, default=None,
                   help="folder for JSON/CSV/PNG (default: bench/results/)")
    p.add_argument("--peers", default="auto", choices=("auto", "all", "none"),
                   help="peer variants (QuACK, Liger) beside --variants: auto = those that "
                        "import here, on a GPU (default); all = every one, a missing one as "
                        "skipped; none = only what --variants selects")
    p.add_argument("--full-cpu", action="store_true",
                   help="--device cpu: every cell of the preset (rows capped to fit memory) "
                        "and the GPU's rounds, or a --shape however long it takes; without it "
                        f"a CPU run is planned to end within {bm.CPU_BUDGET_S / 60:.0f} min on "
                        "2 cores (few small cells, short rounds)")


def default_out_dir() -> Path:
    """``bench/results/`` of the checkout the package lives in, else of the working folder."""
    root = Path(__file__).resolve().parents[1]
    return (root if (root / "bench").is_dir() else Path.cwd()) / "bench" / "results"


def run_sweep(pairs: Sequence[tuple[bm.Cell, bm.Variant]], device: str,
              copy_gbps: float, progress=None, cpu_rounds: int | None = None,
              finished=None) -> list[Record]:
    """Vet and time every (cell, variant) pair; ``progress(done, description)`` before each,
    ``finished()`` after each; ``cpu_rounds``: off CUDA, that many short rounds a run (the CPU's
    share)."""
    cache = bm.WorkloadCache(device)
    records = []
    for i, (cell, variant) in enumerate(pairs):
        if progress is not None:
            progress(i, f"{cell.id} {variant.name}")
        try:
            work = cache.get(cell)
            rec = bm.vet(variant, work)
            if rec is None or rec.status == "inexact":
                peak = bm.memory(variant, work)  # before any graph holds memory
                timing, event = bm.prepare(variant, work, cpu_rounds=cpu_rounds)
                with bm.trusted_inputs():  # Op.make_inputs' values: no checks timed
                    per_call = sorted(bm.time_rounds(timing.target, timing.clock,
                                                     timing.schedule))
                timing.close()
                status = ("inexact", rec.reason) if rec is not None else ()
                rec = Record.start(cell, variant, *status).fill(
                    work, per_call[len(per_call) // 2], event, copy_gbps,
                    bm.kernel_attributes(variant, work), timing.schedule, peak, timing.host_s)
        except Exception as e:  # noqa: BLE001 - one broken variant must not end the sweep
            rec = Record.crashed(cell, variant, e)
        records.append(rec)
        if finished is not None:
            finished()
    return records


# -- presentation ------------------------------------------------------------------------------
def _panels(records: Iterable[Record]) -> dict[tuple[str, str], list[Record]]:
    out: dict[tuple[str, str], list[Record]] = defaultdict(list)
    for r in records:
        out[(r.op, r.dtype)].append(r)
    return out


def legend(device: str, copy_gbps: float) -> str:
    """The line above the tables: what the cells mean and the roofline they are a % of."""
    per_call = "device time per call" if device.startswith("cuda") else "time per call"
    return (f"{bm.device_label(device)}: cells are GB/s and % of device copy "
            f"({copy_gbps:,.0f} GB/s) from {per_call} (a matmul-bound op's: ms and TFLOP/s), "
            "then peak memory above the inputs (forward / step); ★ = best per shape (M x N: rows "
            "x row length)")


def memory_cell(r: Record) -> str:
    """The memory column of a timed record: ``fwd / step`` above the inputs, "n/a" off CUDA."""
    if r.mem_fwd_bytes is None:
        return "mem n/a" if r.mem_note else ""
    fwd = format_bytes(r.mem_fwd_bytes)
    if r.mem_step_bytes is not None:
        return f"{fwd} / {format_bytes(r.mem_step_bytes)}"
    return f"{fwd} / step n/a" if r.mem_note else fwd


def speed(r: Record) -> float:
    """What a cell ranks by: TFLOP/s for a matmul-bound op (Op.flops), else GB/s."""
    return r.tflops if r.tflops is not None else r.gbps


def value_cell(r: Record) -> str:
    """A timed cell's figure: ``ms (TFLOP/s)`` for a matmul-bound op, else ``GB/s (% of
    copy)``."""
    if r.tflops is not None:
        return f"{r.median_s * 1e3:.2f} ms ({r.tflops:,.0f} TFLOP/s)"
    return f"{_num(r.gbps)} ({r.pct_of_copy:.0f}%)"


def render_tables(records: Sequence[Record], copy_gbps: float) -> list:
    """One rich Table per (op, dtype): variant x shape cells of GB/s and % of copy (ms and
    TFLOP/s for a matmul-bound op), best marked."""
    from rich.markup import escape
    from rich.table import Table

    tables = []
    for (op, dtype), recs in _panels(records).items():
        shapes = sorted({(r.n, r.m) for r in recs})
        names = list(dict.fromkeys(r.variant for r in recs))
        best = {}
        for r in recs:
            if r.status == "ok" and speed(r) > best.get((r.n, r.m), (0.0,))[0]:
                best[(r.n, r.m)] = (speed(r), r.variant)
        # Shapes down, variants across: a sweep's many shapes stay readable in any width.
        measured = any(r.mem_fwd_bytes is not None for r in recs)
        notes = sorted({r.mem_note for r in recs if r.mem_note and r.mem_fwd_bytes is None})
        unit = "ms (TFLOP/s)" if any(r.tflops is not None for r in recs) else "GB/s (% of copy)"
        title = f"{op} {dtype}: {unit}" + (
            ", peak memory above inputs (forward / step)" if measured else
            f"; memory {notes[0]}" if notes else "")
        t = Table(title=title, title_justify="left")
        label = {(r.n, r.m): r.shape or f"{r.m}x{r.n}" for r in recs}  # (lm-head: T x d x V)
        deep = any(lbl.count("x") > 1 for lbl in label.values())
        t.add_column("T x d x V" if deep else "M x N", style="bold", justify="right")
        for name in names:
            t.add_column(name, justify="right", overflow="fold")
        cells = {(r.variant, r.n, r.m): r for r in recs}
        for n, m in shapes:
            row = []
            for name in names:
                r = cells.get((name, n, m))
                if r is None:
                    row.append("")
                elif r.status == "inexact":
                    row.append(f"[yellow]{value_cell(r)} inexact[/]" + _mem_line(r))
                elif r.status == "skipped" and r.backend == "peer":
                    row.append(f"[dim]skip: {escape(_cut(r.reason, PEER_REASON_CHARS))}[/]")
                elif r.status != "ok":
                    row.append(STATUS_CELL.get(r.status, r.status))
                elif best[(n, m)][1] == name:
                    row.append(f"[bold green]★ {value_cell(r)}[/]" + _mem_line(r))
                else:
                    row.append(value_cell(r) + _mem_line(r))
            t.add_row(label[(n, m)], *row)
        tables.append(t)
    return tables


def _mem_line(r: Record) -> str:
    text = memory_cell(r) if r.mem_fwd_bytes is not None else ""  # no figure: said in the title
    return f"\n[dim]{text}[/]" if text else ""


def problems(records: Sequence[Record]) -> list[str]:
    """One line per distinct (variant, status, reason) that did not time: what the table hides."""
    seen: dict[tuple[str, str, str], int] = {}
    for r in records:
        if r.status != "ok":
            key = (r.variant, r.status, r.reason)
            seen[key] = seen.get(key, 0) + 1
    return [f"{v}: {s} ({k} cell{'s' if k > 1 else ''}): {why}" for (v, s, why), k in seen.items()]


def cross_check(records: Sequence[Record], min_s: float = 100e-6, tol: float = 0.10) -> str | None:
    """One line: how many timed runs longer than ``min_s`` agree with their CUDA-event median
    within ``tol``, and the worst disagreement (None when no run had an event median)."""
    pairs = [r for r in records
             if r.status in bm.TIMED and r.event_median_s and r.median_s >= min_s]
    if not pairs:
        return None

    def gap(r: Record) -> float:
        return r.event_median_s / r.median_s - 1

    ok = sum(abs(gap(r)) <= tol for r in pairs)
    worst = max(pairs, key=lambda r: abs(gap(r)))
    return (f"timer cross-check: {ok} of {len(pairs)} runs over {min_s * 1e6:.0f} us agree with "
            f"the CUDA-event median within {tol:.0%}; worst {worst.variant} {worst.dtype} "
            f"{worst.m}x{worst.n}: event {gap(worst):+.1%}")


def _x_axis(recs: Sequence[Record]) -> tuple:
    """x of a point and the axis label: N; M when N is fixed; M*N when both vary."""
    ns, shapes = {r.n for r in recs}, {(r.m, r.n) for r in recs}
    if len(ns) == len(shapes):
        return (lambda r: r.n), "N (row length)"
    if len(ns) == 1:
        return (lambda r: r.m), f"M (rows), N = {recs[0].n}"
    return (lambda r: r.m * r.n), "M*N (elements per call)"


def _cut(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


def _num(g: float) -> str:
    return f"{g:,.0f}" if g >= 10 else f"{g:.2g}"


def memory_label(recs: Sequence[Record]) -> str:
    """A variant's memory in its legend entry: the median over shapes of its peak above the
    inputs in units of one M x N rows tensor (forward / step); "" when nothing was measured."""
    import statistics

    def ratio(field: str) -> str | None:
        vals = [getattr(r, field) / _rows_bytes(r) for r in recs
                if getattr(r, field) is not None]
        return f"{statistics.median(vals):.1f}x" if vals else None

    fwd, step = ratio("mem_fwd_bytes"), ratio("mem_step_bytes")
    if fwd is None:
        return " (mem n/a)" if any(r.mem_note for r in recs) else ""
    return f" (mem {fwd}" + (f" / {step}" if step else "") + " of M x N)"


def _rows_bytes(r: Record) -> float:
    size = {"float64": 8, "float32": 4, "float16": 2, "bfloat16": 2}.get(r.dtype, 4)
    return float(max(1, r.m * r.n) * size)


def plot_results(records: Sequence[Record], copy_gbps: float, path: Path) -> Path:
    """PNG: GB/s vs N (log2 axis; vs M when N is fixed) per variant, one panel per (op, dtype);
    a matmul-bound op's panel: TFLOP/s.

    The dashed line is the measured device-to-device copy: the roofline of a memory-bound op.
    Each legend entry carries the variant's memory column (:func:`memory_label`).
    Uses matplotlib's object API (Agg canvas), never pyplot's global state.
    """
    from matplotlib.figure import Figure

    panels = _panels(records)
    fig = Figure(figsize=(7.5, 4.2 * max(1, len(panels))), layout="constrained")
    axes = fig.subplots(max(1, len(panels)), 1, squeeze=False)[:, 0]
    for ax, ((op, dtype), recs) in zip(axes, panels.items()):
        x_of, xlabel = _x_axis(recs)
        matmul = any(r.tflops is not None for r in recs)  # its roofline is not the copy's
        if not matmul:
            ax.axhline(copy_gbps, ls="--", color="black", lw=1,
                       label=f"device copy {copy_gbps:,.0f} GB/s")
        for name in dict.fromkeys(r.variant for r in recs):
            pts = sorted((x_of(r), speed(r)) for r in recs
                         if r.variant == name and r.status in bm.TIMED)
            if pts:
                ax.plot(*zip(*pts), marker="o", ms=3, lw=1.2,
                        label=name + memory_label([r for r in recs if r.variant == name]))
        ax.set_xscale("log", base=2)
        ax.set_xlabel(xlabel)
        ax.set_ylabel("TFLOP/s" if matmul else "GB/s")
        ax.set_ylim(bottom=0)
        ax.set_title(f"{op} {dtype}")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7, loc="best")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    return path


def write_results(records: Sequence[Record], meta: dict, out_dir: Path, stem: str) -> list[Path]:
    """``<stem>.json`` (meta + records), ``<stem>.csv`` (records) and ``<stem>.png``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    rows = [r.as_dict() for r in records]
    js, cs = out_dir / f"{stem}.json", out_dir / f"{stem}.csv"
    js.write_text(json.dumps({"meta": meta, "records": rows}, indent=1, default=str))
    with cs.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(Record.__dataclass_fields__))
        w.writeheader()
        w.writerows(rows)
    return [js, cs, plot_results(records, meta["copy_gbps"], out_dir / f"{stem}.png")]


# -- entry point -------------------------------------------------------------------------------
def main(args: argparse.Namespace) -> int:
    """Run the sweep. 0: all timed or skipped; 1: some variant wrong/crashed, or (``--device
    cpu``) nothing timed; 2: bad arguments, a --shape the CPU cannot take, or no GPU for
    ``--device cuda``. On a CPU the preset is cut to a share that ends within
    ``CPU_BUDGET_S`` (:func:`kernel_lab.measure.presets.cpu_share`) unless ``--full-cpu``."""
    import shutil

    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    # Logs and pipes get a wide table instead of rich's 80-column default.
    console = Console(width=max(160, shutil.get_terminal_size().columns))
    if args.device == "cuda" and not bm.has_cuda():
        print(f"kernel_lab bench: nothing timed: {bm.NO_GPU} on this machine; pass --device cpu "
              "to time the CPU (a short share of the preset, CPU-sized shapes)", file=sys.stderr)
        return 2
    try:
        pairs = bm.select(args.preset, ops_filter=args.op, variants_filter=args.variants,
                          dtypes_filter=args.dtype, shapes_filter=args.shape)
    except (KernelLabError, ValueError) as e:
        print(f"kernel_lab bench: {e}", file=sys.stderr)
        return 2
    cpu = args.device == "cpu"
    full_cpu = getattr(args, "full_cpu", False)
    share = None
    if cpu:  # presets sized for a GPU: a short CPU run, a --shape too big refused
        from kernel_lab.measure.memory_caps import fit_cpu

        try:
            if full_cpu or args.shape:  # memory: cap preset rows, refuse a huge --shape
                pairs, note = fit_cpu(pairs, bool(args.shape))
            if not full_cpu:
                share = bm.cpu_share(pairs, shapes_given=bool(args.shape),
                                   dtypes_given=bool(args.dtype))
                pairs, note = share.pairs, share.note
        except ValueError as e:
            print(f"kernel_lab bench: {e}", file=sys.stderr)
            return 2
        if full_cpu:
            note = ((note + "; ") if note else "") + (
                f"--full-cpu: ~{minutes_text(bm.share_cost_s(pairs, full=True))} "
                "planned on 2 cores")
        if note:
            console.print(note, markup=False, soft_wrap=True)
    if args.peers == "all" or (args.peers == "auto" and args.device == "cuda"):
        pairs = bm.add_peers(pairs, importable_only=args.peers == "auto")
    if not pairs:
        print("kernel_lab bench: the filters select nothing", file=sys.stderr)
        return 2
    copy = bm.copy_bandwidth(args.device)
    shape_set = "shapes" if args.shape else args.preset  # --shape replaces the preset's
    chosen = f"--shape {', '.join(args.shape)}" if args.shape else f"preset {args.preset}"
    console.print(f"{bm.device_label(args.device)}: device copy {copy:,.0f} GB/s; "
                  f"{len(pairs)} runs ({chosen})", markup=False)
    if cpu:
        records = _run_cpu(pairs, copy, console, share.rounds if share else None,
                           full=full_cpu)
    else:
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                      console=console, transient=True) as bar:
            task = bar.add_task("bench", total=len(pairs))

            records = run_sweep(pairs, args.device, copy, progress=lambda i, desc: bar.update(
                task, completed=i, description=desc))
    console.print(legend(args.device, copy), markup=False)
    for t in render_tables(records, copy):
        console.print(t)
    for line in problems(records):
        console.print(f"  {line}", markup=False)
    agreement = cross_check(records)
    if agreement:
        console.print(agreement, markup=False)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    meta = {"preset": shape_set, "device": args.device, "copy_gbps": copy,
            "created_utc": stamp, "argv": sys.argv, **bm.machine_info(args.device)}
    if cpu:  # what the CPU's share (or --full-cpu) cut, as its first line said
        meta["cpu_share"] = note or ""
    paths = write_results(records, meta, args.out or default_out_dir(),
                          f"bench-{shape_set}-{args.device}-{stamp}")
    for p in paths:
        print(f"wrote {p}")
    if cpu and not any(r.status in bm.TIMED for r in records):
        print(f"kernel_lab bench: nothing timed: {nothing_timed(records)}", file=sys.stderr)
        return 1
    return 1 if any(r.status in ("wrong", "error") for r in records) else 0


def _run_cpu(pairs: Sequence[tuple[bm.Cell, bm.Variant]], copy: float, console,
             rounds: int | None, full: bool = False) -> list[Record]:
    """:func:`run_sweep` on the CPU with :class:`kernel_lab.measure.progress.RunProgress`: a bar
    with
    an ETA weighted by each run's estimated cost in a terminal, a line a minute in a pipe."""
    from kernel_lab.measure.progress import RunProgress

    here = {v.name: runs_on_cpu(v) for _, v in pairs}
    weights = [bm.run_cost_s(c, v, full=full, runs_here=here[v.name]) for c, v in pairs]
    first_compile = next((i for i, w in enumerate(weights) if w and pairs[i][1].backend
                          == "compile"), None)
    if first_compile is not None:
        weights[first_compile] += CPU_COMPILE_WARMUP_S
    with RunProgress("bench", "runs", weights, console) as p:
        return run_sweep(pairs, "cpu", copy, progress=lambda i, desc: p.start(desc),
                         cpu_rounds=rounds, finished=p.done)


def nothing_timed(records: Sequence[Record]) -> str:
    """Why no run of a sweep was timed, in one line: its most common outcomes."""
    from collections import Counter

    why = Counter(f"{r.status}: {r.reason}" if r.reason else r.status for r in records)
    top = "; ".join(f"{k} x {reason}" for reason, k in why.most_common(2))
    more = f"; {len(why) - 2} more reasons" if len(why) > 2 else ""
    runs = f"the {len(records)} runs" if len(records) > 1 else "the one run"
    return f"{runs} skipped or failed ({top}{more})"
