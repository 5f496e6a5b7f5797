"""Launchers for the CUDA C++ cross-entropy kernels: ``cuda_src/cuda_cross_entropy.cu`` and
``cuda_src/cuda_cross_entropy_backward.cu`` (shared: ``cross_entropy_common.cuh``).

``cuda_cross_entropy``: one kernel reads each row once (loss, lse, w_t per row), a second one
block kernel reduces the loss ("mean", "sum"; past SCAN_ONE_BLOCK rows, a block a chunk first).
``cuda_cross_entropy_backward``: a small kernel turns the upstream gradient into three
coefficients per row (one block, or past SCAN_ONE_BLOCK rows a block a chunk, the mean's
denominator summed in parts first), then one read of the logits and one write of dlogits.

:func:`fused_forward` is a training step's forward (``kernel_lab.cross_entropy`` recorded by
autograd): the forward kernel also writes the gradient for a unit upstream gradient, into a
fresh buffer beside the logits (:func:`rows_like`) or, with ``inplace_backward=True``, into the
logits' own buffer (the row on chip where it fits: two passes over the logits); :func:`scale`
is its backward (``cross_entropy_scale``: the upstream gradient read on the device). The
forward kernel flags a bad target in its device's flag words (:mod:`.deferred`).
"""

from __future__ import annotations

import functools

import torch

from kernel_lab.base.inputs import acc_dtype
from kernel_lab.core.registry import register
from kernel_lab.cuda import archs, deferred, jit, occupancy
from kernel_lab.cuda.interop import fresh, launch, refuse_replay
from kernel_lab.cuda.rowkernels.launch import STAGGER_MIN_ROW_BYTES
from kernel_lab.cuda.sources import ALL_DTYPES, cdiv, ctype, cuda_source, device_index, next_pow2
from kernel_lab.ops.cross_entropy.op import check_call, check_kwargs, lse_dtype

_T = [ctype(dt) for dt in ALL_DTYPES]
_ROW_T = [ctype(dt) for dt in ALL_DTYPES if dt != torch.float64]
ROW_VECTORS = 8  # 16-byte windows a thread of cross_entropy_row holds (kRowVectors)
# CTAs a row (more than one: sm_90's clusters); never 2: a row past one CTA of 1024 threads
# takes 4 CTAs of <= 512 (two an SM: bf16 128256, 433 vs 2 x 1024's 455 us a step on an H100)
ROW_CLUSTERS = (1, 4, 8)
# A row that needs more threads of one CTA than this takes one CTA of SLOT_THREADS with slots
# (cross_entropy_row_slots: two rows an SM, not one) where they hold it; 1024: never. H100, bf16
# step: 40000 / 50257 / 65536 classes 386 / 385 / 386 us vs 438 / 427 / 392 on one CTA of 640-1024
SLOTS_PAST = 512
SLOT_CLUSTERS = (2, 4, 8)  # cross_entropy_row_cluster_slots: CTAs a row
# Its CTAs: two an SM, <= 96 KB of slots each. Not one an SM with more CTAs' worth of slots,
# though fewer clusters a row fit the rows in fewer waves: H100, bf16 in place, from a CUDA
# graph (bench/loss_step.py --ab MAX_SLOTS=24), 2 CTAs of 24 slots a row against 4 of 8 at
# 256 / 512 / 1024 rows of 262144: 129 / 232 / 431 us against 114 / 206 / 389.
SLOT_THREADS, MAX_SLOTS = 512, 12


def _row_expr(t: str, cl: int) -> str:
    return f"cross_entropy_row<{t}>" if cl == 1 else f"cross_entropy_row_cluster<{t}, {cl}>"


def _slots_expr(t: str, cl: int) -> str:
    return f"cross_entropy_row_slots<{t}>" if cl == 1 else \
        f"cross_entropy_row_cluster_slots<{t}, {cl}>"


def _launchable_forward(arch=None) -> list[str]:
    """What the forward's launchers can pick on ``arch``: no cluster kernel before sm_90."""
    if arch is None or arch.cluster:
        return list(FORWARD.name_expressions)
    return [e for e in FORWARD.name_expressions if "_cluster" not in e]


FORWARD = cuda_source(
    "cuda_cross_entropy.cu",
    [f"cross_entropy_fwd<{t}, {f}>" for t in _T for f in ("false", "true")]
    + [f"cross_entropy_reduce{k}<{t}>" for k in ("", "_parts") for t in _T]
    + [_row_expr(t, cl) for t in _ROW_T for cl in ROW_CLUSTERS]
    + [_slots_expr(t, cl) for t in _ROW_T for cl in (1, *SLOT_CLUSTERS)],
    launchable=_launchable_forward,
)
BACKWARD = cuda_source("cuda_cross_entropy_backward.cu",
                       [f"cross_entropy_{k}<{t}>" for k in ("bwd", "coefs", "den_parts", "scale")
                        for t in _T])
FWD_SIG = "QQQQQQQqi4xqi4xQqQdQQ"
ROW_SIG = FWD_SIG + "qq"  # cross_entropy_row: + the first wave's (rows, ns)
SLOTS_SIG = ROW_SIG + "i4x"  # cross_entropy_row_cluster_slots: + slots a thread
SCALE_SIG = "Qqi4xqQ"
SCALE_BLOCKS = 1024  # x 256 threads: the grid-stride loop of the in-place mode's g != 1
BWD_SIG = "QQqi4xqi4xi4xQQQQ"
COEFS_SIG = "QQqi4xqQdQi4xi4xQi4x"
DEN_PARTS_SIG = "QQqqi4xqQ"
REDUCE_SIG = "QQQqi4x"
REDUCE_PARTS_SIG = "QQQQqq"
# The small kernels' row scans (the coefficients' denominator, the loss's reduction): one block
# of 1024 threads up to SCAN_ONE_BLOCK rows (8 rows' loads a thread a trip: ~4 DRAM round trips
# at most), else a block per SCAN_BLOCK_ROWS (at most MAX_SCAN_PARTS: one part a thread of the
# block that sums them) and then one block over the parts: at 2^20 x 256 bf16 (H200) the
# coefficients 968 -> 5 + 7 us, the reduction 412 -> 5 + 2 us (cuda_src/README.md).
SCAN_ONE_BLOCK, SCAN_BLOCK_ROWS, MAX_SCAN_PARTS = 32768, 8192, 1024
BWD_THREADS, BWD_WINDOWS_PER_THREAD = 256, 8
ON_CHIP_IN_PLACE = True  # the in-place mode's rows on chip where they fit (False: the L2 re-read)
ROW_MAX_THREADS = 512  # cross_entropy_row's clustered CTAs: at most this many while 8 a row do
FEW_ROWS_ONE_WAVE = True  # the plain forward's few long rows in one wave (one_wave_threads)
ON_CHIP_SLOTS = True  # rows past one CTA: registers and shared-memory slots (slots_shape)
# sm_90: the step's forward launched as a programmatic dependent of the coefficients' kernel (it
# reads its rows while that one runs, and waits for it before its gradient pass), the
# reduction of the forward (it launches as the forward's last CTAs end): cuda_src/
# grid_dependency.cuh, kernel_lab/cuda/launch_ex.py. H100, bf16 steps from a CUDA graph, one
# process (bench/loss_step.py --graph --ab PROGRAMMATIC_LAUNCH=True), off -> on: 256 x 262144
# 116 -> 113 us, 512 x 262144 208 -> 205, 8388 x 32000 377 -> 371.
PROGRAMMATIC_LAUNCH = True


def _windows(n: int, dtype: torch.dtype) -> int:
    """Aligned 16-byte windows a row of n may span (one more for a row off 16 bytes)."""
    w = 16 // dtype.itemsize
    return (n + 2 * w - 2) // w


def forward_threads(n: int, dtype: torch.dtype) -> int:
    """Threads of the row's block: 128 for long rows (6 blocks an SM, 4 + 4 windows in flight a
    thread; H200, bf16 8388 x 32000: 3,619 GB/s against 3,530 with 256 and 3,555 with 64),
    fewer so that short rows give each thread >= 8 windows."""
    return min(128, max(32, next_pow2(cdiv(_windows(n, dtype), 8))))


def one_wave_threads(m: int, n: int, dtype: torch.dtype, expr: str, dev: int) -> int:
    """Threads of cross_entropy_fwd's block for m rows of n: :func:`forward_threads`, or fewer
    (96, 64, 32) where that makes every row resident in the first wave. Few long rows otherwise
    run a second, mostly idle wave: 1024 x 262144 bf16 is 1.29 waves of 792 resident 128-thread
    blocks (80 registers: 6 an SM); with 96 threads 8 fit an SM (1,056 rows at once), the same
    768 threads an SM."""
    t = forward_threads(n, dtype)
    if not FEW_ROWS_ONE_WAVE or m <= occupancy.resident_groups(FORWARD, expr, t, 1, 0, dev):
        return t
    for fewer in (96, 64, 32):
        if fewer < t and m <= occupancy.resident_groups(FORWARD, expr, fewer, 1, 0, dev):
            return fewer
    return t


@functools.lru_cache(maxsize=None)
def row_shape(windows: int, cluster: bool = True, max_threads: int = 512) -> tuple[int, int] | None:
    """(threads, CTAs a row) of ``cross_entropy_row`` holding rows of ``windows`` 16-byte
    windows on chip, 8 vectors a thread: one CTA of up to 1024 threads where it holds them (H100,
    in-place step: 8-9 % faster than two CTAs of half its size), else the fewest CTAs (4, 8;
    none without clusters) of <= max_threads threads (two CTAs an SM: 5-17 % faster than half
    as many CTAs of 1024), else of up to 1024; None when 8 such CTAs do not hold them. With
    slots (ON_CHIP_SLOTS), :func:`forward_pick` sends one CTA past SLOTS_PAST threads to
    ``cross_entropy_row_slots`` instead."""
    one = max(64, cdiv(cdiv(windows, ROW_VECTORS), 32) * 32)
    if one <= 1024:
        return one, 1
    for cap in (max_threads, 1024):
        for cl in ROW_CLUSTERS[1:] if cluster else ():
            threads = cdiv(cdiv(windows, cl * ROW_VECTORS), 32) * 32
            if threads <= cap:
                return threads, cl
    return None


@functools.lru_cache(maxsize=None)
def slots_shape(line_windows: int, one: bool = False) -> tuple[int, int] | None:
    """(CTAs a row, slots a thread) of ``cross_entropy_row_cluster_slots`` for rows of
    ``line_windows`` windows counted from their first 128-byte line: SLOT_THREADS threads, 8
    windows in registers and the rest in shared-memory slots, on the fewest CTAs (2, 4, 8;
    ``one``: 1 first, ``cross_entropy_row_slots``) whose slots stay within MAX_SLOTS; None when
    a thread's registers alone hold its share (the register kinds) or 8 CTAs' slots do not."""
    for cl in (1, *SLOT_CLUSTERS) if one else SLOT_CLUSTERS:
        slots = cdiv(line_windows, cl * SLOT_THREADS) - ROW_VECTORS
        if slots <= 0:
            return None
        if slots <= MAX_SLOTS:
            return cl, slots
    return None


def spanned(n: int, es: int, align: int, on: bool) -> int:
    """The 16-byte windows a row of ``n`` elements of ``es`` bytes spans counted from its first
    ``align``-byte boundary: ceil(N / W) when every row starts ``on`` one, else for the worst
    phase."""
    return cdiv(n, 16 // es) if on else cdiv(n + align // es - 1, 16 // es)


def _spanned(logits: torch.Tensor, align: int) -> int:
    m, n = logits.shape
    es = logits.element_size()
    on = logits.data_ptr() % align == 0 and (m == 1 or logits.stride(0) * es % align == 0)
    return spanned(n, es, align, on)


def line_windows(logits: torch.Tensor) -> int:
    """The windows each row spans counted from its first 128-byte line (the slot kinds' line
    heads): ceil(N / W) when every row starts on a line, else up to 128 bytes' worth more."""
    return _spanned(logits, 128)


def row_windows(logits: torch.Tensor) -> int:
    """The 16-byte windows each row of ``logits`` spans: ceil(N / W) when every row starts on
    16 bytes, else one more for the worst phase."""
    return _spanned(logits, 16)


def forward_pick(n: int, dtype: torch.dtype, windows: int, cluster: bool, fused: bool,
                 lines: int = 0) -> tuple[str, int, int, int]:
    """(kernel, CTAs a row, threads, slots) of the forward for rows of ``n`` spanning
    ``windows`` (``lines``: counted from their first 128-byte line): for the ``fused``
    forward (it writes the gradient: over the logits or beside them) the row on chip (two
    passes) where it fits: one CTA's registers (cross_entropy_row, :func:`row_shape`) while
    it needs <= SLOTS_PAST threads, else one CTA of 512 with shared-memory slots
    (cross_entropy_row_slots), else with clusters registers and slots (:func:`slots_shape`;
    both slot kinds: ON_CHIP_SLOTS), else more CTAs' registers; else a block a row
    (cross_entropy_fwd; float64 always). The plain forward stays a block a row: on chip it ran
    3-11 % slower a step (H100, bf16 and fp32, 50257-262144 classes) but at 1024 x 262144 bf16
    (3 % faster)."""
    t = ctype(dtype)
    if fused and ON_CHIP_IN_PLACE and dtype != torch.float64:
        shape = row_shape(windows, cluster, ROW_MAX_THREADS)
        if shape is not None and shape[1] == 1 and shape[0] > SLOTS_PAST and ON_CHIP_SLOTS:
            slotted = slots_shape(lines or windows, one=True)
            if slotted is not None and slotted[0] == 1:  # two CTAs an SM, no cluster
                return _slots_expr(t, 1), 1, SLOT_THREADS, slotted[1]
        if (shape is None or shape[1] > 1) and cluster and ON_CHIP_SLOTS:
            slotted = slots_shape(lines or windows)
            if slotted is not None:
                return _slots_expr(t, slotted[0]), slotted[0], SLOT_THREADS, slotted[1]
        if shape is not None:
            return _row_expr(t, shape[1]), shape[1], shape[0], 0
    return f"cross_entropy_fwd<{t}, {'true' if fused else 'false'}>", 1, \
        forward_threads(n, dtype), 0


def _launch(src, expr: str, grid, block: int, args: tuple, sig: str, dev: int,
            shared_mem: int = 0, programmatic: bool = False) -> None:
    """One launch; ``shared_mem`` bytes of dynamic shared memory, the kernel's limit raised
    first (as :func:`kernel_lab.cuda.sources.launch_rows`); ``programmatic``: a programmatic
    dependent of the kernel launched before it (:data:`PROGRAMMATIC_LAUNCH`)."""
    fn = src.function(expr, dev)
    if shared_mem:
        jit.set_max_dynamic_shared(fn, shared_mem)
    launch(fn, grid, (block,), args, device_index=dev, signature=sig, source=(src, expr),
           shared_mem=shared_mem, programmatic=programmatic)


def _ptr(t: torch.Tensor | None) -> int:
    return 0 if t is None else t.data_ptr()


def _prepare(logits, target, weight):
    """Logits with unit column stride, int64 contiguous targets, a contiguous weight."""
    x = logits if logits.stride(1) == 1 or logits.shape[1] <= 1 else logits.contiguous()
    t = target if target.dtype == torch.int64 and target.is_contiguous() else \
        target.to(torch.int64).contiguous()
    w = weight.contiguous() if weight is not None else None
    return x, t, w


def scan_blocks(rows: int) -> int:
    """Blocks of the small kernels' row scans (SCAN_ONE_BLOCK): 1, or one a SCAN_BLOCK_ROWS
    chunk of rows, at most MAX_SCAN_PARTS (then more rows a block)."""
    return 1 if rows <= SCAN_ONE_BLOCK else min(MAX_SCAN_PARTS, cdiv(rows, SCAN_BLOCK_ROWS))


def coefficients(target, weight, grad, n: int, ignore_index: int, reduction: str,
                 eps: float, dtype: torch.dtype) -> torch.Tensor:
    """(M, 3) per-row (A, B, D) of the gradient (cuda_src/cross_entropy_common.cuh); ``grad``
    0-d (one value for every row) or one a row, read in the logits' dtype (autograd's own:
    no copy). Past SCAN_ONE_BLOCK rows the mean's denominator is summed in parts first
    (cross_entropy_den_parts) and the rows' coefficients are written by as many blocks."""
    m, dev = target.shape[0], device_index(target)
    acc, mean, blocks = acc_dtype(dtype), reduction == "mean", scan_blocks(m)
    coefs = fresh(torch.empty((m, 3), dtype=acc, device=target.device))
    g = grad.to(dtype).contiguous()
    parts = None
    if blocks > 1 and mean:
        parts = fresh(torch.empty(blocks, dtype=acc, device=target.device))
        _launch(BACKWARD, f"cross_entropy_den_parts<{ctype(dtype)}>", (blocks,), 1024,
                (parts.data_ptr(), target.data_ptr(), m, cdiv(m, blocks), n, ignore_index,
                 _ptr(weight)), DEN_PARTS_SIG, dev)
    _launch(BACKWARD, f"cross_entropy_coefs<{ctype(dtype)}>", (blocks,), 1024,
            (coefs.data_ptr(), target.data_ptr(), m, n, ignore_index, _ptr(weight), eps,
             g.data_ptr(), int(g.dim() > 0), int(mean), _ptr(parts),
             blocks if parts is not None else 0), COEFS_SIG, dev)
    return coefs


def forward(logits, target, weight, ignore_index: int, reduction: str, eps: float,
            fused: bool = False, coefs: torch.Tensor | None = None,
            dx: torch.Tensor | None = None):
    """(loss, lse); ``fused`` (with ``coefs``), also the gradient written over the logits, or
    into ``dx`` when given (rows of the logits' stride and 128-byte phase: :func:`rows_like`)."""
    m, n = logits.shape
    acc = acc_dtype(logits.dtype)
    lse = fresh(torch.empty(m, dtype=lse_dtype(logits.dtype), device=logits.device))
    if m == 0 or n == 0:  # every row is ignored (the target check): loss 0
        zeros = logits.new_zeros(m)
        lse.fill_(float("-inf"))
        if fused:
            (logits if dx is None else dx).zero_()
        return {"none": zeros, "sum": zeros.sum(), "mean": zeros.sum() / 0.0}[reduction], lse
    dev = device_index(logits)
    # fresh: a plan's replay of this call allocates them anew (kernel_lab.core.plans)
    wt = fresh(torch.empty(m, dtype=acc, device=logits.device))
    none = reduction == "none"
    loss_none = fresh(logits.new_empty(m)) if none else None
    loss_rows = None if none else fresh(torch.empty(m, dtype=acc, device=logits.device))
    flags = deferred.flags_or_none(logits.device)
    if flags is None:  # a capture before any eager call: a replay would never flag
        refuse_replay()
    sm90 = (archs.assumed_arch() or archs.device_arch(dev)).cluster  # clusters and PDL
    pdl = PROGRAMMATIC_LAUNCH and sm90  # the launches after one of this call's own kernels
    cluster, windows, lines = False, 0, 0  # asked only in place: the plain forward is a block
    if fused:
        cluster = sm90
        windows, lines = row_windows(logits), line_windows(logits)
    expr, ctas, threads, slots = forward_pick(n, logits.dtype, windows, cluster, fused, lines)
    if not fused:  # a block a row: fewer threads where that puts every row in one wave
        threads = one_wave_threads(m, n, logits.dtype, expr, dev)
    args = (_ptr(loss_none), _ptr(loss_rows), lse.data_ptr(), wt.data_ptr(),
            (logits if dx is None else dx).data_ptr() if fused else 0, _ptr(coefs),
            logits.data_ptr(), m, n,
            logits.stride(0), 1, target.data_ptr(), ignore_index, _ptr(weight), eps,
            flags.first_ptr if flags else 0, flags.raised_ptr if flags else 0)
    if expr.startswith("cross_entropy_row"):  # + the first wave's phases (and the slots)
        row_bytes, smem = n * logits.element_size(), slots * threads * 16
        wave = occupancy.first_wave(FORWARD, expr, threads, ctas, smem, m, row_bytes, dev,
                                    occupancy.copy_bytes_per_ns(dev)) \
            if row_bytes >= STAGGER_MIN_ROW_BYTES else (0, 0)
        args, sig = ((*args, *wave, slots), SLOTS_SIG) if slots else ((*args, *wave), ROW_SIG)
    else:
        sig, smem = FWD_SIG, 0
    # fused: the step's coefficients were launched just before (fused_step)
    _launch(FORWARD, expr, (m * ctas,), threads, args, sig, dev, smem, fused and pdl)
    if none:
        return loss_none, lse
    loss = fresh(logits.new_empty(()))
    sums, count, blocks = (loss_rows, wt), m, scan_blocks(m)
    if blocks > 1:  # a block a chunk of rows first, then one over their parts
        sums = tuple(fresh(torch.empty(blocks, dtype=acc, device=logits.device))
                     for _ in range(2))
        _launch(FORWARD, f"cross_entropy_reduce_parts<{ctype(logits.dtype)}>", (blocks,), 1024,
                (sums[0].data_ptr(), sums[1].data_ptr(), loss_rows.data_ptr(), wt.data_ptr(),
                 m, cdiv(m, blocks)), REDUCE_PARTS_SIG, dev, programmatic=pdl)
        count = blocks
    _launch(FORWARD, f"cross_entropy_reduce<{ctype(logits.dtype)}>", (1,), 1024,
            (loss.data_ptr(), sums[0].data_ptr(), sums[1].data_ptr(), count,
             int(reduction == "mean")), REDUCE_SIG, dev, programmatic=pdl and blocks == 1)
    return loss, lse


@register("cuda_cross_entropy", op="cross_entropy", backend="cuda", dtypes=ALL_DTYPES,
          description="one block a row: online (max, sum) over 16-byte windows, one read; "
          "a one-block reduction (a block a chunk of many rows first)",
          source="cuda_src/cuda_cross_entropy.cu")
def cuda_cross_entropy(logits, target, weight=None, ignore_index=-100, reduction="mean",
                       label_smoothing=0.0):
    check_call(logits, target, ignore_index, reduction, label_smoothing, deferrable=True)
    x, t, w = _prepare(logits, target, weight)
    return forward(x, t, w, ignore_index, reduction, float(label_smoothing))


def backward(logits, target, weight, lse, coefs, out=None) -> torch.Tensor:
    """dlogits from the per-row coefficients (into ``out`` if given, contiguous)."""
    m, n = logits.shape
    dx = fresh(torch.empty((m, n), dtype=logits.dtype, device=logits.device)) if out is None \
        else out
    if m == 0 or n == 0:
        return dx.zero_()
    spans = cdiv(_windows(n, logits.dtype), BWD_THREADS * BWD_WINDOWS_PER_THREAD)
    # one phase for input and output rows: 16-byte windows for both, else element-wise
    es = logits.element_size()
    vec = int((logits.data_ptr() - dx.data_ptr()) % 16 == 0
              and (m == 1 or (logits.stride(0) - n) * es % 16 == 0))
    _launch(BACKWARD, f"cross_entropy_bwd<{ctype(logits.dtype)}>", (m, spans), BWD_THREADS,
            (dx.data_ptr(), logits.data_ptr(), m, n, logits.stride(0), vec,
             BWD_THREADS * BWD_WINDOWS_PER_THREAD, target.data_ptr(), _ptr(weight),
             lse.contiguous().data_ptr(), coefs.data_ptr()), BWD_SIG, device_index(logits))
    return dx


@register("cuda_cross_entropy_backward", op="cross_entropy_backward", backend="cuda",
          dtypes=ALL_DTYPES, description="per-row coefficients (small kernels), then one read of "
          "the logits and one write of dlogits",
          source="cuda_src/cuda_cross_entropy_backward.cu")
def cuda_cross_entropy_backward(logits, target, weight, lse, grad, ignore_index=-100,
                                reduction="mean", label_smoothing=0.0):
    check_kwargs(ignore_index, reduction, label_smoothing)  # targets: NaN rows, no check
    x, t, w = _prepare(logits, target, weight)
    n = x.shape[1]
    coefs = coefficients(t, w, grad, n, ignore_index, reduction, float(label_smoothing),
                         x.dtype)
    return backward(x, t, w, lse.to(lse_dtype(x.dtype)), coefs)


_ONES: dict[tuple, torch.Tensor] = {}


def unit(device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """A 0-d 1 kept per (device, dtype): the fused step's upstream gradient for every row, with
    no fill kernel per call (read only). Not kept when made during a CUDA-graph capture (the
    graph's pool owns that memory)."""
    one = _ONES.get((device, dtype))
    if one is None:
        one = torch.ones((), dtype=dtype, device=device)
        if not torch.cuda.is_current_stream_capturing():
            _ONES[(device, dtype)] = one
    return one


def rows_like(x: torch.Tensor) -> torch.Tensor:
    """A fresh (M, N) tensor with ``x``'s row stride and its data pointer's offset in a 128-byte
    line: the kernels that write dx beside x take the same windows and line heads for both."""
    m, n = x.shape
    stride, es = (x.stride(0) if m > 1 else n), x.element_size()
    buf = torch.empty(128 // es + max(m - 1, 0) * stride + n, dtype=x.dtype, device=x.device)
    phase = (x.data_ptr() - buf.data_ptr()) % 128 // es  # whatever the allocator's alignment
    return buf.as_strided((m, n), (stride, 1), phase)


def dx_like(x: torch.Tensor) -> torch.Tensor:
    """The buffer the fused step writes dx into beside ``x``: a plain one, declared fresh (a
    replay makes it anew), where ``x`` is contiguous and starts a 128-byte line as every
    allocation does; else :func:`rows_like` (the call then runs its launcher every time)."""
    if x.is_contiguous() and x.data_ptr() % 128 == 0:
        return fresh(torch.empty(x.shape, dtype=x.dtype, device=x.device))
    return rows_like(x)


def fused_step(logits, target, weight, one, ignore_index: int, reduction: str, eps: float,
               in_place: bool, grad_scale: torch.Tensor | None = None, with_lse: bool = True):
    """The launcher of a training step's forward that writes the gradient (recorded and
    replayed by its plan, :func:`kernel_lab.core.plans.for_launcher`); ``one``: :func:`unit`,
    every row's upstream gradient. Returns (loss, lse) in place (dlogits over the logits, whose
    columns must be contiguous), else (loss, lse, dlogits) in a fresh buffer (:func:`dx_like`);
    without ``with_lse``, lse is left out (a replay then counts it scratch: one allocation
    fewer a step). ``grad_scale`` (direct calls only, :func:`fused_forward`: a plan replays
    launches, and this is a torch op): a 0-d fp32 factor on every row's gradient, applied to
    the coefficients."""
    x, t, w = _prepare(logits, target, weight)
    coefs = coefficients(t, w, one, x.shape[1], ignore_index, reduction, eps, x.dtype)
    if grad_scale is not None:
        coefs.mul_(grad_scale)  # every coefficient is linear in the row's upstream gradient
    dx = None if in_place else dx_like(x)
    loss, lse = forward(x, t, w, ignore_index, reduction, eps, fused=True, coefs=coefs,
                        dx=dx)
    return (loss,) + ((lse,) if with_lse else ()) + (() if dx is None else (dx,))


def fused_forward(logits, target, weight, ignore_index: int, reduction: str, eps: float,
                  in_place: bool = True, grad_scale: torch.Tensor | None = None):
    """(loss, lse, dlogits) of :func:`fused_step`, run directly: dlogits over the logits (their
    buffer, when its columns are contiguous) or without ``in_place`` in a fresh buffer;
    ``grad_scale``: every row's upstream gradient as a 0-d fp32 tensor (1 when None), taken in
    fp32 (the logits' dtype would round it)."""
    x = logits if logits.stride(1) == 1 or logits.shape[1] <= 1 else logits.contiguous()
    out = fused_step(x, target, weight, unit(x.device, x.dtype), ignore_index, reduction, eps,
                     in_place, grad_scale)
    return (*out, x) if in_place else out


def scale(dx: torch.Tensor, g: torch.Tensor) -> None:
    """dx *= g (one value, read on the device; nothing happens to dx when it is 1): the
    in-place mode's backward without a host sync. dx: unit column stride."""
    m, n = dx.shape
    if m == 0 or n == 0:
        return
    g = g.to(dx.dtype).contiguous()  # no copy for the loss's own dtype
    blocks = min(SCALE_BLOCKS, cdiv(m * n, 256))
    _launch(BACKWARD, f"cross_entropy_scale<{ctype(dx.dtype)}>", (blocks,), 256,
            (dx.data_ptr(), m, n, dx.stride(0), g.data_ptr()), SCALE_SIG, device_index(dx))


def launch_shape(n: int, dtype: torch.dtype, arch=None) -> str:
    """What the forward launches for contiguous rows of n (``python -m kernel_lab picks``): the
    op's own forward, the same on every arch (no clusters, static shared memory); then what a
    training step's forward runs there instead (:func:`step_forward_shape`)."""
    return (f"cross_entropy_fwd<{ctype(dtype)}, false>: one block of "
            f"{forward_threads(n, dtype)} threads a row (fewer where that puts every row in one "
            f"wave: one_wave_threads), then cross_entropy_reduce (1 block; past {SCAN_ONE_BLOCK} "
            f"rows, cross_entropy_reduce_parts first). "
            + step_forward_shape(n, dtype, arch))


def step_forward_shape(n: int, dtype: torch.dtype, arch=None) -> str:
    """The forward of a training step on contiguous rows of n (the drop-in with autograd
    recording, DEFAULT_FUSED or ``inplace_backward``: it writes the gradient) on ``arch``
    (default sm_90), rows off 16 bytes and 128-byte lines counted at their worst phase; kernel
    names without their template arguments (the registered variant alone never runs them)."""
    if dtype == torch.float64:  # api._fused_applies: no fused step in float64
        return "A training step runs this forward too (float64 has no fused step)"
    es = dtype.itemsize  # rows of a fresh allocation start on a boundary when N * es does
    windows, lines = (spanned(n, es, align, n * es % align == 0) for align in (16, 128))
    cluster = True if arch is None else arch.cluster
    expr, ctas, threads, slots = forward_pick(n, dtype, windows, cluster, True, lines)
    name = expr.split("<")[0]
    head = "A training step's forward (it writes the gradient): "
    if name == "cross_entropy_fwd":
        return head + f"cross_entropy_fwd, the row re-read from L2, {threads} threads a row"
    return (head + f"{name}, the row on chip, {ctas} CTA{'s' if ctas > 1 else ''} of "
            f"{threads} threads a row" + (f", {slots} slots a thread" if slots else ""))


def backward_launch_shape(n: int, dtype: torch.dtype, arch=None) -> str:
    """What the backward launches for contiguous rows of n (``python -m kernel_lab picks``); the
    same on every arch."""
    spans = cdiv(_windows(n, dtype), BWD_THREADS * BWD_WINDOWS_PER_THREAD)
    return (f"cross_entropy_coefs<{ctype(dtype)}> (1 block; past {SCAN_ONE_BLOCK} rows, "
            f"cross_entropy_den_parts and a block a chunk), then cross_entropy_bwd<"
            f"{ctype(dtype)}>: {spans} block(s) of {BWD_THREADS} threads a row")


cuda_cross_entropy.launch_shape = launch_shape
cuda_cross_entropy_backward.launch_shape = backward_launch_shape
