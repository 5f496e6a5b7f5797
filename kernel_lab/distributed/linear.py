"""``vocab_parallel_linear_cross_entropy``: the loss of a classifier whose rows (the vocabulary)
are split across a process group, ``cross_entropy(hidden @ weight.T + bias, target)`` with each
rank holding (width, d) of the (V, d) weight, as a column-parallel LM head does.

Built on plain ``torch.matmul`` over chunks of tokens, so that no rank ever holds more than
(chunk, width) logits: the forward makes each chunk's logits, reduces them to the shard's
statistics (:func:`shard_math.shard_stats`) and drops them; after one all_gather of O(tokens)
values (the same as :func:`vocab_parallel_cross_entropy`'s) every rank has the global lse; the
backward makes each chunk's logits again, turns them into dlogits (:func:`shard_math.shard_grad`)
and multiplies them out into dhidden and dweight. Four matmuls a step (the logits twice), one
more than the minimum: the forward cannot write dlogits before the gather gives the lse, and
keeping the logits until then would cost O(tokens x width). The single-GPU fused op
(``linear_cross_entropy``) is the place for a kernel that does better per rank.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch.autograd.function import once_differentiable

from kernel_lab.base.errors import UnsupportedInputError
from kernel_lab.base.inputs import acc_dtype
from kernel_lab.distributed.comm import group_info, vocab_layout
from kernel_lab.distributed.cross_entropy import (
    check_merged,
    check_target,
    check_vocab_start,
    check_weight,
    loss_from_stats,
    merge_shards,
    shard_weight,
)
from kernel_lab.distributed.shard_math import row_chunks, shard_grad, shard_stats
from kernel_lab.ops.cross_entropy.op import check_kwargs

NAME = "vocab_parallel_linear_cross_entropy"


def chunk_logits(h: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                 softcap: float | None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(z, tanh) of one chunk: z = h @ weight.T + bias in the input dtype, or with ``softcap``
    z = cap * tanh(that / cap) in the accumulator dtype (tanh kept for the backward)."""
    u = torch.addmm(bias, h, weight.t()) if bias is not None else h @ weight.t()
    if softcap is None:
        return u, None
    th = torch.tanh(u.to(acc_dtype(u.dtype)) / softcap)
    return softcap * th, th


class VocabParallelLinearCrossEntropy(torch.autograd.Function):
    """Forward: chunks of logits -> shard statistics, one all_gather, the merge. Backward: the
    chunks again -> dlogits -> dhidden (all-reduced when asked), dweight, dbias."""

    @staticmethod
    def forward(ctx, hidden, weight, bias, target, class_weight, group, vocab_start,
                ignore_index, reduction, eps, softcap, chunk_size, reduce_hidden_grad):
        _, world = group_info(group)
        rows, width = hidden.shape[0], weight.shape[0]
        if vocab_start is None:
            vocab_start, _ = vocab_layout(width, group, hidden.device)
        acc = acc_dtype(hidden.dtype)
        w = shard_weight(class_weight, vocab_start, width, NAME)
        w = w.to(acc) if w is not None else None
        t_local = target.long() - vocab_start
        stats = [torch.empty(rows, dtype=acc, device=hidden.device) for _ in range(3)]
        stats.append(torch.empty(rows, dtype=acc, device=hidden.device) if eps else None)
        for a, b in row_chunks(rows, width, chunk_size):
            z, _ = chunk_logits(hidden[a:b], weight, bias, softcap)
            for whole, part in zip(stats, shard_stats(z, t_local[a:b], w, bool(eps))):
                if part is not None:
                    whole[a:b] = part
        m = merge_shards(vocab_start, width, w, t_local, stats, group, world)
        check_merged(m, class_weight, width, target, ignore_index, NAME)
        loss, coefs = loss_from_stats(m, target, ignore_index, reduction, eps, hidden.dtype, acc)
        ctx.save_for_backward(hidden, weight, bias, t_local, w, m.lse)
        ctx.coefs, ctx.group, ctx.world = coefs, group, world
        ctx.softcap, ctx.chunk_size, ctx.reduce = softcap, chunk_size, reduce_hidden_grad
        return loss

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        hidden, weight, bias, t_local, w, lse = ctx.saved_tensors
        need_h, need_w, need_b = ctx.needs_input_grad[:3]
        acc = acc_dtype(hidden.dtype)
        coef_p, coef_t, coef_w = (None if c is None else c.expand(lse.shape)
                                  for c in ctx.coefs.scaled(grad))
        dh = torch.empty_like(hidden) if need_h else None
        dw = torch.zeros(weight.shape, dtype=acc, device=weight.device) if need_w else None
        db = torch.zeros(weight.shape[0], dtype=acc, device=weight.device) if need_b else None
        for a, b in row_chunks(hidden.shape[0], weight.shape[0], ctx.chunk_size):
            h = hidden[a:b]
            z, th = chunk_logits(h, weight, bias, ctx.softcap)
            dz = shard_grad(z, t_local[a:b], w, lse[a:b], coef_p[a:b], coef_t[a:b],
                            None if coef_w is None else coef_w[a:b])
            du = (dz * (1 - th * th)).to(hidden.dtype) if th is not None else dz
            if dh is not None:
                dh[a:b] = du @ weight
            if dw is not None:
                dw += (du.t() @ h).to(acc)
            if db is not None:
                db += du.sum(0, dtype=acc)
        if dh is not None and ctx.reduce and ctx.world > 1:
            dist.all_reduce(dh, group=ctx.group)  # the sum over the shards of dlogits @ weight
        return (dh, dw.to(weight.dtype) if dw is not None else None,
                db.to(bias.dtype) if db is not None else None) + (None,) * 10


def vocab_parallel_linear_cross_entropy(
        hidden: torch.Tensor, weight_shard: torch.Tensor, target: torch.Tensor,
        group: dist.ProcessGroup | None = None, bias_shard: torch.Tensor | None = None,
        class_weight: torch.Tensor | None = None, ignore_index: int = -100,
        reduction: str = "mean", label_smoothing: float = 0.0, softcap: float | None = None,
        vocab_start: int | None = None, chunk_size: int | None = None,
        reduce_hidden_grad: bool = True) -> torch.Tensor:
    """``F.cross_entropy(hidden @ W.T + b, target, class_weight, ...)`` where the classifier
    W (V, d) and bias b (V,) are split by rows across ``group``: this rank holds
    ``weight_shard`` (width, d) and ``bias_shard`` (width,), the vocabulary columns
    [vocab_start, vocab_start + width). ``hidden`` (tokens, d) and ``target`` (tokens,) are the
    same on every rank. ``softcap``: Gemma-2's cap * tanh(z / cap) on the logits.

    Plain torch matmuls over chunks of ``chunk_size`` tokens (default: 2^26 / width), so memory
    is O(chunk x width) above the inputs and their gradients; the logits are made twice (forward
    and backward) and never kept. Communication as :func:`vocab_parallel_cross_entropy`'s: the
    forward gathers O(tokens) values; the backward's dlogits stay local. Each rank's dhidden is
    its shard's part of the sum over the vocabulary; ``reduce_hidden_grad=True`` (default)
    all-reduces it over the group in the backward (one collective of tokens x d), so that every
    rank's ``hidden.grad`` is the whole gradient. Pass False where the layer before already sums
    it (Megatron's ``copy_to_tensor_model_parallel_region`` does, in its backward).

    ``class_weight`` (full (V,) or this shard's slice), ``ignore_index``, ``reduction``,
    ``label_smoothing``, ``vocab_start`` and the checks are those of
    :func:`vocab_parallel_cross_entropy`. Gradients flow to hidden, weight_shard and bias_shard.
    """
    check_kwargs(ignore_index, reduction, label_smoothing)
    check_vocab_start(vocab_start, NAME)
    if not isinstance(hidden, torch.Tensor) or hidden.dim() != 2 or \
            not hidden.dtype.is_floating_point:
        what = (f"{hidden.dtype} tensor of shape {tuple(hidden.shape)}"
                if isinstance(hidden, torch.Tensor) else type(hidden).__name__)
        raise UnsupportedInputError(f"{NAME}: hidden must be a floating (tokens, d) tensor, "
                                    f"got a {what}")
    d = hidden.shape[1]
    if not isinstance(weight_shard, torch.Tensor) or weight_shard.dim() != 2 or \
            weight_shard.shape[1] != d or weight_shard.dtype != hidden.dtype or \
            weight_shard.device != hidden.device:
        what = (f"{weight_shard.dtype} tensor of shape {tuple(weight_shard.shape)} on "
                f"{weight_shard.device}" if isinstance(weight_shard, torch.Tensor)
                else type(weight_shard).__name__)
        raise UnsupportedInputError(f"{NAME}: weight_shard must be a {hidden.dtype} (width, {d}) "
                                    f"tensor on {hidden.device} like hidden, got a {what}")
    width = weight_shard.shape[0]
    if bias_shard is not None and (not isinstance(bias_shard, torch.Tensor)
                                   or tuple(bias_shard.shape) != (width,)
                                   or bias_shard.dtype != hidden.dtype
                                   or bias_shard.device != hidden.device):
        raise UnsupportedInputError(f"{NAME}: bias_shard must be a {hidden.dtype} ({width},) "
                                    f"tensor on {hidden.device}")
    if softcap is not None and not softcap > 0:
        raise UnsupportedInputError(f"{NAME}: softcap must be None or > 0, got {softcap!r}")
    if chunk_size is not None and (not isinstance(chunk_size, int) or chunk_size < 1):
        raise UnsupportedInputError(f"{NAME}: chunk_size must be None or an int >= 1, "
                                    f"got {chunk_size!r}")
    check_target(target, hidden.shape[0], hidden.device, NAME)
    check_weight(class_weight, width, hidden.device, NAME)
    if vocab_start is not None:
        shard_weight(class_weight, vocab_start, width, NAME)
    return VocabParallelLinearCrossEntropy.apply(
        hidden, weight_shard, bias_shard, target, class_weight, group, vocab_start,
        ignore_index, reduction, float(label_smoothing),
        None if softcap is None else float(softcap), chunk_size, reduce_hidden_grad)
