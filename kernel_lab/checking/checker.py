"""Correctness checking shared by the tests, the benchmarks and ``python -m kernel_lab check``.

One place defines *what* is checked: the shape cases (odd sizes, 3-D, other dims, strided and
misaligned layouts, empty tensors), each op's edge cases, poisoning, and the comparison with the
op's float64 reference under the tolerance table of :mod:`kernel_lab.core.reference`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import torch

from kernel_lab.core import contract, registry
from kernel_lab.core.reference import CheckResult

DTYPE_NAMES = {  # every spelling the commands accept (bf16 and bfloat16 alike)
    "float32": torch.float32, "fp32": torch.float32,
    "float16": torch.float16, "fp16": torch.float16, "half": torch.float16,
    "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
    "float64": torch.float64, "fp64": torch.float64,
}


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def parse_dtype(name: str) -> torch.dtype:
    """A dtype from any accepted spelling; ValueError naming them otherwise."""
    try:
        return DTYPE_NAMES[name.strip().lower()]
    except KeyError:
        raise ValueError(f"unknown dtype {name!r}; use one of {', '.join(DTYPE_NAMES)}") from None


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
        s = "x".join(map(str, self.shape)) or "0d"
        extra = "" if self.dim == -1 else f"-dim{self.dim}"
        return f"{s}{extra}" + ("" if self.layout == "contiguous" else f"-{self.layout}")


CORE = ("core",)  # the representative set `check` runs by default (`--all`: every case)
SMOKE = ("core", "smoke")  # the one shape case of the default set for per-shape compilers
# The sanitizers' case sets (sanitize.TOOL_CASES picks one per tool); "only": not in `all`.
# sanitize (memcheck, initcheck): the CPU-sized cases (every layout, 0-d, empty, odd N 1-1823)
# plus GPU rows, odd where a kind allows, at aligned and misaligned bases, that reach every
# kernel kind of every CUDA variant in fp32 and bf16.
SANITIZE = ("sanitize",)
SANITIZE_ONLY = ("sanitize", "only")
# race (racecheck, synccheck): per kind, about the smallest rows that pick it, 1-2 rows
# (racecheck pays per shared-memory access). tests/test_sanitize_cover.py proves both sets reach
# every kind (kernel_lab.checking.sanitize_cover) and that each race case is needed.
RACE_ONLY = ("race", "only")

CASES: tuple[Case, ...] = (
    Case((), tags=CORE),  # 0-d: one row of one element, as PyTorch's row ops treat it
    Case((1, 1)),
    Case((1, 7), tags=CORE),
    Case((3, 127)),
    Case((4, 781)),
    Case((2, 1823), tags=CORE),
    Case((2, 3, 127), tags=SMOKE),  # 3-D, odd rows
    Case((7, 3, 5), dim=0, tags=CORE),
    Case((4, 5, 6), dim=1),
    Case((3, 781), layout="transposed", tags=CORE),
    Case((3, 781), layout="row_sliced"),
    Case((3, 781), layout="misaligned", tags=CORE),
    Case((0, 16), tags=CORE),
    Case((4, 0)),
    # GPU only: real sizes (too slow for the Triton interpreter on a CPU).
    Case((1024, 128), gpu_only=True, tags=CORE),
    Case((513, 512), gpu_only=True),
    Case((64, 1024), gpu_only=True),
    Case((8, 4096), gpu_only=True),
    Case((5, 24001), gpu_only=True, tags=CORE),  # odd rows on block_slots at 256 threads
    Case((4, 32000), gpu_only=True),
    Case((3, 50257), gpu_only=True),
    # misaligned: fast cluster, backward cluster, log backward stream
    Case((8, 50257), layout="misaligned", gpu_only=True, tags=CORE + SANITIZE),
    Case((4, 65536), layout="row_sliced", gpu_only=True),
    Case((2, 128256), gpu_only=True),
    Case((2, 151936), gpu_only=True, tags=CORE),
    Case((3, 262144), gpu_only=True),
    Case((2, 1048576), gpu_only=True),
    Case((2, 2097153), gpu_only=True, tags=CORE),  # rows in chunks, odd length
    Case((16, 4097), layout="transposed", gpu_only=True),
    # -- sanitize: the kinds each GPU row reaches (fp32 / bf16; fast = fast_softmax and
    # fast_log_softmax, bwd = both backwards). Odd rows leave partial 16-byte vectors at the edges.
    # fast block_slots, bwd persist, vec_softmax fp32 stream
    Case((2, 50257), gpu_only=True, tags=SANITIZE_ONLY),
    # fast fp32 cluster_slots / bf16 persist_cluster (odd rows of ~57.3K-59.4K)
    Case((2, 58001), gpu_only=True, tags=SANITIZE_ONLY),
    # fast fp32 persist_cluster / bf16 cluster_slots; fp32 bwd persist on 16-CTA clusters, 9 rows:
    # more than the 8 an H100 holds at once, so a cluster loops to a second row
    Case((9, 151937), gpu_only=True, tags=SANITIZE_ONLY),
    # fast chunks_reg, bwd chunks, vec_softmax bf16 stream
    Case((2, 262145), gpu_only=True, tags=SANITIZE_ONLY),
    # fast cluster on 16 CTAs (non-portable), bwd stream
    Case((2, 262145), layout="misaligned", gpu_only=True, tags=SANITIZE_ONLY),
    Case((2, 524289), layout="misaligned", gpu_only=True, tags=SANITIZE_ONLY),  # fast wide
    # fast chunks: fp32 132 chunks a row (<= resident CTAs + 1 on 132 SMs), bf16 66 (> 65)
    Case((2, 2150001), gpu_only=True, tags=SANITIZE_ONLY),
    # cross-entropy's row scans in parts (past cuda_variants.SCAN_ONE_BLOCK rows: 5 blocks;
    # the race tools run them in .ci/gpu's own stage: race cases keep to 1-2 rows)
    Case((32771, 3), gpu_only=True, tags=SANITIZE_ONLY),
    # -- race: what each row reaches, as above
    Case((1, 127), gpu_only=True, tags=RACE_ONLY),  # fast warp; every small kernel; bwd block
    # fast block_slots, bwd persist, vec_softmax fp32 stream
    Case((1, 33001), gpu_only=True, tags=RACE_ONLY),
    # fast cluster, bwd cluster, log bwd stream
    Case((1, 33001), layout="misaligned", gpu_only=True, tags=RACE_ONLY),
    Case((2, 58001), gpu_only=True, tags=RACE_ONLY),  # fp32 cluster_slots, bf16 persist_cluster
    # fp32 persist_cluster, bf16 cluster_slots, vec_softmax bf16 stream
    Case((1, 140001), gpu_only=True, tags=RACE_ONLY),
    Case((1, 180001), gpu_only=True, tags=RACE_ONLY),  # fast chunks_reg, bwd chunks
    Case((1, 524289), layout="misaligned", gpu_only=True, tags=RACE_ONLY),  # wide, bwd stream
    Case((1, 2150001), gpu_only=True, tags=RACE_ONLY),  # fast chunks (fp32 132, bf16 66 a row)
)

SELECTIONS = ("core", "all", "sanitize", "race")


def cases_for(device: str | torch.device, op: contract.Op | None = None,
              selection: str = "all") -> list[Case]:
    """The shape cases for ``device``: ``core`` (a representative set: 0-d, odd, 3-D, another
    dim, strided, misaligned, empty), ``all`` (every case but the sanitizers' own), ``sanitize``
    (the CPU-sized cases plus GPU rows that reach every kernel kind: memcheck, initcheck) or
    ``race`` (small rows that reach every kind: racecheck, synccheck). An op without a
    ``dim`` keyword reduces over the last dim only, so cases over other dims are left out for
    it."""
    if selection not in SELECTIONS:
        raise ValueError(f"unknown case selection {selection!r}; use one of {SELECTIONS}")
    on_gpu = torch.device(device).type == "cuda"
    has_dim = op is None or "dim" in op.kwargs

    def chosen(c: Case) -> bool:
        if selection == "core":
            return "core" in c.tags
        if selection == "all":
            return "only" not in c.tags
        if selection == "sanitize":
            return not c.gpu_only or "sanitize" in c.tags
        return "race" in c.tags

    return [c for c in CASES
            if chosen(c) and (on_gpu or not c.gpu_only) and (has_dim or c.dim == -1)]


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


def make_case_inputs(op: contract.Op, case: Case, dtype: torch.dtype, device, generator):
    """(inputs, kw) of ``case``: the op's rows inputs in the case's layout, its other inputs
    (per-column parameters, indices) as the op made them."""
    inputs = op.make_inputs(case.shape, dtype, device, generator)
    roles = [i.role for i in op.inputs] + ["rows"] * len(inputs)
    kw = {"dim": case.dim} if "dim" in op.kwargs else {}
    return tuple(relayout(t, case.layout) if role == "rows" else t
                 for t, role in zip(inputs, roles)), kw


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
    snapshot = [t if t is None else t.clone() for t in inputs]  # a variant must not write inputs
    poison_allocator(inputs[0])
    out = variant.fn(*inputs, **kw)
    if inputs[0].is_cuda:
        torch.cuda.synchronize(inputs[0].device)
    result = op.check(out, *inputs, ref=ref, **kw)
    for before, after in zip(snapshot, inputs):
        if before is None:
            continue
        if not torch.equal(before, after) and not torch.equal(before.nan_to_num(),
                                                              after.nan_to_num()):
            return CheckResult(False, result.max_abs_err, result.max_rel_err,
                               "the variant modified its input"), out
    return result, out


def fresh_seed() -> int:
    """A new seed per run (printed on failure), so every run checks new random inputs."""
    return int.from_bytes(os.urandom(4), "little")


def default_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


_PROBE = Case((2, 8))  # the input a variant is asked about by runs_here / `list`


def why_not_here(variant: registry.Variant | str, device: str | None = None) -> str | None:
    """Why ``variant`` (or its name) cannot run on this machine (``device``: default the GPU
    if there is one, else the CPU), or None if it can: its own ``supports()`` on a small
    float32 input (its first dtype if it takes no float32). Never launches anything."""
    v = registry.get(variant) if isinstance(variant, str) else variant
    dtype = torch.float32 if torch.float32 in v.dtypes else v.dtypes[0]
    op = registry.get_op(v.op)
    inputs, kw = make_case_inputs(op, _PROBE, dtype, device or default_device(), None)
    return v.supports(*inputs, **kw)


def runs_here(variant: registry.Variant | str, device: str | None = None) -> bool:
    """Whether ``variant`` runs on this machine (:func:`why_not_here` says why not)."""
    return why_not_here(variant, device) is None
