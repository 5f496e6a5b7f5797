"""Deliberately wrong softmax implementations: the checker must reject every one of them.

They are plain functions wrapped in unregistered Variants, run through exactly the same cases
and checker (`kernel_lab.checking.checker`) as the real variants.
"""

import torch

from kernel_lab.core.registry import Variant
from kernel_lab.core.rows import rowwise

DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def drops_tail(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Forgets the last 8 columns of every row (a grid/mask off-by-a-tile bug)."""

    def kernel(out, x2d):
        n = x2d.shape[1]
        keep = max(n - 8, 1) if n > 1 else 0
        out[:, :keep] = torch.softmax(x2d[:, :keep].float(), dim=-1).to(out.dtype)

    return rowwise(kernel, x, dim=dim)


def skips_max(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """exp(x) / sum(exp(x)) in the input precision: right on small logits, overflows on big ones."""
    e = torch.exp(x)
    return e / e.sum(dim=dim, keepdim=True)


def writes_nothing(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Returns the freshly allocated output without writing it."""
    return rowwise(lambda out, x2d: None, x, dim=dim)


WRONG = [
    Variant(name=f.__name__, op="softmax", backend="torch", fn=f, dtypes=DTYPES,
            description=f.__doc__.splitlines()[0])
    for f in (drops_tail, skips_max, writes_nothing)
]
