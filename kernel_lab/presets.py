"""What a benchmark runs: the presets (shapes, dtypes, ops, variants), the (op, dtype, shape)
cells and the command-line selection over the registry (``kernel_lab.benchmarking.select``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

import torch

from .checking import dtype_name, parse_dtype
from .registry import BACKENDS, Variant, get, get_op, op_names, variants

ELEMENTS = 2**28  # the sweep's working set: 1 GiB of fp32, far past any L2


def _fixed_elements(ns: Iterable[int]) -> tuple[tuple[int, int], ...]:
    return tuple((max(1, ELEMENTS // n), n) for n in sorted(ns))


@dataclass(frozen=True)
class Preset:
    """Shapes ((rows M, columns N): the op over the N of each row), dtypes and, optionally, ops
    and variants.

    ``variants`` holds variant names or backend names (``"triton"`` = every Triton variant);
    None selects everything registered. Command-line filters replace these, never intersect.
    """

    name: str
    description: str
    shapes: tuple[tuple[int, int], ...]
    dtypes: tuple[torch.dtype, ...]
    ops: tuple[str, ...] | None = None
    variants: tuple[str, ...] | None = None


SWEEP_N = (*(2**k for k in range(7, 21)), 32000, 50257, 128256, 151936)
ROW_OPS = ("softmax", "softmax_backward", "log_softmax", "log_softmax_backward")
VOCAB_N = (32000, 50257, 65536, 128256, 151936, 262144)
LOSS_OPS = ("cross_entropy", "cross_entropy_backward")
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
    )
}
DEFAULT_PRESET = "quick"


@dataclass(frozen=True)
class Case:
    """One (op, dtype, shape): the unit whose variants race on identical inputs.

    Not :class:`kernel_lab.checking.Case`, which is a layout case (shape, dim, strides) that a
    correctness check runs for every op and dtype; a benchmark cell fixes the op and dtype and
    always times contiguous rows."""

    op: str
    dtype: torch.dtype
    shape: tuple[int, int]

    @property
    def shape_id(self) -> str:
        return "x".join(map(str, self.shape))

    @property
    def id(self) -> str:
        return f"{self.op}-{dtype_name(self.dtype)}-{self.shape_id}"

    @classmethod
    def parse(cls, op: str, dtype: str, shape: str) -> "Case":
        return cls(op, parse_dtype(dtype), tuple(int(s) for s in shape.split("x")))


def split_tokens(tokens: Sequence[str] | None) -> list[str]:
    """Comma-separated or repeated command-line tokens, as one list."""
    return [t.strip() for tok in tokens or () for t in tok.split(",") if t.strip()]


def parse_shape(token: str) -> tuple[int, int]:
    """``"N"`` (rows M = 2^28 // N, the sweep's working set) or ``"MxN"`` -> (M, N)."""
    parts = token.lower().split("x")
    try:
        dims = [int(d) for d in parts]
    except ValueError:
        dims = []
    if len(dims) not in (1, 2) or min(dims) < 1:
        raise ValueError(f"bad shape {token!r}: use N or MxN with positive integers, e.g. "
                         "262144 or 1024x262144")
    return (max(1, ELEMENTS // dims[0]), dims[0]) if len(dims) == 1 else (dims[0], dims[1])


def select(
    preset: str | Preset = DEFAULT_PRESET,
    *,
    ops_filter: Sequence[str] | None = None,
    variants_filter: Sequence[str] | None = None,
    dtypes_filter: Sequence[str] | None = None,
    shapes_filter: Sequence[str] | None = None,
) -> list[tuple[Case, Variant]]:
    """Every (case, variant) pair to benchmark, case-major (all variants of a case together).

    Filters are comma-separated or repeated tokens; a variant token may be a backend; a shape
    token is N or MxN (:func:`parse_shape`) and replaces the preset's shapes. Unknown ops /
    variants raise with close-match suggestions. Variants that cannot run a case are kept: the
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
    out = []
    for op_name in names:
        chosen = [v for v in variants(op_name)
                  if not tokens or v.name in tokens or v.backend in tokens]
        for dtype in dtypes:
            for shape in shapes:
                out.extend((Case(op_name, dtype, shape), v) for v in chosen)
    return out


