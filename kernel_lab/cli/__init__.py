"""``python -m kernel_lab``: list, check, bench, watch, resources, picks, compile.

Each subcommand's work lives in its own module (``checking``, ``sweep``, ``watch``,
``resources``, ``picks``, ``precompile``); this file
only parses arguments and dispatches.
"""

from __future__ import annotations

import argparse
import sys


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m kernel_lab",
        description="Write, check and race GPU kernels: one registry of variants per op.",
    )
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    ls = sub.add_parser("list", help="table of ops and variants, and whether each runs here")
    ls.add_argument("--op", help="only this op")
    ls.add_argument("--here", action="store_true", help="only the variants that run here")

    ck = sub.add_parser("check", help="run variants against the float64 reference")
    ck.add_argument("names", nargs="*", metavar="NAME", help="variants (default: all)")
    ck.add_argument("--op", help="only variants of this op")
    ck.add_argument("--dtype", action="append", help="dtypes to check (repeatable; fp32 / "
                    "float32, bf16 / bfloat16, fp16, fp64; default fp32, fp16, bf16)")
    ck.add_argument("--device", default=None, choices=["cuda", "cpu"],
                    help="cuda or cpu (default: cuda if present; Triton variants run in "
                    "Triton's interpreter without a GPU)")
    ck.add_argument("--seed", type=int, default=None, help="seed (default: fresh each run)")
    ck.add_argument("--cases", default=None, choices=["core", "all", "sanitize", "race"],
                    help="core: a representative set (default); all: every shape case; "
                    "sanitize: the small cases plus rows that reach every CUDA kernel kind at "
                    "odd N and misaligned bases (memcheck's and initcheck's default); race: the "
                    "smallest rows that reach every kind (racecheck's and synccheck's default)")
    ck.add_argument("--all", action="store_true", help="every shape case (--cases all)")
    ck.add_argument("--sanitize", nargs="?", const="memcheck", metavar="TOOL",
                    choices=["memcheck", "racecheck", "initcheck", "synccheck"],  # sanitize.TOOLS
                    help="run the CUDA variants named (default: all; racecheck: those with "
                    "shared memory or clusters) under compute-sanitizer TOOL (default "
                    "memcheck) over the tool's --cases, one process a variant, one line each")
    ck.add_argument("--jobs", type=int, default=4, help="--sanitize: processes at once")
    ck.add_argument("--timeout", type=float, default=600.0,
                    help="--sanitize: seconds a variant may take")
    ck.add_argument("--logs", default=None, help="--sanitize: folder for the full logs")
    ck.add_argument("--case-times", action="store_true",
                    help="print each case's wall time as it ends (the sanitizer's children do: "
                    "a timed-out child's log shows how far it got and what was slow)")
    ck.add_argument("--warnings", action="store_true",
                    help="show the warnings raised while checking (hidden, and counted, "
                    "otherwise)")

    from kernel_lab.measure import sweep

    sweep.add_arguments(sub.add_parser("bench", help="sweep shapes: table, JSON/CSV and plot"))

    from kernel_lab.cli import watch

    watch.add_arguments(
        sub.add_parser("watch", help="recompile, re-check and re-time a kernel on every save")
    )

    from kernel_lab.cli import resources

    resources.add_arguments(sub.add_parser(
        "resources", help="registers and spills of a CUDA variant's kernels (NVRTC, no GPU)"))

    from kernel_lab.cli import picks

    picks.add_arguments(sub.add_parser(
        "picks", aliases=["plan"],
        help="per row length: the auto choice and each CUDA launcher's kernel (no GPU)"))

    from kernel_lab.cli import precompile

    precompile.add_arguments(sub.add_parser(
        "compile", help="compile every declared .cu into the cubin cache (NVRTC, no GPU)"))
    return p


TRACEBACK_ENV = "KERNEL_LAB_TRACEBACK"  # =1: a lab error shows its traceback (as --traceback)


def _traceback_switch(p: argparse.ArgumentParser) -> None:
    """``--traceback`` before the command (shown in the top-level help) or after it (hidden)."""
    p.add_argument("--traceback", action="store_true",
                   help=f"on an error, the full traceback, not one line (also {TRACEBACK_ENV}=1)")
    sub = p._subparsers._group_actions[0]
    for command in set(sub.choices.values()):  # an alias shares its command's parser
        command.add_argument("--traceback", action="store_true", default=argparse.SUPPRESS,
                             help=argparse.SUPPRESS)


def main(argv: list[str] | None = None) -> int:
    """Entry point. A lab error (:class:`~kernel_lab.base.errors.KernelLabError`: an unknown name,
    an input a variant refuses...) or a file that cannot be read or written is one line on
    stderr, ``kernel_lab <command>: <message>``, and exit code 2 (a failed check stays 1);
    Ctrl-C is ``interrupted`` and 130. ``--traceback`` or ``KERNEL_LAB_TRACEBACK=1``: raise
    instead, with the traceback. Any other exception is a bug and keeps its traceback."""
    import os

    from kernel_lab.base.errors import KernelLabError

    parser = build_parser()
    _traceback_switch(parser)
    args = parser.parse_args(argv)
    if args.traceback or os.environ.get(TRACEBACK_ENV, "") not in ("", "0"):
        return _dispatch(args)
    try:
        return _dispatch(args)
    except (KernelLabError, OSError) as e:
        print(f"kernel_lab {args.command}: {str(e).strip() or type(e).__name__}",
              file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"kernel_lab {args.command}: interrupted", file=sys.stderr)
        return 130


def _dispatch(args: argparse.Namespace) -> int:
    if args.command == "list":
        from kernel_lab.cli.check import list_main

        return list_main(args)
    if args.command == "check":
        from kernel_lab.cli.check import check_main

        return check_main(args)
    if args.command == "bench":
        from kernel_lab.measure.sweep import main as bench_main

        return bench_main(args)
    if args.command == "watch":
        from kernel_lab.cli.watch import main as watch_main

        return watch_main(args)
    if args.command == "resources":
        from kernel_lab.cli.resources import main as resources_main

        return resources_main(args)
    if args.command in ("picks", "plan"):
        from kernel_lab.cli.picks import main as picks_main

        return picks_main(args)
    if args.command == "compile":
        from kernel_lab.cli.precompile import main as compile_main

        return compile_main(args)
    return 2


if __name__ == "__main__":
    sys.exit(main())
