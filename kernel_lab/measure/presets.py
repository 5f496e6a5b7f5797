"""What a benchmark runs: the presets (shapes, dtypes, ops, variants), the (op, dtype, shape)
cells, the command-line selection over the registry (``kernel_lab.measure.benchmarking.select``)
and,
on a CPU, the share of a preset that ends within ``CPU_BUDGET_S`` (:func:`cpu_share`)."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Iterable, Sequence

import torch

from kernel_lab.checking.checker import dtype_name, parse_dtype
from kernel_lab.core.registry import BACKENDS, Variant, get, get_op, op_names, variants
from kernel_lab.measure.timing import CPU_ROUNDS, MIN_ROUNDS

ELEMENTS = 2**28  # the sweep's working set: 1 GiB of fp32, far past any L2


def _fixed_elements(ns: Iterable[int]) -> tuple[tuple[int, int], ...]:
    return tuple((max(1, ELEMENTS // n), n) for n in sorted(ns))


@dataclass(frozen=True)
class Preset:
    """Shapes ((rows M, columns N): the op over the N of each row; an op with its own
    ``Op.bench_inputs`` may put its parameters between, as the lm-head's (tokens, hidden,
    vocabulary)), dtypes and, optionally, ops and variants.

    ``variants`` holds variant names or backend names (``"triton"`` = every Triton variant);
    None selects everything registered. Command-line filters replace these, never intersect.
    """

    name: str
    description: str
    shapes: tuple[tuple[int, ...], ...]
    dtypes: tuple[torch.dtype, ...]
    ops: tuple[str, ...] | None = None
    variants: tuple[str, ...] | None = None


SWEEP_N = (*(2**k for k in range(7, 21)), 32000, 50257, 128256, 151936)
ROW_OPS = ("softmax", "softmax_backward", "log_softmax", "log_softmax_backward")
VOCAB_N = (32000, 50257, 65536, 128256, 151936, 262144)
LOSS_OPS = ("cross_entropy", "cross_entropy_backward")
LM_HEAD_OPS = ("linear_cross_entropy", "linear_cross_entropy_backward")
# (tokens, hidden, vocabulary): Llama 3 8B, Gemma 2 2B, Qwen 2 7B heads; Llama's at 2x the tokens
LM_HEAD_SHAPES = ((8192, 4096, 128256), (8192, 2304, 256000), (8192, 3584, 151936),
                  (16384, 4096, 128256))
PRESETS: dict[str, Preset] = {
    p.name: p
    for p in (
        Preset("quick", "M*N = 2^28 at five row lengths, fp32 + bf16: a few minutes on an H200",
               _fixed_elements((128, 4096, 32000, 65536, 151936)), (torch.float32, torch.bfloat16),
               ops=ROW_OPS),
        Preset("sweep", "M*N = 2^28, N = 128 ... 1,048,576 plus vocab sizes, fp32 + bf16",
               _fixed_elements(SWEEP_N), (torch.float32, torch.bfloat16), ops=ROW_OPS),
        Preset("vocab", "cross-entropy: M*N = 2^28 at vocab sizes 32000 ... 262144, fp32 + bf16",
               _fixed_elements(VOCAB_N), (torch.float32, torch.bfloat16), ops=LOSS_OPS),
        # The seed article raced torch.softmax, the decomposed softmax and Triton on fp32 rows
        # of 128 and reported GB/s of each kernel's device time (do_bench: events around a
        # call, L2 flushed before it). Here these launch-bound cells are graph-timed: device
        # time per call, inputs rotated past L2 - the same figure.
        Preset("seed", "the seed experiment: fp32, N = 128, M = 256 ... 2432 step 128; "
               "GB/s of device time per call, as the article's",
               tuple((m, 128) for m in range(256, 2433, 128)), (torch.float32,),
               ops=("softmax",), variants=("torch_eager", "torch_naive", "triton")),
        Preset("small", "launch-bound shapes (a few KB to ~1 MB): device time per call "
               "(CUDA graphs; host time: the host group)",
               ((1, 128), (16, 1024), (64, 4096), (8, 32000), (1, 151936)),
               (torch.float32, torch.bfloat16), ops=ROW_OPS),
        # GB/s of an lm-head cell counts its inputs once: the time and memory columns are the
        # figures (bench/lm_head.py races whole steps beside cuBLAS's matmuls)
        Preset("lm_head", "the LM-head loss, forward and backward, at tokens x hidden x "
               "vocabulary of Llama 3 8B, Gemma 2 2B and Qwen 2 7B, bf16 (--dtype fp32 too)",
               LM_HEAD_SHAPES, (torch.bfloat16,), ops=LM_HEAD_OPS),
    )
}
DEFAULT_PRESET = "quick"


@dataclass(frozen=True)
class Cell:
    """A benchmark cell, one (op, dtype, shape): the unit whose variants race on identical
    inputs, always contiguous rows. (A *case* is :class:`kernel_lab.checking.checker.Case`: a
    layout - shape, dim, strides - that a correctness check runs for every op and dtype.)"""

    op: str
    dtype: torch.dtype
    shape: tuple[int, ...]  # (rows M, [the op's parameters, e.g. hidden size,] row length N)

    @property
    def shape_id(self) -> str:
        return "x".join(map(str, self.shape))

    @property
    def id(self) -> str:
        return f"{self.op}-{dtype_name(self.dtype)}-{self.shape_id}"

    @classmethod
    def parse(cls, op: str, dtype: str, shape: str) -> "Cell":
        return cls(op, parse_dtype(dtype), tuple(int(s) for s in shape.split("x")))


def split_tokens(tokens: Sequence[str] | None) -> list[str]:
    """Comma-separated or repeated command-line tokens, as one list."""
    return [t.strip() for tok in tokens or () for t in tok.split(",") if t.strip()]


def parse_shape(token: str) -> tuple[int, ...]:
    """``"N"`` (rows M = 2^28 // N, the sweep's working set), ``"MxN"`` -> (M, N), or
    ``"MxDxN"`` (the lm-head's tokens x hidden x vocabulary) -> (M, D, N)."""
    parts = token.lower().split("x")
    try:
        dims = [int(d) for d in parts]
    except ValueError:
        dims = []
    if len(dims) not in (1, 2, 3) or min(dims) < 1:
        raise ValueError(f"bad shape {token!r}: use N, MxN or (lm-head) TxDxV with positive "
                         "integers, e.g. 262144, 1024x262144 or 8192x4096x128256")
    return (max(1, ELEMENTS // dims[0]), dims[0]) if len(dims) == 1 else tuple(dims)


def select(
    preset: str | Preset = DEFAULT_PRESET,
    *,
    ops_filter: Sequence[str] | None = None,
    variants_filter: Sequence[str] | None = None,
    dtypes_filter: Sequence[str] | None = None,
    shapes_filter: Sequence[str] | None = None,
) -> list[tuple[Cell, Variant]]:
    """Every (cell, variant) pair to benchmark, cell-major (all variants of a cell together).

    Filters are comma-separated or repeated tokens; a variant token may be a backend; a shape
    token is N or MxN (:func:`parse_shape`) and replaces the preset's shapes. Unknown ops /
    variants raise with close-match suggestions. Variants that cannot run a cell are kept: the
    benchmark skips them with their ``supports()`` reason.
    """
    p = PRESETS[preset] if isinstance(preset, str) else preset
    names = split_tokens(ops_filter) or list(p.ops or op_names())
    for name in names:
        get_op(name)
    tokens = split_tokens(variants_filter) or list(p.variants or ())
    for t in tokens:
        if t not in BACKENDS:
            get(t)
    dtypes = [parse_dtype(d) for d in split_tokens(dtypes_filter)] or list(p.dtypes)
    shapes = [parse_shape(t) for t in split_tokens(shapes_filter)] or list(p.shapes)
    deep = next((s for s in shapes if len(s) > 2), None)
    flat = [n for n in names if get_op(n).bench_inputs is None]
    if deep is not None and flat:
        raise ValueError(f"bad shape {'x'.join(map(str, deep))!r} for {', '.join(flat)}: "
                         "TxDxV (tokens x hidden x vocabulary) is the lm-head ops' "
                         f"({', '.join(LM_HEAD_OPS)}); the others take N or MxN")
    out = []
    for op_name in names:
        chosen = [v for v in variants(op_name)
                  if not tokens or v.name in tokens or v.backend in tokens]
        for dtype in dtypes:
            for shape in shapes:
                out.extend((Cell(op_name, dtype, shape), v) for v in chosen)
    return out


# -- the CPU's share: what `bench --device cpu` runs (without --full-cpu) ----------------------
# The presets are sized for a GPU. On a CPU, Triton runs in its interpreter (milliseconds a
# row: one program per row), torch.compile compiles each (shape, dtype) for seconds and the
# numbers say nothing about kernels, so a CPU run exercises the harness instead: few, small
# cells, short rounds, chosen by the cost model below to end within CPU_BUDGET_S on 2 cores.
# tests/test_cpu_front_door.py cuts every preset and checks it against the budget, untimed.
CPU_BUDGET_S = 120.0  # wall seconds a `bench --device cpu` run may take on 2 cores
CPU_SHARE_S = 75.0  # the share's estimate stays under this: the rest is margin (a busy machine)
CPU_MAX_ROWS = 16  # rows of a CPU cell (a Triton program each, interpreted) ...
CPU_ELEMENTS = 2**16  # ... and its M*N (at least one row) ...
CPU_MAX_PARAM = 64  # ... and the op's parameters between (the lm-head's hidden size)

# Seconds a run costs on a 2-core CPU with CPU_ROUNDS rounds, measured (2026, torch 2.13,
# Triton 3.x interpreter): vet + calibration + warm-up + rounds, with a margin.
CPU_FIXED_S = 8.0  # a process: import, the copy roofline, tables, JSON/CSV/PNG
CPU_COMPILE_WARMUP_S = 8.0  # the first torch.compile of a process (inductor's start)
CPU_RUN_S = {"torch": 0.3, "compile": 2.0, "triton": 0.15}  # a run, before its elements
CPU_ELEMENT_S = {"torch": 1.0e-6, "compile": 2.0e-6, "triton": 1.0e-6}  # per M*N (checks,
# the float64 reference, copies) of a loss op (cross-entropy: ~0.85 us measured at 256x50257)
ROW_ELEMENT_FACTOR = 0.25  # ... a row op (softmax & co.: ~0.2 us measured at 4096x50257)
TRITON_ROW_S, TRITON_ELEMENT_S = 5e-3, 0.8e-6  # an interpreted call: per row, per element
TRITON_CALLS = 4 + CPU_ROUNDS  # vet, calibration, warm-up, rounds (+1 margin)
FULL_CALLS = 4 + MIN_ROUNDS  # --full-cpu: the GPU's schedule, >= MIN_ROUNDS rounds
FULL_RUN_S = 0.35  # --full-cpu: a fast call's rounds fill timing.BUDGET_S


def runs_on_cpu(variant: Variant) -> bool:
    """Whether ``variant`` runs on CPU tensors (its ``supports()`` on a small one)."""
    from kernel_lab.checking.checker import runs_here

    return runs_here(variant, "cpu")


def run_cost_s(cell: Cell, variant: Variant, *, full: bool = False,
               runs_here: bool | None = None) -> float:
    """Estimated seconds of one (cell, variant) run on a 2-core CPU: CPU_ROUNDS short rounds
    (``full``: the GPU's schedule, as ``--full-cpu`` times it). A variant that does not run
    here costs nothing (its ``supports()`` skips it)."""
    if not (runs_on_cpu(variant) if runs_here is None else runs_here):
        return 0.0
    m, n = cell.shape[0], cell.shape[-1]
    # M*N, and an lm-head cell's matmul (T x d x V multiply-adds, ~1 % of an element's checks)
    elements = m * n + (math.prod(cell.shape) // 100 if len(cell.shape) > 2 else 0)
    backend = variant.backend if variant.backend in CPU_RUN_S else "torch"
    per_element = CPU_ELEMENT_S[backend] * (ROW_ELEMENT_FACTOR if cell.op in ROW_OPS else 1.0)
    cost = CPU_RUN_S[backend] + per_element * elements
    if backend == "triton":
        cost += (FULL_CALLS if full else TRITON_CALLS) * m * (TRITON_ROW_S
                                                               + TRITON_ELEMENT_S * n)
    elif full:
        cost += FULL_RUN_S
    return cost


def share_cost_s(pairs: Sequence[tuple[Cell, Variant]], *, full: bool = False,
                here: dict[str, bool] | None = None) -> float:
    """Estimated wall seconds of a ``bench --device cpu`` process timing ``pairs``
    (``here``: variant name -> runs here, filled as asked: a cache to share)."""
    here = {} if here is None else here
    total, compiles = CPU_FIXED_S, False
    for cell, v in pairs:
        if v.name not in here:
            here[v.name] = runs_on_cpu(v)
        ok = here[v.name]
        total += run_cost_s(cell, v, full=full, runs_here=ok)
        compiles = compiles or (ok and v.backend == "compile")
    return total + (CPU_COMPILE_WARMUP_S if compiles else 0.0)


def cpu_rows(shapes: Sequence[tuple[int, ...]]) -> dict[tuple[int, ...], tuple[int, ...]]:
    """Each preset shape's CPU shape: rows cut to <= CPU_MAX_ROWS and M*N <= CPU_ELEMENTS (at
    least one row), the row length kept, the op's parameters between cut to CPU_MAX_PARAM.
    Where several shapes share a row length (the seed preset: M = 256 ... 2432 at N = 128)
    their rows are scaled by one factor instead, so the M axis survives."""
    by_n: dict[int, list[int]] = {}
    for shape in shapes:
        by_n.setdefault(shape[-1], []).append(shape[0])
    out = {}
    for shape in shapes:
        m, n, ms = shape[0], shape[-1], by_n[shape[-1]]
        cap = max(1, min(CPU_MAX_ROWS, CPU_ELEMENTS // n))
        rows = min(m, cap) if len(set(ms)) == 1 else max(1, min(m, -(-m * cap // max(ms))))
        out[shape] = (rows, *(min(p, CPU_MAX_PARAM) for p in shape[1:-1]), n)
    return out


def _spread(k: int) -> list[int]:
    """0 .. k-1 in the order that covers the range first: ends, middle, quarters, ..."""
    if k <= 0:
        return []
    order, seen = [], set()
    spans = [(0, k - 1)]
    for i in (0, k - 1):
        if i not in seen:
            seen.add(i)
            order.append(i)
    while spans:
        nxt = []
        for lo, hi in spans:
            if hi - lo < 2:
                continue
            mid = (lo + hi) // 2
            if mid not in seen:
                seen.add(mid)
                order.append(mid)
            nxt += [(lo, mid), (mid, hi)]
        spans = nxt
    return order + [i for i in range(k) if i not in seen]


@dataclass
class CpuShare:
    """What ``bench --device cpu`` runs: the pairs, the rounds (None: the GPU's schedule), the
    estimate, and the one line that says what was cut."""

    pairs: list[tuple[Cell, Variant]]
    rounds: int | None
    estimate_s: float
    note: str


def _cells(pairs: Sequence[tuple[Cell, Variant]]) -> list[Cell]:
    return list(dict.fromkeys(c for c, _ in pairs))


def cpu_share(pairs: Sequence[tuple[Cell, Variant]], *, shapes_given: bool = False,
             dtypes_given: bool = False, budget_s: float = CPU_SHARE_S) -> CpuShare:
    """The CPU's share of a selection (:func:`select`'s pairs), chosen without timing.

    Preset shapes: the first dtype only (unless ``--dtype`` chose), rows cut
    (:func:`cpu_rows`), then as many row lengths as fit ``budget_s``, spread over the preset's
    range (the smallest and largest first; none that alone costs a quarter of the budget),
    every op and variant kept. Shapes given with
    ``--shape`` are kept as given and timed with CPU_ROUNDS rounds, or refused (ValueError,
    one line naming ``--full-cpu``) when they would not fit CPU_BUDGET_S.
    """
    cells = _cells(pairs)
    if not cells:
        return CpuShare([], CPU_ROUNDS, share_cost_s([]), "")
    if shapes_given:
        est = share_cost_s(pairs)
        if est > CPU_BUDGET_S:
            big = max(cells, key=lambda c: math.prod(c.shape))
            raise ValueError(
                f"--shape {big.shape_id}: ~{minutes_text(est)} on a 2-core CPU (a CPU run is "
                f"meant for {minutes_text(CPU_BUDGET_S)}): pass --full-cpu to time it anyway, "
                f"or a smaller --shape, e.g. {_fitting(pairs, big)}")
        return CpuShare(list(pairs), CPU_ROUNDS, est,
                       f"CPU: {len(cells)} cells as given, {CPU_ROUNDS} rounds a run, "
                       f"~{minutes_text(est)} estimated; --full-cpu: the GPU's rounds")
    first_dtype: dict[str, torch.dtype] = {}
    for c in cells:
        first_dtype.setdefault(c.op, c.dtype)
    rows = cpu_rows(list(dict.fromkeys(c.shape for c in cells)))
    kept = [(replace(c, shape=rows[c.shape]), v) for c, v in pairs
            if dtypes_given or c.dtype == first_dtype[c.op]]
    kept = list({(c, v.name): (c, v) for c, v in kept}.values())  # shapes met by the cut: once
    shapes = sorted({c.shape for c, _ in kept}, key=lambda s: (s[-1], s))
    here: dict[str, bool] = {}
    chosen: set[tuple[int, ...]] = set()
    est = share_cost_s([])
    for i in _spread(len(shapes)):
        trial = chosen | {shapes[i]}
        cost = share_cost_s([(c, v) for c, v in kept if c.shape in trial], here=here)
        # a row length that alone would take a quarter of the budget leaves room for no other
        if not chosen or (cost <= budget_s and cost - est <= budget_s / 4):
            chosen, est = trial, cost
    out = [(c, v) for c, v in kept if c.shape in chosen]
    n_cells = len(_cells(out))
    dts = ", ".join(sorted({dtype_name(c.dtype) for c, _ in out}))
    ns = sorted({s[-1] for s in chosen})
    ms = sorted({s[0] for s in chosen})
    size = (f"N = {_list(ns)}" if len(ns) > 1 else f"{_list(ms)} rows of {ns[0]}")
    params = f", hidden <= {CPU_MAX_PARAM}" if any(len(s) > 2 for s in chosen) else ""
    note = (f"CPU: {n_cells} of {len(cells)} cells ({dts}; {size}; rows cut: <= "
            f"{CPU_MAX_ROWS}, M*N <= {CPU_ELEMENTS:,} or one row{params}), {CPU_ROUNDS} rounds "
            "a run, "
            f"~{minutes_text(est)} estimated; all cells: --full-cpu (slow) or --device cuda")
    return CpuShare(out, CPU_ROUNDS, est, note)


def _fitting(pairs: Sequence[tuple[Cell, Variant]], big: Cell) -> str:
    """The biggest's shape with rows halved until the selection would fit the budget."""
    m = big.shape[0]
    here: dict[str, bool] = {}
    while m > 1:
        m //= 2
        trial = [(replace(c, shape=(min(c.shape[0], m), *c.shape[1:])), v) for c, v in pairs]
        if share_cost_s(trial, here=here) <= CPU_BUDGET_S:
            break
    return "x".join(map(str, (m, *big.shape[1:])))


def minutes_text(seconds: float) -> str:
    """``45 s``, ``25 min``, ``3.2 h``."""
    s = int(round(seconds))
    return f"{s} s" if s < 120 else f"{s / 60:.0f} min" if s < 7200 else f"{s / 3600:.1f} h"


def _list(xs: Sequence[int], k: int = 6) -> str:
    return ", ".join(map(str, xs)) if len(xs) <= k else (
        f"{', '.join(map(str, xs[:k - 2]))}, ..., {xs[-1]}")
