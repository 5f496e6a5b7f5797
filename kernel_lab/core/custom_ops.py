"""Drop-in functions for any op: ``torch.library`` custom ops built from the op's declaration.

:func:`define` turns an :class:`~kernel_lab.core.contract.Op` with an ``autograd`` spec into
``torch.ops.kernel_lab.<op>`` (and its backward op, recursively), with a fake kernel and an
autograd formula; :func:`call` is what a public function such as ``kernel_lab.softmax`` runs.
So autograd, ``torch.compile(fullgraph=True)``, CUDA graphs and ``torch.library.opcheck`` all
see ordinary ops. Nothing here names an op.

Decisions:

* The schema comes from the op: its tensor inputs (``Op.inputs``), its keywords (``Op.kwargs``,
  typed by their defaults), then ``str variant`` and, if it has a backward op, ``str
  backward_variant``. Variant names are strings, so dynamo traces them as constants and the
  graph records which kernel runs; ``"auto"`` is resolved inside the op, on real tensors.
* Outputs are always contiguous, and the fake kernel says so: compiled graphs rely on the fake
  kernel's strides being the real ones.
* Names are checked eagerly in :func:`call` (not while dynamo traces) and again in the fake
  kernel, so ``torch.compile`` reports a misspelt variant at compile time.
* Plain eager calls skip the dispatcher: the custom op's Python layers (schema binding, the
  autograd wrapper) cost more than the kernels of small tensors take on an H200. Where nothing
  needs to see the op - not compiling, no dispatch mode (FakeTensorMode, FlopCounterMode), no
  functorch transform, plain tensors - the call runs the variant directly, or, when autograd
  records it, :class:`_EagerOp` with the op's formula; double backward goes through the
  backward custom op. Under the profiler the call is a ``kernel_lab::<op>`` range.
* Mistakes in how a drop-in is called raise the lab's one-line errors naming the function and
  the argument (:func:`mistake`): a non-tensor input or a ``dim`` / variant of the wrong type
  is an :class:`~kernel_lab.base.errors.InputTypeError` (a TypeError), a ``dim`` out of range a
  :class:`~kernel_lab.base.errors.DimRangeError` (an IndexError, as PyTorch's, and a ValueError).
  Nothing is checked up front on the per-call path: the arguments are looked at only where
  the call already leaves it (a non-tensor input) or has failed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch.utils._python_dispatch import _get_current_dispatch_mode

from kernel_lab.base.errors import DimRangeError, InputTypeError, given, not_a_tensor
from kernel_lab.core import contract, dispatch, plans, registry
from kernel_lab.core.dispatch import AUTO
from kernel_lab.core.rows import dim_type_error
from kernel_lab.cuda import deferred

_SCHEMA_TYPES = {bool: "bool", int: "int", float: "float", str: "str"}
_defined: dict[str, Any] = {}  # op name -> its torch.library custom op


def _schema(op: contract.Op) -> str:
    args = [f"Tensor{'?' if i.optional else ''} {i.name}" for i in op.inputs]
    for name, default in op.kwargs.items():
        kind = _SCHEMA_TYPES.get(type(default))
        if kind is None:
            raise TypeError(f"op {op.name}: keyword {name!r} has no schema type ({default!r})")
        args.append(f"{kind} {name}")
    args.append("str variant")
    if op.autograd is not None and op.autograd.backward is not None:
        args.append("str backward_variant")
    outs = ", ".join("Tensor" for _ in op.outputs)
    return f"({', '.join(args)}) -> {outs if len(op.outputs) == 1 else f'({outs})'}"


def _split(op: contract.Op, args: Sequence[Any]) -> tuple[tuple, dict, str, str]:
    """(tensors, kw, variant, backward_variant) from a call in schema order."""
    k, nk = len(op.inputs), len(op.kwargs)
    kw = dict(zip(op.kwargs, args[k:k + nk]))
    rest = list(args[k + nk:]) + [AUTO]
    return tuple(args[:k]), kw, rest[0], rest[1]


def _fake_outputs(op: contract.Op, tensors: tuple, kw: dict) -> Any:
    """Empty contiguous outputs shaped like the real ones: each output's own ``empty``, else
    like the first input (what every row op returns)."""
    from kernel_lab.core.rows import normalize_dim

    x = tensors[0]
    if "dim" in kw:
        normalize_dim(kw["dim"], x.dim())
    outs = tuple(o.empty(*tensors, **kw) if o.empty is not None else
                 torch.empty_like(x, memory_format=torch.contiguous_format)
                 for o in op.outputs)
    return outs[0] if len(outs) == 1 else outs


def _mark_outputs(op: contract.Op, ctx: Any, output: Any) -> None:
    """Tell autograd which outputs carry no gradient (Output.differentiable), and to pass None
    for an output's unused gradient instead of a tensor of zeros (cross-entropy's lse: a fill
    kernel and its launch every step, for nothing)."""
    ctx.set_materialize_grads(False)
    if len(op.outputs) > 1:
        fixed = [o for spec, o in zip(op.outputs, output) if not spec.differentiable]
        if fixed:
            ctx.mark_non_differentiable(*fixed)


def _output_grad(op: contract.Op, grads: tuple) -> Any:
    """The gradient the op's backward takes: that of its first differentiable output."""
    if len(op.outputs) == 1:
        return grads[0]
    return next(g for spec, g in zip(op.outputs, grads) if spec.differentiable)


def define(name: str) -> Any:
    """``torch.ops.kernel_lab.<name>`` for the registered op ``name`` (defined once)."""
    got = _defined.get(name)
    if got is not None:
        return got
    op = registry.get_op(name)
    grad = op.autograd
    backward_op = define(grad.backward) if grad is not None and grad.backward else None

    def impl(*args):
        tensors, kw, variant, _ = _split(op, args)
        return plans.run_op(name, variant, tuple(tensors), kw)

    custom = torch.library.custom_op(f"kernel_lab::{name}", impl, mutates_args=(),
                                     schema=_schema(op))

    @custom.register_fake
    def _(*args):
        tensors, kw, variant, backward_variant = _split(op, args)
        dispatch.check_names(name, variant, backward_variant)
        return _fake_outputs(op, tensors, kw)

    if grad is not None:

        def setup_context(ctx, inputs, output):
            tensors, ctx.kw, _, ctx.backward_variant = _split(op, inputs)
            ctx.absent = _absent(tensors)
            ctx.save_for_backward(*grad.save(tensors, output, ctx.kw))
            _mark_outputs(op, ctx, output)

        def backward_fn(ctx, *gs):
            g = _output_grad(op, gs)
            grads = ((None,) * len(op.inputs) if g is None else
                     _input_grads(op, ctx.saved_tensors, g, ctx.kw, ctx.backward_variant,
                                  backward_op, absent=ctx.absent))
            return (*grads, *[None] * (len(op.kwargs) + 1 + (backward_op is not None)))

        custom.register_autograd(backward_fn, setup_context=setup_context)
    _defined[name] = custom
    return custom


def _input_grads(op: contract.Op, saved: tuple, g: Any, kw: dict, backward_variant: str,
                 backward_op: Any, eager: Callable[..., Any] | None = None,
                 absent: tuple[int, ...] = (), bop: contract.Op | None = None) -> tuple:
    """One gradient (or None) per tensor input of ``op``: its formula, or its backward op
    (``bop``, else the registry's) run by ``backward_variant`` - directly by ``eager(op,
    variant, inputs, kw)`` when given (no graph to record), else through the backward custom
    op. ``absent``: the positions of optional inputs the forward got as None (they get no
    gradient)."""
    grad = op.autograd
    if grad.formula is not None:
        return tuple(grad.formula(saved, g, kw))
    bop = bop or registry.get_op(grad.backward)
    inputs = grad.backward_inputs(saved, g, kw)
    bkw = {k: kw.get(k, default) for k, default in bop.kwargs.items()}
    if eager is not None:
        dx = eager(bop.name, backward_variant, inputs, bkw)
    else:
        more = (AUTO,) if _has_backward_variant(bop.name) else ()
        dx = backward_op(*inputs, *bkw.values(), backward_variant, *more)
    grads: list[Any] = [None] * len(op.inputs)
    if isinstance(grad.grad_of, int):
        grads[grad.grad_of] = dx
    else:  # one backward output per input named; none for an input the forward got as None
        for i, d in zip(grad.grad_of, dx):
            grads[i] = None if i in absent else d
    return tuple(grads)


def _absent(tensors: Sequence[Any]) -> tuple[int, ...]:
    """Positions of the inputs given as None (optional tensors left out)."""
    return tuple(i for i, t in enumerate(tensors) if t is None)


def _has_backward_variant(name: str) -> bool:
    a = registry.get_op(name).autograd
    return a is not None and a.backward is not None


class _EagerOp(torch.autograd.Function):
    """A custom op's forward and autograd formula without the dispatcher (module docstring,
    "Plain eager calls"). ``backward`` runs the backward op's plan directly, or, when the
    backward is itself differentiated (``create_graph``), goes through the backward custom op."""

    @staticmethod
    def forward(ctx, plan, name, kw, variant, backward_variant, *tensors):
        out = plan(tensors, kw)
        op = plan.op
        ctx.save_for_backward(*op.autograd.save(tensors, out, kw))
        ctx.op, ctx.bop, ctx.kw, ctx.backward_variant = op, plan.backward_op, kw, backward_variant
        ctx.absent = _absent(tensors)
        _mark_outputs(op, ctx, out)
        return out

    @staticmethod
    def backward(ctx, *gs):
        op, g = ctx.op, _output_grad(ctx.op, gs)
        if g is None:  # no gradient reached the output (unmaterialized: _mark_outputs)
            return (None,) * (5 + len(op.inputs))
        backward = op.autograd.backward
        grads = _input_grads(op, ctx.saved_tensors, g, ctx.kw,
                             ctx.backward_variant,
                             define(backward) if backward else None,
                             eager=None if torch.is_grad_enabled() else _run_backward,
                             absent=ctx.absent, bop=ctx.bop)
        return (None, None, None, None, None, *grads)


def _run_backward(name: str, variant: str, inputs: tuple, kw: dict) -> Any:
    """The backward op ``name`` by ``variant`` through its plan (picked and recorded once per
    signature of its inputs: the upstream gradient's layout may differ between calls)."""
    return plans.for_op(name, variant, AUTO, inputs, kw)(inputs, kw)


_is_compiling = torch.compiler.is_compiling
_profiler = torch.autograd.profiler  # its _is_profiler_enabled flag, read each call
_functorch_active = getattr(torch._C, "_are_functorch_transforms_active", lambda: False)
_dispatch_modes = torch._C._len_torch_dispatch_stack  # what _get_current_dispatch_mode reads


def _nothing_watches(tensors: Sequence[Any]) -> bool:
    """Plain tensors, and no dispatch mode or functorch transform that needs to see the op."""
    return (all(type(t) is torch.Tensor or t is None for t in tensors)
            and _get_current_dispatch_mode() is None and not _functorch_active())


def eager_fast_path(*tensors: torch.Tensor) -> bool:
    """Whether a call on ``tensors`` may skip the custom op (:class:`_EagerOp`)."""
    return not _is_compiling() and _nothing_watches(tensors)


def call(name: str, tensors: tuple, kw: dict, variant: str | None = None,
         backward_variant: str | None = None) -> Any:
    """Run op ``name`` as a drop-in: its plan for this call signature when nothing watches
    (:mod:`kernel_lab.core.plans`), else its custom op. A bad class index an earlier kernel flagged
    raises first (:mod:`kernel_lab.cuda.deferred`)."""
    x = tensors[0]
    try:
        compiling = _is_compiling()
        if not compiling:  # a bad class index a kernel flagged: reported first
            for raised in deferred.RAISED:  # (deferred.raise_pending, read inline)
                if raised[0]:
                    deferred.raise_pending()
        if variant in _AUTOS and backward_variant in _AUTOS and len(tensors) == 1:
            auto = registry.get_op(name).auto
            if (auto is not None and auto.native is not None and not compiling
                    and type(x) is torch.Tensor and not _profiler._is_profiler_enabled
                    and _nothing_watches(tensors)
                    and auto.native(x, **kw)):  # "auto" runs PyTorch's own op (Auto.native)
                return registry.get(auto.portable).fn(x, **kw)
        variant, backward_variant = variant or AUTO, backward_variant or AUTO
        if (compiling or type(x) is not torch.Tensor or _dispatch_modes()
                or _functorch_active() or len(tensors) > 1 and not _nothing_watches(tensors)):
            if not compiling:  # eager: fail before running
                wrong = mistake(name, tensors, kw, variant, backward_variant)
                if wrong is not None:
                    raise wrong
                dispatch.check_names(name, variant, backward_variant)
            return _custom_call(name, tensors, kw, variant, backward_variant)
        plan = plans.for_op(name, variant, backward_variant, tensors, kw)
        if _profiler._is_profiler_enabled:  # traces still name the op
            with torch.profiler.record_function(f"kernel_lab::{name}"):
                return _run(plan, name, tensors, kw, variant, backward_variant)
        # under the lab's autograd node when autograd records the call (and PyTorch's own op
        # does not record it itself)
        if not plan.native and torch.is_grad_enabled() and (
                x.requires_grad if len(tensors) == 1  # (no generator: 0.2 us a call)
                else any(t is not None and t.requires_grad for t in tensors)):
            return _run(plan, name, tensors, kw, variant, backward_variant)
        return plan.run(tensors, kw)
    except (TypeError, ValueError, IndexError):  # free until raised: was it how it was called?
        wrong = mistake(name, tensors, kw, variant, backward_variant)
        if wrong is None:
            raise
        raise wrong from None


def mistake(name: str, tensors: Sequence[Any], kw: dict, variant: Any = None,
            backward_variant: Any = None) -> Exception | None:
    """The lab's error for a drop-in call of op ``name`` whose arguments are wrong, or None:
    an input that is not a tensor (or None where one is needed), a variant name or ``dim`` of
    the wrong type (:class:`InputTypeError`), ``dim`` out of range (:class:`DimRangeError`).
    Each names ``kernel_lab.<name>``, the argument and what was given, on one line."""
    where = f"kernel_lab.{name}"
    specs = registry.get_op(name).inputs
    for i, t in enumerate(tensors):
        arg = specs[i].name if i < len(specs) else f"input {i}"
        if t is None:
            if i >= len(specs) or not specs[i].optional:
                return InputTypeError(f"{where}: {arg} must be a torch.Tensor, got None")
        elif not isinstance(t, torch.Tensor):
            return not_a_tensor(where, arg, t)
    for arg, v in (("variant", variant), ("backward_variant", backward_variant)):
        if v is not None and not isinstance(v, str):
            return InputTypeError(f"{where}: {arg} must be a variant name (str) or None, "
                                  f"got {given(v)}")
    if "dim" in kw:
        why = dim_type_error(kw["dim"])
        if why is not None:
            return InputTypeError(f"{where}: {why}")
        d, span = kw["dim"].__index__(), max(tensors[0].dim(), 1)
        if not -span <= d < span:
            return DimRangeError(f"{where}: Dimension out of range (expected to be in range of "
                                 f"[{-span}, {span - 1}], but got {d})")
    return None


_AUTOS = (None, AUTO)


def row_call(name: str, torch_op: Callable[[torch.Tensor, int], torch.Tensor]
             ) -> Callable[..., Any]:
    """``dropin(x, dim=-1, variant=None, *, backward_variant=None)``: the body of row op
    ``name``'s drop-in (:func:`kernel_lab.core.dropin.row_dropin` names and documents it), whose
    PyTorch twin is ``torch_op(x, dim)``. When nothing traces, watches or profiles the call
    (those see the lab's op), ``x`` is a plain tensor and ``dim`` an int:

    - on "auto", where the op's :attr:`Auto.native` takes ``x``, PyTorch's op at once, no plan
      (the hot path of small tensors; a :class:`~kernel_lab.core.registry.NativeBelow` rule is
      tested inline from its limits);
    - else a warm plan found inline (:func:`plans.for_op`'s key) that needs no autograd node of
      the lab's runs at once.

    A kernel's flagged bad index raises first. Anything else takes :func:`call`. What it reads
    each call is bound here once: no module or attribute lookups, one Python frame."""
    raised_words, cache, tensor, auto = deferred.RAISED, plans.PLANS, torch.Tensor, AUTO
    compiling, modes, functorch, profiler = (_is_compiling, _dispatch_modes, _functorch_active,
                                             _profiler)
    grad_enabled = torch.is_grad_enabled
    limits = rule = None

    def dropin(x: Any, dim: Any = -1, variant: Any = None, *,
               backward_variant: Any = None) -> Any:
        nonlocal limits, rule
        if (type(x) is tensor and type(dim) is int and not profiler._is_profiler_enabled
                and not (compiling() or modes() or functorch())):
            for raised in raised_words:  # (deferred.raise_pending, read inline)
                if raised[0]:
                    deferred.raise_pending()
            if variant is None and backward_variant is None:
                if rule is None:  # the op's Auto: registered by the first call
                    rule = registry.get_op(name).auto.native
                    limits = rule.limits() if isinstance(rule, registry.NativeBelow) else None
                if limits is not None:
                    numel, cpu_ok, cuda_ok = limits
                    native = x.is_contiguous() and (
                        x.dtype in cuda_ok and x.numel() <= numel if x.is_cuda
                        else x.dtype in cpu_ok)
                else:
                    native = rule(x, dim)
                if native:
                    try:
                        return torch_op(x, dim)
                    except IndexError:
                        pass  # dim out of range: call() says so in the lab's words
                v = b = auto
            else:
                v = auto if variant is None else variant
                b = auto if backward_variant is None else backward_variant
            if type(v) is str and type(b) is str:  # plans.for_op's key, inline
                grad = x.requires_grad
                plan = cache.get((name, v, b, dim, x.shape, x.stride(), x.dtype,
                                  x.get_device(), x.data_ptr() & 127, grad))
                if plan is not None and (plan.native or not (grad and grad_enabled())):
                    return plan.run((x,), {"dim": dim})
        return call(name, (x,), {"dim": dim}, variant, backward_variant)

    return dropin


def _run(plan: plans.Plan, name: str, tensors: tuple, kw: dict, variant: str,
         backward_variant: str) -> Any:
    """The plan, under the lab's autograd node where autograd records the call."""
    if (not plan.native and plan.op.autograd is not None
            and torch.is_grad_enabled() and any(t is not None and t.requires_grad
                                                for t in tensors)):
        return _EagerOp.apply(plan, name, kw, variant, backward_variant, *tensors)
    return plan(tensors, kw)


def _custom_call(name: str, tensors: tuple, kw: dict, variant: str,
                 backward_variant: str) -> Any:
    custom = _defined.get(name) or define(name)
    more = (backward_variant,) if _has_backward_variant(name) else ()
    return custom(*tensors, *kw.values(), variant, *more)
