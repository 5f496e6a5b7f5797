"""``python -m kernel_lab picks``: what would run for rows of N, without a GPU.

Per op, dtype and row length N (contiguous rows): the variant ``kernel_lab.softmax`` & co. pick on
CUDA with ``variant=None`` for a tensor of ``--numel`` elements (the first of
the op's ``auto.preferences`` that is registered, takes the dtype and holds the row; the
default size is the sweeps' 2^28 elements, small tensors go to PyTorch's own kernel), and for every
variant whose launcher declares its launch shape (``fn.launch_shape(n, dtype) -> str``: the CUDA
launchers' configs, pure functions of N and dtype), the kernel and shape it launches. Shapes come
from the configs' own rules, so this is what a sweep runs - the saved sweep's ``kernels`` column
records it as launched. ``--arch`` (repeatable): the shapes for another GPU generation - the
rules pass over what it cannot launch (no clusters before sm_90, its shared memory per CTA;
:mod:`kernel_lab.cuda.archs`).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from typing import Sequence

import torch

from kernel_lab.core import registry
from kernel_lab.cuda.archs import ARCHS, Arch, as_if_on, get_arch
from kernel_lab.measure.benchmarking import ELEMENTS, SWEEP_N, dtype_name, parse_dtype


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--op", action="append", help="ops to show (repeatable; default: every op "
                   "with a shaped variant or a measured auto order)")
    p.add_argument("--dtype", default="float32,bfloat16",
                   help="comma-separated dtypes (default: float32,bfloat16)")
    p.add_argument("--n", default=",".join(map(str, sorted(SWEEP_N))),
                   help="comma-separated row lengths (default: the sweep preset's)")
    p.add_argument("--arch", action="append", metavar="SM",
                   help="GPU generation(s) to pick for, repeatable or comma-separated: "
                   f"{', '.join(ARCHS)} (default sm_90, the rules' own)")
    p.add_argument("--numel", default=str(ELEMENTS), metavar="ELEMENTS",
                   help="tensor size the auto column assumes, in elements: max(1, ELEMENTS // N) "
                   f"rows of N (default 2^28 = {ELEMENTS}, the sweeps'; small tensors go to "
                   "PyTorch's own kernel)")


def auto_choice(op: str, n: int, dtype: torch.dtype, numel: int = ELEMENTS,
                arch: Arch | None = None) -> str:
    """The variant the op's ``variant=None`` path takes on CUDA for contiguous rows of n, in a
    tensor of ``max(1, numel // n)`` rows (CuPy assumed present): ``dispatch.first_preference``
    with the variants' size limits (``check``) in place of ``supports``, which a meta tensor
    cannot pass; on ``arch`` (default: the rules' own, sm_90), whose limits those checks ask
    (``archs.as_if_on``). "-" for an op whose pick needs its other inputs
    (linear_cross_entropy: the weight and the targets)."""
    from kernel_lab.core import dispatch

    x = torch.empty(max(1, numel // n), n, dtype=dtype, device="meta")
    kw = {"dim": -1} if "dim" in registry.get_op(op).kwargs else {}
    with as_if_on(arch) if arch is not None else contextlib.nullcontext():
        try:
            return dispatch.first_preference(op, (x,), kw, lambda v: dtype in v.dtypes and (
                v.check is None or v.check(x, **kw) is None)).name
        except TypeError:  # a variant's check takes the op's other inputs
            return "-"


def shaped_variants(op: str) -> list[registry.Variant]:
    return [v for v in registry.variants(op) if callable(getattr(v.fn, "launch_shape", None))]


def pick_rows(op: str, dtype: torch.dtype, ns: Sequence[int], numel: int = ELEMENTS,
              arch: Arch | None = None) -> tuple[list[str], list[list[str]]]:
    """(header, rows): N, the auto choice for a tensor of ``numel`` elements, then each shaped
    variant's launch on ``arch`` (default: the rules' own, sm_90)."""
    kw = {} if arch is None else {"arch": arch}
    shaped = shaped_variants(op)
    header = ["N", "auto (CUDA)", *(v.name for v in shaped)]
    rows = []
    for n in ns:
        cells = [str(n), auto_choice(op, n, dtype, numel, arch)]
        for v in shaped:
            cells.append(v.fn.launch_shape(n, dtype, **kw) if dtype in v.dtypes else "-")
        rows.append(cells)
    return header, rows


def _parse(args: argparse.Namespace) -> tuple[list[str], list[torch.dtype], list[int], int,
                                              list[Arch]]:
    """(ops, dtypes, row lengths, numel, archs) from the arguments; ValueError / KernelLabError
    if bad."""
    registry.op_names()  # load the ops
    ops = args.op or [o for o in registry.op_names() if shaped_variants(o)
                      or registry.get_op(o).auto is not None]
    for o in ops:
        registry.get_op(o)  # an unknown op: UnknownVariantError with suggestions
    dtypes = [parse_dtype(d) for d in args.dtype.split(",") if d]
    try:
        ns = [int(n) for n in args.n.split(",") if n]
    except ValueError:
        raise ValueError(f"--n takes comma-separated row lengths, not {args.n!r}") from None
    if not ns or any(n < 1 for n in ns):
        raise ValueError(f"--n takes row lengths >= 1, not {args.n!r}")
    numel = int(args.numel) if str(args.numel).isdigit() else 0
    if numel < 1:
        raise ValueError(f"--numel takes a number of elements >= 1, not {args.numel!r}")
    names = [a for arg in (args.arch or ["sm_90"]) for a in arg.split(",") if a]
    return ops, dtypes, ns, numel, [get_arch(a) for a in names]


def main(args: argparse.Namespace) -> int:
    from rich.console import Console

    from kernel_lab.base.errors import KernelLabError

    try:
        ops, dtypes, ns, numel, archs = _parse(args)
    except (KernelLabError, ValueError) as e:
        print(f"kernel_lab picks: {e}", file=sys.stderr)
        return 2
    console = Console()
    console.print(f"auto (CUDA): the pick for a tensor of {numel:,} elements (--numel)")
    for arch in archs:
        for o in ops:
            for dt in dtypes:
                _print_table(console, o, dt, ns, numel, arch)
    return 0


def _print_table(console, op: str, dt: torch.dtype, ns: Sequence[int], numel: int,
                 arch: Arch) -> None:
    from rich.table import Table

    header, rows = pick_rows(op, dt, ns, numel, arch)
    table = Table(title=f"{op} {dtype_name(dt)} on {arch.name} ({arch.gpus}): contiguous rows "
                  "of N", title_justify="left")
    for h in header:
        table.add_column(h, justify="right" if h == "N" else "left")
    for r in rows:
        table.add_row(*r)
    console.print(table)
