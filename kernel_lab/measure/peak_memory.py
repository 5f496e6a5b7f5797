"""Peak device memory of one call above its inputs: the benchmarks' memory column.

DESIGN.md "Measuring": reset the peak after the inputs exist, run, then ``max_memory_allocated()``
minus what was allocated before the call. Two figures per variant:

* **forward**: one call of the variant on the workload's inputs (its outputs and workspace);
* **step**, for ops whose autograd has a backward op: the drop-in with this variant, forward +
  backward (backward variant "auto"), each differentiated input (``grad_of``: one, or several
  as the LM head's hidden, weight and bias) a *view* of a leaf that requires grad (as a model's
  loss sees a matmul's output, so AccumulateGrad does not hide a copy) and the upstream
  gradients made beforehand. The leaves' ``.grad`` count: a step produces them.

Only PyTorch's caching allocator is seen (every variant here allocates through it). Off CUDA
the column is "n/a".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch

from kernel_lab.core import contract, registry

NOT_CUDA = "n/a: not a CUDA device"


@dataclass(frozen=True)
class Peak:
    """Bytes above the inputs: ``forward``, ``step`` (None: the op has no step, or see
    ``note``)."""

    forward: int | None
    step: int | None = None
    note: str = ""


def above_inputs(run: Callable[[], Any], device: torch.device) -> int:
    """Peak bytes ``run()`` allocates above what is allocated when it starts (its result is
    dropped afterwards)."""
    torch.cuda.synchronize(device)
    before = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    out = run()
    peak = torch.cuda.max_memory_allocated(device) - before
    del out
    return max(0, int(peak))


def has_step(op: contract.Op) -> bool:
    return op.autograd is not None and op.autograd.backward is not None


def step_runner(op: contract.Op, variant: str, inputs: tuple, kw: dict) -> Callable[[], Any]:
    """One forward + backward through the drop-in with ``variant``; the upstream gradients
    (ones, shaped by a first unmeasured step) are made here, before any measurement."""
    from kernel_lab.core import custom_ops

    g = op.autograd.grad_of
    slots = (g,) if isinstance(g, int) else g  # the inputs the backward differentiates
    leaves = {i: inputs[i].detach().requires_grad_() for i in slots
              if isinstance(inputs[i], torch.Tensor) and inputs[i].is_floating_point()}

    def forward() -> tuple:
        args = list(inputs)
        for i, leaf in leaves.items():
            args[i] = leaf.view_as(leaf)
        out = custom_ops.call(op.name, tuple(args), kw, variant)
        outs = out if isinstance(out, (tuple, list)) else (out,)
        return tuple(o for o, spec in zip(outs, op.outputs) if spec.differentiable)

    grads = tuple(torch.ones_like(o) for o in forward())

    def step() -> Any:
        for leaf in leaves.values():
            leaf.grad = None
        torch.autograd.backward(forward(), grads)
        return [leaf.grad for leaf in leaves.values()]

    return step


def measure(variant: registry.Variant, inputs: tuple, kw: dict) -> Peak:
    """The memory column of ``variant`` on ``inputs`` (run outside any timing)."""
    x = inputs[0]
    if not (isinstance(x, torch.Tensor) and x.is_cuda):
        return Peak(None, None, NOT_CUDA)
    fwd = above_inputs(lambda: variant.fn(*inputs, **kw), x.device)
    op = registry.get_op(variant.op)
    if not has_step(op):
        return Peak(fwd)
    try:
        step = step_runner(op, variant.name, inputs, kw)
        return Peak(fwd, above_inputs(step, x.device))
    except Exception as e:  # noqa: BLE001 - the forward's figure stands; the step says why not
        first = (str(e).strip().splitlines() or [""])[0]
        return Peak(fwd, None, f"step: {type(e).__name__}: {first[:100]}")


def format_bytes(n: int | None) -> str:
    """``1.5 GiB``, ``12 MiB``, ``640 KiB``, ``0 B``; "n/a" for None."""
    if n is None:
        return "n/a"
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            v = n / size
            return f"{v:.1f} {unit}" if v < 10 else f"{v:.0f} {unit}"
    return f"{n} B"
