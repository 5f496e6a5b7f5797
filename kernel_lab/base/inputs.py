"""Dtypes and random inputs shared by the ops' definitions (never zeros, never constant rows)."""

from __future__ import annotations

import torch

FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
ALL_DTYPES = (torch.float64, *FLOAT_DTYPES)


def acc_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype kernels accumulate ``dtype`` in: float64 for float64, float32 otherwise."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def randn(shape, dtype, device="cpu", generator=None, scale: float = 2.0) -> torch.Tensor:
    """N(0, scale^2) values of ``shape`` drawn on the CPU (same values on every device)."""
    x = torch.randn(shape, generator=generator, dtype=torch.float32)
    return (x * scale).to(device=device, dtype=dtype)
