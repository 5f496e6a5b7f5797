"""Softmax from other projects (backend ``peer``): yardsticks our kernels race in `pytest bench`.

Decisions:

* Always registered, imported lazily. When a package is missing or does not import,
  ``supports()`` says so ("quack not installed ...") and the benchmark skips it with that
  reason; importing this module never imports the peer (Liger pulls in Triton kernels, QuACK
  the CuTe DSL). Each launcher's ``peer_missing()`` gives that reason alone (None: importable),
  which ``kernel_lab bench`` uses to add every importable peer to a sweep.
* Called through each project's public entry point, forward only unless the project exposes
  a plain backward function: Liger ``LigerSoftmaxFunction.apply(x)``; QuACK ``quack.softmax(x)``
  and ``quack.softmax.softmax_bwd(dy, y)``.
* Their limits are spelled out in ``supports()`` rather than discovered by a crash, in short
  reasons a sweep table can show in the cell: both work over the last dim only; QuACK needs
  16-byte rows (N a multiple of 16 / element size), sm_90+, and a row slice per CTA of a 16-CTA
  cluster that fits shared memory; Liger stops at N = 65536 (its ``calculate_settings`` raises
  beyond, multi-block kernels or not, up to 0.8.5 at least).
"""

from __future__ import annotations

import functools
import importlib
import importlib.util

import torch

from kernel_lab.core.registry import registrar
from kernel_lab.core.rows import normalize_dim

SOURCE = "kernel_lab/ops/softmax/peer_variants.py"
PEER_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
peer_variant = registrar(op="softmax", backend="peer", dtypes=PEER_DTYPES, source=SOURCE)
LIGER_FUSED_MAX_N = 65536
QUACK_CLUSTER, QUACK_SMEM_BYTES = 16, 200 * 1024  # per-CTA share of a row must fit smem


@functools.lru_cache(maxsize=None)
def package_missing(module: str, dist: str) -> str | None:
    """Why ``module`` (of pip package ``dist``) cannot be used here, or None once it imports."""
    if importlib.util.find_spec(module.split(".")[0]) is None:
        return f"not installed (pip install {dist})"
    try:
        importlib.import_module(module)
    except Exception as e:  # noqa: BLE001 - a half-installed peer (no CuTe DSL libs ...) is skipped
        first = (str(e).strip().splitlines() or [""])[0]
        return f"{module} does not import: {type(e).__name__}: {first}"
    return None


LIGER = functools.partial(package_missing, "liger_kernel.ops.softmax", "liger-kernel")
QUACK = functools.partial(package_missing, "quack.softmax", "quack-kernels")


def _last_dim(x: torch.Tensor, dim: int) -> str | None:
    try:
        last = normalize_dim(dim, x.dim()) == x.dim() - 1
    except IndexError as e:
        return str(e)
    return None if last else "works over the last dim only"


# -- Liger-Kernel -------------------------------------------------------------------------------
def _liger_check(x: torch.Tensor, dim: int = -1) -> str | None:
    if (why := LIGER()) is not None:
        return why
    if (why := _last_dim(x, dim)) is not None:
        return why
    if (n := x.shape[-1]) > LIGER_FUSED_MAX_N:
        return f"N={n} > {LIGER_FUSED_MAX_N} (Liger's block limit)"
    return None


@peer_variant(
    "peer_liger",
    description="Liger-Kernel's Triton softmax (LigerSoftmaxFunction), last dim",
    check=_liger_check,
    needs_cuda=True,
)
def peer_liger(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    from liger_kernel.ops.softmax import LigerSoftmaxFunction

    if x.numel() == 0:
        return torch.empty_like(x)
    return LigerSoftmaxFunction.apply(x.detach())


peer_liger.peer_missing = LIGER


# -- QuACK --------------------------------------------------------------------------------------
def _quack_check(*inputs: torch.Tensor, dim: int = -1, need: str = "softmax") -> str | None:
    if (why := QUACK()) is not None:
        return why
    x = inputs[0]
    if (why := _last_dim(x, dim)) is not None:
        return why
    if torch.cuda.get_device_capability(x.device) < (9, 0):
        return "QuACK's CuTe kernels need sm_90 or newer"
    n, es = x.shape[-1], x.element_size()
    if (n * es) % 16:
        return f"N={n} not a multiple of {16 // es} (16-byte rows)"
    if n * es > QUACK_CLUSTER * QUACK_SMEM_BYTES // (2 if need == "softmax_bwd" else 1):
        return f"N={n}: row too long for a {QUACK_CLUSTER}-CTA cluster's smem"
    if need != "softmax" and not hasattr(importlib.import_module("quack.softmax"), need):
        return f"this quack version has no quack.softmax.{need}"
    return None


def _rows(t: torch.Tensor) -> torch.Tensor:
    """(M, N) rows for QuACK: a non-contiguous or not 16-byte aligned input is copied."""
    t = t.detach().contiguous()
    return (t.clone() if t.data_ptr() % 16 else t).view(-1, t.shape[-1])


@peer_variant(
    "peer_quack",
    description="QuACK's CuTe-DSL softmax (quack.softmax), last dim, clusters for long rows",
    check=_quack_check,
    needs_cuda=True,
)
def peer_quack(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    import quack

    if x.numel() == 0:
        return torch.empty_like(x)
    return quack.softmax(_rows(x)).view(x.shape)


peer_quack.peer_missing = QUACK


@peer_variant(
    "peer_quack_backward",
    op="softmax_backward",
    description="QuACK's CuTe-DSL softmax backward (quack.softmax.softmax_bwd), last dim",
    check=functools.partial(_quack_check, need="softmax_bwd"),
    needs_cuda=True,
)
def peer_quack_backward(y: torch.Tensor, dy: torch.Tensor, dim: int = -1) -> torch.Tensor:
    from quack.softmax import softmax_bwd

    if y.numel() == 0:
        return torch.empty_like(y)
    return softmax_bwd(_rows(dy), _rows(y)).view(y.shape)


peer_quack_backward.peer_missing = QUACK
