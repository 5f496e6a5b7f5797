"""Train a tiny attention classifier twice - with torch's softmax and with the lab's - and compare.

    python -m kernel_lab.examples.train_tiny_attention                 # auto variants
    python -m kernel_lab.examples.train_tiny_attention --variant fast_softmax \
        --backward-variant fused_softmax_backward --log-variant log_softmax  # the lab's CUDA
    python -m kernel_lab.examples.train_tiny_attention --variant triton_fused --compile
    python -m kernel_lab.examples.train_tiny_attention --loss cross_entropy \
        --ce-variant cuda_cross_entropy --ce-backward-variant cuda_cross_entropy_backward
    python -m kernel_lab.examples.train_tiny_attention --loss linear_cross_entropy

The task: each sequence is noise tokens plus one label token (0..7) somewhere; find it. The
model is one multi-head self-attention block (its attention weights: ``softmax``), mean pooling
and a linear head. With ``--loss nll`` (the default) the head's ``log_softmax`` feeds
``nll_loss``; with ``--loss cross_entropy`` the head returns logits and the loss is
``F.cross_entropy`` in the reference run, ``kernel_lab.cross_entropy`` in the lab's (no
log_softmax then); with ``--loss linear_cross_entropy`` the model returns the pooled hidden
state and the head + loss is ``F.cross_entropy(F.linear(h, W, b))`` in the reference run,
``kernel_lab.linear_cross_entropy(h, W, target, b)`` in the lab's. Both runs start from the
same weights and see the same batches; the only difference is who computes softmax and
log_softmax (or the loss), forward and backward. The losses must agree step by step within
``--tol`` (default 1e-3, absolute, on losses falling from 2.1 to ~0.05): fp32 kernels differ
from PyTorch's in the last bits, and a few dozen Adam steps carry that forward as ~1e-6.

The tensors are small (a few thousand elements), so ``variant="auto"`` runs PyTorch's own
kernels behind the custom ops, on a GPU too (each op's ``auto`` policy: launch-bound sizes,
where PyTorch's C++ launch wins); the comparison then checks the op plumbing, autograd and
compile. Name variants to train with the lab's kernels: on a CPU ``--variant torch_naive`` for
different arithmetic, or Triton variant names with ``TRITON_INTERPRET=1`` set (slow: keep
``--steps`` small).
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F

import kernel_lab

VOCAB, CLASSES = 24, 8  # tokens 0..7 are the labels, 8..23 noise


@dataclass
class Config:
    steps: int = 30
    batch: int = 16
    seq: int = 12
    dim: int = 32
    heads: int = 2
    lr: float = 1e-2
    seed: int = 0
    device: str = "cpu"
    dtype: torch.dtype = torch.float32
    # nll: log_softmax + nll_loss; cross_entropy: logits + cross_entropy; linear_cross_entropy:
    # the pooled hidden state + the head's weight and bias into one loss
    loss: str = "nll"


LOSSES = ("nll", "cross_entropy", "linear_cross_entropy")


def torch_linear_cross_entropy(h, weight, target, bias):
    """The reference head + loss: the logits, then F.cross_entropy."""
    return F.cross_entropy(F.linear(h, weight, bias), target)


class TinyAttention(torch.nn.Module):
    """Embedding -> one self-attention block (residual) -> mean pool -> linear -> log-probs
    (logits when ``log_softmax`` is None)."""

    def __init__(self, cfg: Config, softmax: Callable, log_softmax: Callable | None) -> None:
        super().__init__()
        self.heads, self.softmax, self.log_softmax = cfg.heads, softmax, log_softmax
        self.tok = torch.nn.Embedding(VOCAB, cfg.dim)
        self.pos = torch.nn.Parameter(0.1 * torch.randn(cfg.seq, cfg.dim))
        self.qkv = torch.nn.Linear(cfg.dim, 3 * cfg.dim)
        self.proj = torch.nn.Linear(cfg.dim, cfg.dim)
        self.head = torch.nn.Linear(cfg.dim, CLASSES)
        self.hidden_out = cfg.loss == "linear_cross_entropy"  # the loss applies the head

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        b, s = tokens.shape
        h = self.tok(tokens) + self.pos[:s]
        q, k, v = self.qkv(h).view(b, s, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
        att = self.softmax(scores, -1) @ v  # (b, heads, s, dim / heads)
        h = h + self.proj(att.transpose(1, 2).reshape(b, s, -1))
        if self.hidden_out:
            return h.mean(dim=1)
        logits = self.head(h.mean(dim=1))
        return logits if self.log_softmax is None else self.log_softmax(logits, -1)


def make_batch(cfg: Config, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Noise tokens with the label token at a random position."""
    tokens = torch.randint(CLASSES, VOCAB, (cfg.batch, cfg.seq), generator=gen)
    where = torch.randint(0, cfg.seq, (cfg.batch,), generator=gen)
    labels = torch.randint(0, CLASSES, (cfg.batch,), generator=gen)
    tokens[torch.arange(cfg.batch), where] = labels
    return tokens.to(cfg.device), labels.to(cfg.device)


def train(
    cfg: Config, softmax: Callable, log_softmax: Callable, compile: bool = False,
    cross_entropy: Callable = F.cross_entropy,
    linear_cross_entropy: Callable = torch_linear_cross_entropy,
) -> list[float]:
    """Loss per step. Same seed -> same initial weights and batches, whoever computes softmax.
    ``cfg.loss == "cross_entropy"``: the model returns logits, the loss is
    ``cross_entropy(logits, labels)`` and ``log_softmax`` is unused; ``"linear_cross_entropy"``:
    the model returns the pooled hidden state, the loss is ``linear_cross_entropy(h,
    head.weight, labels, head.bias)``."""
    if cfg.loss not in LOSSES:
        raise ValueError(f"loss must be one of {LOSSES}, not {cfg.loss!r}")
    ce = cfg.loss != "nll"
    torch.manual_seed(cfg.seed)
    model = TinyAttention(cfg, softmax, None if ce else log_softmax).to(cfg.device, cfg.dtype)
    step_model = torch.compile(model, fullgraph=True) if compile else model
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    gen = torch.Generator().manual_seed(cfg.seed + 1)
    losses = []
    for _ in range(cfg.steps):
        tokens, labels = make_batch(cfg, gen)
        out = step_model(tokens)
        if cfg.loss == "linear_cross_entropy":
            loss = linear_cross_entropy(out, model.head.weight, labels, model.head.bias)
        else:
            loss = cross_entropy(out, labels) if ce else F.nll_loss(out, labels)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def compare(
    cfg: Config,
    variant: str | None = None,
    log_variant: str | None = None,
    compile: bool = False,
    *,
    backward_variant: str | None = None,
    log_backward_variant: str | None = None,
    ce_variant: str | None = None,
    ce_backward_variant: str | None = None,
    lce_variant: str | None = None,
    lce_backward_variant: str | None = None,
) -> tuple[list[float], list[float]]:
    """(torch's losses, the lab's losses) for the same training run. None = ``"auto"``.
    ``ce_variant`` / ``ce_backward_variant``: the lab's cross_entropy when ``cfg.loss`` is
    ``"cross_entropy"`` (the reference run uses ``F.cross_entropy``)."""
    ref = train(cfg, torch.softmax, torch.log_softmax, compile)

    def lab_softmax(x, dim):
        return kernel_lab.softmax(x, dim, variant, backward_variant=backward_variant)

    def lab_log_softmax(x, dim):
        return kernel_lab.log_softmax(x, dim, log_variant, backward_variant=log_backward_variant)

    def lab_cross_entropy(logits, target):
        return kernel_lab.cross_entropy(logits, target, variant=ce_variant,
                                        backward_variant=ce_backward_variant)

    def lab_linear_cross_entropy(h, weight, target, bias):
        return kernel_lab.linear_cross_entropy(h, weight, target, bias, variant=lce_variant,
                                               backward_variant=lce_backward_variant)

    return ref, train(cfg, lab_softmax, lab_log_softmax, compile, lab_cross_entropy,
                      lab_linear_cross_entropy)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=Config.steps)
    p.add_argument("--variant", default=None, help="softmax variant (default: auto)")
    p.add_argument("--log-variant", default=None, help="log_softmax variant (default: auto)")
    p.add_argument("--backward-variant", default=None, help="softmax_backward variant")
    p.add_argument("--log-backward-variant", default=None, help="log_softmax_backward variant")
    p.add_argument("--loss", default="nll", choices=LOSSES,
                   help="nll: log_softmax + F.nll_loss (default); cross_entropy: the head's "
                        "logits into F.cross_entropy / kernel_lab.cross_entropy; "
                        "linear_cross_entropy: head + loss in kernel_lab.linear_cross_entropy")
    p.add_argument("--ce-variant", default=None,
                   help="cross_entropy variant with --loss cross_entropy (default: auto)")
    p.add_argument("--ce-backward-variant", default=None,
                   help="cross_entropy_backward variant with --loss cross_entropy")
    p.add_argument("--lce-variant", default=None,
                   help="linear_cross_entropy variant with --loss linear_cross_entropy")
    p.add_argument("--lce-backward-variant", default=None,
                   help="linear_cross_entropy_backward variant with --loss linear_cross_entropy")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--compile", action="store_true", help="torch.compile(fullgraph=True) both")
    p.add_argument("--tol", type=float, default=1e-3, help="max |loss difference| allowed")
    args = p.parse_args(argv)
    if args.device == "cpu":
        torch.set_num_threads(1)  # tiny tensors: more threads only add synchronisation (10x)
    cfg = Config(steps=args.steps, device=args.device, loss=args.loss)
    ref, lab = compare(cfg, args.variant, args.log_variant, args.compile,
                       backward_variant=args.backward_variant,
                       log_backward_variant=args.log_backward_variant,
                       ce_variant=args.ce_variant, ce_backward_variant=args.ce_backward_variant,
                       lce_variant=args.lce_variant,
                       lce_backward_variant=args.lce_backward_variant)
    print(f"{'step':>4}  {'torch':>10}  {'kernel_lab':>10}  {'|diff|':>9}")
    for i, (a, b) in enumerate(zip(ref, lab)):
        print(f"{i:>4}  {a:>10.6f}  {b:>10.6f}  {abs(a - b):>9.2e}")
    if args.variant is None:
        print("(auto: these tensors are small, so PyTorch's own kernels ran in both; name "
              "variants, e.g. --variant fast_softmax, to train with the lab's)")
    worst = max(abs(a - b) for a, b in zip(ref, lab))
    ok = worst <= args.tol
    print(f"max |diff| {worst:.2e} ({'<=' if ok else '>'} tol {args.tol:g}); "
          f"loss {ref[0]:.3f} -> {ref[-1]:.3f}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
