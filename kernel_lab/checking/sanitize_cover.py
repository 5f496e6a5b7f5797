"""Which CUDA kernels a case set makes each variant launch, worked out on a CPU.

``check --sanitize`` only finds what its cases launch, so each sanitizer's case set must reach
every kernel kind a variant can pick. Here a variant's own launcher runs on ``meta`` tensors
(no data; every allocation at address 0, as aligned as the 256-byte cudaMalloc bases the
sanitizer's child gets with the caching allocator off) with the launch and the device queries
replaced: each launch records its name expression; persistent grids come from an H100 model
(:data:`H100_SMS` SMs, sm_90's limits; registers not modelled), the only device fact a pick
reads (the chunk kernels' fallbacks where a row has more chunks than resident CTAs + 1).

A kind is a kernel template with its compile-time switches (``true`` / ``false``) and without
its dtype and sizes: ``fast_softmax_persist_cluster<float, 16, 8>`` ->
``fast_softmax_persist_cluster``, ``cross_entropy_fwd<float, false>`` ->
``cross_entropy_fwd<false>``. :func:`possible_kinds` is what the launcher can pick at all
(:func:`kernel_lab.cuda.rowkernels.reachable.launchable`), :func:`reached_kinds` what a case set
makes it launch; tests/test_sanitize_cover.py asserts they are equal for every CUDA variant.
"""

from __future__ import annotations

import contextlib
import re
import sys
from collections.abc import Iterator
from typing import Any, NamedTuple

import torch

from kernel_lab.core import registry

H100_SMS = 132  # H100 SXM and H200 alike
_ARGS = re.compile(r"^\s*([A-Za-z_]\w*)\s*(?:<(.*)>)?\s*$")


def _split(expr: str) -> tuple[str, list[str]]:
    m = _ARGS.match(expr)
    if m is None:
        raise ValueError(f"not a name expression: {expr!r}")
    args = [a.strip() for a in m.group(2).split(",")] if m.group(2) else []
    return m.group(1), args


def kind_of(expr: str) -> str:
    """The kind of name expression ``expr``: its template and its ``true`` / ``false``
    arguments (types and sizes dropped)."""
    name, args = _split(expr)
    switches = [a for a in args if a in ("true", "false")]
    return f"{name}<{', '.join(switches)}>" if switches else name


def expr_ctype(expr: str) -> str | None:
    """The C element type of ``expr`` (its first template argument), or None."""
    _, args = _split(expr)
    return args[0] if args else None


def source_of(variant: registry.Variant):
    """The CudaSource a CUDA variant's launcher declares for its kernel file."""
    from kernel_lab.cuda import jit
    from kernel_lab.cuda import sources as cuda_common

    found = [s for s in cuda_common.SOURCES if jit.display_name(s.path) == variant.source]
    if len(found) != 1:
        raise LookupError(f"{variant.name}: {len(found)} declared sources for {variant.source}")
    return found[0]


def possible_kinds(variant: registry.Variant, dtype: torch.dtype) -> set[str]:
    """Every kind ``variant``'s launcher can pick for ``dtype``: its source's launchable
    instantiations (:func:`kernel_lab.cuda.rowkernels.reachable.launchable`) of that C type."""
    from kernel_lab.cuda.rowkernels.reachable import launchable
    from kernel_lab.cuda.sources import ctype

    t = ctype(dtype)
    return {kind_of(e) for e in launchable(source_of(variant)) if expr_ctype(e) == t}


# -- the launches, simulated -------------------------------------------------------------------
class _Loaded(NamedTuple):
    """Stands for a loaded kernel (CudaSource.function) in a simulated launch."""

    expr: str
    ptr: int = 0


def _h100_groups(threads: int, cluster: int, smem: int) -> int:
    """CTAs (cluster 1) or clusters resident at once on an H100: sm_90's limits on threads,
    blocks and shared memory per SM (registers not modelled), whole clusters per SM share."""
    from kernel_lab.cuda.archs import get_arch

    a = get_arch("sm_90")
    per_sm = min(a.max_blocks_per_sm, a.max_threads_per_sm // threads,
                 a.smem_per_sm // (smem + a.smem_reserved_per_block))
    return max(1, per_sm * H100_SMS // cluster)


@contextlib.contextmanager
def simulated_launches() -> Iterator[list[str]]:
    """Inside, CUDA launches record their name expressions in the yielded list instead of
    running; the device queries answer for an H100. Every kernel_lab module's reference to a
    replaced function is swapped for the stand-in and put back on exit: process-wide, so for
    tests and tools, never beside real launches on another thread."""
    from kernel_lab.cuda import deferred, flag_words, interop, jit, occupancy
    from kernel_lab.cuda import sources as cuda_common

    launched: list[str] = []

    def launch_rows(src, expr, out2d, inputs2d, **kw):
        launched.append(expr)

    def launch(fn, grid, block, args, **kw):
        launched.append(kw["source"][1] if kw.get("source") else fn.expr)

    def persistent_grid(src, expr, threads, cluster, smem, m, dev, max_groups=None):
        groups = min(m, _h100_groups(threads, cluster, smem))
        return (groups if max_groups is None else max(1, min(groups, max_groups))) * cluster

    def first_wave(src, expr, threads, cluster, smem, m, row_bytes, dev, bytes_per_ns=None):
        return min(m, _h100_groups(threads, cluster, smem)), 0

    stand_ins = {
        cuda_common.launch_rows: launch_rows,
        interop.launch: launch,
        cuda_common.device_index: lambda t: 0,
        occupancy.persistent_grid: persistent_grid,
        occupancy.first_wave: first_wave,
        occupancy.copy_bytes_per_ns: lambda dev: occupancy.FIRST_WAVE_BYTES_PER_NS,
        occupancy.resident_groups: lambda src, expr, threads, cluster, smem, dev: _h100_groups(
            threads, cluster, smem),
        occupancy.allow_non_portable_cluster: lambda *a, **k: None,
        jit.set_max_dynamic_shared: lambda fn, nbytes: None,
        flag_words.flag_words: lambda count, device: (torch.empty(count, dtype=torch.int64,
                                                                  device="meta"), 1),
        deferred.flags_or_none: lambda device: None,
        deferred.raise_pending: lambda: None,  # a flag an earlier real launch left is not ours
    }
    by_id = {id(f): g for f, g in stand_ins.items()}
    swapped: list[tuple[Any, str, Any]] = []
    function = cuda_common.CudaSource.function
    try:
        for name, mod in list(sys.modules.items()):
            if mod is None or not (name == "kernel_lab" or name.startswith("kernel_lab.")):
                continue
            for attr, value in list(vars(mod).items()):
                if id(value) in by_id and callable(value):
                    swapped.append((mod, attr, value))
                    setattr(mod, attr, by_id[id(value)])
        cuda_common.CudaSource.function = lambda self, expr, dev: _Loaded(expr)
        with registry.trusted_inputs():  # target values: meta tensors have none to check
            yield launched
    finally:
        cuda_common.CudaSource.function = function
        for mod, attr, value in swapped:
            setattr(mod, attr, value)


def _supports_on_gpu(v: registry.Variant, inputs: tuple, kw: dict) -> str | None:
    """``v.supports`` as on CUDA tensors of these shapes (the inputs are on ``meta``)."""
    why = v.supports(*inputs, **kw)
    if why is not None and why.startswith("needs a CUDA tensor"):
        why = v.check(*inputs, **kw) if v.check is not None else None
    return why


def case_kinds(variant: registry.Variant, dtype: torch.dtype,
               selection: str) -> dict[str, set[str]]:
    """Per case of ``check --cases selection`` on a GPU (shape cases, then the op's edge
    cases): the kinds ``variant`` launches for it in ``dtype``; cases it refuses are left out."""
    from kernel_lab.checking.checker import cases_for, make_case_inputs

    op = registry.get_op(variant.op)
    todo = [(c.label, *make_case_inputs(op, c, dtype, "meta", None))
            for c in cases_for("cuda", op, selection)]
    if op.edge_cases:
        todo += op.edge_cases(dtype, "meta", None)
    out: dict[str, set[str]] = {}
    with simulated_launches() as launched:
        for label, inputs, kw in todo:
            if _supports_on_gpu(variant, inputs, kw) is not None:
                continue
            launched.clear()
            variant.fn(*inputs, **kw)
            out[label] = {kind_of(e) for e in launched}
    return out


def reached_kinds(variant: registry.Variant, dtype: torch.dtype, selection: str) -> set[str]:
    """Every kind ``variant`` launches in ``dtype`` over the case set ``selection``."""
    return set().union(*case_kinds(variant, dtype, selection).values())


def main(argv: list[str] | None = None) -> int:
    """``python -m kernel_lab.checking.sanitize_cover [SELECTION] [--dtype D]...``: per CUDA
    variant and
    dtype, the kinds each case of the set reaches, and the kinds it can pick that none does."""
    import argparse

    from kernel_lab.checking.checker import SELECTIONS, parse_dtype

    p = argparse.ArgumentParser(prog="python -m kernel_lab.checking.sanitize_cover")
    p.add_argument("selection", nargs="?", default="sanitize", choices=SELECTIONS)
    p.add_argument("--dtype", action="append", help="repeatable (default: fp32, bf16)")
    args = p.parse_args(argv)
    dtypes = [parse_dtype(d) for d in args.dtype or ["fp32", "bf16"]]
    missed = 0
    for v in registry.variants():
        if v.backend != "cuda":
            continue
        for dtype in dtypes:
            per_case = case_kinds(v, dtype, args.selection)
            left = possible_kinds(v, dtype) - set().union(*per_case.values())
            missed += bool(left)
            print(f"{v.name} {dtype}: " + ("every kind reached" if not left else
                                           f"never reached: {', '.join(sorted(left))}"))
            first: dict[str, str] = {}
            for label, kinds in per_case.items():
                for k in sorted(kinds):
                    first.setdefault(k, label)
            for k, label in sorted(first.items()):
                print(f"    {k}: first by {label}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
