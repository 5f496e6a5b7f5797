"""Launchers of the shared row-kernel family (cuda_src/row_softmax_kernels.cuh and the
backward headers) for any op that instantiates it with its own epilogue.

An op declares its instantiation as :class:`RowKernels` (its CudaSource and kernel-name
prefix); :func:`fast_choice` picks the forward shape, :func:`fast_launch` launches it, and
:func:`backward_launch` does the same for the backward kernels. Shapes are pure functions of
(N, dtype, alignment) in :mod:`.forward_config` and :mod:`.backward_config`; persistent grids
come from :mod:`kernel_lab.cuda.occupancy`, the chunk kernels' flag words from
:mod:`kernel_lab.cuda.flag_words`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kernel_lab.cuda.archs import Arch, assumed_arch, device_arch
from kernel_lab.cuda.flag_words import flag_words
from kernel_lab.cuda.interop import i32, i64
from kernel_lab.cuda.occupancy import allow_non_portable_cluster, first_wave, persistent_grid
from kernel_lab.cuda.rowkernels.backward_config import (
    BackwardConfig,
    backward_config,
)
from kernel_lab.cuda.rowkernels.forward_config import (
    MAX_CTA_SHARED,
    TUNED_ARCH,
    FastConfig,
    chunks_fit,
    config_windows,
    fast_softmax_config,
    row_chunks,
    wide_config,
)
from kernel_lab.cuda.rowkernels.geometry import (
    LINE_BYTES,
    NoShapeForArch,
    line_windows,
    vector_windows,
)
from kernel_lab.cuda.sources import cdiv, ctype, device_index, launch_rows, same_vector_phase


def backward_launch(dx, y2d, dy2d, cfg: BackwardConfig | tuple, aligned: bool,
                    max_groups: int | None = None, phase: bool | None = None,
                    kernels: "RowKernels | None" = None) -> None:
    """Launch one :func:`backward_config` shape ``cfg`` (a BackwardConfig or the tuple of its
    fields) on (M, N) rows (tests and tuning force shapes through it). ``aligned``: y, dy, dx
    16-byte aligned (vector loads in ``block`` and ``cluster``); ``persist`` needs only rows of
    y, dy and dx in the same 16-byte phase (any N). ``phase``: the registered op passes the
    phase it sized ``cfg`` for (no re-check on the per-call path); None (tests, tuning: a
    caller's own shape) checks phase and capacity first. ``max_groups`` caps the persistent
    grid, so each cluster loops. ``kernels``: whose kernels (default BACKWARD_KERNELS,
    fused_softmax_backward's; log_softmax_backward's ``persist`` shares this launch)."""
    m, n = dx.shape
    t = ctype(y2d.dtype)
    if kernels is None:
        raise TypeError("backward_launch needs kernels= (an op's RowKernels)")
    src, prefix = kernels.src, kernels.prefix
    cfg = BackwardConfig(*cfg)
    _, threads, vpt, cl, stages = cfg
    kind = cfg.kind_of
    if stages not in kind.stages:
        raise ValueError(f"stages (prefetch sets in flight) must be 1 or 2 (chunks: 1 to 4), "
                         f"not {stages}")
    smem, extra = 0, (i32(int(aligned)),)
    expr = cfg.expr(t, prefix)
    if kind.grid == "chunks":
        _backward_chunks(dx, y2d, dy2d, cfg, aligned, max_groups, phase, kernels, expr)
        return
    if kind.grid == "resident":
        if phase is None:
            check_backward_persist(dx, y2d, dy2d, cfg)
        # line heads where the shape holds a row's line head and y, dy share their line phase
        line = threads * vpt * cl >= line_windows(n, y2d.dtype, line=False) \
            and _same_line_phase(y2d, dy2d)
        smem, extra = cfg.shared_mem(), (i32(int(line)), i32(stages))
        grid = persistent_grid(src, expr, threads, cl, smem, m, device_index(dx), max_groups)
    else:  # a CTA or cluster a row
        grid = m * cl
        if kind.non_portable_opt_in and cl > 8:
            allow_non_portable_cluster(src, expr, device_index(dx))
    launch_rows(src, expr, dx, (y2d, dy2d), grid=grid, block=threads, extra=extra,
                shared_mem=smem)


def _backward_chunks(dx, y2d, dy2d, cfg: BackwardConfig, aligned: bool, max_groups: int | None,
                     phase: bool | None, kernels: "RowKernels", expr: str) -> None:
    """chunks: resident CTAs over every row's chunks, their partial sums in flag words; where
    the GPU holds too few CTAs for a row's chunks, the streaming kernel."""
    m, n = dx.shape
    if phase is None and not same_vector_phase(dx, y2d, dy2d):
        raise ValueError(f"{cfg.label()} needs the rows of y, dy and dx in the same 16-byte "
                         "phase")
    line = _same_line_phase(y2d, dy2d)
    chunks = backward_row_chunks(cfg, n, y2d, line)
    smem = cfg.shared_mem()
    grid = persistent_grid(kernels.src, expr, cfg.threads, 1, smem, m * chunks,
                           device_index(dx), max_groups)
    if not chunks_fit(chunks, 1, grid):
        if phase is None:  # a caller's own shape
            raise ValueError(f"{cfg.label()}: a row of {n} is {chunks} chunks, more than "
                             f"{grid} resident CTAs + 1 (the kernel would wait on itself)")
        # this GPU holds too few CTAs for the row's chunks: two passes
        backward_launch(dx, y2d, dy2d, BackwardConfig("stream", 1024, None), aligned,
                        kernels=kernels)
        return
    # per chunk, its partial sum as a 64-bit word that carries the launch's epoch
    sums, epoch = flag_words(m * chunks, dx.device)
    launch_rows(kernels.src, expr, dx, (y2d, dy2d), grid=grid, block=cfg.threads,
                extra=(i32(int(line)), i32(chunks), sums.data_ptr(), epoch, i32(cfg.stages)),
                shared_mem=smem)


def backward_row_chunks(cfg: BackwardConfig, n: int, y2d: torch.Tensor, line: bool) -> int:
    """Chunks of ``cfg.threads * cfg.vpt`` windows that cover every row of ``y2d`` (N = ``n``):
    heads measured from the row's 128-byte line (``line``: y and dy share their line phase; 0
    when the rows start on lines) or its 16 bytes (backward_chunks.cuh)."""
    if line:
        nw = line_windows(n, y2d.dtype, line=_rows_on_lines(y2d))
    else:
        nw = vector_windows(n, y2d.dtype, aligned=_rows_aligned(y2d))
    return cfg.chunks_of(nw)


def _same_line_phase(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Every row of b starts at the same offset within a 128-byte line as its row of a (the
    persistent backward's line heads need it for y and dy: the slots it copies before a row
    then lie in that row's first line)."""
    return (a.data_ptr() - b.data_ptr()) % LINE_BYTES == 0 and (
        a.shape[0] == 1 or (a.stride(0) - b.stride(0)) * a.element_size() % LINE_BYTES == 0)


def _contiguous_rows(n: int, dtype: torch.dtype) -> bool:
    """Rows of a contiguous (M, n) tensor start 16-byte aligned (PyTorch's allocations do)."""
    return n * dtype.itemsize % 16 == 0


def backward_shape(n: int, dtype: torch.dtype, prefix: str, arch: Arch = TUNED_ARCH) -> str:
    """What the backward of kernel-name ``prefix`` launches for contiguous rows of n on ``arch``
    (``python -m kernel_lab picks``): y, dy and dx share their 16-byte phase there."""
    cfg = backward_config(n, dtype, _contiguous_rows(n, dtype), True, arch)
    return f"{cfg.label()}: {cfg.expr(ctype(dtype), prefix)}{backward_shape_note(cfg, n, dtype)}"


def backward_shape_note(cfg: BackwardConfig, n: int, dtype: torch.dtype) -> str:
    """For a ``chunks`` config: how many chunks a contiguous row is cut into, and that the launch
    streams the rows on a GPU holding fewer resident CTAs + 1 (only the launcher knows; an H200
    holds 132 of 512 threads, 264 of 256)."""
    if cfg.kind_of.grid != "chunks":
        return ""
    chunks = cfg.chunks_of(line_windows(n, dtype, _contiguous_rows(n, dtype)))
    return f" ({chunks} chunks a row; streamed on a GPU of fewer than {chunks - 1} resident CTAs)"


def fast_shape(n: int, dtype: torch.dtype, prefix: str, arch: Arch = TUNED_ARCH) -> str:
    """What the forward of kernel-name ``prefix`` (fast_softmax, log_softmax) launches for
    contiguous rows of n on ``arch`` (``python -m kernel_lab picks``): input and output in one
    phase, rows on 128-byte lines when n * itemsize is a multiple of 128. "phased start": the
    launch's first wave starts in phases (Kind.staggered). "none": no shape holds the row
    there."""
    try:
        cfg = fast_softmax_config(n, dtype, _contiguous_rows(n, dtype), True, arch=arch)
    except NoShapeForArch:
        return (f"none on {arch.name} (the shapes that hold the row need clusters or more "
                "shared memory)")
    phased = ", phased start" if _phased(cfg, n * dtype.itemsize) else ""
    return f"{cfg.label()}{phased}: {cfg.expr(ctype(dtype), prefix)}"


def fast_shape_missing(x2d: torch.Tensor) -> str | None:
    """For the fast forward variants' checks: None, or why no launch shape holds the (M, N) rows
    ``x2d`` on its GPU's arch (before sm_90, long rows whose shapes need clusters), asked with
    the flags fast_choice will see (the output: a fresh, aligned (M, N)); or why the GPU is too
    old (before sm_80: no cp.async). An arch with every shape (sm_90, sm_100) is not asked."""
    arch = assumed_arch()  # picks --arch: that arch, for any tensor (meta included)
    if arch is None:
        if x2d.device.type != "cuda":
            return None
        try:
            arch = device_arch(device_index(x2d))
        except ValueError as e:
            return str(e)
    if arch.cluster and arch.smem_per_block_optin >= MAX_CTA_SHARED:
        return None
    (m, n), es = x2d.shape, x2d.element_size()
    vec = x2d.data_ptr() % 16 == 0 and (m == 1 or (x2d.stride(0) - n) * es % 16 == 0)
    aligned = vec and _rows_aligned(x2d)
    try:
        fast_softmax_config(n, x2d.dtype, aligned, vec, aligned and _rows_on_lines(x2d), arch)
    except NoShapeForArch as e:
        return str(e)
    return None


def check_backward_persist(dx, y2d, dy2d, cfg: BackwardConfig) -> None:
    """Raise ValueError unless the persistent backward ``cfg`` can run on these rows: y, dy and
    dx in one 16-byte phase, and the shape holding a row's windows (one more when rows start
    mid-slot: odd N or an offset base)."""
    if not same_vector_phase(dx, y2d, dy2d):
        raise ValueError(f"{cfg.label()} needs the rows of y, dy and dx in the same 16-byte phase")
    n = dx.shape[1]
    need = vector_windows(n, y2d.dtype, aligned=_rows_aligned(y2d))
    if cfg.threads * cfg.vpt * cfg.cluster < need:
        raise ValueError(f"{cfg.label()} holds {cfg.threads * cfg.vpt * cfg.cluster} 16-byte "
                         f"windows; a row of {n} {y2d.dtype} here spans {need}")


@dataclass(frozen=True)
class RowKernels:
    """One op's instantiation of a shared kernel family: its CudaSource and kernel-name prefix
    (fast_softmax.cu -> ``fast_softmax_*``, fast_log_softmax.cu -> ``log_softmax_*``; the backwards'
    persistent kernels: fused_softmax_backward.cu / fused_log_softmax_backward.cu)."""

    src: object  # CudaSource
    prefix: str


def _rows_start_on(x2d: torch.Tensor, boundary: int) -> bool:
    """Every row of x starts on a multiple of ``boundary`` bytes."""
    return x2d.data_ptr() % boundary == 0 and (
        x2d.shape[0] == 1 or x2d.stride(0) * x2d.element_size() % boundary == 0)


def _rows_aligned(x2d: torch.Tensor) -> bool:
    """Every row of x (and so of the output, in vector mode) starts on a 16-byte boundary."""
    m, n = x2d.shape
    return _rows_start_on(x2d, 16) and (m == 1 or n * x2d.element_size() % 16 == 0)


def _rows_on_lines(x2d: torch.Tensor) -> bool:
    """Every row of x starts on a 128-byte line (the persistent kernels' line heads are 0)."""
    return _rows_start_on(x2d, LINE_BYTES)


def fast_choice(out: torch.Tensor, x2d: torch.Tensor) -> tuple[FastConfig, int]:
    """(config, vector phase) for this launch on x2d's device: a pure function of (N, dtype,
    rows aligned, same vector phase, rows on 128-byte lines, arch), 2-4 us; asked when a call
    signature's plan records its launch, not on the calls it replays."""
    phase = same_vector_phase(out, x2d)
    aligned = phase == 1 and _rows_aligned(x2d)
    cfg = fast_softmax_config(out.shape[1], x2d.dtype, aligned, phase == 1,
                              aligned and _rows_on_lines(x2d),
                              arch=device_arch(device_index(x2d)))
    return cfg, phase


# Rows of at least this many bytes start a staggered kind's first wave in 8 phases of its load
# time (Kind.staggered; row_common.cuh, stagger_first_wave): short rows launch at once.
STAGGER_MIN_ROW_BYTES = 8192


def _phased(cfg: FastConfig, row_bytes: int) -> bool:
    """Whether a launch of ``cfg`` on rows of ``row_bytes`` starts its first wave in phases."""
    return cfg.kind_of.staggered and row_bytes >= STAGGER_MIN_ROW_BYTES


_NO_WAVE = (i64(0), i64(0))


def _wave(cfg: FastConfig, x2d: torch.Tensor, src, expr: str, m: int, n: int) -> tuple:
    """(wave_rows, wave_ns) of a block / cluster / block_slots launch over ``m`` rows of ``n``: its
    first wave in phases (occupancy.first_wave; the driver's residency answer is kept there, per
    loaded function) for staggered kinds and rows of at least STAGGER_MIN_ROW_BYTES, else (0, 0):
    every row at once."""
    row_bytes = n * x2d.element_size()
    if not _phased(cfg, row_bytes):
        return _NO_WAVE
    rows, ns = first_wave(src, expr, cfg.threads, cfg.cluster, cfg.shared_mem(), m, row_bytes,
                          device_index(x2d))
    return i64(rows), i64(ns)


def fast_launch(
    out: torch.Tensor,
    x2d: torch.Tensor,
    cfg: FastConfig,
    phase: int | None = None,
    kernels: RowKernels | None = None,
    max_groups: int | None = None,
) -> None:
    """Launch ``cfg`` on (M, N) ``x2d`` into contiguous ``out`` (used by tuning scripts too).

    ``phase``: :func:`same_vector_phase` of (out, x2d) when the caller already computed it.
    ``kernels``: which op's instantiation (fast_softmax's or log_softmax's).
    ``max_groups``: for ``persist``, ``persist_slots``, ``wide`` and ``chunks``, cap the
    resident CTAs / clusters (tests use it to make each one loop over many rows).
    """
    if kernels is None:
        raise TypeError("fast_launch needs kernels= (an op's RowKernels)")
    m, n = out.shape
    t = ctype(x2d.dtype)
    src, expr = kernels.src, cfg.expr(t, kernels.prefix)
    own = phase is None
    if own:  # a caller's own config (tests, tuning): check that it holds the row
        phase = same_vector_phase(out, x2d)
        need = config_windows(cfg, n, x2d.dtype, aligned=not phase or _rows_aligned(x2d),
                            line=_rows_on_lines(x2d))
        if cfg.capacity() < need:
            raise ValueError(f"{cfg.label()} holds {cfg.capacity()} 16-byte windows; a row of "
                             f"{n} {x2d.dtype} here spans {need}")
    vec = i32(phase)
    kind = cfg.kind_of
    if kind.line_heads and not vec:
        raise ValueError(f"{expr} needs input and output rows in the same 16-byte phase")
    if kind.grid == "chunks":
        _launch_chunks(out, x2d, cfg, vec, src, expr, own, kernels, max_groups)
        return
    if kind.grid == "groups":
        grid = cdiv(m, cfg.threads // cfg.group)
    elif kind.grid == "rows":
        grid = m * cfg.cluster
    else:  # resident
        grid = persistent_grid(src, expr, cfg.threads, cfg.cluster, cfg.shared_mem(), m,
                               device_index(out), max_groups)
    if kind.non_portable_opt_in and cfg.cluster > 8:
        allow_non_portable_cluster(src, expr, device_index(out))
    wave = _wave(cfg, x2d, src, expr, m, n) if kind.waved else ()
    # launch_rows raises the kernel's shared-memory limit for what it takes
    launch_rows(src, expr, out, (x2d,), grid=grid, block=cfg.threads,
                extra=(vec, *kind.args(cfg), *wave), shared_mem=cfg.shared_mem())


def _launch_chunks(out, x2d, cfg: FastConfig, vec, src, expr: str, own: bool,
                   kernels: RowKernels, max_groups: int | None) -> None:
    """chunks / chunks_reg: resident CTAs over every row's chunks, the chunks' (max, sum) pairs
    in flag words; where the GPU holds too few CTAs for a row's chunks, the wide kernel."""
    m, n = out.shape
    chunks = row_chunks(cfg, n, x2d.dtype, _rows_on_lines(x2d))
    grid = persistent_grid(src, expr, cfg.threads, 1, cfg.shared_mem(), m * chunks,
                           device_index(out), max_groups)
    if not chunks_fit(chunks, cfg.lag, grid):
        if own:
            raise ValueError(f"{cfg.label()}: a row of {n} is {chunks} chunks, more than "
                             f"lag {cfg.lag} x {grid} resident CTAs + 1 (the kernel would "
                             "wait on itself)")
        # this GPU holds too few CTAs for the default pick: the wide kernel
        arch = device_arch(device_index(out))
        if not arch.cluster:
            raise NoShapeForArch(f"{cfg.label()}: a row of {n} is {chunks} chunks, more than "
                                 f"this {arch.name} GPU's {grid} resident CTAs + 1, and the "
                                 "wide kernel needs clusters (sm_90+)")
        fast_launch(out, x2d, wide_config(vector_windows(n, x2d.dtype), arch=arch), int(vec),
                    kernels)
        return
    # per chunk, (max, sum) as two 64-bit words that carry the launch's epoch
    pairs, epoch = flag_words(2 * m * chunks, out.device)
    launch_rows(src, expr, out, (x2d,), grid=grid, block=cfg.threads,
                extra=(vec, i32(chunks), pairs.data_ptr(), epoch, *cfg.kind_of.args(cfg)),
                shared_mem=cfg.shared_mem())
