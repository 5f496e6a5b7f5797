"""Launch shapes of the row-softmax CUDA kernels: the fast family (cuda_src/row_softmax_kernels.cuh,
instantiated by fast_softmax.cu and fast_log_softmax.cu) and vec_softmax's one-CTA vector shape.

Pure functions of (N, dtype, alignment, arch) - no GPU needed. Beside each rule, the H200
measurement that justifies it (% of the device-to-device copy, M*N = 2^28,
bench/tune_long_rows.py); cuda_src/README.md has each kernel kind's design. The launchers are in
launch.py; what a row spans (windows, lines) and whether a shape fits an arch, in geometry.py.
The rules are tuned on sm_90; on another arch (:mod:`kernel_lab.cuda.archs`) a rule whose shape
the arch cannot launch - a cluster past its largest (none before sm_90), more dynamic shared
memory than a CTA may take there - is passed over for the next (:func:`runs_on`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch

from kernel_lab.cuda.archs import ARCHS, Arch
from kernel_lab.cuda.rowkernels.geometry import (  # noqa: F401  (also read from here)
    LINE_BYTES,
    NoShapeForArch,
    cluster_shape,
    line_windows,
    max_cluster,
    round32,
    rows_on_lines,
    runs_on,
    vector_windows,
)
from kernel_lab.cuda.rowkernels.kinds import (  # noqa: F401  (the limits: also read from here)
    CHUNK_REG_MAX_THREADS,
    KINDS,
    MAX_CTA_SHARED,
    SLOTS_CL,
    SLOTS_KINDS,
    Kind,
)
from kernel_lab.cuda.sources import ALL_DTYPES, cdiv, ctype, next_pow2, vec_width

TUNED_ARCH = ARCHS["sm_90"]  # where every rule below was measured (H100, H200)

_T = [ctype(dt) for dt in ALL_DTYPES]
VPT = (1, 2, 4, 8)  # 16-byte vectors per thread kept in registers (vec_softmax, backward block)
VEC_MAX_THREADS = 1024


# -- vec_softmax (and the backward's one-CTA kernel) ----------------------------------------------
def vec_config(n: int, dtype: torch.dtype, max_threads: int = VEC_MAX_THREADS):
    """(threads, vectors per thread) keeping a row of ``n`` in registers, or (threads, None)
    when it does not fit (the streaming kernel then runs)."""
    nv = cdiv(n, vec_width(dtype))
    threads = min(max_threads, max(32, next_pow2(cdiv(nv, 4))))
    vpt = next_pow2(cdiv(nv, threads))
    return (threads, vpt) if vpt <= VPT[-1] else (max_threads, None)


# -- fast_softmax: speed of light ---------------------------------------------------------------
# Instantiations fast_softmax_config can pick (and nothing else: compile time is per name).
FAST_WARP = ((4, 1), (4, 2), (8, 2), (16, 2), (32, 1), (32, 2), (32, 4))  # (group, vpt)
FAST_BLOCK_VPT = (2, 4, 8)
BLOCK_SLOTS_VPT = 8  # block_slots: vectors per thread in registers, the rest in slots
FAST_CL = (2, 4, 8, 16)
# 16-byte vectors per thread of the persist instantiations, by itemsize. A thread keeps at most
# 64 exps in fp32 registers (kKeptFor, cuda_src/row_epilogues.cuh): fp16/bf16 x 16 softmax keeps
# them rounded to fp16/bf16 instead (104-128 registers; spills: 0 B but bf16 on one CTA 80 B),
# log_softmax the packed values (bf16 0 B, fp16 216-240 B; NVRTC 13.0).
PERSIST_VPT = {4: (4, 8, 16), 2: (4, 8, 16)}
PERSIST_CL = (1, 2, 4, 8, 15, 16)


class PersistShape(NamedTuple):
    """One rule of the persistent kernels: ``vpt`` vectors x at most ``most`` threads per CTA in
    the first of ``clusters`` (CTAs per cluster) that holds the row; ``stages`` rows in flight;
    ``lines_only``: only rows that start on 128-byte lines (odd rows skip the rule); ``late``:
    the next row's copies issued while the messages fly (None: CTAs of <= LATE_MAX_THREADS);
    ``min_fill``: only where the row fills at least this share of the shape's windows (threads
    come in warps)."""

    vpt: int
    most: int
    clusters: tuple[int, ...]
    stages: int = 1
    lines_only: bool = False
    late: bool | None = None
    min_fill: float = 0.0


# persist: rows that neither block nor block_slots takes, on the first PERSIST_SHAPES rule that
# holds them (the CTA sized down to cover the row; `late` copies up to LATE_MAX_THREADS). Measured
# on H200: fp32 151936 8x320x16 late 93.8 % vs chunks_reg 92.9 %; 2-byte: only the odd rows of
# ~57.3K-59.4K (2 x 928-960 x 4). Longer rows run in chunks (chunk_config).
PERSIST_SHAPES = {  # by itemsize
    4: (PersistShape(16, 320, (8,)),),
    2: (PersistShape(4, 1024, (2, 4)),),
}
# 2-byte CTAs of more than 512 threads issue their copies right after the local (max, sum), not
# late (bf16 262144 8x1024x4 84.2 vs late 81-82; 131072 4x1024x4 91.4 vs late 89.1).
LATE_MAX_THREADS = {2: 512}  # by itemsize; default: every cluster CTA issues late
PERSIST_DTYPES = (torch.float32, torch.float16, torch.bfloat16)  # fp64: correctness, not speed
# pipe: persistent clusters, each row's (max, sum) exchange overlapping the next row's
# reduction; PIPE_VPT vectors per thread (by itemsize), PIPE_CL CTAs. Timed by
# bench/tune_long_rows.py, picked by no rule: fp32 65536 pipe 8x128x16 s2 91.7 vs persist 94.4.
PIPE_CL = (8, 16)
PIPE_VPT = {4: (8, 16), 2: (4,)}
# wide (rows no other kind holds): clusters of WIDE_CL[0] CTAs of 1024 threads, or WIDE_CL[1]
# when 8 CTAs' shared memory would keep under WIDE_MIN_KEPT of each CTA's share (the rest is read
# twice): fp32 2^20 16x1024 keep 14 69.6-71.1 vs 8x1024 (44 % kept) 64.2-64.5; bf16 2^20
# 8x1024 (88 % kept) 67.7 vs 16x1024 67.8.
WIDE_CL = (8, 16)
# chunks: one CTA a chunk of threads x CHUNK_VPT vectors, the chunks' (max, sum) pairs through
# global memory, each chunk kept in shared memory until its row's last pair arrives (``lag``
# steps later), ``ahead`` chunks in flight; any row of at most lag * resident CTAs + 1 chunks.
CHUNK_VPT = (2, 4)
# chunks_reg: lag 1 with the waiting chunk in registers, shared memory only for the ``ahead``
# chunks in flight; CTAs of <= CHUNK_REG_MAX_THREADS threads (two chunks' values each).
CHUNK_REG_VPT = (4, 8)  # (CHUNK_REG_MAX_THREADS: the kind's limit, in kinds.py)
WIDE_MIN_KEPT = 0.75
WIDE_KEEP_BYTES = MAX_CTA_SHARED


def _fast_vpt_cap(dtype: torch.dtype) -> int:
    """Vectors per thread for cluster rows: 16 (fp32/fp64), 4 for 2-byte types - beyond
    32 fp16/bf16 elements per thread the unpacked fp32 copies spill (measured: 1.1-1.4 TB/s)."""
    return 4 if dtype.itemsize == 2 else 16


def pipe_vpts(dtype: torch.dtype) -> tuple[int, ...]:
    """Vectors per thread of the pipelined instantiations (PIPE_VPT)."""
    return PIPE_VPT[dtype.itemsize]


def block_max_threads(vpt: int) -> int:
    """CTA size limit of the warp / block / cluster kernels (``MaxThreads`` in
    cuda_src/row_common.cuh)."""
    return 512 if vpt >= 16 else 1024


def persist_max_threads(vpt: int, dtype: torch.dtype) -> int:
    """CTA size limit of the persistent kernels (``PersistThreads`` in cuda_src/row_common.cuh):
    512 where a thread keeps 64 or more elements in fp32 registers (fp32 x 16, fp16/bf16 x 8),
    else 1024."""
    return 512 if vpt * vec_width(dtype) >= 64 else 1024


def row_kernel_exprs(prefix: str) -> list[str]:
    """Every instantiation of the row-softmax family (row_softmax_kernels.cuh) under ``prefix``:
    fast_softmax.cu and fast_log_softmax.cu declare the same list."""
    out = []
    for dt, t in zip(ALL_DTYPES, _T):
        big = _fast_vpt_cap(dt)
        out += [f"{prefix}_warp<{t}, {g}, {v}>" for g, v in FAST_WARP]
        out += [f"{prefix}_block<{t}, {v}>" for v in FAST_BLOCK_VPT]
        if dt in PERSIST_DTYPES:
            out += [f"{prefix}_{k}<{t}, {BLOCK_SLOTS_VPT}>" for k in SLOTS_KINDS]
            out += [f"{prefix}_{k}<{t}, {BLOCK_SLOTS_VPT}, {c}>" for c in SLOTS_CL
                    for k in ("cluster_slots", "persist_cluster_slots")]
        out += [f"{prefix}_cluster<{t}, {big}, {c}>" for c in FAST_CL]
        if dt in PERSIST_DTYPES:
            for v in PERSIST_VPT[dt.itemsize]:
                out += [f"{prefix}_persist<{t}, {v}>"]
                out += [f"{prefix}_persist_cluster<{t}, {v}, {c}>" for c in PERSIST_CL if c > 1]
            out += [f"{prefix}_persist_pipe<{t}, {v}, {c}>" for v in pipe_vpts(dt) for c in PIPE_CL]
        out += [f"{prefix}_wide<{t}, {c}>" for c in WIDE_CL]
        if dt in PERSIST_DTYPES:
            out += [f"{prefix}_chunks<{t}, {v}>" for v in CHUNK_VPT]
            out += [f"{prefix}_chunks_reg<{t}, {v}>" for v in CHUNK_REG_VPT]
    return out


@dataclass(frozen=True)
class FastConfig:
    """What fast_softmax (and log_softmax) launches for one (N, dtype): kernel kind and shape.

    kind (cuda_src/row_softmax_kernels.cuh maps each to its kernel symbols and device body):
    ``warp`` (``group`` lanes per row, several rows per block), ``block`` (a CTA per row),
    ``block_slots`` (a CTA per row - or, with ``cluster`` > 1, a cluster of that many - ``vpt``
    windows a thread in registers and ``slots`` more in shared memory), ``persist_slots``
    (block_slots on resident CTAs that loop over rows, each window refilled with the next row's
    once stored),
    ``cluster`` (``cluster`` CTAs per row, DSMEM reduction),
    ``persist`` (resident CTAs / clusters loop over rows, next row prefetched into shared memory;
    ``cluster`` = 1 is the single-CTA form), ``pipe`` (persistent clusters, ``stages`` rows in
    flight, each row's (max, sum) exchange overlapping the next row's reduction), ``wide``
    (``cluster`` CTAs per row, two passes), ``chunks`` (persistent CTAs, one chunk of
    ``threads`` x ``vpt`` windows at a time, pairs through global memory; each chunk waits
    ``lag`` steps in shared memory for its row's (max, sum), ``ahead`` chunks in flight) or
    ``chunks_reg`` (chunks with lag 1, the waiting chunk in registers).
    ``threads`` is the CTA size, ``vpt`` the 16-byte vectors each thread keeps in registers
    (``wide``: in shared memory between its passes).
    """

    kind: str
    threads: int
    vpt: int
    group: int = 32
    cluster: int = 1
    late: bool = False  # persist clusters: next row's copies issued while (max, sum) messages fly
    stages: int = 1  # persist, pipe: rows in flight into shared memory (1: the next; 2: two)
    lag: int = 1  # chunks: steps a chunk waits in shared memory for its row's (max, sum)
    ahead: int = 1  # chunks: chunks in flight into shared memory
    slots: int = 0  # block_slots: 16-byte windows per thread in shared memory

    def __post_init__(self):
        kind = KINDS.get(self.kind)
        if kind is None:
            raise ValueError(f"unknown FastConfig kind {self.kind!r}; kinds: {', '.join(KINDS)}")
        if self.stages not in (1, 2):
            raise ValueError(f"stages must be 1 or 2, not {self.stages}")
        if self.stages > 1 and not kind.staged:
            raise ValueError(f"stages apply to the persistent kernels, not {self.kind!r}")
        why = kind.rule(self)
        if why is not None:
            raise ValueError(why)

    @property
    def kind_of(self) -> Kind:
        """This config's :class:`~.kinds.Kind` (the kind table's entry)."""
        return KINDS[self.kind]

    def expr(self, t: str, prefix: str = "fast_softmax") -> str:
        """The name expression this config launches for C type ``t`` under kernel ``prefix``."""
        return KINDS[self.kind].template(self, t, prefix)

    def capacity(self) -> int:
        """Windows (16-byte slots) one row may span (wide, chunks: any row)."""
        return KINDS[self.kind].capacity(self)

    def shared_mem(self) -> int:
        """Dynamic shared memory per CTA: slots, prefetched rows, kept windows or chunk sets."""
        return KINDS[self.kind].shared_mem(self)

    def label(self) -> str:
        return KINDS[self.kind].label(self)


def config_windows(cfg: "FastConfig", n: int, dtype: torch.dtype, aligned: bool,
                 line: bool) -> int:
    """Windows a row of ``n`` spans in ``cfg``'s kernel (line heads: Kind.line_heads)."""
    if KINDS[cfg.kind].line_heads:
        return line_windows(n, dtype, line=line)
    return vector_windows(n, dtype, aligned)


def row_chunks(cfg: "FastConfig", n: int, dtype: torch.dtype, line: bool) -> int:
    """chunks: the chunks of ``cfg.threads * cfg.vpt`` windows a row of ``n`` is cut into (line
    heads, as the persistent kernels)."""
    return cdiv(line_windows(n, dtype, line=line), cfg.threads * cfg.vpt)


def chunks_fit(chunks: int, lag: int, groups: int) -> bool:
    """Whether a row of ``chunks`` chunks can run over ``groups`` resident CTAs waiting ``lag``
    steps: every chunk of a row must be reduced by the step a CTA waits for the row
    (cuda_src/row_chunks.cuh), i.e. chunks <= lag * groups + 1."""
    return chunks <= lag * groups + 1


def persist_config(nw: int, vpt: int, cluster: int, late: bool = False,
                   stages: int = 1) -> FastConfig:
    """The persistent shape holding ``nw`` windows with ``vpt`` per thread over ``cluster``
    CTAs: the multiple of 32 threads that just covers the row."""
    return FastConfig("persist", threads=round32(cdiv(nw, vpt * cluster)), vpt=vpt,
                      cluster=cluster, late=late and cluster > 1, stages=stages)


def block_slots_config(nwl: int, threads: int, vpt: int = BLOCK_SLOTS_VPT,
                       cluster: int = 1, kind: str = "block_slots") -> FastConfig:
    """block_slots (``cluster`` > 1: CTAs a row; ``kind`` ``persist_slots``: its persistent
    form) for a row of ``nwl`` windows (line heads: :func:`line_windows`) on CTAs of
    ``threads``: ``vpt`` windows a thread in registers, the rest in as few slots a thread as hold
    them."""
    per = cluster * threads
    return FastConfig(kind, threads=threads, vpt=vpt, cluster=cluster,
                      slots=max(0, cdiv(nwl - per * vpt, per)))


def wide_config(nw: int, cluster: int | None = None, threads: int = 1024,
                keep_bytes: int | None = None, arch: Arch = TUNED_ARCH) -> FastConfig:
    """The wide kernel for rows of ``nw`` windows: ``cluster`` CTAs of ``threads`` (default:
    WIDE_CL[0], or WIDE_CL[1] if WIDE_CL[0] CTAs would keep under WIDE_MIN_KEPT of their
    windows and ``arch`` has clusters that large), each thread keeping as many of its windows
    in shared memory as ``keep_bytes`` per CTA hold (default: WIDE_KEEP_BYTES, at most what a
    CTA may take on ``arch``)."""
    if keep_bytes is None:
        keep_bytes = min(WIDE_KEEP_BYTES, arch.smem_per_block_optin)
    most = keep_bytes // (16 * threads)
    if cluster is None:
        per = wide_per_thread(nw, WIDE_CL[0], threads)
        big = WIDE_CL[1] <= max_cluster(arch)
        cluster = WIDE_CL[0] if most >= WIDE_MIN_KEPT * per or not big else WIDE_CL[1]
    return FastConfig("wide", threads=threads, cluster=cluster,
                      vpt=min(wide_per_thread(nw, cluster, threads), most))


def wide_per_thread(nw: int, cluster: int, threads: int) -> int:
    """Windows each thread of the wide kernel owns: ceil(ceil(nw / cluster) / threads)."""
    chunk = cdiv(nw, cluster)
    return cdiv(chunk, threads)


# chunks: rows past every PERSIST_SHAPES rule with more than CHUNK_REG_MAX_CHUNKS chunks. fp32
# 2^20 1024 x 4 lag 1 ahead 1 87.3 vs wide 72.9 (no other chunk shape over 82: the step's
# latency, not its bytes, sets the pace, so the largest chunk wins).
CHUNK_DEFAULT = FastConfig("chunks", threads=1024, vpt=4, lag=1, ahead=1)
# chunks_reg: rows of at most CHUNK_REG_MAX_CHUNKS chunks of 512 x 8 vectors (64 KB), a 64 KB
# chunk in flight beside the waiting one (chunks fits one): 2^20 fp32 / bf16 / fp16 91.3 / 92.0 /
# 91.1 (fp32 chunks 87.3), 524288 fp32 93.2; but at 128 chunks (fp32 2^21) 74.6 vs chunks' 82.4:
# a CTA waits on rows the whole grid is still reducing. 1024 x 4 (the same 64 KB) lost: bf16
# 2^20 80.8, fp32 75.8.
CHUNK_REG_DEFAULT = FastConfig("chunks_reg", threads=512, vpt=8, ahead=1)
CHUNK_REG_MAX_CHUNKS = 65  # 64 measured; + 1 for the same rows off 128-byte lines


def chunk_config(n: int, dtype: torch.dtype, line: bool) -> FastConfig:
    """The chunk kernel for a row of ``n`` past every persistent rule: CHUNK_REG_DEFAULT while the
    row has at most CHUNK_REG_MAX_CHUNKS of its chunks - its CTA sized down to the multiple of 32
    threads that cuts the row into as many chunks, all (nearly) full - else CHUNK_DEFAULT.

    Sized down (bf16, % of copy, 512 x 8 -> fitted): 135000 82.4 -> 85.3 (448), 200000 87.3 ->
    89.8 (448), 245760 91.3 -> 92.5 (480); never slower. The step's cost is nearly fixed, so a
    row's last, mostly empty chunk cost a whole step."""
    d = CHUNK_REG_DEFAULT
    chunks = row_chunks(d, n, dtype, line)
    if chunks > CHUNK_REG_MAX_CHUNKS:
        return CHUNK_DEFAULT
    threads = round32(cdiv(line_windows(n, dtype, line=line), chunks * d.vpt))
    if threads >= d.threads:
        return d
    return FastConfig("chunks_reg", threads=threads, vpt=d.vpt, ahead=d.ahead)


def fast_softmax_config(
    n: int, dtype: torch.dtype, aligned: bool = True, vec: bool = True, line: bool | None = None,
    arch: Arch = TUNED_ARCH,
) -> FastConfig:
    """The launch fast_softmax (and log_softmax) uses for rows of ``n`` elements of ``dtype``.

    Rules, in 16-byte windows ``nw`` per row (the measurements beside each rule's constants;
    ``python bench/tune_long_rows.py`` reruns the tunes):

    * nw <= WARP_MAX_WINDOWS (64: rows of <= 1 KB): a lane group per row, 1-2 vectors per lane;
    * nw <= PERSIST_MIN_NW (8192 fp32, 2048 fp16/bf16): one CTA per row (``block``), 2 (fp32,
      nw <= 256), 4 (nw <= 2048, and always for 2-byte types) or 8 vectors per thread, threads
      = the multiple of 32 that just covers the row (no idle pow2 padding);
    * fp16/bf16 rows of 2049-8192 windows whose CTA of 8 vectors a thread has a size in
      BLOCK_X8_THREADS (:func:`block_x8_threads`; rows on 16 bytes: N 16385-32768 and ~55.3k-65536,
      odd rows fewer): ``block`` x 8, any phase;
    * longer, when input and output rows share their 16-byte phase (``vec``) and the dtype is
      fp32/fp16/bf16: ``block_slots`` where BLOCK_SLOTS_RULES take the row (a CTA of 512 or
      1024 threads x 8 vectors and at most 5-6 slots a thread: fp32 N 32769-53248, fp16/bf16
      32769-57344 and 65537-106496, in line windows; 256 threads: the odd fp16/bf16 rows of
      ~20.5K-26.6K that block x 8 leaves; on a cluster of 2 CTAs a row: fp16/bf16
      ~106.5K-163.8K on 512 x 8 + 6-12, fp32 ~53.2K-81.9K on 512 x 8 + 5-12 and ~81.9K-131072
      on 1024 x 8 + 1-8; on 4 CTAs: fp16/bf16 ~213K-262144 on 512 x 8 + 6-8), else
      ``persist``, the first PERSIST_SHAPES rule that holds the row - fp32: <= 320 x 16 in 8
      CTAs; fp16/bf16: <= 1024 x 4 in 2 or 4 (the odd rows of ~57.3K-59.4K) - threads
      = the multiple of 32 that just covers the row, next row's copies issued late (2-byte CTAs:
      only up to LATE_MAX_THREADS);
    * longer rows of those dtypes (fp32 > 163840, 2-byte > 163840): ``chunks_reg``,
      CHUNK_REG_DEFAULT (512 threads x 8 vectors a chunk, the waiting chunk in registers, one
      chunk ahead; the CTA sized down so that the row's chunks come out full, :func:`chunk_config`)
      for rows of <= CHUNK_REG_MAX_CHUNKS chunks (N <= 2^20 fp32, 2^21 2-byte),
      else ``chunks``, CHUNK_DEFAULT (1024 threads x 4 vectors a chunk, lag 1, one chunk ahead);
      the launcher falls back to ``wide`` where a row has more chunks than resident CTAs + 1;
    * otherwise (fp64, misaligned phase): a one-row cluster of up to 16 CTAs
      with 16 vectors x <= 512 threads (fp32/fp64) or 4 x <= 1024 (fp16/bf16), else ``wide``
      (persistent clusters of 8 CTAs of 1024 threads, 16 where 8 would keep under 3/4 of each
      CTA's chunk; two passes, up to 227 KB per CTA kept in shared memory).

    ``aligned``: rows start on 16-byte boundaries (otherwise one extra window is budgeted).
    ``vec``: input and output rows share their 16-byte phase (the persistent kernels need it).
    ``line``: rows start on 128-byte lines (default: ``aligned`` and N * itemsize a multiple of
    128); otherwise the persistent shapes budget up to 7 more windows (:func:`line_windows`).
    ``arch``: the GPU's limits; the first rule's shape that it can launch (:func:`runs_on`).
    NoShapeForArch when none can (rows past ``block`` on an arch without clusters whose shapes
    need them).
    """
    for cfg in _fast_shapes(n, dtype, aligned, vec, line, arch):
        if runs_on(cfg, arch):
            return cfg
    raise NoShapeForArch(f"fast row kernels: no launch shape holds rows of {n} {dtype} on "
                         f"{arch.name} ({arch.gpus}): the ones that do need clusters of CTAs "
                         f"(sm_90+) or more shared memory than {arch.smem_per_block_optin} B a CTA")


def _fast_shapes(n: int, dtype: torch.dtype, aligned: bool, vec: bool, line: bool | None,
                 arch: Arch):
    """fast_softmax_config's rules in order, each one's shape (cluster sizes past the arch's
    largest left out)."""
    sizes = lambda cls: tuple(c for c in cls if c <= max_cluster(arch))  # noqa: E731

    nw = vector_windows(n, dtype, aligned)
    es = dtype.itemsize
    if nw <= WARP_MAX_WINDOWS:
        if nw < 32:
            vpt = 1 if nw <= 4 else 2
            g = max(4, next_pow2(cdiv(nw, vpt)))
        else:
            g, vpt = 32, next_pow2(cdiv(nw, 32))
        yield FastConfig("warp", threads=128, vpt=vpt, group=g)
        return
    persist_ok = vec and dtype in PERSIST_DTYPES
    if es == 2 and nw > PERSIST_MIN_NW[2] and (x8 := block_x8_threads(nw, aligned)):
        yield FastConfig("block", threads=x8, vpt=8)
    block_max = PERSIST_MIN_NW[es] if persist_ok else 1024 * (4 if es == 2 else 8)
    if nw <= block_max:
        vpt = 2 if (nw <= 256 and es >= 4) else 4 if (nw <= 2048 or es == 2) else 8
        yield FastConfig("block", threads=round32(cdiv(nw, vpt)), vpt=vpt)
    if persist_ok:
        line = rows_on_lines(n, dtype, aligned, line)
        nwl = line_windows(n, dtype, aligned, line)
        for threads, above, most, cl in BLOCK_SLOTS_RULES[es]:
            if above < nwl <= most and cl <= max_cluster(arch):
                yield block_slots_config(nwl, threads, cluster=cl)
        for rule in PERSIST_SHAPES[es]:
            if rule.lines_only and not line:
                continue
            most = min(rule.most, persist_max_threads(rule.vpt, dtype))
            shape = cluster_shape(nwl, rule.vpt, most, sizes(rule.clusters))
            if shape and nwl >= rule.min_fill * shape[0] * shape[1] * rule.vpt:
                late = rule.late
                if late is None:
                    late = shape[1] <= LATE_MAX_THREADS.get(es, 1024)
                yield persist_config(nwl, rule.vpt, shape[0], late=late, stages=rule.stages)
        yield chunk_config(n, dtype, line)
        yield CHUNK_DEFAULT
        return
    big = _fast_vpt_cap(dtype)
    shape = cluster_shape(nw, big, 1024 if big <= 8 else 512, sizes(FAST_CL))
    if shape:
        yield FastConfig("cluster", threads=shape[1], vpt=big, cluster=shape[0])
    if arch.cluster:
        yield wide_config(nw, arch=arch)


# Rows of at most this many 16-byte windows (1 KB) take a lane group each (``warp``), longer
# ones a CTA: fp32 N = 256 (64 windows) warp g32x2 99.6 vs block 32x2 79.1; bf16 N = 1024 (128
# windows) block 32x4 101.1 vs warp g32x4 99.1.
WARP_MAX_WINDOWS = 64

# Rows of more windows than this take the persistent kernels (by itemsize). fp32: one CTA per
# row up to 8192 windows (block 1024x8: 93 % at N = 32768 vs 92 % for persist 1x512x16, and
# 97 % vs 90 % at 16384); 2-byte types: up to 2048 (N = 16384: block 512x4 87 %, persist 83 %;
# N = 32768: persist 1x1024x4 83 % vs block 1024x4 65 %), then block x 8 at BLOCK_X8_THREADS.
PERSIST_MIN_NW = {8: 1 << 30, 4: 8192, 2: 2048}

# fp16 / bf16 rows of 2049-8192 windows: one CTA a row of 8 vectors a thread (64 registers, no
# spills) for the CTA sizes (threads, ranges inclusive) where it beat every persistent shape
# (fp16 / bf16 softmax): rows on 16 bytes 320-512 threads 96-99 vs 89-95, 896-1024 95.5-97 vs
# 93-95; odd rows 288-320 and 448-512 96-98, 960-1024 94-95 vs 92-94 (352-416 and 896-928: 86-94,
# persistent better). CTAs of 544-864 threads (one an SM, < 112 KB in flight) read 84-94 %.
BLOCK_X8_THREADS = {  # by rows on 16 bytes
    True: ((32, 512), (896, 1024)),
    False: ((32, 320), (448, 512), (960, 1024)),
}


# block_slots: rows past the one-CTA shapes (input and output in one 16-byte phase), a CTA (or
# ``cluster`` CTAs) a row of ``threads`` x 8 vectors in registers and at most 5-6 slots a thread
# on one CTA (more lose: 512 x 8 + 12 92.8-93.5 %, + 17 80-81 %), for rows of more than ``above``
# and at most ``most`` line windows. Measured on H200 against the persist / chunks_reg picks: one
# CTA 94.6-97.1 % vs 82-95.1 %; 2 CTAs 93.5-96.2 % vs 91.8-95.1 %; 4 CTAs (2-byte ~213K-262144)
# 93.0-95.0 % vs 92.5-94.6 %.
class SlotsRule(NamedTuple):
    threads: int
    above: int  # line windows (line_windows): rows of more ...
    most: int  # ... and at most this many
    cluster: int = 1  # CTAs a row (block_slots on a cluster past 1)


BLOCK_SLOTS_RULES = {  # by itemsize
    4: (SlotsRule(1024, 8192, 1024 * 13), SlotsRule(512, 1024 * 13, 1024 * 20, cluster=2),
        SlotsRule(1024, 1024 * 20, 2048 * 16, cluster=2)),
    2: (SlotsRule(256, 2048, 256 * 14), SlotsRule(512, 4096, 512 * 14),
        SlotsRule(1024, 8192, 1024 * 13), SlotsRule(512, 1024 * 13, 1024 * 20, cluster=2),
        SlotsRule(512, 2048 * 13, 2048 * 16, cluster=4)),
    8: (),
}


def block_x8_threads(nw: int, aligned: bool = True) -> int:
    """The CTA size of 8 vectors a thread that holds a row of ``nw`` 16-byte windows, where that
    CTA runs fast (fp16/bf16: BLOCK_X8_THREADS; ``aligned``: rows start on 16 bytes), else 0."""
    threads = round32(cdiv(nw, 8))
    return threads if any(lo <= threads <= hi for lo, hi in BLOCK_X8_THREADS[aligned]) else 0
