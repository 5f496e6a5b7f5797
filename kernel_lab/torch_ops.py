"""``kernel_lab.softmax`` / ``kernel_lab.log_softmax``: the lab's kernels inside real models.

Each is a ``torch.library`` custom op (``torch.ops.kernel_lab.softmax``, ``...log_softmax``)
with a fake (meta) kernel and an autograd formula whose backward is another custom op
(``kernel_lab::softmax_backward``, ``kernel_lab::log_softmax_backward``) running a registered
backward variant. So autograd, ``torch.compile(fullgraph=True)``, CUDA graphs
(``mode="reduce-overhead"``) and ``torch.library.opcheck`` all see ordinary ops.

Decisions:

* The variant names are ``str`` arguments of the ops, so dynamo traces them as constants and the
  graph records which kernel runs. ``"auto"`` (the default) is resolved *inside* the op, on the
  real tensors: that is where ``supports()`` can look at what only real tensors have (data
  pointers for 16-byte alignment), and where no Python runs under a CUDA-graph replay.
* ``"auto"`` on CUDA takes the first entry of :data:`PREFERENCES` that is registered and supports
  the input: the hand-written CUDA kernel (``fast_softmax``, ...), then Triton, then PyTorch;
  :func:`measured_preferences` reorders it by the input's size and row length as measured (PyTorch's
  own kernel first for tensors of at most ``SMALL_NUMEL[op]`` elements). On any other device it is
  PyTorch's own kernel (:data:`PORTABLE`), so a model using ``kernel_lab.softmax`` runs unchanged on
  a CPU. An explicit name runs that variant or raises (``UnknownVariantError`` with suggestions, or
  ``UnsupportedInputError`` with the reason).
* Outputs are always contiguous, and the fake kernel says so. A hand-written kernel reducing
  over a non-last dim returns a permuted view; the op copies it (one extra pass, on top of the
  copy that moving ``dim`` last already cost), because compiled graphs rely on the fake kernel's
  strides being the real ones.
* The backward saves only the output ``y`` (both backward formulas need y and dy, never x).
  The backward ops are differentiable too (double backward, gradgradcheck), through plain
  PyTorch formulas: second derivatives are rare enough that a kernel for them is not worth it.
* Names are checked eagerly in :func:`softmax` (not while dynamo traces) and again in the fake
  kernel, so ``torch.compile`` reports a misspelt variant at compile time, not at first run.
* Plain eager calls skip the dispatcher: the custom op's Python layers (schema binding, the
  autograd wrapper) cost ~15 us a call, ~38 us with autograd on the CI's CPU - more than the
  kernels of tensors up to tens of MB take on an H200 (twenty-first run: 34-80 us a call
  through the op for the lab's kernels, 21-43 for PyTorch's, bench/NOTES.md). Where nothing
  needs to see the op - not compiling, no dispatch mode (FakeTensorMode, FlopCounterMode), no
  functorch transform, a plain tensor - the call runs ``_run`` directly, or, when autograd
  records it, :class:`_EagerRowOp` with the op's formula; double backward goes through the
  backward op as before. Under the profiler the call is a ``kernel_lab::<op>`` range, so
  traces still name it.
"""

import functools
import importlib.util
from collections.abc import Callable, Sequence

import torch
from torch.utils._python_dispatch import _get_current_dispatch_mode

from . import registry
from .errors import UnknownVariantError

AUTO = "auto"

# variant="auto" on CUDA: the first registered name whose supports() accepts the input.
PREFERENCES: dict[str, tuple[str, ...]] = {
    "softmax": ("fast_softmax", "triton_fused", "triton_online", "torch_eager"),
    "softmax_backward": ("fused_softmax_backward", "triton_backward", "torch_eager_backward"),
    "log_softmax": ("log_softmax", "triton_log_softmax", "torch_log_softmax"),
    "log_softmax_backward": (
        "log_softmax_backward", "triton_log_softmax_backward", "torch_log_softmax_backward",
    ),
}
# variant="auto" anywhere else (CPU, meta ...): PyTorch's own kernel, correct everywhere.
PORTABLE: dict[str, str] = {
    "softmax": "torch_eager",
    "softmax_backward": "torch_eager_backward",
    "log_softmax": "torch_log_softmax",
    "log_softmax_backward": "torch_log_softmax_backward",
}


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


# variant="auto" on CUDA, by tensor size (elements): at most this many and the call is
# host-bound, where PyTorch's own kernels (launched from C++) beat the lab's Python launch path
# (~20 us a call through kernel_lab.softmax on the H200's host, more when it is busy). Twenty-
# first H200 run, bench/auto_check.py through the public functions (bench/NOTES.md): at 2^22
# PyTorch ahead at every row length (13-20 us against 22-50), at 2^23 the lab ahead for rows of
# 4096 (20 against 25-31 us: PyTorch's kernel reads rows of 4096 at ~62 % of copy) but PyTorch
# for rows of 1024, which it streams at copy speed (SMALL_NUMEL_SHORT_ROWS), level at 2^24. The
# softmax backward keeps the twentieth run's 2^21: the lab's fused kernel was level or ahead
# from 2^20 (PyTorch's fp32 backward is slow; its fp16 / bf16 one is never picked).
SMALL_NUMEL: dict[str, int] = {
    "softmax": 1 << 22,
    "softmax_backward": 1 << 21,
    "log_softmax": 1 << 22,
    "log_softmax_backward": 1 << 22,
}
# ... and for rows of <= 1024 (not the softmax backward: its rule is 2^21 at any row length)
SMALL_NUMEL_SHORT_ROWS: dict[str, int] = {
    "softmax": 1 << 23,
    "log_softmax": 1 << 23,
    "log_softmax_backward": 1 << 23,
}
TRITON_MIN_NUMEL = 1 << 25  # Triton's whole-row kernels only from here (longer host path)


def prefers_pytorch(op: str, x: torch.Tensor, n: int) -> bool:
    """Whether a tensor this small runs faster in PyTorch's own kernel (PORTABLE[op]), and that
    kernel is within the lab's tolerance for its dtype (not ``known_inexact``: PyTorch's fp16 /
    bf16 softmax backward is not, on short rows)."""
    limit = SMALL_NUMEL_SHORT_ROWS.get(op, 0) if n <= 1024 else 0
    return x.numel() <= max(limit, SMALL_NUMEL.get(op, 0)) and \
        x.dtype not in registry.get(PORTABLE[op]).known_inexact


def measured_preferences(op: str, x: torch.Tensor, dim: int = -1) -> tuple[str, ...]:
    """PREFERENCES, reordered by the H200 benchmarks (bench/NOTES.md).

    By size first (:func:`prefers_pytorch`): PyTorch's own kernel for host-bound tensors.
    Softmax, log_softmax and the log backward: up to 2^22 elements, 2^23 for rows of <= 1024
    (twenty-first run, ``bench/auto_check.py`` through the public functions, fresh tensors each
    call: PyTorch ahead by 1.2-2.5x at every shape of 2^22 elements, rows 1024-32000, fp32 and
    bf16, and at 2^23 for rows of 1024; the lab ahead by 1.3-1.5x at 2^23 for rows of 4096, level
    or ahead at 2^24; per-call times this host-bound vary by up to 2x between calls). The softmax
    backward: up to 2^21 (twentieth run: PyTorch's fp32 backward 12-16 % ahead at 2^21, the lab
    35-82 % ahead from 3 * 2^20; the twenty-first run had the lab level from 2^20; PyTorch's
    bf16 / fp16 backward misses the lab's tolerance, so it is never picked).

    Then by row length N, from the sweeps at M*N = 2^28 (sweep18, sweep19, the nineteenth and
    twentieth runs' benchmarks). Softmax forward: Triton's whole-row kernel in fp16/bf16 for N
    <= 256 and 1024 <= N <= 2048 (bf16 128 / 256 / 1024 99.9 / 100.2 / 98.2 % of copy against
    99.2 / 96.9 / 94.4 % in sweep19; 2048 level) and in fp32 for 16384 <= N <= 32768 (level:
    97-98 % both, Triton 0.3-0.7 % ahead), but only in tensors of TRITON_MIN_NUMEL elements or
    more (at 2^25 Triton led 2-byte rows of 128 by 1-2 %; at 2^23 it trailed by up to a third,
    at 2^24 by -34 to +5 %, its host path being longer); fast_softmax everywhere else, the
    longest rows included (N = 2^20: 90-92 % in sweep19).
    Softmax backward: Triton's whole-row kernel for N < 512 only (N = 128: 104 % of copy against
    fused_softmax_backward's 60 % fp32 / 30 % bf16, its programs taking several short rows
    each); the fused CUDA kernel from 512 (twentieth run, one benchmark process: level with
    Triton at 512-16384 within 0.5 % but bf16 512, 104 against 98 %, and far ahead from 32000:
    100-101 % against 81-88 %). fp16 follows bf16 (not swept).
    log_softmax backward (M*N = 2^28): Triton's kernel for N < 512 (N = 128: 103 % of copy
    against the CUDA kernel's 60 % fp32 / 30 % bf16); the CUDA kernel from 512: 102-104 % at
    512-16384 (bf16 16384 98 against Triton's 103), and since the twenty-first run, on the
    softmax backward's persistent clusters, 93-101 % from 32000 to 262144 where Triton reads
    48-95 % and PyTorch 66-77 %.
    Re-measure and edit this table when kernels change.
    """
    prefs = PREFERENCES[op]
    n = x.shape[dim] if x.dim() else 1
    if prefers_pytorch(op, x, n):
        return (PORTABLE[op], *prefs)
    if x.dim() == 0:
        return prefs
    two_byte = x.element_size() == 2
    if op == "log_softmax_backward":
        return ("triton_log_softmax_backward", *prefs) if n < 512 else prefs
    if op == "softmax_backward":
        return ("triton_backward", *prefs) if n < 512 else prefs
    if op != "softmax":
        return prefs
    triton_rows = (two_byte and (n <= 256 or 1024 <= n <= 2048)) or (
        not two_byte and 16384 <= n <= 32768)
    if triton_rows and x.numel() >= TRITON_MIN_NUMEL:
        return ("triton_fused", *prefs)
    return prefs


def first_preference(op: str, x: torch.Tensor, dim: int,
                     accepts: Callable[[registry.Variant], bool]) -> registry.Variant:
    """The first registered variant of ``measured_preferences`` that ``accepts``, else the
    portable one (``python -m kernel_lab plan`` asks it with a meta tensor)."""
    for name in measured_preferences(op, x, dim):
        try:
            v = registry.get(name)
        except UnknownVariantError:  # not written (yet): the next preference
            continue
        if accepts(v):
            return v
    return registry.get(PORTABLE[op])


def can_run(v: registry.Variant, *tensors: torch.Tensor, dim: int = -1) -> bool:
    """Whether ``v`` takes these (real) tensors here: its ``supports()`` accepts them, and CuPy
    is installed if it is a CUDA C++ variant (those register without it)."""
    return (v.backend != "cuda" or _has_cupy()) and v.supports(*tensors, dim=dim) is None


def choose_variant(op: str, *tensors: torch.Tensor, dim: int = -1) -> registry.Variant:
    """The variant ``variant="auto"`` runs for these (real) tensors. Never launches anything."""
    if tensors[0].device.type != "cuda":
        return registry.get(PORTABLE[op])
    return first_preference(op, tensors[0], dim, lambda v: can_run(v, *tensors, dim=dim))


def _run(op: str, variant: str, tensors: Sequence[torch.Tensor], dim: int) -> torch.Tensor:
    if variant == AUTO:
        v = choose_variant(op, *tensors, dim=dim)
    else:
        v = named_variant(op, variant)
        registry.ensure_supported(v, *tensors, dim=dim)
    return v.fn(*tensors, dim=dim).contiguous()  # no copy when it already is


def _fake(op: str, variant: str, x: torch.Tensor, dim: int) -> torch.Tensor:
    registry.get_op(op)  # loads the ops (importing kernel_lab.ops before the registry does not)
    from .rows import normalize_dim

    normalize_dim(dim, x.dim())
    if variant != AUTO:
        named_variant(op, variant)
    return torch.empty_like(x, memory_format=torch.contiguous_format)


def _softmax_double_backward(y, dy, g, dim):
    """Gradients of dx = y * (dy - <y, dy>) with respect to (y, dy), given g = d(loss)/dx."""
    yg = (y * g).sum(dim, keepdim=True)
    return g * (dy - (y * dy).sum(dim, keepdim=True)) - dy * yg, y * (g - yg)


def _log_softmax_double_backward(y, dy, g, dim):
    """Gradients of dx = dy - exp(y) * sum(dy) with respect to (y, dy), given g."""
    p = torch.exp(y)
    return -g * p * dy.sum(dim, keepdim=True), g - (g * p).sum(dim, keepdim=True)


def _define(op: str, backward: str, double_backward):
    """Define ``kernel_lab::<op>`` and ``kernel_lab::<backward>``; return both custom ops.

    Both ops take one output-shaped input and differentiate as ``dx = backward(y, dy)``;
    ``double_backward(y, dy, g, dim) -> (grad_y, grad_dy)`` differentiates the backward.
    """

    @torch.library.custom_op(f"kernel_lab::{backward}", mutates_args=())
    def backward_op(y: torch.Tensor, dy: torch.Tensor, dim: int, variant: str) -> torch.Tensor:
        return _run(backward, variant, (y, dy), dim)

    @backward_op.register_fake
    def _(y, dy, dim, variant):
        return _fake(backward, variant, y, dim)

    def setup_backward(ctx, inputs, output):
        y, dy, ctx.dim, _ = inputs
        ctx.save_for_backward(y, dy)

    def double_backward_fn(ctx, g):
        y, dy = ctx.saved_tensors
        return (*double_backward(y, dy, g, ctx.dim), None, None)

    backward_op.register_autograd(double_backward_fn, setup_context=setup_backward)

    @torch.library.custom_op(f"kernel_lab::{op}", mutates_args=())
    def forward_op(
        x: torch.Tensor, dim: int, variant: str, backward_variant: str
    ) -> torch.Tensor:
        return _run(op, variant, (x,), dim)

    @forward_op.register_fake
    def _(x, dim, variant, backward_variant):
        if backward_variant != AUTO:
            named_variant(backward, backward_variant)
        return _fake(op, variant, x, dim)

    def setup_context(ctx, inputs, output):
        _, ctx.dim, _, ctx.backward_variant = inputs
        ctx.save_for_backward(output)

    def backward_fn(ctx, grad):
        (y,) = ctx.saved_tensors
        return backward_op(y, grad, ctx.dim, ctx.backward_variant), None, None, None

    forward_op.register_autograd(backward_fn, setup_context=setup_context)
    return forward_op, backward_op


softmax_op, softmax_backward_op = _define(
    "softmax", "softmax_backward", _softmax_double_backward
)
log_softmax_op, log_softmax_backward_op = _define(
    "log_softmax", "log_softmax_backward", _log_softmax_double_backward
)


BACKWARD_OPS = {"softmax": softmax_backward_op, "log_softmax": log_softmax_backward_op}


def _functorch_active() -> bool:
    active = getattr(torch._C, "_are_functorch_transforms_active", None)
    return bool(active and active())


class _EagerRowOp(torch.autograd.Function):
    """``kernel_lab::softmax`` / ``log_softmax`` for plain eager calls: the op's forward
    (``_run``) and autograd formula without the dispatcher (module docstring, "Plain eager
    calls"). ``backward`` runs the backward variant directly, or, when the backward is itself
    differentiated (``create_graph``), through the backward custom op and its formula."""

    @staticmethod
    def forward(ctx, x, name, dim, variant, backward_variant):
        y = _run(name, variant, (x,), dim)
        ctx.save_for_backward(y)
        ctx.name, ctx.dim, ctx.backward_variant = name, dim, backward_variant
        return y

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        if torch.is_grad_enabled():  # create_graph=True: keep dx differentiable
            dx = BACKWARD_OPS[ctx.name](y, grad, ctx.dim, ctx.backward_variant)
        else:
            dx = _run(f"{ctx.name}_backward", ctx.backward_variant, (y, grad), ctx.dim)
        return dx, None, None, None, None


def _nothing_watches(x: torch.Tensor) -> bool:
    """A plain tensor, and no dispatch mode or functorch transform that needs to see
    ``kernel_lab::<op>`` (the caller knows it is not compiling)."""
    return (type(x) is torch.Tensor and _get_current_dispatch_mode() is None
            and not _functorch_active())


def eager_fast_path(x: torch.Tensor) -> bool:
    """Whether a call on ``x`` may skip the custom op (:class:`_EagerRowOp`): eager, a plain
    tensor, no dispatch mode or functorch transform that needs to see ``kernel_lab::<op>``."""
    return not torch.compiler.is_compiling() and _nothing_watches(x)


def _call(op, name: str, x, dim, variant, backward_variant) -> torch.Tensor:
    variant, backward_variant = variant or AUTO, backward_variant or AUTO
    if torch.compiler.is_compiling():
        return op(x, dim, variant, backward_variant)
    for op_name, v in ((name, variant), (f"{name}_backward", backward_variant)):
        if v != AUTO:  # eager: fail before anything runs
            named_variant(op_name, v)
    if _nothing_watches(x):
        if torch.autograd.profiler._is_profiler_enabled:  # traces still name the op
            with torch.profiler.record_function(f"kernel_lab::{name}"):
                return _eager(x, name, dim, variant, backward_variant)
        return _eager(x, name, dim, variant, backward_variant)
    return op(x, dim, variant, backward_variant)


def _eager(x, name: str, dim: int, variant: str, backward_variant: str) -> torch.Tensor:
    if x.requires_grad and torch.is_grad_enabled():
        return _EagerRowOp.apply(x, name, dim, variant, backward_variant)
    return _run(name, variant, (x,), dim)  # no graph to record


def softmax(
    x: torch.Tensor,
    dim: int = -1,
    variant: str | None = None,
    *,
    backward_variant: str | None = None,
) -> torch.Tensor:
    """``torch.softmax(x, dim)`` computed by a lab variant; differentiable and compilable.

    ``variant``: a ``softmax`` variant name, or None / ``"auto"`` for the best one for ``x``
    (see :func:`choose_variant`). ``backward_variant``: the same for ``softmax_backward``.
    """
    return _call(softmax_op, "softmax", x, dim, variant, backward_variant)


def log_softmax(
    x: torch.Tensor,
    dim: int = -1,
    variant: str | None = None,
    *,
    backward_variant: str | None = None,
) -> torch.Tensor:
    """``torch.log_softmax(x, dim)`` computed by a lab variant; differentiable and compilable.

    ``variant``: a ``log_softmax`` variant name or None / ``"auto"``; ``backward_variant``: a
    ``log_softmax_backward`` one.
    """
    return _call(log_softmax_op, "log_softmax", x, dim, variant, backward_variant)
