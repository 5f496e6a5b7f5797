"""Softmax from other projects (backend ``peer``): yardsticks our kernels race in `pytest bench`.

Decisions:

* Always registered, imported lazily. When a package is missing, ``supports()`` says so
  ("liger_kernel not installed ...") and the benchmark skips it with that reason; importing
  this module never imports the peer (Liger pulls in Triton kernels, QuACK the CuTe DSL).
* Called through each project's public entry point, forward only unless the project exposes
  a plain backward function: Liger ``LigerSoftmaxFunction.apply(x)``; QuACK ``quack.softmax(x)``
  and ``quack.softmax.softmax_bwd(dy, y)``.
* Their limits are spelled out in ``supports()`` rather than discovered by a crash: both work
  over the last dim only; QuACK needs 16-byte rows, sm_90+, and a row slice per CTA of a
  16-CTA cluster that fits shared memory; Liger before its multi-block kernels stops at 65536.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util

import torch

from kernel_lab.registry import register
from kernel_lab.rows import normalize_dim

SOURCE = "kernel_lab/ops/softmax/peer_variants.py"
PEER_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
LIGER_FUSED_MAX_N = 65536
QUACK_CLUSTER, QUACK_SMEM_BYTES = 16, 200 * 1024  # per-CTA share of a row must fit smem


@functools.lru_cache(maxsize=None)
def _installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def _last_dim(x: torch.Tensor, dim: int) -> str | None:
    try:
        last = normalize_dim(dim, x.dim()) == x.dim() - 1
    except IndexError as e:
        return str(e)
    return None if last else "works over the last dim only"


# -- Liger-Kernel -------------------------------------------------------------------------------
def _liger_check(x: torch.Tensor, dim: int = -1) -> str | None:
    if not _installed("liger_kernel"):
        return "liger_kernel not installed (pip install liger-kernel)"
    if (why := _last_dim(x, dim)) is not None:
        return why
    n = x.shape[-1]
    if n > LIGER_FUSED_MAX_N:
        mod = importlib.import_module("liger_kernel.ops.softmax")
        if not hasattr(mod, "_softmax_multi_block_forward_kernel"):
            return f"row length {n} > {LIGER_FUSED_MAX_N}: this liger_kernel has no long-row path"
    return None


@register(
    "peer_liger",
    op="softmax",
    backend="peer",
    dtypes=PEER_DTYPES,
    description="Liger-Kernel's Triton softmax (LigerSoftmaxFunction), last dim",
    source=SOURCE,
    check=_liger_check,
    needs_cuda=True,
)
def peer_liger(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    from liger_kernel.ops.softmax import LigerSoftmaxFunction

    if x.numel() == 0:
        return torch.empty_like(x)
    return LigerSoftmaxFunction.apply(x.detach())


# -- QuACK --------------------------------------------------------------------------------------
def _quack_check(*inputs: torch.Tensor, dim: int = -1, need: str = "softmax") -> str | None:
    if not _installed("quack"):
        return "quack not installed (pip install quack-kernels)"
    x = inputs[0]
    if (why := _last_dim(x, dim)) is not None:
        return why
    if torch.cuda.get_device_capability(x.device) < (9, 0):
        return "QuACK's CuTe kernels need sm_90 or newer"
    n, es = x.shape[-1], x.element_size()
    if (n * es) % 16:
        return f"row of {n * es} bytes: QuACK needs rows that are a multiple of 16 bytes"
    if n * es > QUACK_CLUSTER * QUACK_SMEM_BYTES // (2 if need == "softmax_bwd" else 1):
        return f"row of {n * es} bytes does not fit a {QUACK_CLUSTER}-CTA cluster's smem"
    if need != "softmax" and not hasattr(importlib.import_module("quack.softmax"), need):
        return f"this quack version has no quack.softmax.{need}"
    return None


def _rows(t: torch.Tensor) -> torch.Tensor:
    """(M, N) rows for QuACK: a non-contiguous or not 16-byte aligned input is copied."""
    t = t.detach().contiguous()
    return (t.clone() if t.data_ptr() % 16 else t).view(-1, t.shape[-1])


@register(
    "peer_quack",
    op="softmax",
    backend="peer",
    dtypes=PEER_DTYPES,
    description="QuACK's CuTe-DSL softmax (quack.softmax), last dim, clusters for long rows",
    source=SOURCE,
    check=_quack_check,
    needs_cuda=True,
)
def peer_quack(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    import quack

    if x.numel() == 0:
        return torch.empty_like(x)
    return quack.softmax(_rows(x)).view(x.shape)


@register(
    "peer_quack_backward",
    op="softmax_backward",
    backend="peer",
    dtypes=PEER_DTYPES,
    description="QuACK's CuTe-DSL softmax backward (quack.softmax.softmax_bwd), last dim",
    source=SOURCE,
    check=functools.partial(_quack_check, need="softmax_bwd"),
    needs_cuda=True,
)
def peer_quack_backward(y: torch.Tensor, dy: torch.Tensor, dim: int = -1) -> torch.Tensor:
    from quack.softmax import softmax_bwd

    if y.numel() == 0:
        return torch.empty_like(y)
    return softmax_bwd(_rows(dy), _rows(y)).view(y.shape)
