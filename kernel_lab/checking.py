"""Correctness checking shared by the tests, the benchmarks and ``python -m kernel_lab check``.

One place defines *what* is checked: the shape cases (odd sizes, 3-D, other dims, strided and
misaligned layouts, empty tensors), each op's edge cases, poisoning, and the comparison with the
op's float64 reference under the tolerance table of :mod:`kernel_lab.reference`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import torch

from . import registry
from .reference import CheckResult

DTYPE_NAMES = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float64": torch.float64,
}


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


@dataclass(frozen=True)
class Case:
    """A shape case: inputs of ``shape`` laid out as ``layout``, reduced over ``dim``."""

    shape: tuple[int, ...]
    dim: int = -1
    layout: str = "contiguous"  # contiguous | transposed | row_sliced | misaligned
    gpu_only: bool = False
    tags: tuple[str, ...] = field(default=())

    @property
    def label(self) -> str:
        s = "x".join(map(str, self.shape))
        extra = "" if self.dim == -1 else f"-dim{self.dim}"
        return f"{s}{extra}" + ("" if self.layout == "contiguous" else f"-{self.layout}")


CASES: tuple[Case, ...] = (
    Case((1, 1)),
    Case((1, 7)),
    Case((3, 127)),
    Case((4, 781)),
    Case((2, 1823)),
    Case((2, 3, 127)),
    Case((7, 3, 5), dim=0),
    Case((4, 5, 6), dim=1),
    Case((3, 781), layout="transposed"),
    Case((3, 781), layout="row_sliced"),
    Case((3, 781), layout="misaligned"),
    Case((0, 16)),
    Case((4, 0)),
    # GPU only: real sizes (too slow for the Triton interpreter on a CPU).
    Case((1024, 128), gpu_only=True),
    Case((513, 512), gpu_only=True),
    Case((64, 1024), gpu_only=True),
    Case((8, 4096), gpu_only=True),
    Case((5, 24001), gpu_only=True),  # odd rows on kernel 2b at 256 threads (fp16 / bf16)
    Case((4, 32000), gpu_only=True),
    Case((3, 50257), gpu_only=True),
    Case((8, 50257), layout="misaligned", gpu_only=True),
    Case((4, 65536), layout="row_sliced", gpu_only=True),
    Case((2, 128256), gpu_only=True),
    Case((2, 151936), gpu_only=True),
    Case((3, 262144), gpu_only=True),
    Case((2, 1048576), gpu_only=True),
    Case((2, 2097153), gpu_only=True),  # fp32 / fp16 / bf16: rows in chunks, odd length
    Case((16, 4097), layout="transposed", gpu_only=True),
)


def cases_for(device: str | torch.device) -> list[Case]:
    on_gpu = torch.device(device).type == "cuda"
    return [c for c in CASES if on_gpu or not c.gpu_only]


def relayout(t: torch.Tensor, layout: str) -> torch.Tensor:
    """The same values as ``t`` in another memory layout (for strided / misaligned inputs)."""
    if layout == "contiguous" or t.dim() == 0:
        return t
    if layout == "transposed":  # last dim strided: a (..., N) view of an (N, ...) buffer
        buf = torch.empty(t.shape[::-1], dtype=t.dtype, device=t.device)
        out = buf.permute(*reversed(range(t.dim())))
    elif layout == "row_sliced":  # unit column stride, row stride N + 3
        buf = torch.empty((*t.shape[:-1], t.shape[-1] + 3), dtype=t.dtype, device=t.device)
        out = buf[..., : t.shape[-1]]
    elif layout == "misaligned":  # base pointer one element past an aligned allocation
        buf = torch.empty(t.numel() + 1, dtype=t.dtype, device=t.device)
        out = buf[1:].view(t.shape)
    else:
        raise ValueError(f"unknown layout {layout!r}")
    out.copy_(t)
    return out


def make_case_inputs(op: registry.Op, case: Case, dtype: torch.dtype, device, generator):
    inputs = op.make_inputs(case.shape, dtype, device, generator)
    return tuple(relayout(t, case.layout) for t in inputs), {"dim": case.dim}


def poison_allocator(like: torch.Tensor) -> None:
    """Leave a NaN-filled block in the caching allocator where the next output will land.

    Variants allocate their own outputs with ``torch.empty``; on CUDA the caching allocator hands
    back the block freed last of the same size, so an element the kernel forgets to write reads
    as NaN and fails the check instead of inheriting a correct value from an earlier run.
    """
    if like.is_cuda and like.numel():
        torch.full(like.shape, float("nan"), dtype=like.dtype, device=like.device)


def run_checked(
    variant: registry.Variant, inputs: tuple, kw: dict[str, Any]
) -> tuple[CheckResult, Any]:
    """Poison, run ``variant`` on ``inputs`` and compare with its op's float64 reference."""
    op = registry.get_op(variant.op)
    ref = op.reference(*inputs, **kw)
    snapshot = [t.clone() for t in inputs]  # before the call: a variant must not write inputs
    poison_allocator(inputs[0])
    out = variant.fn(*inputs, **kw)
    if isinstance(out, torch.Tensor) and out.is_cuda:
        torch.cuda.synchronize(out.device)
    result = op.check(out, *inputs, ref=ref, **kw)
    for before, after in zip(snapshot, inputs):
        if not torch.equal(before.nan_to_num(), after.nan_to_num()):
            return CheckResult(False, result.max_abs_err, result.max_rel_err,
                               "the variant modified its input"), out
    return result, out


def fresh_seed() -> int:
    """A new seed per run (printed on failure), so every run checks new random inputs."""
    return int.from_bytes(os.urandom(4), "little")


def default_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


# -- CLI: list / check -----------------------------------------------------------------------
def wide_console():
    """A rich Console at least 140 columns wide (logs and pipes would get 80 and fold tables)."""
    import shutil

    from rich.console import Console

    return Console(width=max(140, shutil.get_terminal_size().columns))


def _probe_input(v: registry.Variant, device: str) -> torch.Tensor:
    dtype = torch.float32 if torch.float32 in v.dtypes else v.dtypes[0]
    return torch.empty((2, 8), dtype=dtype, device=device)


def runs_here(v: registry.Variant) -> str:
    """'yes', or the reason it cannot run on this machine."""
    probe = _probe_input(v, default_device())
    op = registry.get_op(v.op)
    n_inputs = len(op.make_inputs((1, 1), probe.dtype, "cpu", None))
    reason = v.supports(*([probe] * n_inputs))
    return "yes" if reason is None else reason


def list_main(args) -> int:
    from rich.table import Table

    console = wide_console()
    names = [args.op] if getattr(args, "op", None) else registry.ops()
    for op_name in names:
        op = registry.get_op(op_name)
        table = Table(title=f"{op.name}: {op.description}", title_justify="left")
        for col in ("variant", "backend", "dtypes", "source", "runs here", "description"):
            table.add_column(col, overflow="fold")
        for v in registry.variants(op_name):
            here = runs_here(v)
            table.add_row(
                v.name, v.backend, ",".join(dtype_name(d).replace("float", "f").replace(
                    "bf", "bf") for d in v.dtypes), v.source or "-",
                "[green]yes[/]" if here == "yes" else f"[yellow]no[/]: {here}", v.description,
            )
        console.print(table)
    return 0


def check_main(args) -> int:
    from rich.table import Table

    console = wide_console()
    device = args.device or default_device()
    seed = args.seed if args.seed is not None else fresh_seed()
    dtypes = [DTYPE_NAMES[d] for d in (args.dtype or ["float32", "float16", "bfloat16"])]
    if args.names:
        chosen = [registry.get(n) for n in args.names]
    else:
        chosen = registry.variants(args.op)
    table = Table(title=f"check on {device} (seed {seed})", title_justify="left")
    for col in ("variant", "dtype", "cases", "result", "max abs err", "first failure"):
        table.add_column(col, overflow="fold")
    failures = 0
    for v in chosen:
        op = registry.get_op(v.op)
        for dtype in dtypes:
            if dtype not in v.dtypes:
                continue
            gen = torch.Generator().manual_seed(seed)
            n_ok, n_run, worst, first_bad, skipped = 0, 0, 0.0, "", ""
            todo = [(c.label, *make_case_inputs(op, c, dtype, device, gen)) for c in
                    cases_for(device)]
            if op.edge_cases:
                todo += op.edge_cases(dtype, device, gen)
            for label, inputs, kw in todo:
                reason = v.supports(*inputs, **kw)
                if reason is not None:
                    skipped = reason
                    continue
                n_run += 1
                try:
                    res, _ = run_checked(v, inputs, kw)
                except Exception as e:  # noqa: BLE001 - report, keep checking the others
                    res = CheckResult(False, float("nan"), float("nan"), f"raised {e!r}")
                if res.ok:
                    n_ok += 1
                    worst = max(worst, res.max_abs_err)
                elif not first_bad:
                    first_bad = f"{label}: {res.message}"
            if n_run == 0:
                table.add_row(v.name, dtype_name(dtype), "0", "[yellow]skip[/]", "-", skipped)
                continue
            ok = n_ok == n_run
            failures += not ok
            table.add_row(v.name, dtype_name(dtype), f"{n_ok}/{n_run}",
                          "[green]pass[/]" if ok else "[red]FAIL[/]", f"{worst:.2e}", first_bad)
    console.print(table)
    return 1 if failures else 0
