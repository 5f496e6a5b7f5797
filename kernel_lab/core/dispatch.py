"""``variant="auto"`` and named variants for the drop-in functions, for any op.

Each op owns its policy (:class:`kernel_lab.core.contract.Auto`: the ordered names to try on CUDA,
the portable variant for every other device); this module only applies it. ``"auto"`` is
resolved on the real tensors, where ``supports()`` can see what only real tensors have (data
pointers for 16-byte alignment), so no Python runs for it under a CUDA-graph replay.
"""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Callable, Sequence
from typing import Any

import torch

from kernel_lab.base.errors import UnknownVariantError
from kernel_lab.core import contract, registry

AUTO = "auto"


def named_variant(op: str, name: str) -> registry.Variant:
    """The variant ``name``, checked to compute ``op``; raises UnknownVariantError otherwise."""
    v = registry.get(name)
    if v.op != op:
        names = ", ".join(w.name for w in registry.variants(op))
        raise UnknownVariantError(
            f"variant {name!r} computes {v.op!r}, not {op!r}; {op} variants: {AUTO}, {names}"
        )
    return v


def check_names(name: str, variant: str, backward_variant: str) -> None:
    """Raise UnknownVariantError for a variant that does not compute ``name`` (or its backward)."""
    if variant != AUTO:
        named_variant(name, variant)
    grad = registry.get_op(name).autograd
    if backward_variant != AUTO and grad is not None and grad.backward:
        named_variant(grad.backward, backward_variant)


@functools.cache
def _has_cupy() -> bool:
    return importlib.util.find_spec("cupy") is not None


def can_run(v: registry.Variant, *tensors: torch.Tensor, **kw: Any) -> bool:
    """Whether ``v`` takes these (real) tensors here: its ``supports()`` accepts them, and CuPy
    is installed if it is a CUDA C++ variant (those register without it)."""
    return (v.backend != "cuda" or _has_cupy()) and v.supports(*tensors, **kw) is None


def policy(op: str) -> contract.Auto:
    """The op's "auto" policy; raises if the op declares none."""
    auto = registry.get_op(op).auto
    if auto is None:
        raise UnknownVariantError(f"op {op!r} has no 'auto' policy: name a variant")
    return auto


def preferences(op: str, *tensors: torch.Tensor, **kw: Any) -> Sequence[str]:
    """The op's ordered candidates for these tensors (CUDA), before ``supports()`` filters."""
    return policy(op).preferences(*tensors, **kw)


def first_preference(op: str, tensors: Sequence[torch.Tensor], kw: dict,
                     accepts: Callable[[registry.Variant], bool]) -> registry.Variant:
    """The first registered preference that ``accepts``, else the portable variant
    (``python -m kernel_lab picks`` asks it with meta tensors)."""
    auto = policy(op)
    for name in auto.preferences(*tensors, **kw):
        try:
            v = registry.get(name)
        except UnknownVariantError:  # not written (yet): the next preference
            continue
        if accepts(v):
            return v
    return registry.get(auto.portable)


def choose_variant(op: str, *tensors: torch.Tensor, **kw: Any) -> registry.Variant:
    """The variant ``variant="auto"`` runs for these (real) tensors. Never launches anything."""
    if tensors[0].device.type != "cuda":
        return registry.get(policy(op).portable)
    return first_preference(op, tensors, kw, lambda v: can_run(v, *tensors, **kw))


def pick(op: str, variant: str, tensors: Sequence[torch.Tensor], kw: dict) -> registry.Variant:
    """The variant a call of ``op`` by ``variant`` (a name or ``"auto"``) runs on these (real)
    tensors, its ``supports()`` asked once: raises UnsupportedInputError (or
    UnknownVariantError) before anything is launched."""
    if variant != AUTO:
        v = named_variant(op, variant)
    elif tensors[0].device.type == "cuda":
        for name in policy(op).preferences(*tensors, **kw):
            try:
                v = registry.get(name)
            except UnknownVariantError:  # not written (yet): the next preference
                continue
            if can_run(v, *tensors, **kw):
                return v
        v = registry.get(policy(op).portable)
    else:
        v = registry.get(policy(op).portable)
    registry.ensure_supported(v, *tensors, **kw)
    return v
