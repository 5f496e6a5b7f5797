"""Which declared instantiations a launcher can pick, derived from the launchers' own rules.

``python -m kernel_lab compile`` builds these by default; the others (tuning-only shapes, probes)
only with ``--all`` or when a tuner or test launches them. Nothing here is a second list: each
family below calls the config function its launcher calls - ``fast_softmax_config`` (fast_softmax,
log_softmax), ``backward_config`` (fused_softmax_backward), ``log_backward_config``
(log_softmax_backward), ``vec_config``, ``warp_softmax_config`` - for every alignment flag the
launcher can pass, plus the launchers' fallbacks (chunks -> wide forward, chunks -> stream
backward, where a GPU holds too few CTAs for a row's chunks), over :func:`row_lengths`.

The configs depend on N only through 16-byte window counts (``ceil(n / W)``, and whether the row
starts a window with one element or lands on a 128-byte line), so :func:`row_lengths` takes every
N up to DENSE_N and beyond it, up to 2^21 + 1, the window counts of a grid of relative step
1 / GRID_STEPS, each with the N that ends a window, the two after it and the next multiple of a
128-byte line; then powers of two around 2^12-2^28. Checked against every N up to 2^21 + 1 in
every family and dtype: the same sets (the grid's powers of two past 2^21 add the 2-byte
``chunks``, right). Past DENSE_N, the instantiation with the narrowest span of row lengths is
the 2-byte ``persist_cluster<T, 4, 2>``: window counts 7161-7424, 3.7 % of its start, against a
grid step of 0.2 %. tests/test_reachable.py checks random row lengths against the set.

Each arch has its own set (:mod:`kernel_lab.cuda.archs`; default sm_90): the configs pass over
shapes the arch cannot launch, so before sm_90 no cluster kernel is launchable, nor compiled.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch

from kernel_lab.cuda.archs import Arch
from kernel_lab.cuda.rowkernels import backward_config as bc
from kernel_lab.cuda.rowkernels import forward_config as fc
from kernel_lab.cuda.rowkernels import geometry
from kernel_lab.cuda.sources import ALL_DTYPES, cdiv, ctype, vec_width

DENSE_N = 4096  # every row length up to here
LAST_N = (1 << 21) + 1  # the grid's end; past it only powers of two (the rules are constant)
GRID_STEPS = 512  # grid step past DENSE_N: 1 / GRID_STEPS of the window count
# fast_choice's (rows aligned, same 16-byte phase, rows on 128-byte lines)
FORWARD_FLAGS = ((True, True, True), (True, True, False), (False, True, False),
                 (False, False, False))
# the backward launchers' (rows aligned, same 16-byte phase)
BACKWARD_FLAGS = ((True, True), (False, True), (False, False))


@functools.cache
def row_lengths(dtype: torch.dtype) -> tuple[int, ...]:
    """The row lengths whose configs stand for every N (see the module's docstring)."""
    w, line = vec_width(dtype), geometry.LINE_BYTES // dtype.itemsize
    ns = set(range(1, DENSE_N + 1))
    q = DENSE_N // w
    while q * w <= LAST_N + w:
        n = q * w
        ns.update((n, n + 1, n + 2, cdiv(n, line) * line))
        q += max(1, q // GRID_STEPS)
    for k in range(12, 29):
        ns.update(range((1 << k) - 2, (1 << k) + 3))
    return tuple(sorted(ns))


# -- per family: the configs one (N, dtype) can launch, and a config's name expression --------
def forward_configs(n: int, dtype: torch.dtype, arch: Arch = fc.TUNED_ARCH) -> set:
    out = set()
    for aligned, vec, line in FORWARD_FLAGS:
        try:
            cfg = fc.fast_softmax_config(n, dtype, aligned, vec, line, arch)
        except fc.NoShapeForArch:
            continue
        out.add(cfg)
        if cfg.kind_of.grid == "chunks" and arch.cluster:  # too few resident CTAs: wide
            out.add(fc.wide_config(geometry.vector_windows(n, dtype), arch=arch))
    return out


_STREAM = bc.BackwardConfig("stream", 1024, None)


def _backward_with_fallback(pick: Callable, n: int, dtype: torch.dtype, arch: Arch) -> set:
    out = set()
    for aligned, phase in BACKWARD_FLAGS:
        cfg = pick(n, dtype, aligned, phase, arch)
        out.add(cfg)
        if cfg.kind_of.grid == "chunks":  # backward_launch on too few resident CTAs
            out.add(_STREAM)
    return out


def backward_configs(n: int, dtype: torch.dtype, arch: Arch = fc.TUNED_ARCH) -> set:
    return _backward_with_fallback(bc.backward_config, n, dtype, arch)


_FOUND: dict[str, Any] = {}


def _ops_attr(name: str):
    """A launcher module's ``name`` (``log_backward_config``, ``warp_softmax_config``, ...), found
    among the loaded ``kernel_lab.ops`` modules (then remembered); None if no module has it."""
    import sys

    if name in _FOUND:
        return _FOUND[name]
    for modname, mod in list(sys.modules.items()):
        if modname.startswith("kernel_lab.ops.") and hasattr(mod, name):
            _FOUND[name] = getattr(mod, name)
            return _FOUND[name]
    return None


def log_backward_configs(n: int, dtype: torch.dtype, arch: Arch = fc.TUNED_ARCH) -> set:
    pick = _ops_attr("log_backward_config")
    return _backward_with_fallback(pick, n, dtype, arch)


def vec_configs(n: int, dtype: torch.dtype, arch: Arch = fc.TUNED_ARCH) -> set:
    return {fc.vec_config(n, dtype)[1]}


def warp_configs(n: int, dtype: torch.dtype, arch: Arch = fc.TUNED_ARCH) -> set:
    return {_ops_attr("warp_softmax_config")(n)} if n <= _ops_attr("WARP_MAX_N") else set()


def _vec_expr(vpt: int | None, t: str, prefix: str) -> str:
    return f"{prefix}<{t}, {vpt}>" if vpt else f"{prefix}_stream<{t}>"


@dataclass(frozen=True)
class Family:
    """How one launcher picks: ``configs(n, dtype, arch)`` -> hashable configs, ``expr(cfg,
    ctype, prefix)`` -> the name expression launched."""

    configs: Callable[[int, torch.dtype, Arch], set]
    expr: Callable[[Any, str, str], str]


FORWARD = Family(forward_configs, lambda cfg, t, p: cfg.expr(t, p))
BACKWARD = Family(backward_configs, lambda cfg, t, p: cfg.expr(t, p))
LOG_BACKWARD = Family(log_backward_configs, lambda cfg, t, p: cfg.expr(t, p))
VEC = Family(vec_configs, _vec_expr)
WARP = Family(warp_configs, lambda ept, t, p: f"{p}<{t}, {ept}>")
PER_DTYPE = Family(lambda n, dtype, arch: {None}, lambda _, t, p: f"{p}<{t}>")
NONE = Family(lambda n, dtype, arch: set(), lambda *_: "")  # probes and tuning only

# kernel-name prefix (the name expressions' template names: PREFIX<...> or PREFIX_kind<...>)
# -> family; a source whose template names all map to one prefix is that family's (the longest
# prefix wins: log_softmax_backward_persist is log_softmax_backward's); any other, every
# instantiation. Keyed by kernel names, not files or variants, which get renamed.
FAMILIES: dict[str, Family] = {
    "fast_softmax": FORWARD,
    "log_softmax": FORWARD,
    "fused_softmax_backward": BACKWARD,
    "log_softmax_backward": LOG_BACKWARD,
    "vec_softmax": VEC,
    "warp_softmax": WARP,
    "naive_softmax": PER_DTYPE,
    "block_softmax": PER_DTYPE,
    "online_softmax": PER_DTYPE,
    "cluster_probe": NONE,  # occupancy.cluster_placement's probe
}
# what a family needs from the launcher modules (None there: the family cannot be derived)
_NEEDS = {LOG_BACKWARD: ("log_backward_config",), WARP: ("warp_softmax_config", "WARP_MAX_N")}


def family_of(src) -> tuple[Family, str] | None:
    """(family, kernel-name prefix) of a CudaSource, or None: take every instantiation."""
    prefixes = set()
    for e in src.name_expressions:
        name = e.split("<", 1)[0].strip()
        keys = [k for k in FAMILIES if name == k or name.startswith(k + "_")]
        if not keys:
            return None
        prefixes.add(max(keys, key=len))
    if len(prefixes) != 1:
        return None
    prefix = prefixes.pop()
    family = FAMILIES[prefix]
    if any(_ops_attr(need) is None for need in _NEEDS.get(family, ())):
        return None
    return family, prefix


@functools.cache
def family_configs(family: Family, dtype: torch.dtype, arch: Arch = fc.TUNED_ARCH) -> frozenset:
    """Every config ``family`` can launch for ``dtype`` on ``arch``, over :func:`row_lengths`."""
    out: set = set()
    for n in row_lengths(dtype):
        out |= family.configs(n, dtype, arch)
    return frozenset(out)


def _in_order(src, exprs: Iterable[str]) -> list[str]:
    want = set(exprs)
    return [e for e in src.name_expressions if e in want]


def _family_exprs(family: Family, prefix: str, arch: Arch = fc.TUNED_ARCH) -> set[str]:
    return {family.expr(cfg, ctype(dt), prefix)
            for dt in ALL_DTYPES for cfg in family_configs(family, dt, arch)}


def launchable(src, arch: Arch = fc.TUNED_ARCH) -> list[str]:
    """The declared instantiations of ``src`` (a CudaSource) that its launcher can pick on
    ``arch``, in declaration order: ``src.launchable`` if set, else its family's
    (:func:`family_of`), else all - all too where the family would pick an undeclared one (then
    it is not the family's file). Computed once per process, source and arch."""
    return list(_launchable(src.name_expressions, src.launchable, arch))


@functools.cache
def _launchable(name_expressions: tuple[str, ...], own, arch: Arch) -> tuple[str, ...]:
    from types import SimpleNamespace

    src = SimpleNamespace(name_expressions=name_expressions)
    if own is not None:
        return tuple(_in_order(src, own(arch)))
    fam = family_of(src)
    if fam is None:
        return name_expressions
    exprs = _family_exprs(*fam, arch)
    if not exprs <= set(name_expressions):
        return name_expressions
    return tuple(_in_order(src, exprs))


def undeclared(src) -> list[str]:
    """Name expressions the family of ``src`` can launch that ``src`` does not declare (for the
    lab's files: none)."""
    fam = family_of(src)
    return [] if fam is None else sorted(_family_exprs(*fam) - set(src.name_expressions))


def launched(src, n: int, dtype: torch.dtype) -> list[str]:
    """The declared instantiations of ``src`` that rows of ``n`` elements of ``dtype`` can
    launch, over every alignment (for ``resources --n``); for files without a family, the
    instantiations naming the dtype's C type."""
    fam = family_of(src)
    t = ctype(dtype)
    if fam is None or fam[0] is NONE:
        return [e for e in src.name_expressions if f"<{t}>" in e or f"<{t}," in e]
    family, prefix = fam
    return _in_order(src, (family.expr(cfg, t, prefix)
                           for cfg in family.configs(n, dtype, fc.TUNED_ARCH)))
