"""Cross-entropy from other projects (backend ``peer``): yardsticks our kernels race in `pytest
bench`, registered like the softmax peers (``kernel_lab/ops/softmax/peer_variants.py``).

Decisions:

* Always registered, imported lazily: when a package is missing or does not import,
  ``supports()`` says so and the benchmark skips it with that reason. Each launcher's
  ``peer_missing()`` gives that reason alone (None: importable), which ``kernel_lab bench``
  uses to add every importable peer to a sweep (``benchmarking.peer_missing``).
* Both peers validate targets as every lab variant does (one host sync): QuACK through
  :func:`check_targets` before its launch; Liger folds the check into the one sync it needs
  after its launch (below). Neither project checks on its own path without syncing (QuACK does
  not check; Liger's ``cross_entropy_forward`` syncs three times: ``.item()`` and two asserts).
* Their limits are spelled out in ``supports()`` in short reasons a sweep table shows in the
  cell.

QuACK (quack-kernels 0.6.5, ``quack/cross_entropy.py``):

* Forward ``cross_entropy_fwd(x, target, weight=, ignore_index=, return_lse=True)`` returns the
  unreduced loss (fp32, 0 on ignored rows, times w_t) and the lse (fp32, every row): the lse is
  QuACK's own (widened to the op's fp64 for fp32 logits). The reduction is done here as
  QuACK's ``cross_entropy()`` does it (``sum`` /
  ``sum / sum of w_t over kept rows``, a few O(rows) PyTorch ops), then cast to the logits'
  dtype. Backward ``cross_entropy_bwd(x, target, dloss, lse, weight=, ignore_index=)`` is a
  plain backward (dloss fp32 per row: the upstream gradient, divided by the mean's denominator,
  expanded as autograd hands it to QuACK's own Function; ignored rows are zeroed by the kernel).
* No label smoothing (forward or backward). fp32 / fp16 / bf16; int32 / int64 targets (others
  are converted). sm_90+ (the lab runs QuACK on Hopper and newer only, as for softmax).
* Forward: the whole row sits in shared memory, split over a cluster of up to 16 CTAs (8 on
  sm_12x; QuACK's own thresholds, :func:`quack_cluster_n`): rows longer than 16 x a CTA's
  share of smem are refused. The vector width is gcd(N, 16 bytes / element size): fp32
  N = 50257 runs unvectorized, but odd 2-byte rows failed to compile on the H200 (refused).
  Backward: tiles of 16K columns, any N, no row limit. Inputs must be 16-byte aligned for the
  widest vector: a misaligned input is copied (as for the softmax peer).

Liger-Kernel (liger-kernel 0.8.5, ``liger_kernel/ops/cross_entropy.py``):

* Forward only. Liger has no plain backward: its gradient is written into the logits by the
  forward kernel (``HAS_GRADIENTS`` when the logits require grad) and its
  ``cross_entropy_backward(_input, grad_output)`` only scales that stored gradient. So no
  ``cross_entropy_backward`` variant for Liger.
* In place: even without gradients, Liger's kernel zeroes the logits of every ignored row (its
  early exit), so through its own ``cross_entropy_forward`` the lab's check "the variant
  modified its input" fires, and a clone would put a full copy of the logits inside the timing.
  Instead the launcher runs Liger's kernel (``liger_cross_entropy_kernel``, launched with
  ``cross_entropy_forward``'s block size and warps) on targets with every ignored row mapped
  to class 0 and an ignore index no row has, ``reduction="none"``, ``HAS_GRADIENTS=False``:
  nothing is written to the logits; the ignored rows are read (not written) and their loss is
  masked here; the reduction is done here (O(rows) PyTorch ops), and the per-row loss goes to an
  fp32 buffer (Liger's own is in the logits' dtype).
* lse: Liger never returns it (its z-loss is lse^2 added into the loss). From the fp32 per-row
  loss it is recovered exactly in O(rows): lse = loss / w_t + x_t without label smoothing (one
  gather). Where that is not finite (a -inf target logit, w_t = 0, an ignored row whose class 0
  is -inf) those rows get ``torch.logsumexp``, after the one host sync the launcher makes (the
  target check rides on it). With label smoothing the lse is a separate ``torch.logsumexp``
  pass over the logits (a second read: not the benchmarked default).
* Any N (the kernel loops over blocks of 32768 columns; the 65536 limit is Liger's softmax,
  not its cross entropy); fp32 / fp16 / bf16; weight, ignore_index, every reduction and label
  smoothing are Liger's own. The kernel's argument list is checked against 0.8.5's (supports()
  names a mismatch) since it is called directly.
"""

from __future__ import annotations

import functools
import importlib

import torch

from kernel_lab.core.registry import registrar
from kernel_lab.cuda.sources import cdiv
from kernel_lab.ops.cross_entropy.op import check_kwargs, check_targets, lse_dtype
from kernel_lab.ops.softmax.peer_variants import QUACK_SMEM_BYTES, package_missing

SOURCE = "kernel_lab/ops/cross_entropy/peer_variants.py"
PEER_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
peer_variant = registrar(op="cross_entropy", backend="peer", dtypes=PEER_DTYPES, source=SOURCE,
                         needs_cuda=True)
QUACK_SM12_SMEM_BYTES = 96 * 1024  # sm_12x: 99 KB of smem a block

LIGER = functools.partial(package_missing, "liger_kernel.ops.cross_entropy", "liger-kernel")
QUACK = functools.partial(package_missing, "quack.cross_entropy", "quack-kernels")

# liger_cross_entropy_kernel's parameters in 0.8.5, all passed by name below
LIGER_KERNEL_ARGS = (
    "X_ptr", "X_stride", "Y_ptr", "Y_stride", "weight_ptr", "loss_ptr", "z_loss_ptr",
    "loss_stride", "token_accuracy_ptr", "token_accuracy_stride", "predicted_tokens_ptr",
    "predicted_tokens_stride", "n_cols", "n_non_ignore", "sum_non_ignore_weight", "weight_sum",
    "ignore_index", "lse_square_scale", "label_smoothing", "reduction", "softcap",
    "RETURN_Z_LOSS", "RETURN_TOKEN_ACCURACY", "RETURN_PREDICTED_TOKENS", "BLOCK_SIZE",
    "HAS_WEIGHT", "HAS_SOFTCAPPING", "HAS_GRADIENTS",
)


def _empty_case(logits, target, weight, ignore_index, reduction, label_smoothing):
    """No rows or no classes: PyTorch's variant (the peers do not launch on empty tensors)."""
    from kernel_lab.ops.cross_entropy.torch_variants import torch_cross_entropy

    return torch_cross_entropy(logits, target, weight, ignore_index, reduction, label_smoothing)


def _kept_weights(target, weight, ignore_index):
    """(keep, t, wt): rows not ignored, targets with ignored rows at class 0 (int64), and w_t
    per row in fp32 (None without weights)."""
    keep = target != ignore_index
    t = torch.where(keep, target, 0).long()
    wt = weight.float()[t] if weight is not None else None
    return keep, t, wt


def _denominator(keep, wt):
    """The mean's denominator: the kept rows' count, or their weights' sum (fp32)."""
    return keep.sum() if wt is None else torch.where(keep, wt, 0.0).sum()


def _reduce(loss_rows, keep, wt, reduction, dtype):
    """PyTorch's reduction of fp32 per-row losses (0 on ignored rows), in ``dtype``."""
    if reduction == "none":
        return loss_rows.to(dtype)
    total = loss_rows.sum()
    if reduction == "mean":
        total = total / _denominator(keep, wt)
    return total.to(dtype)


def _capturing(x: torch.Tensor) -> bool:
    return x.is_cuda and torch.cuda.is_current_stream_capturing()


# -- QuACK --------------------------------------------------------------------------------------
def quack_cluster_n(n: int, element_size: int, major: int) -> int:
    """CTAs a row of n is split over by QuACK's forward (``CrossEntropy._set_cluster_n``)."""
    if major < 9:
        return 1
    if element_size == 2 or (major == 12 and element_size >= 4):
        limits = ((16384, 1), (32768, 2), (65536, 4), (131072, 8))
    else:
        limits = ((16384, 1), (65536, 2), (131072, 4), (262144, 8))
    for limit, cluster in limits:
        if n <= limit:
            return cluster
    return 8 if major == 12 else 16


def _quack_check(*inputs, ignore_index=-100, reduction="mean", label_smoothing=0.0,
                 need: str = "cross_entropy_fwd", **_) -> str | None:
    if (why := QUACK()) is not None:
        return why
    x = inputs[0]
    major, _minor = torch.cuda.get_device_capability(x.device)
    if major < 9:
        return "QuACK's CuTe kernels need sm_90 or newer"
    if label_smoothing:
        return "no label_smoothing in QuACK"
    if x.dim() == 2 and x.element_size() == 2 and x.shape[1] % 2:
        # measured on the H200: bf16 5341 x 50257, forward and backward, DSLRuntimeError
        # "The compiler could not build valid IR for this code"
        return f"N={x.shape[1]}: QuACK 0.6.5 does not compile odd 2-byte rows"
    if need == "cross_entropy_fwd" and x.dim() == 2:
        n, es = x.shape[1], x.element_size()
        cluster = quack_cluster_n(n, es, major)
        smem = QUACK_SM12_SMEM_BYTES if major == 12 else QUACK_SMEM_BYTES
        if cdiv(n, cluster) * es > smem:
            return f"N={n}: row too long for a {cluster}-CTA cluster's smem"
    if not hasattr(importlib.import_module("quack.cross_entropy"), need):
        return f"this quack version has no quack.cross_entropy.{need}"
    return None


def _quack_rows(t: torch.Tensor) -> torch.Tensor:
    """Contiguous rows at a 16-byte aligned address (QuACK assumes its vector width's)."""
    t = t.detach().contiguous()
    return t.clone() if t.data_ptr() % 16 else t


def _quack_target(target: torch.Tensor) -> torch.Tensor:
    t = target if target.dtype in (torch.int32, torch.int64) else target.long()
    return t.contiguous()


@peer_variant(
    "peer_quack_cross_entropy",
    description="QuACK's CuTe-DSL cross entropy (quack.cross_entropy.cross_entropy_fwd: "
    "loss and lse per row), reduced as quack.cross_entropy does",
    check=_quack_check,
)
def peer_quack_cross_entropy(logits, target, weight=None, ignore_index=-100, reduction="mean",
                             label_smoothing=0.0):
    from quack.cross_entropy import cross_entropy_fwd

    check_kwargs(ignore_index, reduction, label_smoothing)
    if logits.numel() == 0:
        return _empty_case(logits, target, weight, ignore_index, reduction, label_smoothing)
    check_targets(logits, target, ignore_index)
    w = weight.detach().contiguous() if weight is not None else None
    loss_rows, lse = cross_entropy_fwd(_quack_rows(logits), _quack_target(target), weight=w,
                                       ignore_index=ignore_index, return_lse=True)
    keep = wt = None
    if reduction == "mean":
        keep, _t, wt = _kept_weights(target, w, ignore_index)
    return _reduce(loss_rows, keep, wt, reduction, logits.dtype), lse.to(lse_dtype(logits.dtype))


peer_quack_cross_entropy.peer_missing = QUACK


@peer_variant(
    "peer_quack_cross_entropy_backward",
    op="cross_entropy_backward",
    description="QuACK's CuTe-DSL cross-entropy backward (quack.cross_entropy."
    "cross_entropy_bwd: dlogits from logits, target, lse and a per-row dloss)",
    check=functools.partial(_quack_check, need="cross_entropy_bwd"),
)
def peer_quack_cross_entropy_backward(logits, target, weight, lse, grad, ignore_index=-100,
                                      reduction="mean", label_smoothing=0.0):
    from quack.cross_entropy import cross_entropy_bwd

    check_kwargs(ignore_index, reduction, label_smoothing)
    if logits.numel() == 0:
        return torch.zeros_like(logits)
    check_targets(logits, target, ignore_index)
    m = logits.shape[0]
    w = weight.detach().contiguous() if weight is not None else None
    g = grad.detach().float()
    if reduction == "mean":
        keep, _t, wt = _kept_weights(target, w, ignore_index)
        g = g / _denominator(keep, wt)
    dloss = g if reduction == "none" else g.expand(m)
    return cross_entropy_bwd(_quack_rows(logits), _quack_target(target), dloss,
                             lse.detach().float().contiguous(), weight=w,
                             ignore_index=ignore_index)


peer_quack_cross_entropy_backward.peer_missing = QUACK


# -- Liger-Kernel -------------------------------------------------------------------------------
def _liger_check(*inputs, **kw) -> str | None:
    if (why := LIGER()) is not None:
        return why
    kernel = importlib.import_module("liger_kernel.ops.cross_entropy").liger_cross_entropy_kernel
    names = getattr(kernel, "arg_names", None)
    if names is not None and tuple(names) != LIGER_KERNEL_ARGS:
        return "liger_cross_entropy_kernel's arguments differ from 0.8.5's"
    return None


@functools.lru_cache(maxsize=None)
def _liger_num_warps(device_index: int, element_size: int) -> int:
    """``cross_entropy_forward``'s choice: 32 warps; 8 for 2-byte dtypes on Blackwell; 16 on
    ROCm."""
    from liger_kernel.ops.utils import is_hip
    from liger_kernel.utils import infer_device_arch

    if is_hip():
        return 16
    blackwell = infer_device_arch(device_index).startswith("blackwell")
    return 8 if element_size == 2 and blackwell else 32


@peer_variant(
    "peer_liger_cross_entropy",
    description="Liger-Kernel's Triton cross entropy (liger_cross_entropy_kernel, no gradient, "
    "ignored rows read not zeroed), lse from its fp32 per-row loss",
    check=_liger_check,
)
def peer_liger_cross_entropy(logits, target, weight=None, ignore_index=-100, reduction="mean",
                             label_smoothing=0.0):
    import triton
    from liger_kernel.ops import cross_entropy as lce

    check_kwargs(ignore_index, reduction, label_smoothing)
    if logits.numel() == 0:
        return _empty_case(logits, target, weight, ignore_index, reduction, label_smoothing)
    x = logits.detach()
    x = x if x.stride(1) == 1 else x.contiguous()
    m, n = x.shape
    target = target.long()
    keep = target != ignore_index
    # class 0 for ignored rows, and out-of-range targets clamped: the kernel reads no further
    # than the row (an out-of-range target raises below, after the one sync)
    t = torch.where(keep, target, 0).clamp_(0, n - 1)
    w = weight.detach().contiguous() if weight is not None else None
    eps = float(label_smoothing)
    loss = torch.empty(m, dtype=torch.float32, device=x.device)
    lce.liger_cross_entropy_kernel[(m,)](
        X_ptr=x, X_stride=x.stride(0), Y_ptr=t, Y_stride=1, weight_ptr=w, loss_ptr=loss,
        z_loss_ptr=None, loss_stride=1, token_accuracy_ptr=None, token_accuracy_stride=0,
        predicted_tokens_ptr=None, predicted_tokens_stride=0, n_cols=n, n_non_ignore=1,
        sum_non_ignore_weight=1.0,
        weight_sum=float(w.float().sum()) if w is not None and eps else 0.0,
        ignore_index=-1,  # no row: ignored rows run as class 0, masked below
        lse_square_scale=0.0, label_smoothing=eps, reduction="none", softcap=None,
        RETURN_Z_LOSS=False, RETURN_TOKEN_ACCURACY=False, RETURN_PREDICTED_TOKENS=False,
        BLOCK_SIZE=min(lce.MAX_FUSED_SIZE, triton.next_power_of_2(n)),
        HAS_WEIGHT=w is not None, HAS_SOFTCAPPING=False, HAS_GRADIENTS=False,
        num_warps=_liger_num_warps(x.device.index or 0, x.element_size()),
    )
    wt = w.float()[t] if w is not None else None
    if eps:
        lse = torch.logsumexp(x.float(), 1)
    else:
        lse = (loss / wt if wt is not None else loss) + x.gather(1, t[:, None])[:, 0].float()
    if not _capturing(x):  # the one host sync: the target check and non-finite lse rows
        bad_target = keep & (t != target)
        bad_lse = ~torch.isfinite(lse)
        if bool((bad_target.any() | bad_lse.any()).item()):
            check_targets(logits, target, ignore_index)  # raises for an out-of-range target
            rows = bad_lse.nonzero()[:, 0]
            lse[rows] = torch.logsumexp(x[rows].float(), 1)
    loss = torch.where(keep, loss, 0.0)
    return _reduce(loss, keep, wt, reduction, logits.dtype), lse.to(lse_dtype(logits.dtype))


peer_liger_cross_entropy.peer_missing = LIGER
