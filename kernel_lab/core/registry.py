"""One registry for every op and every way of writing it.

A *variant* is data: its name, the op it implements, the backend, the callable, the dtypes it
takes, a ``supports(*inputs, **kw) -> reason | None`` check and (for compiled kernels) its source
file. An *op* is data too: its float64 reference, how to make inputs for a shape, and how many
bytes one call must move. Tests, benchmarks and the CLI all iterate this registry, so a variant is
tested and benchmarked the moment it is registered.

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
from kernel_lab.core.rows import dim_type_error

BACKENDS = ("torch", "compile", "triton", "cuda", "peer")


ROLES = ("rows", "column", "index", "per_row", "free")


@dataclass(frozen=True)
class Input:
    """One tensor input of an op and its role, which the registry checks before any launch.

    ``rows``: shaped like the first input (the rows reduced over ``dim``); ``column``: a
    per-column parameter of shape (N,), N the first input's length along ``dim``, same dtype;
    ``index``: an integer tensor shaped like the first input without ``dim`` (one per row);
    ``per_row``: a floating tensor of that shape (a row statistic); ``free``: any shape (only
    its device is checked). ``optional``: the input may be None (``Tensor?`` in the schema).
    """

    name: str
    role: str = "rows"
    optional: bool = False

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"input {self.name!r}: role must be one of {ROLES}, not {self.role!r}")


@dataclass(frozen=True)
class Output:
    """One output of an op: its name and how the checker compares it with the reference.

    ``tolerances``: dtype -> reference.Tolerance (None: the op's table, else the lab's);
    ``error_scale(*inputs, **kw)``: the magnitude rtol applies to, per element (None: |ref|).
    """

    name: str
    tolerances: dict | None = None
    error_scale: Callable[..., torch.Tensor] | None = None
    # empty(*inputs, **kw): an uninitialized output of the real one's shape, dtype and device
    # (the custom op's fake kernel); None: shaped like the first input
    empty: Callable[..., torch.Tensor] | None = None
    # False: no gradient flows through this output (a statistic kept for the backward)
    differentiable: bool = True
    # dtype(input dtype) -> this output's dtype; None: the input's
    dtype: Callable[[torch.dtype], torch.dtype] | None = None


@dataclass(frozen=True)
class Auto:
    """An op's ``variant="auto"`` policy.

    ``preferences(*inputs, **kw)``: variant names to try on CUDA, best first (the first that is
    registered and supports the inputs runs); ``portable``: the variant for every other device
    and the last resort. ``portable_autograd``: the portable variant is PyTorch's own
    differentiable op, so where the backward would run PyTorch's kernel too, the drop-in lets
    PyTorch's autograd record the call (no Python autograd node of the lab's). ``native(x, dim)
    -> bool`` (row ops): a cheap test (no registry lookup, no allocation) that "auto" picks the
    portable variant for these inputs and for their backward, and that its output is contiguous;
    where it says so, the drop-in calls the portable variant at once, with no plan.
    """

    preferences: Callable[..., Sequence[str]]
    portable: str
    portable_autograd: bool = False
    native: Callable[..., bool] | None = None


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
class Autograd:
    """How an op differentiates, for the custom op and the eager path.

    ``save(inputs, output, kw)``: the tensors the forward keeps. Then either ``backward``: the
    name of the op whose output is the gradient of input ``grad_of`` (its inputs are
    ``backward_inputs(saved, grad, kw)``; its variant is the call's ``backward_variant``), or
    ``formula(saved, grad, kw)``: plain PyTorch returning one gradient (or None) per tensor
    input - used for backward ops themselves (double backward). ``grad_of`` may be a tuple of
    input positions: the backward op then returns one output per position, in that order (an
    input the forward got as None gets no gradient, whatever its output holds).
    """

    save: Callable[..., tuple]
    backward: str | None = None
    backward_inputs: Callable[..., tuple] | None = None
    grad_of: int | tuple[int, ...] = 0
    formula: Callable[..., tuple] | None = None


@dataclass(frozen=True)
class Op:
    """An operation: its single float64 reference and what the suites need to exercise it.

    ``make_inputs(shape, dtype, device, generator)`` returns the positional inputs for a call
    (``shape``: the rows input's shape); ``bytes_moved(*inputs, **kw)`` the fewest bytes a call
    must read plus write (for GB/s); ``reference(*inputs, **kw)`` returns the float64 answer, a
    tuple when the op has several ``outputs``. ``inputs`` declares each tensor input's role
    (:class:`Input`); ``kwargs`` the default call keywords (their types make the custom op's
    schema); ``auto`` and ``autograd`` make it a drop-in (:mod:`kernel_lab.core.custom_ops`).
    """

    name: str
    reference: Callable[..., Any]
    make_inputs: Callable[..., tuple]
    bytes_moved: Callable[..., int]
    description: str = ""
    kwargs: dict = field(default_factory=dict)  # default call kwargs, e.g. {"dim": -1}
    # edge_cases(dtype, device, generator) -> [(label, inputs, kwargs)]: -inf / NaN rows, huge
    # magnitudes ... run by the correctness suite for every variant, on top of random inputs.
    edge_cases: Callable[..., list] | None = None
    # Per-op tolerance table (dtype -> reference.Tolerance); None = reference.TOLERANCES.
    tolerances: dict | None = None
    # error_scale(*inputs, **kw) -> float64 tensor: the magnitude rtol applies to per element
    # (None = |reference|); see reference.check. Outputs may override both.
    error_scale: Callable[..., torch.Tensor] | None = None
    inputs: tuple[Input, ...] = (Input("x"),)
    outputs: tuple[Output, ...] = (Output("y"),)
    auto: Auto | None = None
    autograd: Autograd | None = None
    # bench_inputs(shape, dtype, device, generator): a benchmark cell's inputs where its shape
    # is not make_inputs' (the lm-head cells: tokens x hidden x vocabulary); None: make_inputs
    bench_inputs: Callable[..., tuple] | None = None
    # check_slice(inputs) -> inputs: what the benchmark's float64 check runs a variant on where
    # the cell's own reference would not fit a GPU (the lm-head: its first tokens); None: all
    check_slice: Callable[[tuple], tuple] | None = None
    # flops(*inputs, **kw) -> the floating-point operations a call must do: set for a
    # matmul-bound op (the lm-head), whose benchmark cells then read ms and TFLOP/s; None: GB/s
    flops: Callable[..., int] | None = None

    def check(self, out: Any, *inputs: Any, ref: Any = None, **kw: Any):
        """Compare ``out`` with this op's float64 reference on ``inputs``: every output under
        its own tolerance; the first failing output names itself in the message."""
        from kernel_lab.core.reference import CheckResult, check

        ref = self.reference(*inputs, **kw) if ref is None else ref
        several = len(self.outputs) > 1
        outs, refs = (out, ref) if several else ((out,), (ref,))
        if several and (not isinstance(outs, (tuple, list)) or len(outs) != len(self.outputs)):
            return CheckResult(False, float("inf"), float("inf"),
                               f"expected {len(self.outputs)} outputs, got {type(out).__name__}")
        worst_abs = worst_rel = worst_ratio = 0.0
        for spec, o, r in zip(self.outputs, outs, refs):
            scale_fn = spec.error_scale or (self.error_scale if not several else None)
            scale = scale_fn(*inputs, **kw) if scale_fn is not None else None
            dt = inputs[0].dtype
            res = check(o, r, dt, spec.tolerances or self.tolerances, scale=scale,
                        out_dtype=spec.dtype(dt) if spec.dtype is not None else None)
            if not res.ok:
                return CheckResult(False, res.max_abs_err, res.max_rel_err,
                                   f"{spec.name}: {res.message}" if several else res.message,
                                   res.ratio)
            worst_abs, worst_rel = max(worst_abs, res.max_abs_err), max(worst_rel, res.max_rel_err)
            worst_ratio = max(worst_ratio, res.ratio)
        return CheckResult(True, worst_abs, worst_rel, "ok", worst_ratio)


def row_forward_op(name: str, backward: str, **fields: Any) -> Op:
    """An :class:`Op` over rows along ``dim`` (default -1) whose gradient needs its output only
    (softmax, log_softmax): the forward keeps y, the op ``backward`` maps (y, dy) to dx."""
    return Op(name=name, kwargs={"dim": -1}, autograd=Autograd(
        save=lambda inputs, y, kw: (y,), backward=backward,
        backward_inputs=lambda saved, dy, kw: (saved[0], dy)), **fields)


def row_backward_op(name: str, double_backward: Callable[..., tuple], **fields: Any) -> Op:
    """The ``backward`` op of a :func:`row_forward_op`: inputs (y, dy), output dx, and
    ``double_backward(saved, g, kw)`` its own gradient with respect to (y, dy)."""
    return Op(name=name, kwargs={"dim": -1}, inputs=(Input("y"), Input("dy")),
              outputs=(Output("dx"),),
              autograd=Autograd(save=lambda inputs, dx, kw: inputs, formula=double_backward),
              **fields)


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
            reason = _input_contract(_ops[self.op].inputs, inputs, kw.get("dim", -1))
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


def _input_contract(specs: tuple[Input, ...], inputs: tuple, dim: int) -> str | None:
    """Why ``inputs`` break their op's declared roles (:class:`Input`), or None."""
    x = inputs[0]
    n = x.shape[dim] if x.dim() and -x.dim() <= dim < x.dim() else None
    for i, t in enumerate(inputs[1:], 1):
        spec = specs[i] if i < len(specs) else Input(f"input {i}")
        if t is None and not spec.optional:
            return f"{spec.name} must be a tensor, not None"
        if not isinstance(t, torch.Tensor):
            continue
        if t.device != x.device:
            return f"{spec.name} is on {t.device}, {specs[0].name} on {x.device}"
        if spec.role == "rows" and (t.dtype != x.dtype or t.shape != x.shape):
            return f"{spec.name} must have {specs[0].name}'s dtype and shape"
        column = (n,) if x.dim() else ()  # a 0-d row: its one parameter, 0-d too
        if spec.role == "column" and (t.dtype != x.dtype or tuple(t.shape) != column):
            return f"{spec.name} must be a {column} tensor of {specs[0].name}'s dtype"
        if spec.role == "index" and (t.dtype.is_floating_point or t.dtype.is_complex
                                     or t.dtype == torch.bool):
            return f"{spec.name} must be an integer tensor, got {t.dtype}"
        if spec.role == "per_row" and not t.dtype.is_floating_point:
            return f"{spec.name} must be a floating tensor, got {t.dtype}"
        if spec.role in ("index", "per_row"):
            rows = tuple(s for d, s in enumerate(x.shape) if d != dim % max(x.dim(), 1))
            if tuple(t.shape) != rows:
                return f"{spec.name} must have shape {rows} (one per row), got {tuple(t.shape)}"
    return None


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
