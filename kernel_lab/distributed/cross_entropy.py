"""``vocab_parallel_cross_entropy``: F.cross_entropy over logits whose vocabulary columns are
split across the ranks of a process group (Megatron-LM's ``vocab_parallel_cross_entropy``,
DTensor's ``loss_parallel``), with the lab's cross-entropy semantics.

Per row, with the global lse, target t, class weights w (1 without), eps = label_smoothing and
V classes in all (the op module ``kernel_lab.ops.cross_entropy.op`` states the same formula):

    loss_i = (1 - eps) * w_t * (lse - x_t) + eps / V * sum_j w_j * (lse - x_j)

Forward: each rank reduces its shard to three numbers a row (:func:`shard_math.shard_stats`:
the shard's lse, the target's logit where it owns the target, the smoothing sum), one all_gather
of those O(rows) values plus a 3-number header per rank, and every rank merges them into the same
loss. Backward: none of it crosses ranks; each rank writes its own dlogits shard from the saved
global lse (:func:`shard_math.shard_grad`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch.autograd.function import once_differentiable

from kernel_lab.base.errors import UnsupportedInputError
from kernel_lab.core.registry import inputs_trusted
from kernel_lab.distributed.comm import (
    HEADER,
    Merged,
    check_layout,
    gather_stats,
    group_info,
    vocab_layout,
)
from kernel_lab.distributed.shard_math import acc_dtype, shard_grad, shard_stats
from kernel_lab.ops.cross_entropy.op import check_kwargs


def check_target(target, rows: int, device: torch.device, name: str) -> None:
    """One integer class a row, on the logits' device."""
    if (not isinstance(target, torch.Tensor) or target.dim() != 1 or target.shape[0] != rows
            or target.dtype.is_floating_point or target.dtype.is_complex
            or target.dtype == torch.bool):
        what = (f"{target.dtype} tensor of shape {tuple(target.shape)}"
                if isinstance(target, torch.Tensor) else type(target).__name__)
        raise UnsupportedInputError(f"{name}: target must be one integer class per row "
                                    f"({rows},), got a {what}")
    if target.device != device:
        raise UnsupportedInputError(f"{name}: target is on {target.device}, the logits on "
                                    f"{device}")


def check_weight(weight, width: int, device: torch.device, name: str) -> None:
    """Class weights are None or a 1-D floating tensor on the logits' device."""
    if weight is None:
        return
    if not isinstance(weight, torch.Tensor) or weight.dim() != 1 or \
            not weight.dtype.is_floating_point or weight.device != device:
        what = (f"{weight.dtype} tensor of shape {tuple(weight.shape)} on {weight.device}"
                if isinstance(weight, torch.Tensor) else type(weight).__name__)
        raise UnsupportedInputError(f"{name}: weight must be a 1-D floating tensor on {device} "
                                    f"(the full (V,) class weights or this shard's ({width},)), "
                                    f"got a {what}")


def shard_weight(weight: torch.Tensor | None, start: int, width: int,
                 name: str) -> torch.Tensor | None:
    """This shard's slice of the class weights: ``weight`` is either the full (V,) vector (the
    same on every rank) or already this rank's (width,) slice, told apart by its length (when
    V = width the two are the same vector). The full vector's length is checked against V once
    V is known (:func:`check_full_weight`)."""
    if weight is None or weight.numel() == width:
        return weight
    if weight.numel() < start + width:
        raise UnsupportedInputError(
            f"{name}: weight has {weight.numel()} elements: neither this shard's {width} nor the "
            f"full vocabulary's (this shard covers columns [{start}, {start + width}))")
    return weight[start:start + width]


def check_full_weight(weight, width: int, vocab_size: int, name: str) -> None:
    if weight is not None and weight.numel() not in (width, vocab_size):
        raise UnsupportedInputError(f"{name}: weight has {weight.numel()} elements: neither this "
                                    f"shard's {width} nor the vocabulary's {vocab_size}")


@dataclass
class Coefficients:
    """Per row, what the backward needs besides the logits and the lse (accumulator dtype):
    dlogits = s * (a * p - b * onehot(t) - c * w), s = upstream gradient * r."""

    r: torch.Tensor  # 1 / the mean's denominator (1 for sum / none); 0 where ignored
    a: torch.Tensor  # (1 - eps) * w_t + eps / V * sum(w)
    b: torch.Tensor  # (1 - eps) * w_t
    c: torch.Tensor | None  # eps / V (0-d), None without smoothing

    def scaled(self, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor,
                                                  torch.Tensor | None]:
        """(coef_p, coef_t, coef_w) of :func:`shard_math.shard_grad` for upstream ``grad``."""
        s = grad.to(self.r.dtype) * self.r
        return s * self.a, s * self.b, s * self.c if self.c is not None else None


def loss_from_stats(m: Merged, target: torch.Tensor, ignore_index: int, reduction: str,
                    eps: float, out_dtype: torch.dtype,
                    acc: torch.dtype) -> tuple[torch.Tensor, Coefficients]:
    """The reduced loss (``out_dtype``) and the backward's coefficients from the merged
    statistics; the same arithmetic on every rank, so every rank returns the same loss."""
    keep = target != ignore_index
    bad = keep & ((target < 0) | (target >= m.vocab_size))  # only inside trusted_inputs()
    wt = m.wt if m.wt is not None else torch.ones_like(m.lse)
    loss = (1 - eps) * wt * (m.lse - m.xt)
    c = None
    if eps:
        c = eps / m.vocab_size.clamp_min(1)
        loss = loss + c * m.smooth
    loss = torch.where(bad, float("nan"), torch.where(keep, loss, 0.0))
    r = keep.to(torch.float64)
    if reduction == "sum":
        loss = loss.sum()
    elif reduction == "mean":
        den = torch.where(keep, wt, 0.0).sum()
        loss = loss.sum() / den
        r = torch.where(keep, 1 / den, 0.0)
    a = (1 - eps) * wt + (c * m.weight_sum if c is not None else 0.0)
    coefs = Coefficients(r.to(acc), a.to(acc), ((1 - eps) * wt).to(acc),
                         c.to(acc) if c is not None else None)
    return loss.to(out_dtype), coefs


def merge_shards(start: int, width: int, w: torch.Tensor | None, t_local: torch.Tensor,
                 stats: tuple, group, world: int) -> Merged:
    """Add the target's class weight (from this shard's slice ``w``, where it owns the target)
    and the shard's weight sum to its statistics (``shard_stats``'s), and gather and merge
    them."""
    m, s, xt, smooth = stats
    wt = None
    if w is not None:
        owned = (t_local >= 0) & (t_local < width)
        wt = torch.where(owned, w[torch.where(owned, t_local, 0)], 0.0) if width else \
            torch.zeros_like(xt)
    wsum = w.sum() if w is not None else xt.new_full((), width, dtype=torch.float64)
    return gather_stats(start, width, wsum, m, s, xt, wt, smooth, group, world)


def check_merged(m: Merged, weight, width: int, target: torch.Tensor, ignore_index: int,
                 name: str) -> None:
    """The checks that need V: the layout, the full weight's length, and a class outside [0, V)
    that is not ignore_index. One host sync, every rank alike (the target is the same on every
    rank, so every rank raises); none inside ``registry.trusted_inputs()``, where such a row's
    loss is NaN instead."""
    if inputs_trusted():
        return
    f64 = torch.float64
    bad = (target != ignore_index) & ((target < 0) | (target >= m.vocab_size))
    first = torch.argmax(bad.to(torch.uint8)) if bad.numel() else None
    tail = [bad.any(), first, target[first]] if first is not None else []
    host = torch.cat([m.header.flatten(), *(v.to(f64).reshape(1) for v in tail)]).tolist()
    world = m.header.shape[0]
    vocab_size = check_layout([host[HEADER * r:HEADER * r + 2] for r in range(world)])
    check_full_weight(weight, width, vocab_size, name)
    if tail and host[-3]:
        raise UnsupportedInputError(f"{name}: target[{int(host[-2])}] = {int(host[-1])} is out "
                                    f"of range for {vocab_size} classes (ignore_index = "
                                    f"{ignore_index})")


class VocabParallelCrossEntropy(torch.autograd.Function):
    """Forward: the shard statistics, one all_gather, the merge. Backward: local only."""

    @staticmethod
    def forward(ctx, logits, target, weight, group, vocab_start, ignore_index, reduction, eps):
        name = "vocab_parallel_cross_entropy"
        _, world = group_info(group)
        width = logits.shape[1]
        if vocab_start is None:
            vocab_start, _ = vocab_layout(width, group, logits.device)
        w = shard_weight(weight, vocab_start, width, name)
        acc = acc_dtype(logits.dtype)
        w = w.to(acc) if w is not None else None
        t_local = target.long() - vocab_start
        stats = shard_stats(logits, t_local, w, bool(eps))
        m = merge_shards(vocab_start, width, w, t_local, stats, group, world)
        check_merged(m, weight, width, target, ignore_index, name)
        loss, coefs = loss_from_stats(m, target, ignore_index, reduction, eps, logits.dtype, acc)
        ctx.save_for_backward(logits, t_local, w, m.lse)
        ctx.coefs = coefs
        return loss

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        logits, t_local, w, lse = ctx.saved_tensors
        coef_p, coef_t, coef_w = ctx.coefs.scaled(grad)
        dx = shard_grad(logits, t_local, w, lse, coef_p.expand(lse.shape),
                        coef_t.expand(lse.shape), None if coef_w is None else
                        coef_w.expand(lse.shape))
        return dx, None, None, None, None, None, None, None


def check_logits(logits, name: str) -> None:
    if not isinstance(logits, torch.Tensor) or logits.dim() not in (1, 2) or \
            not logits.dtype.is_floating_point:
        what = (f"{logits.dtype} tensor of shape {tuple(logits.shape)}"
                if isinstance(logits, torch.Tensor) else type(logits).__name__)
        raise UnsupportedInputError(f"{name}: logits_shard must be a floating tensor of shape "
                                    f"(rows, this rank's classes) or (classes,), got a {what}")


def check_vocab_start(vocab_start, name: str) -> None:
    if vocab_start is not None and (not isinstance(vocab_start, int) or vocab_start < 0):
        raise UnsupportedInputError(f"{name}: vocab_start must be None or an int >= 0, "
                                    f"got {vocab_start!r}")


def vocab_parallel_cross_entropy(logits_shard: torch.Tensor, target: torch.Tensor,
                                 group: dist.ProcessGroup | None = None,
                                 weight: torch.Tensor | None = None, ignore_index: int = -100,
                                 reduction: str = "mean", label_smoothing: float = 0.0,
                                 vocab_start: int | None = None) -> torch.Tensor:
    """``F.cross_entropy(logits, target, weight, ...)`` where ``logits`` (rows, V) is held as
    column shards across ``group`` (default: the world): this rank passes its contiguous slice
    ``logits_shard`` (rows, width) of columns [vocab_start, vocab_start + width). Widths may
    differ between ranks, 0 included. Differentiable with respect to ``logits_shard``: its
    gradient is this rank's slice of dlogits.

    * ``target`` (rows,): global class indices, the same on every rank; ``ignore_index``,
      ``reduction`` and ``label_smoothing`` as in F.cross_entropy (and all ranks pass the same).
    * ``weight``: class weights, either the full (V,) vector (the same on every rank) or this
      rank's (width,) slice; told apart by length. Treated as a constant (no gradient).
    * ``vocab_start``: this shard's first column. None: the shards lie in group rank order and
      one extra all_gather of the widths (and a host sync) finds it on every call;
      :func:`comm.vocab_layout` does that once, for the caller to pass here. Either every rank
      passes it or none does (the collectives must match).

    Every rank returns the same loss, in the logits' dtype. The forward sends O(rows) values
    (one float64 all_gather of (shard max, sum of exp, target logit, [target weight],
    [smoothing sum]) per row, plus 3 numbers per rank); nothing of O(rows x V) crosses ranks,
    and the backward sends nothing: the upstream gradient must be the same on every rank (as
    for a replicated loss). Memory per rank: the shard's dlogits plus fp32 temporaries of at
    most ``shard_math.ROW_CHUNK_ELEMENTS``; the per-rank math is plain torch (``shard_math``,
    where a kernel slots in).

    Checks: shapes, dtypes and devices raise on the rank that has them before any collective
    (the other ranks then wait in theirs until the group's timeout, as with any collective);
    a layout whose shards do not tile [0, V), a weight of the wrong length and a target outside
    [0, V) that is not ``ignore_index`` raise on every rank after the gather (one host sync;
    skipped inside ``kernel_lab.core.registry.trusted_inputs()``, where such a target's row is NaN).
    """
    name = "vocab_parallel_cross_entropy"
    check_kwargs(ignore_index, reduction, label_smoothing)
    check_logits(logits_shard, name)
    check_vocab_start(vocab_start, name)
    if logits_shard.dim() == 1:
        if not isinstance(target, torch.Tensor) or target.dim() != 0:
            raise UnsupportedInputError(f"{name}: 1-D logits_shard takes a 0-d target")
        loss = vocab_parallel_cross_entropy(logits_shard[None], target.reshape(1), group,
                                            weight, ignore_index, reduction, label_smoothing,
                                            vocab_start)
        return loss[0] if reduction == "none" else loss
    check_target(target, logits_shard.shape[0], logits_shard.device, name)
    check_weight(weight, logits_shard.shape[1], logits_shard.device, name)
    if vocab_start is not None:
        shard_weight(weight, vocab_start, logits_shard.shape[1], name)
    return VocabParallelCrossEntropy.apply(logits_shard, target, weight, group, vocab_start,
                                           ignore_index, reduction, float(label_smoothing))
