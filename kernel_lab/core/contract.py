"""The op contract: what an op declares so that the registry, the suites, the drop-ins and the
benchmarks can exercise it without knowing it - its inputs and their roles (:class:`Input`),
its outputs and their tolerances (:class:`Output`), the "auto" policy (:class:`Auto`), the
autograd spec (:class:`Autograd`) and the op itself (:class:`Op`: the float64 reference, how to
make inputs for a shape, the bytes (or FLOPs) one call must move). :func:`input_contract_error`
checks a call's inputs against the declared roles before any launch. The registry
(:mod:`kernel_lab.core.registry`) holds the ops and their variants.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

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


def input_contract_error(specs: tuple[Input, ...], inputs: tuple, dim: int) -> str | None:
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
