"""One registry for every op and every way of writing it.

A *variant* is data: its name, the op it implements, the backend, the callable, the dtypes it
takes, a ``supports(*inputs, **kw) -> reason | None`` check and (for compiled kernels) its source
file. An *op* is data too (:class:`kernel_lab.core.contract.Op`: its float64 reference, how to
make inputs for a shape, how many bytes one call must move). Tests, benchmarks and the CLI all
iterate this registry, so a variant is tested and benchmarked the moment it is registered.

Registration is explicit: ``@register(...)`` next to each launcher, and one import list
(``kernel_lab.ops.OP_MODULES``) that the registry imports on first use. Adding an op means new
files plus one line in that list; nothing here changes.
"""

from __future__ import annotations

import contextlib
import difflib
import importlib
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from kernel_lab.base.errors import (
    DimRangeError,
    DuplicateOpError,
    DuplicateVariantError,
    InputTypeError,
    UnknownVariantError,
    UnsupportedInputError,
    given,
    not_a_tensor,
)
from kernel_lab.core import triton_mode
from kernel_lab.core.contract import Op, input_contract_error
from kernel_lab.core.rows import dim_type_error

BACKENDS = ("torch", "compile", "triton", "cuda", "peer")


class NativeBelow:
    """An :attr:`Auto.native` test for an op whose portable variants ``forward`` and
    ``backward`` are PyTorch's own ops: true off CUDA, and on CUDA for tensors of at most
    ``numel`` elements whose dtype both variants compute within the lab's tolerance; contiguous
    inputs only (the output then is contiguous too). The drop-ins' hot path reads
    :meth:`limits` once and tests inline (:func:`kernel_lab.core.custom_ops.row_call`)."""

    def __init__(self, numel: int, forward: str, backward: str) -> None:
        self.numel, self.forward, self.backward = numel, forward, backward
        self._dtypes: dict[bool, frozenset] = {}

    def dtypes(self, on_cuda: bool) -> frozenset:
        """The dtypes PyTorch's ops run here for the lab (the variants registered by now)."""
        ok = self._dtypes.get(on_cuda)
        if ok is None:
            fwd, bwd = get(self.forward), get(self.backward)
            ok = set(fwd.dtypes) & set(bwd.dtypes)
            if on_cuda:
                ok -= set(fwd.known_inexact) | set(bwd.known_inexact)
            ok = self._dtypes[on_cuda] = frozenset(ok)
        return ok

    def limits(self) -> tuple[int, frozenset, frozenset]:
        """(numel, CPU dtypes, CUDA dtypes): the whole test as data."""
        return self.numel, self.dtypes(False), self.dtypes(True)

    def __call__(self, x: torch.Tensor, dim: Any = -1) -> bool:
        on_cuda = x.is_cuda
        return (type(dim) is int and x.dtype in self.dtypes(on_cuda) and x.is_contiguous()
                and (not on_cuda or x.numel() <= self.numel))


@dataclass(frozen=True)
class Variant:
    """One way of computing an op. Call it via :func:`run` (checks first) or ``variant(...)``."""

    name: str
    op: str
    backend: str
    fn: Callable[..., Any]
    dtypes: tuple[torch.dtype, ...]
    description: str
    source: str | None = None  # repo-relative file holding the kernel, e.g. "cuda_src/x.cu"
    check: Callable[..., str | None] | None = None  # extra, variant-specific limits
    needs_cuda: bool = False  # True: only CUDA tensors (Triton also runs in its interpreter)
    # dtype -> why this variant is known to miss the op's tolerance (a peer we do not control,
    # e.g. PyTorch's own bf16 backward). Tests report such a miss as xfail with this reason;
    # the checker itself is never loosened for it.
    known_inexact: dict = field(default_factory=dict)

    def supports(self, *inputs: Any, **kw: Any) -> str | None:
        """Why this variant cannot run these inputs, or None if it can. Never launches anything."""
        x = inputs[0]
        if not isinstance(x, torch.Tensor):
            return f"expected a torch.Tensor (or DLPack array), got {type(x).__name__}"
        if "dim" in kw and type(kw["dim"]) is not int and dim_type_error(kw["dim"]):
            return dim_type_error(kw["dim"])
        if x.dtype not in self.dtypes:
            names = ", ".join(str(d).replace("torch.", "") for d in self.dtypes)
            return f"dtype {str(x.dtype).replace('torch.', '')} not supported (takes {names})"
        if len(inputs) > 1:
            reason = input_contract_error(_ops[self.op].inputs, inputs,
                                          kw.get("dim", -1))
            if reason is not None:
                return reason
        if self.needs_cuda and not x.is_cuda:
            if self.backend != "triton":
                return f"needs a CUDA tensor, got device {x.device}"
            if not triton_mode.interpreting():  # Triton's mode was fixed when it loaded
                return f"needs a CUDA tensor, got device {x.device} ({triton_mode.HINT})"
        if self.check is not None:
            return self.check(*inputs, **kw)
        return None

    def __call__(self, *inputs: Any, **kw: Any) -> Any:
        return self.fn(*inputs, **kw)


class ThreadSwitch(threading.local):
    """A per-thread on/off switch: ``with switch.turned_on():`` sets it for the block (the
    previous state restored after, so blocks nest); ``switch.on`` reads it."""

    on = False

    @contextlib.contextmanager
    def turned_on(self):
        before, self.on = self.on, True
        try:
            yield
        finally:
            self.on = before


_trust = ThreadSwitch()


def trusted_inputs():
    """Inside, variants skip checks of their inputs' values that cost a host sync (a class
    index out of range): the caller made the inputs valid (``Op.make_inputs``: the benchmark)
    or checked them already (a drop-in, once per call). Shapes and dtypes are still checked."""
    return _trust.turned_on()


def inputs_trusted() -> bool:
    """Whether the caller vouches for the inputs' values (:func:`trusted_inputs`)."""
    return _trust.on


TRUST = _trust  # the switch trusted_inputs() turns on (a replay's guard reads it: core.plans)


_ops: dict[str, Op] = {}
_variants: dict[str, Variant] = {}
_aliases: dict[str, str] = {}  # a former variant name -> its name now
_on_change: list[Callable[[], None]] = []  # called by every registration (:func:`on_change`)
_lock = threading.RLock()
_loaded = False


def register_op(op: Op) -> Op:
    """Add an op. Its name must be new."""
    with _lock:
        if op.name in _ops:
            raise DuplicateOpError(f"op {op.name!r} is already registered")
        _ops[op.name] = op
    return op


def add_variant(variant: Variant) -> Variant:
    """Add a ready-made :class:`Variant` (what ``@register`` does). Names are global and unique."""
    if variant.backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {variant.backend!r}")
    with _lock:
        if variant.name in _variants:
            old = _variants[variant.name]
            raise DuplicateVariantError(
                f"variant {variant.name!r} is already registered (op {old.op}, {old.backend})"
            )
        if variant.op not in _ops:
            raise UnknownVariantError(f"variant {variant.name!r} names unknown op {variant.op!r}")
        _variants[variant.name] = variant
        changed()
    return variant


def on_change(fn: Callable[[], None]) -> Callable[[], None]:
    """Call ``fn()`` after every registration from now on: a cache of choices (the plans of
    :mod:`kernel_lab.core.plans`) forgets them, since a new variant may change what "auto" picks."""
    _on_change.append(fn)
    return fn


def changed() -> None:
    """Tell every :func:`on_change` listener that the variants changed (a registration does)."""
    for fn in _on_change:
        fn()


def register(
    name: str,
    *,
    op: str,
    backend: str,
    dtypes: Sequence[torch.dtype],
    description: str,
    source: str | None = None,
    check: Callable[..., str | None] | None = None,
    needs_cuda: bool | None = None,
    known_inexact: dict | None = None,
) -> Callable[[Callable], Callable]:
    """Decorator: register the decorated launcher as a variant and return it unchanged."""

    def deco(fn: Callable) -> Callable:
        add_variant(
            Variant(
                name=name,
                op=op,
                backend=backend,
                fn=fn,
                dtypes=tuple(dtypes),
                description=description,
                source=source,
                check=check,
                needs_cuda=backend in ("triton", "cuda") if needs_cuda is None else needs_cuda,
                known_inexact=dict(known_inexact or {}),
            )
        )
        return fn

    return deco


def registrar(**fixed: Any) -> Callable[..., Callable[[Callable], Callable]]:
    """:func:`register` with some keywords fixed, for a module whose variants share them: e.g.
    ``cuda_variant = registrar(op="softmax", backend="cuda", dtypes=ALL_DTYPES)``, then
    ``@cuda_variant("block_softmax", description=..., source=...)``. A keyword given again at a
    variant replaces the fixed one."""

    def register_with(name: str, **kw: Any) -> Callable[[Callable], Callable]:
        return register(name, **{**fixed, **kw})

    return register_with


def alias(old: str, new: str) -> None:
    """Let ``get(old)`` (and ``run(old, ...)``) find the variant now called ``new``."""
    with _lock:
        if old in _variants or old in _aliases:
            raise DuplicateVariantError(f"{old!r} is already a variant or an alias")
        _aliases[old] = new


def load_ops_from(modules: Iterable[str]) -> None:
    """The op modules to import on the registry's first use (``kernel_lab/__init__.py`` passes
    ``kernel_lab.ops.OP_MODULES``: the core names no op)."""
    global _loaded
    with _lock:
        _op_modules.extend(m for m in modules if m not in _op_modules)
        _loaded = False


_op_modules: list[str] = []


def assume_constant_result(fn):
    """``torch.compiler.assume_constant_result(fn)`` without importing ``torch._dynamo`` (seconds
    of every ``import kernel_lab`` on a CPU): the same mark on ``fn``, so Dynamo runs it instead
    of tracing it (tests/test_registry.py pins the mark to torch's)."""
    fn._dynamo_marked_constant = True
    return fn


# Run, not traced, when torch.compile meets it (the first lab call of a process may be inside a
# compiled function: Dynamo cannot enter the lock, and fullgraph=True would fail on the break)
@assume_constant_result
def _ensure_loaded() -> None:
    global _loaded
    if _loaded:
        return
    with _lock:
        if _loaded:
            return
        for module in _op_modules:
            importlib.import_module(module)
        _loaded = True


def _suggest(name: str, choices: Iterable[str]) -> str:
    close = difflib.get_close_matches(name, list(choices), n=3, cutoff=0.5)
    return f"; did you mean {', '.join(map(repr, close))}?" if close else ""


def get(name: str) -> Variant:
    """The variant called ``name``; raises :class:`UnknownVariantError` with suggestions."""
    _ensure_loaded()
    try:
        return _variants[_aliases.get(name, name)]
    except (KeyError, TypeError):
        if not isinstance(name, str):
            raise InputTypeError(f"a variant name is a str, got {given(name)}") from None
        known = sorted(_variants)
        raise UnknownVariantError(
            f"no variant named {name!r}{_suggest(name, known)} "
            f"(`python -m kernel_lab list` shows all {len(known)})"
        ) from None


def get_op(name: str) -> Op:
    """The op called ``name``; raises :class:`UnknownVariantError` with suggestions."""
    _ensure_loaded()
    try:
        return _ops[name]
    except KeyError:
        raise UnknownVariantError(
            f"no op named {name!r}{_suggest(name, _ops)}; ops: {', '.join(sorted(_ops))}"
        ) from None


def op_names() -> list[str]:
    """Names of all registered ops, sorted."""
    _ensure_loaded()
    return sorted(_ops)


def variants(op: str | None = None, backend: str | None = None) -> list[Variant]:
    """Registered variants (of one op / backend if given), in registration order."""
    _ensure_loaded()
    if op is not None:
        get_op(op)
    return [
        v
        for v in _variants.values()
        if (op is None or v.op == op) and (backend is None or v.backend == backend)
    ]


def ensure_supported(variant: Variant, *inputs: Any, **kw: Any) -> None:
    """Raise :class:`UnsupportedInputError` naming variant, input and reason, or return; an
    :class:`InputTypeError` (a TypeError) for an input that is not a tensor or a ``dim`` that
    is not an int."""
    specs = _ops[variant.op].inputs if variant.op in _ops else ()
    for i, t in enumerate(inputs):
        if not isinstance(t, torch.Tensor) and (t is not None or i == 0 or i >= len(specs)
                                                or not specs[i].optional):
            arg = specs[i].name if i < len(specs) else f"input {i}"
            raise not_a_tensor(variant.name, arg, t, dlpack=True)
    if "dim" in kw and inputs:
        dim = kw["dim"]
        if type(dim) is not int and dim_type_error(dim):
            raise InputTypeError(f"{variant.name}: {dim_type_error(dim)}")
        dim, span = dim.__index__(), max(inputs[0].dim(), 1)
        if not -span <= dim < span:  # PyTorch's words
            raise DimRangeError(f"{variant.name}: Dimension out of range (expected to be in "
                                f"range of [{-span}, {span - 1}], but got {dim})")
    reason = variant.supports(*inputs, **kw)
    if reason is not None:
        x = inputs[0]
        desc = (
            f"{tuple(x.shape)} {str(x.dtype).replace('torch.', '')} on {x.device}"
            if isinstance(x, torch.Tensor)
            else type(x).__name__
        )
        raise UnsupportedInputError(f"{variant.name}: cannot run input {desc}: {reason}")
