"""``variant="auto"`` and named variants for the drop-in functions, for any op.

Each op owns its policy (:class:`kernel_lab.registry.Auto`: the ordered names to try on CUDA,
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

from . import registry
from .errors import UnknownVariantError

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


@functools.cache
def _has_cupy() -> bool:
    return importlib.util.find_spec("cupy") is not None


def can_run(v: registry.Variant, *tensors: torch.Tensor, **kw: Any) -> bool:
    """Whether ``v`` takes these (real) tensors here: its ``supports()`` accepts them, and CuPy
    is installed if it is a CUDA C++ variant (those register without it)."""
    return (v.backend != "cuda" or _has_cupy()) and v.supports(*tensors, **kw) is None


def policy(op: str) -> registry.Auto:
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
    (``python -m kernel_lab plan`` asks it with meta tensors)."""
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


def run(op: str, variant: str, tensors: Sequence[torch.Tensor], kw: dict) -> Any:
    """Run ``op`` by ``variant`` (a name or ``"auto"``); outputs come back contiguous."""
    if variant == AUTO:
        v = choose_variant(op, *tensors, **kw)
    else:
        v = named_variant(op, variant)
        registry.ensure_supported(v, *tensors, **kw)
    out = v.fn(*tensors, **kw)
    if isinstance(out, torch.Tensor):
        return out.contiguous()  # no copy when it already is
    return tuple(o.contiguous() for o in out)
