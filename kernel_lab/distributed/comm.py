"""What crosses ranks in the vocabulary-parallel loss: the group, the vocabulary layout, and the
forward's one gather of O(rows) statistics with their merge. The backward sends nothing.

Every collective is ``torch.distributed``'s (``all_gather``, looked up on the module at call time),
on any backend (NCCL, gloo over CPU or CUDA tensors) and any group.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist

from kernel_lab.base.errors import UnsupportedInputError
from kernel_lab.distributed.shard_math import finite_shift

# The gathered header of each rank: its vocab_start, its width, the sum of its class weights.
HEADER = 3


def group_info(group: dist.ProcessGroup | None) -> tuple[int, int]:
    """(rank in ``group``, group size); raises if there is no process group or this process is
    not in ``group``."""
    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError("torch.distributed is not initialized: call "
                           "torch.distributed.init_process_group() first")
    rank = dist.get_rank(group)
    if rank < 0:
        raise ValueError("this process is not a member of the given process group")
    return rank, dist.get_world_size(group)


def vocab_shard(vocab_size: int, rank: int, world: int) -> tuple[int, int]:
    """[start, stop) of ``rank``'s columns when ``vocab_size`` is split over ``world`` ranks in
    order, the first ``vocab_size % world`` ranks holding one column more."""
    base, extra = divmod(vocab_size, world)
    start = rank * base + min(rank, extra)
    return start, start + base + (rank < extra)


def all_gather_rows(send: torch.Tensor, group, world: int) -> torch.Tensor:
    """(world, len(send)): every rank's 1-D ``send``, in group rank order (one collective)."""
    out = torch.empty((world, send.numel()), dtype=send.dtype, device=send.device)
    dist.all_gather(list(out.unbind(0)), send, group=group)
    return out


def vocab_layout(width: int, group: dist.ProcessGroup | None = None,
                 device: torch.device | str = "cpu") -> tuple[int, int]:
    """(vocab_start, vocab_size) of this rank's shard of ``width`` columns, the shards laid out
    in group rank order: one all_gather of the widths and one host sync. Call it once where the
    layout is fixed and pass ``vocab_start=`` to the losses, which then skip it. ``device``: where
    the collective's tensors live (a CUDA device for NCCL)."""
    rank, world = group_info(group)
    widths = all_gather_rows(torch.tensor([width], dtype=torch.int64, device=device), group,
                             world)[:, 0].tolist()
    return sum(widths[:rank]), sum(widths)


@dataclass
class Merged:
    """The forward's per-row statistics over the whole vocabulary (float64, every rank alike)."""

    lse: torch.Tensor  # log(sum_j exp(x_j))
    xt: torch.Tensor  # the target's logit (0 where no shard owns it)
    wt: torch.Tensor | None  # the target's class weight (with class weights)
    smooth: torch.Tensor | None  # sum_j w_j * (lse - x_j) (with label smoothing)
    vocab_size: torch.Tensor  # 0-d: V, the sum of the widths
    weight_sum: torch.Tensor  # 0-d: the sum of every class weight (V without weights)
    header: torch.Tensor  # (world, HEADER): each rank's start, width, weight sum


def gather_stats(start: int, width: int, weight_sum: torch.Tensor, m: torch.Tensor,
                 s: torch.Tensor, xt: torch.Tensor, wt: torch.Tensor | None,
                 smooth: torch.Tensor | None, group, world: int) -> Merged:
    """The forward's only O(rows) collective: every rank's header and per-row (m, s, xt, [wt],
    [smooth]) of :func:`shard_math.shard_stats` in one float64 all_gather, merged on every rank:
    lse = logsumexp over the shards of c_r + log(s_r); sums of xt and wt, each owned by one rank;
    the smoothing sums moved from each shard's shift c_r to the global lse. ``wt`` / ``smooth``
    must be given on all ranks or on none."""
    f64 = torch.float64
    rows = [v.to(f64) for v in (m, s, xt, wt, smooth) if v is not None]
    ws = weight_sum.to(f64).reshape(1)  # new_full, not torch.tensor: no host-to-device copy
    head = torch.cat([ws.new_full((1,), start), ws.new_full((1,), width), ws])
    got = all_gather_rows(torch.cat([head, *rows]), group, world)
    header, stats = got[:, :HEADER], got[:, HEADER:].view(world, len(rows), -1)
    shift = finite_shift(stats[:, 0])
    lse = torch.logsumexp(shift + torch.log(stats[:, 1]), 0)
    k = 3
    wt_all = smooth_all = None
    if wt is not None:
        wt_all, k = stats[:, k].sum(0), k + 1
    if smooth is not None:  # sum over shards of sum_j w_j (c_r - x_j) + (lse - c_r) W_r
        smooth_all = (stats[:, k] + (lse[None] - shift) * header[:, 2:3]).sum(0)
    return Merged(lse, stats[:, 2].sum(0), wt_all, smooth_all, header[:, 1].sum(),
                  header[:, 2].sum(), header)


def check_layout(spans: list) -> int:
    """Raise unless the gathered (start, width) pairs (host numbers) tile [0, V), the same
    answer on every rank; returns V."""
    spans = sorted((int(s), int(w)) for s, w in spans)
    end = 0
    for s, w in spans:
        if s != end:
            raise UnsupportedInputError(
                f"the ranks' vocabulary shards (start, width) = {spans} do not tile [0, V): "
                f"expected a shard starting at {end}, found one at {s}")
        end = s + w
    return end
