"""The loss across GPUs: cross-entropy over logits (or a classifier) sharded by vocabulary
columns across a ``torch.distributed`` process group.

    import torch.distributed as dist, kernel_lab.distributed as kld
    start, stop = kld.vocab_shard(V, dist.get_rank(), dist.get_world_size())
    loss = kld.vocab_parallel_cross_entropy(logits[:, start:stop], target, vocab_start=start)

Files: ``shard_math.py`` (the per-rank math: the kernel seams), ``comm.py`` (the group, the
layout, the forward's one gather and its merge), ``cross_entropy.py`` (the loss over logit
shards), ``linear.py`` (the loss over a classifier's weight shard, in chunks of tokens).
"""

from kernel_lab.distributed.comm import vocab_layout, vocab_shard
from kernel_lab.distributed.cross_entropy import vocab_parallel_cross_entropy
from kernel_lab.distributed.linear import vocab_parallel_linear_cross_entropy

__all__ = [
    "vocab_layout",
    "vocab_parallel_cross_entropy",
    "vocab_parallel_linear_cross_entropy",
    "vocab_shard",
]
