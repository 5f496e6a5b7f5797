"""``python -m kernel_lab list`` and ``check``: the registry as a table, and every variant
against its op's float64 reference on this machine, with a progress bar and a summary line."""

from __future__ import annotations

import sys
from collections import Counter

import torch

from kernel_lab.base.errors import KernelLabError
from kernel_lab.checking.checker import (
    cases_for,
    default_device,
    dtype_name,
    fresh_seed,
    make_case_inputs,
    parse_dtype,
    run_checked,
    why_not_here,
)
from kernel_lab.core import registry
from kernel_lab.core.reference import CheckResult

# Backends that compile once per input signature: seconds a case on a CPU, so the default set
# gives them one shape case and one edge case, in the first dtype only (--all: everything).
PER_SHAPE_BACKENDS = ("compile",)
TRIMMED = ("torch.compile variants: one shape and one edge case, in their first dtype (each "
           "new shape compiles); --all checks every case and dtype")
# The progress bar's guess of a case's seconds (measured on a 2-core CPU; on a GPU only the
# ratios matter: the clock scales them) by op family and backend, and the first
# torch.compile's start-up on top. An op of no family here counts as cross-entropy.
CASE_S = {
    "rows": {"torch": 0.02, "triton": 0.04, "compile": 0.2, "cuda": 0.2, "peer": 0.05},
    "cross_entropy": {"torch": 0.06, "triton": 0.08, "compile": 0.2, "cuda": 0.2, "peer": 0.05},
    "cross_entropy_backward": {"torch": 0.1, "triton": 0.13, "compile": 0.2, "cuda": 0.2,
                               "peer": 0.05},
    "linear_cross_entropy": {"torch": 0.06, "triton": 0.16, "compile": 0.3, "cuda": 0.3,
                             "peer": 0.1},
    "linear_cross_entropy_backward": {"torch": 0.08, "triton": 0.4, "compile": 0.3, "cuda": 0.3,
                                      "peer": 0.1},
}
ROW_FAMILY = ("softmax", "softmax_backward", "log_softmax", "log_softmax_backward")
FIRST_COMPILE_S = 6.0


def case_seconds(v: registry.Variant) -> float:
    """The guess of one check case's seconds for variant ``v`` (:data:`CASE_S`)."""
    family = (v.op if v.op in CASE_S else "rows" if v.op in ROW_FAMILY else
              "cross_entropy_backward")
    return CASE_S[family].get(v.backend, 0.1)


def case_weights(jobs) -> list[float]:
    """Each case's weight for :class:`kernel_lab.measure.progress.RunProgress`, in run order
    (``jobs``: (variant, dtype, labels) as :func:`check_main` lists them)."""
    weights, compiled = [], False
    for v, _, todo in jobs:
        for _ in todo:
            w = case_seconds(v)
            if v.backend == "compile" and not compiled:
                w, compiled = w + FIRST_COMPILE_S, True
            weights.append(w)
    return weights


def wide_console():
    """A rich Console at least 140 columns wide (logs and pipes would get 80 and fold tables)."""
    import shutil

    from rich.console import Console

    return Console(width=max(140, shutil.get_terminal_size().columns))


def list_main(args) -> int:
    from rich.table import Table

    console = wide_console()
    names = [args.op] if getattr(args, "op", None) else registry.op_names()
    for op_name in names:
        op = registry.get_op(op_name)
        table = Table(title=f"{op.name}: {op.description}", title_justify="left")
        for col in ("variant", "backend", "dtypes", "launcher", "kernel", "runs here"):
            table.add_column(col, overflow="fold")
        for v in registry.variants(op_name):
            why = why_not_here(v)
            if getattr(args, "here", False) and why is not None:
                continue
            launcher = f"{v.fn.__module__}.{v.fn.__qualname__}"
            table.add_row(
                v.name, v.backend, ",".join(_short(d) for d in v.dtypes), launcher,
                v.source or "-", "[green]yes[/]" if why is None else f"[yellow]no[/]: {why}",
            )
        console.print(table)
    return 0


def _short(dtype: torch.dtype) -> str:
    return {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16",
            torch.float64: "fp64"}.get(dtype, dtype_name(dtype))


def _chosen(args) -> list[registry.Variant]:
    if args.names:
        return [registry.get(n) for n in args.names]
    return registry.variants(args.op)


def check_main(args) -> int:
    import warnings

    from rich.table import Table

    from kernel_lab.measure.progress import RunProgress

    if args.sanitize:
        from kernel_lab.checking.sanitize import sanitize_main

        return sanitize_main(args.sanitize, args.names, op=args.op, dtypes=args.dtype,
                             seed=args.seed, jobs=args.jobs, timeout=args.timeout,
                             log_dir=args.logs, cases="all" if args.all else args.cases)
    console = wide_console()
    if args.device == "cuda" and not torch.cuda.is_available():
        raise KernelLabError("--device cuda: no CUDA GPU is usable on this machine")
    device = args.device or default_device()
    seed = args.seed if args.seed is not None else fresh_seed()
    try:
        dtypes = [parse_dtype(d) for d in (args.dtype or ["float32", "float16", "bfloat16"])]
    except ValueError as e:
        raise KernelLabError(str(e)) from None
    selection = "all" if args.all else (args.cases or "core")
    chosen = _chosen(args)
    with warnings.catch_warnings(record=True) as caught:  # shown only with --warnings
        warnings.simplefilter("default")  # each distinct warning once, recorded
        # First the cases: which (variant, dtype, case) run here, so the bar counts only what
        # runs (supports() never launches) and its ETA is not fooled by instant skips.
        jobs, skip_reasons, trimmed = [], Counter(), False
        for v in chosen:
            mine = [dt for dt in dtypes if dt in v.dtypes]
            for dt in mine:
                if selection == "core" and v.backend in PER_SHAPE_BACKENDS:
                    trimmed = True
                    if dt != mine[0]:
                        continue
                todo, skips = _cases_of(v, dt, device, seed, selection)
                jobs.append((v, dt, todo))
                skip_reasons.update(skips)
        table = Table(title=f"check on {device} (seed {seed}, {selection} cases)",
                      title_justify="left")
        for col in ("variant", "dtype", "cases", "result", "err / allowed", "s",
                    "first failure"):
            table.add_column(col, overflow="fold")
        tally: Counter = Counter()
        # The bar's ETA weighs each case by its backend (kernel_lab.measure.progress: none before
        # data, a stalled compile pushes it out); in a pipe: a line a minute at most.
        with RunProgress("check", "cases", case_weights(jobs), console) as progress:
            for v, dtype, todo in jobs:
                if not todo:
                    tally["skip"] += 1
                    continue
                progress.start(f"{v.name} {dtype_name(dtype)}")
                row, outcome = _check_one(v, dtype, device, seed, selection, todo,
                                          _case_done(progress, v, dtype, args.case_times))
                table.add_row(*row)
                tally[outcome] += 1
    distinct = {(w.category.__name__, str(w.message), w.filename, w.lineno): w for w in caught}
    if args.warnings:
        for category, message, filename, lineno in distinct:
            console.print(f"warning: {category}: {message} ({filename}:{lineno})",
                          markup=False, highlight=False)
    if table.row_count:
        console.print(table)
    skips = "; ".join(f"{n} x {r}" for r, n in skip_reasons.most_common())
    # `check --sanitize` reads this line back (sanitize._CHECKED): keep its words
    ran = sum(len(todo) for _, _, todo in jobs)
    console.print(f"{tally['pass'] + tally['fail']} variant x dtype checked over {ran} cases: "
                  f"{tally['pass']} passed, {tally['fail']} failed, {tally['skip']} ran nothing "
                  "here" + (f"; cases skipped: {skips}" if skips else ""))
    if trimmed:
        console.print(TRIMMED)
    if distinct and not args.warnings:
        console.print(f"{len(distinct)} distinct warnings hidden (--warnings shows them)")
    if tally["fail"]:
        return 1
    if args.names and not tally["pass"]:  # a named variant that cannot run here
        print(f"kernel_lab check: {', '.join(args.names)} ran no case here: {skips or 'no dtype'}",
              file=sys.stderr)
        return 2
    return 0


def _todo(v: registry.Variant, dtype: torch.dtype, device: str, seed: int,
          selection: str) -> list[tuple[str, tuple, dict]]:
    """Every (label, inputs, kw) of one (variant, dtype): shape cases, then the op's edge cases;
    the same seed gives the same inputs."""
    op = registry.get_op(v.op)
    gen = torch.Generator().manual_seed(seed)
    todo = [(c.label, *make_case_inputs(op, c, dtype, device, gen))
            for c in cases_for(device, op, selection)]
    if op.edge_cases:
        todo += op.edge_cases(dtype, device, gen)
    return todo


def _case_done(progress, v: registry.Variant, dtype: torch.dtype, print_times: bool):
    """What ends each case: the bar moves; with ``--case-times`` a line (read back by
    ``sanitize.summarize`` when a child times out: ``case NAME DTYPE LABEL: SECONDS s``)."""
    def done(label: str, seconds: float) -> None:
        progress.done()
        if print_times:
            print(f"case {v.name} {_short(dtype)} {label}: {seconds:.2f} s", flush=True)
    return done


def _cases_of(v: registry.Variant, dtype: torch.dtype, device: str, seed: int,
              selection: str) -> tuple[list[str], Counter]:
    """The labels of the cases ``v`` runs here, and the reasons (counted) it skips the others.
    In the default set a per-shape compiler runs the smoke shape case and the first edge case
    only (each new shape or keyword is a compile: seconds on a CPU)."""
    run, skips = [], Counter()
    op = registry.get_op(v.op)
    smoke = {c.label for c in cases_for(device, op, selection) if "smoke" in c.tags}
    trim = selection == "core" and v.backend in PER_SHAPE_BACKENDS
    edge_taken = False
    shape_labels = {c.label for c in cases_for(device, op, selection)}
    for label, inputs, kw in _todo(v, dtype, device, seed, selection):
        if trim:
            is_shape = label in shape_labels
            if (is_shape and label not in smoke) or (not is_shape and edge_taken):
                continue
        reason = v.supports(*inputs, **kw)
        if reason is None:
            run.append(label)
            edge_taken = edge_taken or label not in shape_labels
        else:
            skips[reason] += 1
    return run, skips


def _check_one(v: registry.Variant, dtype: torch.dtype, device: str, seed: int,
               selection: str, labels: list[str],
               advance=lambda label, seconds: None) -> tuple[list[str], str]:
    """One (variant, dtype) over the cases named ``labels`` (of :func:`_cases_of`, same seed and
    selection: the same inputs): its table row, and 'pass' or 'fail'."""
    import time

    start = time.perf_counter()
    wanted = set(labels)
    n_ok = n_run = 0
    worst, first_bad = 0.0, ""
    for label, inputs, kw in _todo(v, dtype, device, seed, selection):
        if label not in wanted:
            continue
        wanted.discard(label)
        n_run += 1
        t0 = time.perf_counter()
        try:
            res, _ = run_checked(v, inputs, kw)
        except Exception as e:  # noqa: BLE001 - report, keep checking the others
            res = CheckResult(False, float("nan"), float("nan"), f"raised {e!r}")
        if res.ok:
            n_ok += 1
            worst = max(worst, res.ratio)
        elif not first_bad:
            first_bad = f"{label}: {res.message}"
        advance(label, time.perf_counter() - t0)
    ok = n_ok == n_run
    return ([v.name, dtype_name(dtype), f"{n_ok}/{n_run}",
             "[green]pass[/]" if ok else "[red]FAIL[/]", f"{worst:.3f}",
             f"{time.perf_counter() - start:.1f}", first_bad],
            "pass" if ok else "fail")
