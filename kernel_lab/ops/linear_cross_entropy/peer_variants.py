"""The LM-head loss from other projects (backend ``peer``), registered like the cross-entropy
peers (``kernel_lab/ops/cross_entropy/peer_variants.py``): always registered, imported lazily,
a missing package is a ``supports()`` reason and a benchmark skip.

The op returns (loss, lse); neither peer returns lse. Their forward variants take the loss from
the peer and the lse from the lab's chunked forward (a second pass over the logits), so a
forward timing of a peer through the registry includes that pass. The training-step race
(``bench/lm_head.py``) calls each peer's own autograd function instead, nothing added.

Liger-Kernel (liger-kernel 0.8.5, ``LigerFusedLinearCrossEntropyFunction``): chunks of tokens,
each chunk's logits materialized and turned into gradients in the forward (written over the
chunk); any V; bias, ignore_index, label smoothing, softcap, every reduction; fp32 / fp16 / bf16.

Cut Cross-Entropy (cut-cross-entropy 25.1.1, ``cut_cross_entropy.linear_cross_entropy``,
impl "cce"): Triton, logits never in memory; no bias and no label smoothing in this version;
its backward skips softmax entries below ``filter_eps`` ("high" by default: gradient filtering
on, as users run it); every reduction; CUDA only.
"""

from __future__ import annotations

import functools

import torch

from kernel_lab.core.registry import registrar
from kernel_lab.core.rows import named_as
from kernel_lab.ops.linear_cross_entropy.op import check_inputs
from kernel_lab.ops.linear_cross_entropy.torch_variants import checked_forward, chunked_forward
from kernel_lab.ops.softmax.peer_variants import package_missing

SOURCE = "kernel_lab/ops/linear_cross_entropy/peer_variants.py"
PEER_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
peer_variant = registrar(op="linear_cross_entropy", backend="peer", dtypes=PEER_DTYPES,
                         source=SOURCE, needs_cuda=True)

LIGER = functools.partial(package_missing, "liger_kernel.ops.fused_linear_cross_entropy",
                          "liger-kernel")
CCE = functools.partial(package_missing, "cut_cross_entropy", "cut-cross-entropy")


def _lse(hidden, weight, target, bias, ignore_index, softcap):
    """The lse the op returns, from the lab's chunked forward (the peers return none)."""
    return chunked_forward(hidden, weight, target, bias, ignore_index, "none", 0.0, softcap)[1]


def peer_forward(loss):
    """A peer's forward variant: its ``loss(hidden, weight, target, bias, ignore_index,
    reduction, label_smoothing, softcap)`` without autograd, the lse by the lab's chunked
    forward (the training-step race, ``bench/lm_head.py``, calls ``loss`` itself)."""

    def forward(hidden, weight, t, bias, ignore_index, reduction, label_smoothing, softcap):
        with torch.no_grad():
            out = loss(hidden.detach(), weight.detach(), t, bias, ignore_index, reduction,
                       label_smoothing, softcap)
        return out.to(hidden.dtype), _lse(hidden, weight, t, bias, ignore_index, softcap)

    return checked_forward(named_as(forward, loss))  # where the peer's call is


# -- Liger-Kernel -------------------------------------------------------------------------------
def liger_loss(hidden, weight, target, bias=None, ignore_index=-100, reduction="mean",
               label_smoothing=0.0, softcap=0.0) -> torch.Tensor:
    """Liger's differentiable loss (its own autograd Function, gradients formed in its
    forward)."""
    from liger_kernel.ops.fused_linear_cross_entropy import LigerFusedLinearCrossEntropyFunction

    out = LigerFusedLinearCrossEntropyFunction.apply(
        hidden, weight, target, bias, None, ignore_index, 0.0, float(label_smoothing),
        reduction, softcap or None, False)
    return out[0] if isinstance(out, tuple) else out


def _liger_check(*inputs, **kw) -> str | None:
    return LIGER() or check_inputs(*inputs, **kw)


peer_liger_linear_cross_entropy = peer_variant(
    "peer_liger_linear_cross_entropy",
    check=_liger_check,
    description="Liger-Kernel's fused linear cross entropy (chunked matmul, gradients in "
          "the forward); lse by the lab's chunked forward",
)(peer_forward(liger_loss))
peer_liger_linear_cross_entropy.peer_missing = LIGER


# -- Cut Cross-Entropy --------------------------------------------------------------------------
def cce_loss(hidden, weight, target, bias=None, ignore_index=-100, reduction="mean",
             label_smoothing=0.0, softcap=0.0) -> torch.Tensor:
    """CCE's differentiable loss with its defaults (gradient filtering on)."""
    from cut_cross_entropy import linear_cross_entropy

    return linear_cross_entropy(hidden, weight, target, ignore_index=ignore_index,
                                softcap=softcap or None, reduction=reduction)


def _cce_check(*inputs, label_smoothing=0.0, **kw) -> str | None:
    if (why := CCE()) is not None:
        return why
    if len(inputs) > 3 and inputs[3] is not None:
        return "no bias in cut-cross-entropy 25.1.1"
    if label_smoothing:
        return "no label_smoothing in cut-cross-entropy"
    return check_inputs(*inputs, **kw)


peer_cce_linear_cross_entropy = peer_variant(
    "peer_cce_linear_cross_entropy",
    check=_cce_check,  # no bias, no label smoothing: refused before the loss is called
    description="Apple's Cut Cross-Entropy (Triton, online lse over vocabulary tiles, "
          "gradient filtering); lse by the lab's chunked forward",
)(peer_forward(cce_loss))
peer_cce_linear_cross_entropy.peer_missing = CCE
