"""The kinds of the row-kernel family, one object each: the forward's (cuda_src/
row_softmax_kernels.cuh) in :data:`KINDS`, the backward's (fused_softmax_backward.cu and the
backward headers) in :data:`BACKWARD_KINDS`.

A kind is one device body and its launch geometry. Its object holds everything that differs by
kind - the template a config instantiates, the windows a row may span, the dynamic shared
memory, the label, whether windows count from the row's 128-byte line, how its grid is sized and
the arguments after the first - so a config (:class:`~.forward_config.FastConfig`,
:class:`~.backward_config.BackwardConfig`) only names its kind, and launch.py looks the kind up.
The rules that pick a kind and its shape per (N, dtype, arch) are the config modules'.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kernel_lab.cuda.interop import i32

ANY_ROW = 1 << 31  # the capacity of the kinds that hold rows of any length
# grids: "groups" - rows in lane groups, ``threads // group`` rows a CTA; "rows" - a CTA (or
# cluster) per row; "resident" - the resident CTAs / clusters loop over rows (occupancy); "chunks"
# - resident CTAs over every row's chunks, their (max, sum) through flag words
GRIDS = ("groups", "rows", "resident", "chunks")


# The kinds' limits, checked by each kind's ``rule``.
SLOTS_CL = (2, 4)  # block_slots on a cluster: the row over 2 or 4 CTAs
CHUNK_REG_MAX_THREADS = 512  # chunks_reg: each thread holds two chunks' values in registers
MAX_CTA_SHARED = 227 * 1024  # H100/H200: the most dynamic shared memory one CTA may take


def _cl(cfg) -> str:
    return f"{cfg.cluster}x" if cfg.cluster > 1 else ""


def _slot_bytes(cfg) -> int:
    return cfg.threads * cfg.slots * 16


def _staged_bytes(cfg) -> int:
    return cfg.threads * cfg.vpt * 16 * cfg.stages


def _clustered_label(cfg) -> str:
    late = " late" if cfg.late else ""
    stages = f" s{cfg.stages}" if cfg.stages > 1 else ""
    return f"{cfg.kind} {cfg.cluster}x{cfg.threads}x{cfg.vpt}{late}{stages}"


def _slots_rule(cfg) -> str | None:
    if cfg.cluster not in (1, *SLOTS_CL):
        return f"{cfg.kind} runs on 1 CTA a row or clusters of {SLOTS_CL}, not {cfg.cluster}"
    if not (0 <= cfg.slots and _slot_bytes(cfg) <= MAX_CTA_SHARED):
        return (f"{cfg.label()}: {_slot_bytes(cfg)} B of slots, more than a CTA may take "
                f"({MAX_CTA_SHARED} B)")
    return None


def _chunks_rule(cfg) -> str | None:
    if cfg.lag >= 1 and 0 <= cfg.ahead <= 7:
        return None
    return f"chunks need lag >= 1 and 0 <= ahead <= 7, not {cfg.lag}, {cfg.ahead}"


def _chunks_reg_rule(cfg) -> str | None:
    if cfg.lag == 1 and 1 <= cfg.ahead <= 8 and cfg.threads <= CHUNK_REG_MAX_THREADS:
        return None
    return (f"chunks_reg needs lag 1, 1 <= ahead <= 8 and <= {CHUNK_REG_MAX_THREADS} threads, "
            f"not {cfg.lag}, {cfg.ahead}, {cfg.threads}")


@dataclass(frozen=True)
class Kind:
    """One kernel kind: ``template(cfg, t, prefix)`` its name expression for C type t,
    ``capacity(cfg)`` the 16-byte windows a row may span, ``shared_mem(cfg)`` its dynamic shared
    memory per CTA, ``label(cfg)``, ``args(cfg)`` the kernel arguments after ``vec`` (before the
    first-wave pair where ``waved``), ``rule(cfg)`` why a config is not a shape of this kind
    (None: it is)."""

    name: str
    template: Callable[[Any, str, str], str]
    capacity: Callable[[Any], int]
    label: Callable[[Any], str]
    grid: str
    shared_mem: Callable[[Any], int] = lambda cfg: 0
    args: Callable[[Any], tuple] = lambda cfg: ()
    line_heads: bool = False  # windows from the row's 128-byte line: rows in one 16-byte phase
    waved: bool = False  # takes (wave_rows, wave_ns): its first wave may start in phases
    # ... and does, for rows of launch.STAGGER_MIN_ROW_BYTES or more (A/B in one process, H200,
    # M*N = 2^28: block_slots +0.6-2.7 points of copy at 2-byte 128256-151936, block +0.4-0.9 at
    # 32K-64K; cluster, waved too, is picked by no rule and launches every row at once)
    staggered: bool = False
    rule: Callable[[Any], str | None] = lambda cfg: None
    staged: bool = False  # ``stages`` rows in flight (1 or 2)
    non_portable_opt_in: bool = False  # clusters past 8 CTAs ask for the attribute at launch

    def __post_init__(self):
        if self.grid not in GRIDS:
            raise ValueError(f"{self.name}: grid {self.grid!r} is not one of {GRIDS}")


KINDS: dict[str, Kind] = {k.name: k for k in (
    Kind("warp", lambda c, t, p: f"{p}_warp<{t}, {c.group}, {c.vpt}>",
         capacity=lambda c: c.group * c.vpt, label=lambda c: f"warp g{c.group}x{c.vpt}",
         grid="groups"),
    Kind("block", lambda c, t, p: f"{p}_block<{t}, {c.vpt}>",
         capacity=lambda c: c.threads * c.vpt * c.cluster,
         label=lambda c: f"block {c.threads}x{c.vpt}", grid="rows", waved=True, staggered=True),
    Kind("block_slots", lambda c, t, p: (f"{p}_cluster_slots<{t}, {c.vpt}, {c.cluster}>"
                                         if c.cluster > 1 else f"{p}_block_slots<{t}, {c.vpt}>"),
         capacity=lambda c: c.cluster * c.threads * (c.vpt + c.slots),
         label=lambda c: f"block_slots {_cl(c)}{c.threads}x{c.vpt}+{c.slots}", grid="rows",
         shared_mem=_slot_bytes, args=lambda c: (i32(c.slots),), line_heads=True, waved=True,
         staggered=True, rule=_slots_rule),
    Kind("persist_slots",
         lambda c, t, p: (f"{p}_persist_cluster_slots<{t}, {c.vpt}, {c.cluster}>"
                          if c.cluster > 1 else f"{p}_persist_slots<{t}, {c.vpt}>"),
         capacity=lambda c: c.cluster * c.threads * (c.vpt + c.slots),
         label=lambda c: f"persist_slots {_cl(c)}{c.threads}x{c.vpt}+{c.slots}",
         grid="resident", shared_mem=_slot_bytes, args=lambda c: (i32(c.slots),),
         line_heads=True, rule=_slots_rule),
    Kind("cluster", lambda c, t, p: f"{p}_cluster<{t}, {c.vpt}, {c.cluster}>",
         capacity=lambda c: c.threads * c.vpt * c.cluster, label=_clustered_label, grid="rows",
         waved=True, non_portable_opt_in=True),
    Kind("persist", lambda c, t, p: (f"{p}_persist<{t}, {c.vpt}>" if c.cluster == 1
                                     else f"{p}_persist_cluster<{t}, {c.vpt}, {c.cluster}>"),
         capacity=lambda c: c.threads * c.vpt * c.cluster, label=_clustered_label,
         grid="resident", shared_mem=_staged_bytes,
         args=lambda c: (i32(int(c.late)), i32(c.stages)), line_heads=True, staged=True),
    Kind("pipe", lambda c, t, p: f"{p}_persist_pipe<{t}, {c.vpt}, {c.cluster}>",
         capacity=lambda c: c.threads * c.vpt * c.cluster, label=_clustered_label,
         grid="resident", shared_mem=_staged_bytes, args=lambda c: (i32(c.stages),),
         line_heads=True, staged=True),
    Kind("wide", lambda c, t, p: f"{p}_wide<{t}, {c.cluster}>", capacity=lambda c: ANY_ROW,
         label=lambda c: f"wide {c.cluster}x{c.threads} keep {c.vpt}", grid="resident",
         shared_mem=_staged_bytes, args=lambda c: (i32(c.vpt),)),
    Kind("chunks", lambda c, t, p: f"{p}_chunks<{t}, {c.vpt}>", capacity=lambda c: ANY_ROW,
         label=lambda c: f"chunks {c.threads}x{c.vpt} lag {c.lag} ahead {c.ahead}",
         grid="chunks", shared_mem=lambda c: c.threads * c.vpt * 16 * (c.lag + 1 + c.ahead),
         args=lambda c: (i32(c.lag), i32(c.ahead)), line_heads=True, rule=_chunks_rule),
    Kind("chunks_reg", lambda c, t, p: f"{p}_chunks_reg<{t}, {c.vpt}>",
         capacity=lambda c: ANY_ROW,
         label=lambda c: f"chunks_reg {c.threads}x{c.vpt} ahead {c.ahead}", grid="chunks",
         shared_mem=lambda c: c.threads * c.vpt * 16 * c.ahead,
         args=lambda c: (i32(c.ahead),), line_heads=True, rule=_chunks_reg_rule),
)}
SLOTS_KINDS = tuple(k for k in KINDS if k.endswith("_slots"))  # windows in shared-memory slots


# -- the backward kinds --------------------------------------------------------------------------
def _backward_label(cfg) -> str:
    stages = f" s{cfg.stages}" if cfg.stages > 1 else ""
    return f"{cfg.kind} {cfg.cluster}x{cfg.threads}x{cfg.vpt}{stages}"


def _backward_slots(cfg) -> int:
    """y and dy slots of ``stages`` prefetch sets (persist: rows, chunks: chunks)."""
    return cfg.stages * 2 * cfg.threads * cfg.vpt * 16


@dataclass(frozen=True)
class BackwardKind:
    """One backward kind: ``template(cfg, t, prefix)``, ``label(cfg)``, ``shared_mem(cfg)``;
    ``grid``: "rows" (a CTA or cluster a row), "resident" (persistent clusters) or "chunks";
    ``stages``: the prefetch sets it may keep in flight."""

    name: str
    template: Callable[[Any, str, str], str]
    grid: str
    label: Callable[[Any], str] = _backward_label
    shared_mem: Callable[[Any], int] = lambda cfg: 0
    stages: tuple[int, ...] = (1, 2)
    non_portable_opt_in: bool = False


BACKWARD_KINDS: dict[str, BackwardKind] = {k.name: k for k in (
    BackwardKind("block", lambda c, t, p: f"{p}<{t}, {c.vpt}>", grid="rows"),
    BackwardKind("cluster", lambda c, t, p: f"{p}_cluster<{t}, {c.vpt}, {c.cluster}>",
                 grid="rows", non_portable_opt_in=True),
    BackwardKind("persist", lambda c, t, p: f"{p}_persist<{t}, {c.vpt}, {c.cluster}>",
                 grid="resident", shared_mem=_backward_slots),
    BackwardKind("chunks", lambda c, t, p: f"{p}_chunks<{t}, {c.vpt}>", grid="chunks",
                 label=lambda c: f"chunks {c.threads}x{c.vpt} ahead {c.stages}",
                 shared_mem=_backward_slots, stages=(1, 2, 3, 4)),
    BackwardKind("stream", lambda c, t, p: f"{p}_stream<{t}>", grid="rows"),
)}
