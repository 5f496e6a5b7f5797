"""Race ``variant="auto"`` against the variants it picks from, end to end, by tensor size.

    python bench/auto_check.py [--op softmax,softmax_backward] [--dtype float32,bfloat16]
        [--shape 256x4096,1024x4096] [--tolerance 1.05] [--device cuda] [--json FILE]
        [--path eager|custom]

Per (op, dtype, shape): the time per call of what a model runs with variant "auto" and with
each candidate the op's auto policy names (its preferences for the input and its portable
variant, those registered that take the input). ``--path eager`` (default):
``kernel_lab.softmax(x, variant=...)`` / ``kernel_lab.log_softmax`` for the forward ops, and
for the backward ops what their eager autograd runs (``plans.run_op``); ``--path custom``: the
custom ops (``torch.ops.kernel_lab.<op>``), what ``torch.compile``d graphs and dispatch modes
call. Each is timed on the benchmark's rotating inputs and timer
(``kernel_lab.measure.benchmarking``: the median of rounds of back-to-back calls, the GPU
synchronised around each round). Prints the variant auto took (``dispatch.choose_variant``), the
fastest candidate, and auto's time over the fastest's; exits 1 when that ratio passes
``--tolerance`` anywhere: the op's size / row-length rule (``kernel_lab/ops/<op>/auto.py``) is off
for that tensor. Timing only: the test suite checks every candidate's output.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from types import SimpleNamespace

import torch
from rich.console import Console
from rich.table import Table

import kernel_lab
from kernel_lab.base.errors import UnknownVariantError
from kernel_lab.core import custom_ops, dispatch, plans, registry
from kernel_lab.measure import benchmarking as bm

OPS = ("softmax", "softmax_backward", "log_softmax", "log_softmax_backward")
# both sides of every small-size limit (the ops' SMALL_NUMEL: 2^21-2^23) and of Triton's
# (2^25), rows of 128-32000
SHAPES = ("16x1024,512x4096,1024x4096,2048x4096,4096x4096,8192x1024,16384x1024,128x32000,"
          "512x32000,65536x128,262144x128,2048x16384")


PUBLIC = {"softmax": kernel_lab.softmax, "log_softmax": kernel_lab.log_softmax}
PATHS = ("eager", "custom")


def op_call(op: str, variant: str, path: str = "eager"):
    """``fn(*inputs, dim=...)`` running ``op`` with ``variant`` (or "auto") the way a model
    does: eagerly (the public function, or the backward's eager autograd step) or through the
    custom op."""
    if path == "eager":
        if op in PUBLIC:
            return lambda x, dim=-1: PUBLIC[op](x, dim, variant)
        return lambda *t, dim=-1: plans.run_op(op, variant, t, {"dim": dim})
    custom = custom_ops.define(op)
    grad = registry.get_op(op).autograd
    more = (dispatch.AUTO,) if grad is not None and grad.backward else ()  # backward_variant
    return lambda *t, dim=-1: custom(*t, dim, variant, *more)


def candidates(op: str, inputs: tuple) -> list[str]:
    """The names auto chooses from that are registered and take these inputs."""
    names = []
    policy = dispatch.policy(op)
    for name in dict.fromkeys((*policy.preferences(*inputs), policy.portable)):
        try:
            v = registry.get(name)
        except UnknownVariantError:
            continue
        if dispatch.can_run(v, *inputs):
            names.append(name)
    return names


def seconds_per_call(work: bm.Workload, fn) -> float:
    """The benchmark's median per-call time of ``fn`` on the workload's rotating inputs."""
    call, plan, _ = bm.calibrate(SimpleNamespace(fn=fn), work)
    return statistics.median(bm.time_rounds(call, bm.timer_for(work.device), plan))


def check_case(cell: bm.Cell, device: str, path: str = "eager") -> dict:
    work = bm.make_workload(cell, device)
    picked = dispatch.choose_variant(cell.op, *work.inputs).name
    times = {name: seconds_per_call(work, op_call(cell.op, name, path))
             for name in candidates(cell.op, work.inputs)}
    auto = seconds_per_call(work, op_call(cell.op, dispatch.AUTO, path))
    best = min(times, key=times.get)
    return {"case": cell, "picked": picked, "auto_s": auto, "best": best,
            "best_s": times[best], "ratio": auto / times[best], "times": times}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--op", default="softmax,softmax_backward",
                   help=f"comma-separated ops (of {', '.join(OPS)})")
    p.add_argument("--dtype", default="float32,bfloat16", help="comma-separated dtypes")
    p.add_argument("--shape", default=SHAPES, help="comma-separated MxN shapes")
    p.add_argument("--tolerance", type=float, default=1.05,
                   help="auto's time over the fastest candidate's allowed (default 1.05)")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--path", default="eager", choices=PATHS,
                   help="eager: the public functions / eager autograd (default); custom: the "
                   "custom ops, as compiled graphs call them")
    p.add_argument("--json", default=None, metavar="FILE",
                   help="also write every case's times (seconds per call) to FILE")
    args = p.parse_args(argv)
    bad = [o for o in args.op.split(",") if o not in OPS]
    if bad:
        p.error(f"unknown op {bad[0]!r}; ops: {', '.join(OPS)}")
    try:
        args.cases = [bm.Cell(o, bm.parse_dtype(d), bm.parse_shape(s))
                      for o in args.op.split(",") for d in args.dtype.split(",")
                      for s in args.shape.split(",")]
    except (ValueError, kernel_lab.KernelLabError) as e:
        p.error(str(e))
    if args.tolerance < 1:
        p.error(f"--tolerance must be >= 1, not {args.tolerance}")
    if args.device != "cpu":
        _require_gpu("it races variant='auto' on CUDA tensors", argv=(), cpu_option="--device",
                     script=__file__)
    return args


def _require_gpu(*args, **kw) -> None:
    try:
        from gpu_check import require_gpu  # run as a script: bench/ is sys.path[0]
    except ImportError:  # imported as bench.auto_check
        from bench.gpu_check import require_gpu
    require_gpu(*args, **kw)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    console = Console(width=None if sys.stdout.isatty() else 160)  # logs: one line a row
    table = Table(title=f"variant='auto' against its candidates ({bm.device_label(args.device)}; "
                  f"{args.path} path; us per call)", title_justify="left")
    for col in ("op", "dtype", "M x N", "auto took", "auto", "fastest", "its time", "ratio"):
        table.add_column(col, justify="left" if col in ("op", "dtype", "auto took", "fastest")
                         else "right")
    off, records = 0, []
    for i, cell in enumerate(args.cases, 1):
        console.print(f"[{i}/{len(args.cases)}] {cell.id}", highlight=False)
        r = check_case(cell, args.device, args.path)
        miss = r["ratio"] > args.tolerance
        off += miss
        records.append({"op": cell.op, "dtype": bm.dtype_name(cell.dtype),
                        "shape": cell.shape_id, "picked": r["picked"], "auto_s": r["auto_s"],
                        "best": r["best"], "best_s": r["best_s"],
                        "ratio": round(r["ratio"], 4), "times": r["times"]})
        table.add_row(cell.op, bm.dtype_name(cell.dtype), cell.shape_id, r["picked"],
                      f"{r['auto_s'] * 1e6:,.1f}", r["best"], f"{r['best_s'] * 1e6:,.1f}",
                      f"[red]{r['ratio']:.2f}[/red]" if miss else f"{r['ratio']:.2f}")
    console.print(table)
    if args.json:
        meta = {"device": bm.device_label(args.device), "tolerance": args.tolerance,
                "path": args.path}
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "cases": records}, f, indent=1)
    console.print(f"{off} of {len(args.cases)} cases where auto is more than "
                  f"{args.tolerance:.2f}x the fastest candidate", highlight=False)
    return 1 if off else 0


if __name__ == "__main__":
    sys.exit(main())
