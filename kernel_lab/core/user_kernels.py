"""Your own row-wise CUDA kernels as variants: a ``.cu`` file, or every one in a folder, in one
call (the kernel convention: :mod:`kernel_lab.cuda.sources`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from kernel_lab.base.inputs import FLOAT_DTYPES
from kernel_lab.core.registry import register
from kernel_lab.core.rows import rowwise
from kernel_lab.cuda import jit
from kernel_lab.cuda.sources import cdiv, ctype, cuda_source, launch_rows


def register_row_kernel(
    path: str | Path,
    *,
    name: str | None = None,
    op: str = "softmax",
    kernel: str | None = None,
    dtypes: Sequence[torch.dtype] = FLOAT_DTYPES,
    threads: int | Callable[[int, torch.dtype], int] = 256,
    rows_per_block: int = 1,
    description: str | None = None,
    include_dirs: Sequence[str | Path] = (),
    check: Callable[..., str | None] | None = None,
) -> Callable:
    """Register a row-wise CUDA kernel from any .cu file as a variant, in one call.

    The file must define ``template <typename T> __global__ void <kernel>(...)`` following the
    row-kernel convention above (one output, one input per op input: ``softmax`` takes x,
    ``softmax_backward`` takes y, dy). The launch is ``ceil(M / rows_per_block)`` blocks of
    ``threads`` threads (an int, or a function of (N, dtype)). ``name`` and ``kernel`` default
    to the file's stem. Returns the launcher; ``kernel_lab.run(name, ...)`` calls it.
    """
    p = Path(path).expanduser().resolve()
    kname = kernel or p.stem
    exprs = {dt: f"{kname}<{ctype(dt)}>" for dt in dtypes}
    src = cuda_source(p, list(exprs.values()), (*include_dirs, jit.cuda_src_dir()))
    pick = threads if callable(threads) else (lambda n, dt, t=threads: t)

    def launcher(*inputs: torch.Tensor, dim: int = -1) -> torch.Tensor:
        def run(out2d, *ins2d):
            m, n = out2d.shape
            grid = cdiv(m, rows_per_block)
            launch_rows(src, exprs[out2d.dtype], out2d, ins2d, grid=grid,
                        block=pick(n, out2d.dtype))

        return rowwise(run, *inputs, dim=dim)

    register(
        name or p.stem,
        op=op,
        backend="cuda",
        dtypes=tuple(dtypes),
        description=description or f"user kernel {kname} from {p}",
        source=jit.display_name(p),
        check=check,
    )(launcher)
    return launcher


def register_folder(folder: str | Path, **kw) -> list[str]:
    """Register every ``*.cu`` in ``folder`` with :func:`register_row_kernel` (same options)."""
    names = []
    for f in sorted(Path(folder).expanduser().glob("*.cu")):
        register_row_kernel(f, **kw)
        names.append(f.stem)
    return names
