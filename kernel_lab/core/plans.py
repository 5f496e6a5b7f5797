"""Plans: what one call signature runs, built once, then looked up.

A *plan* is made the first time a call signature is seen - what is called (a variant by name,
or an op through a drop-in with its variant choice), the call's keywords, and every tensor's
shape, strides, dtype, device, data-pointer offset in a 128-byte line and ``requires_grad``
(:func:`signature`). Making it picks the variant (``"auto"`` resolved on the real tensors),
runs every check that holds for the whole signature (``supports()``: dtypes, the op's input
contract, the variant's limits) and, for a CUDA launcher, records its launches so later calls
replay them (:class:`ReplayingCall`). A later call with that signature is one dictionary lookup
and the launches.

One cache (:data:`PLANS`) holds the plans of ``kernel_lab.run()``, the drop-ins and their
backwards, and the recorded calls of launchers no variant names (:func:`for_launcher`:
cross-entropy's fused step). A registration clears it (``registry.on_change``): a new variant
may change what "auto" picks. A hot-reloaded kernel is noticed by the replay (it asks the source
for the function, a cached stat) and recorded anew.

Layers: the API (``run``, :mod:`kernel_lab.core.custom_ops`) -> this module (pick, check, plan) ->
the variant's launcher -> :mod:`kernel_lab.cuda.interop` (launch) -> :mod:`kernel_lab.cuda.jit`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

from kernel_lab.core import contract, dispatch, registry
from kernel_lab.core.dispatch import AUTO
from kernel_lab.cuda import deferred, interop, jit

MAX_PLANS = 4096  # signatures kept before the cache starts over (shape-polymorphic callers)


# -- recorded launches, replayed ----------------------------------------------------------------
class _Replay:
    """One recorded launch with its pointer arguments re-pointed at each call's tensors: what it
    is (for tools such as ``bench/overhead.py --pieces``) and its one-frame call
    (:meth:`interop.PreparedLaunch.replayer`)."""

    __slots__ = ("launch", "owners", "module", "load", "expr", "fn", "device_index", "dense")

    def __init__(self, launch: interop.Launch, slots: list[tuple[int, int]],
                 dense: bool = False) -> None:
        self.launch = interop.PreparedLaunch(launch, [i for i, _ in slots])
        self.owners = tuple(w for _, w in slots)  # per pointer slot: -1 output, else input k
        source, self.expr = launch.source
        self.module = source.module  # the CudaModule: its re-stat time and sources' key
        self.load = self.module.function  # (expr, device) -> the function, reloaded if edited
        self.fn, self.device_index = launch.fn, launch.device_index
        # the first input is contiguous in this signature: empty_like's default layout is the
        # contiguous one, without the memory_format keyword's parsing (0.2 us a call)
        self.dense = dense

    def call(self, fallback: Callable[[tuple, dict], Any]) -> Callable[[tuple, dict], Any]:
        """``call(tensors, kw)`` -> the output; ``fallback(tensors, kw)`` once reloaded."""
        return self.launch.replayer(self.owners, self.dense, self.module, self.expr, self.fn,
                                    fallback)


def pointer_slots(signature: str) -> list[int]:
    """Indices of the ``Q`` (pointer) arguments in an :func:`interop.pack_args` signature."""
    codes, i = [], 0
    while i < len(signature):
        codes.append(signature[i])
        i += 3 if signature[i + 1:i + 3] == "4x" else 1
    return [k for k, c in enumerate(codes) if c == "Q"]


ARENA_ALIGN = 512  # the caching allocator's block alignment: a scratch buffer's address class


class _FreshReplay:
    """Every launch of one recorded call whose launcher declared the tensors it allocated
    (:func:`interop.fresh`: outputs and scratch): a call allocates them anew, points each
    launch's pointer slots at them and at the inputs, and launches in the recorded order. The
    scratch (fresh tensors the call does not return) shares one allocation, each at a
    512-byte-aligned offset: one ``torch.empty`` instead of one each (3-6 us each on the host of
    an H100 machine). The launcher's guards (:func:`interop.guard`) must hold, else it runs
    itself."""

    __slots__ = ("steps", "makers", "places", "outputs", "single", "guards", "fn", "loads")

    def __init__(self, steps: list, specs: list, outputs: list[int], single: bool,
                 guards: list, fn: Callable[..., Any]) -> None:
        # steps: (PreparedLaunch, owners) - per pointer slot k >= 0 for input k, ~j for fresh j
        self.steps = [(interop.PreparedLaunch(launch, slots), owners)
                      for launch, slots, owners in steps]
        self.single, self.guards, self.fn = single, tuple(guards), fn
        # what a call allocates: each output, then one arena for the scratch; places: per
        # fresh tensor j, (which allocation, byte offset) - its pointer in a replay
        made = [specs[j] for j in outputs]
        places = {j: (k, 0) for k, j in enumerate(outputs)}
        scratch = [j for j in range(len(specs)) if j not in places]
        if len(scratch) == 1 or len({specs[j][2] for j in scratch}) > 1:  # each its own
            for j in scratch:
                places[j] = (len(made), 0)
                made.append(specs[j])
        elif scratch:
            total = 0
            for j in scratch:
                shape, dtype, _ = specs[j]
                places[j] = (len(made), total)
                total += -(-shape.numel() * dtype.itemsize // ARENA_ALIGN) * ARENA_ALIGN
            made.append(((total,), torch.uint8, specs[scratch[0]][2]))
        self.outputs = list(range(len(outputs)))
        self.places = tuple(places[j] for j in range(len(specs)))
        # each allocation's torch.empty with its arguments bound: sizes as separate ints parse
        # in half the time of a torch.Size (0.8 vs 1.75 us on a CPU); a 0-d one takes ()
        self.makers = tuple(functools.partial(torch.empty, *(shape or [()]), dtype=dtype,
                                              device=device) for shape, dtype, device in made)
        loads = {}  # one reload check a kernel: (module, its key, expr, device, function)
        for launch, _, _ in steps:
            source, expr = launch.source
            loads[expr, launch.device_index, id(launch.fn)] = (
                source.module, source.module.key, expr, launch.device_index, launch.fn)
        self.loads = tuple(loads.values())

    def call(self, fallback: Callable[[tuple, dict], Any]) -> Callable[[tuple, dict], Any]:
        """``call(tensors, kw)`` -> the outputs; ``fallback(tensors, kw)`` once reloaded."""
        makers, places, outputs, single = self.makers, self.places, self.outputs, self.single
        loads, guards, fn = self.loads, self.guards, self.fn
        launch = interop.sequence_runner(self.steps)

        def call(tensors: tuple, kw: dict) -> Any:
            now = jit.clock()  # one clock read for every kernel's reload check
            for module, key, expr, dev, f in loads:  # (PreparedLaunch.replayer's reload check)
                if ((now >= module.due_at or module.key != key)
                        and module.function(expr, dev) is not f):
                    return fallback(tensors, kw)
            for obj, attribute, value in guards:
                if getattr(obj, attribute) != value:  # another mode: the launcher's own path
                    return _contiguous(fn(*tensors, **kw))
            made = [make() for make in makers]
            launch(tensors, [made[k].data_ptr() + offset for k, offset in places])
            if single:
                return made[0]
            return tuple(made[:len(outputs)]) if outputs else None

        return call


def _contiguous(out: Any) -> Any:
    if type(out) is torch.Tensor:
        return out if out.is_contiguous() else out.contiguous()
    return tuple(o.contiguous() for o in out)


def _fresh_replay_of(rec: interop.Recording, tensors: tuple, out: Any,
                     fn: Callable[..., Any]) -> _FreshReplay | None:
    """A replay of a call whose launcher declared its fresh tensors (or that returned None: it
    wrote into its inputs), or None where a pointer is neither an input, a fresh tensor made
    before its launch, null nor a device's flag words (fixed for the process), an output is not
    a fresh tensor, or two inputs alias."""
    single = isinstance(out, torch.Tensor)
    outs = (out,) if single else () if out is None else out
    if not rec or not isinstance(outs, tuple):
        return None
    fixed = {0}
    for f in deferred.FLAGS.values():
        fixed.update((f.first_ptr, f.raised_ptr))
    where: dict[int, int] = {}
    for k, t in enumerate(tensors):
        if t is None:
            continue
        if type(t) is not torch.Tensor or t.data_ptr() in where or t.data_ptr() in fixed:
            return None
        where[t.data_ptr()] = k
    specs = []
    for j, t in enumerate(rec.fresh):
        if t.data_ptr() in where or t.data_ptr() in fixed or not t.is_contiguous():
            return None
        where[t.data_ptr()] = ~j
        specs.append((t.shape, t.dtype, t.device))
    outputs = [next((j for j, t in enumerate(rec.fresh) if t is o), None) for o in outs]
    if None in outputs:
        return None
    steps = []
    for k, launch in enumerate(rec):
        if launch.source is None or launch.signature is None:
            return None
        slots = [i for i in pointer_slots(launch.signature) if launch.args[i] not in fixed]
        owners = tuple(where.get(launch.args[i]) for i in slots)
        # a fresh tensor made after this launch holds no pointer of it: that address was a
        # temporary's (a copy of an input), freed and handed on by the caching allocator
        if any(w is None or (w < 0 and rec.born[~w] > k) for w in owners):
            return None
        steps.append((launch, slots, owners))
    return _FreshReplay(steps, specs, outputs, single, rec.guards, fn)


def _replay_of(launches: interop.Recording, tensors: tuple, out: Any,
               fn: Callable[..., Any]) -> _Replay | _FreshReplay | None:
    """A replay of this call's recorded launches, or None if they cannot be replayed: a
    launcher that refused it; one that declared fresh tensors or guards (:func:`_fresh_replay_of`);
    else not exactly one launch, or a pointer that is neither an input nor the fresh output (the
    chunk kernels' flag words carry a per-launch epoch), or inputs the launcher copied first.
    A launcher that returns None wrote into its inputs: its launches replay as they are."""
    if launches.refused:
        return None
    if launches.fresh or launches.guards or out is None:
        return _fresh_replay_of(launches, tensors, out, fn)
    if len(launches) != 1 or not isinstance(out, torch.Tensor):
        return None
    launch = launches[0]
    x = tensors[0]
    if (launch.source is None or launch.signature is None or not out.is_contiguous()
            or out.shape != x.shape or out.dtype != x.dtype or out.device != x.device):
        return None
    owners = {out.data_ptr(): -1}
    for k, t in enumerate(tensors):
        if t is None:
            continue
        if t.data_ptr() in owners:  # aliased inputs: which is which is ambiguous
            return None
        owners[t.data_ptr()] = k
    slots = []
    for i in pointer_slots(launch.signature):
        which = owners.get(launch.args[i])
        if which is None:
            return None
        slots.append((i, which))
    if -1 not in {w for _, w in slots}:
        return None
    return _Replay(launch, slots, dense=x.is_contiguous())


class ReplayingCall:
    """``fn(*tensors, **kw)`` for one call signature: recorded on its first call under
    :func:`interop.record_launches`, replayed after when that call was one plain launch into a
    fresh output, or launches on tensors its launcher declared fresh (:class:`_FreshReplay`).
    ``install(call)`` hears of each replay made (a :class:`Plan` calls it directly from then
    on) and of its end (``None``: the kernel was reloaded, calls come here to be recorded).

    A replay repeats the launches and the fresh allocations alone: a launcher whose call also
    runs a torch op that writes (an in-place scale, a fill of an output) must keep that op out
    of the recorded call or declare :func:`interop.refuse_replay`, or a replay skips it."""

    __slots__ = ("fn", "replay", "recorded", "hot", "install")

    def __init__(self, fn: Callable[..., Any],
                 install: Callable[[Callable | None], None] | None = None) -> None:
        self.fn = fn
        self.replay: _Replay | _FreshReplay | None = None
        self.hot: Callable[[tuple, dict], Any] | None = None  # the replay's call
        self.recorded = False
        self.install = install

    def __call__(self, tensors: tuple, kw: dict) -> Any:
        hot = self.hot
        if hot is not None:
            return hot(tensors, kw)
        if self.recorded or interop.recording():  # a caller is recording already
            return self.fn(*tensors, **kw)
        with interop.record_launches() as launches:
            out = self.fn(*tensors, **kw)
        self.recorded = True
        self.replay = _replay_of(launches, tensors, out, self.fn)
        if self.replay is not None:
            self.hot = self.replay.call(self._reloaded)
            if self.install is not None:
                self.install(self.hot)
        return out

    def _reloaded(self, tensors: tuple, kw: dict) -> Any:
        """The replay's kernel was hot-reloaded: record the new one on this call."""
        self.replay = self.hot = None
        self.recorded = False
        if self.install is not None:
            self.install(None)
        return self(tensors, kw)


# -- plans --------------------------------------------------------------------------------------
class Plan:
    """What one call signature runs: the variant (picked and checked once) and how it is called.

    ``native``: a drop-in whose pick is PyTorch's own differentiable op, and whose backward's
    pick would be PyTorch's too, so PyTorch's autograd records the call itself. ``op`` and
    ``backward_op``: a drop-in's :class:`~kernel_lab.core.contract.Op` and its backward's (the
    autograd node reads them from the plan, not the registry, each call)."""

    __slots__ = ("variant", "call", "native", "fn", "replaying", "run", "op", "backward_op")

    def __init__(self, variant: registry.Variant, native: bool = False,
                 op: contract.Op | None = None) -> None:
        self.variant, self.native, self.fn = variant, native, variant.fn
        self.op = op
        grad = op.autograd if op is not None else None
        self.backward_op = registry.get_op(grad.backward) if grad and grad.backward else None
        # call(tensors, kw): the launcher itself, or its launches recorded, then the replay's
        # own call once there is one; run(tensors, kw): the same, outputs contiguous
        self.replaying = (ReplayingCall(variant.fn, self._install)
                          if variant.backend == "cuda" else None)
        self.call = self.replaying or self._direct
        self.run = self._contiguous

    def _install(self, hot: Callable[[tuple, dict], Any] | None) -> None:
        # a replay's outputs are fresh contiguous tensors: its call is run() as it is
        self.call = hot if hot is not None else self.replaying
        self.run = hot if hot is not None else self._contiguous

    def _direct(self, tensors: tuple, kw: dict) -> Any:
        return self.fn(*tensors, **kw)

    def _contiguous(self, tensors: tuple, kw: dict) -> Any:
        return _contiguous(self.call(tensors, kw))

    def __call__(self, tensors: tuple, kw: dict) -> Any:
        """Run the variant; outputs come back contiguous (no copy when they already are)."""
        return self.run(tensors, kw)


def signature(tensors: tuple) -> tuple:
    """Everything of the tensors a pick or a launcher's choices may depend on: shape, strides,
    dtype, device, the data pointer's offset in a 128-byte line (vector and line heads), and
    whether autograd would record the call. Non-tensor inputs (None) stand for themselves."""
    return tuple((t.shape, t.stride(), t.dtype, t.get_device(), t.data_ptr() & 127,
                  t.requires_grad) if type(t) is torch.Tensor else t for t in tensors)


# call signature key -> its plan; the hot paths (run() here, the drop-ins' custom_ops.row_call)
# read it inline, and row_call holds it: cleared in place, never rebound
PLANS: dict[tuple, Plan] = {}


def _store(key: tuple, plan: Plan) -> Plan:
    if len(PLANS) >= MAX_PLANS:
        PLANS.clear()
    PLANS[key] = plan
    return plan


@registry.on_change
def clear() -> None:
    """Forget every plan (the next call of each signature plans anew). A plan keeps what its
    first call chose whatever a launcher's tuning constant says later: whoever patches one
    calls :func:`forget`."""
    PLANS.clear()


def forget(module) -> None:
    """What a patched tuning constant of ``module`` chose: every plan (:func:`clear`) and the
    module's memoized rules (its ``functools`` caches). A test or an A/B (``bench/loss_step.py
    --ab``) calls it after setting the constant and after restoring it."""
    clear()
    for value in vars(module).values():
        if callable(getattr(value, "cache_clear", None)):
            value.cache_clear()


def for_variant(name: str, tensors: tuple, kw: dict) -> Plan:
    """The plan of ``run(name, *tensors, **kw)``: the variant checked once for the signature."""
    key = (name, *kw.items(), *signature(tensors))  # run() builds it inline for one tensor
    plan = PLANS.get(key)
    if plan is None:
        variant = registry.get(name)
        registry.ensure_supported(variant, *tensors, **kw)
        plan = _store(key, Plan(variant))
    return plan


_REFUSED = object()  # a signature's plan slot when the variant does not take it (:func:`runs`)


def runs(name: str, tensors: tuple, kw: dict) -> bool:
    """Whether variant ``name`` takes ``name(*tensors, **kw)`` here (``dispatch.can_run``),
    decided once per call signature and kept in the one cache: the variant's plan, or a refusal
    (a path that launches the variant's kernels itself, cross-entropy's fused step, asks)."""
    key = (runs, name, *kw.items(), *signature(tensors))  # apart from run()'s plans
    plan = PLANS.get(key)
    if plan is None:
        variant = registry.get(name)
        plan = _store(key, Plan(variant)
                      if dispatch.can_run(variant, *tensors, **kw) else _REFUSED)
    return plan is not _REFUSED


def for_launcher(fn: Callable[..., Any], tensors: tuple, kw: dict,
                 admits: Callable[[], bool] | None = None) -> ReplayingCall | None:
    """The recorded call of ``fn(*tensors, **kw)`` for this call signature: a path that launches
    kernels with no variant of its own (cross-entropy's fused step and its scale) recorded on
    its first call and replayed after (:class:`ReplayingCall`), kept in the one cache; None
    where ``admits()`` (if given) refused the signature when it was first seen. ``kw``'s values
    are part of the key."""
    key = (fn, *kw.values(), *signature(tensors))
    call = PLANS.get(key)
    if call is None:
        call = _store(key, ReplayingCall(fn) if admits is None or admits() else _REFUSED)
    return None if call is _REFUSED else call


def for_op(op: str, variant: str, backward_variant: str, tensors: tuple, kw: dict) -> Plan:
    """The plan of a drop-in call of ``op`` by ``variant`` (a name or ``"auto"``), whose
    backward (if any) runs ``backward_variant``."""
    if len(tensors) == 1:  # the common case, inline (per-call hot path)
        x = tensors[0]
        key = (op, variant, backward_variant, *kw.values(), x.shape, x.stride(), x.dtype,
               x.get_device(), x.data_ptr() & 127, x.requires_grad)
    else:
        key = (op, variant, backward_variant, *kw.values(), *signature(tensors))
    plan = PLANS.get(key)
    if plan is not None:
        return plan
    dispatch.check_names(op, variant, backward_variant)
    v = dispatch.pick(op, variant, tensors, kw)
    return _store(key, Plan(v, native=_native(op, v, variant, backward_variant, tensors, kw),
                            op=registry.get_op(op)))


def run_op(op: str, variant: str, tensors: tuple, kw: dict) -> Any:
    """Run ``op`` by ``variant`` (a name or ``"auto"``) through its plan, outputs contiguous:
    what a custom op's implementation and a variant made of other ops call (no autograd)."""
    return for_op(op, variant, AUTO, tensors, kw).run(tensors, kw)


def _native(op_name: str, v: registry.Variant, variant: str, backward_variant: str,
            tensors: tuple, kw: dict) -> bool:
    """Whether PyTorch's autograd may record the call itself (:class:`Plan`)."""
    op = registry.get_op(op_name)
    if not (variant == AUTO and backward_variant == AUTO and op.auto is not None
            and op.auto.portable_autograd and v.name == op.auto.portable
            and op.autograd is not None and op.autograd.backward):
        return False
    bop = registry.get_op(op.autograd.backward)
    if bop.auto is None:
        return False
    like = tensors[0].contiguous()  # output-shaped tensors: what the backward would take
    bkw = {k: kw.get(k, d) for k, d in bop.kwargs.items()}
    return dispatch.choose_variant(bop.name, *[like] * len(bop.inputs),
                                   **bkw).name == bop.auto.portable


def run(name: str, *inputs: Any, **kw: Any) -> Any:
    """Run variant ``name`` on ``inputs``.

    Inputs are torch tensors or any DLPack producer (a CuPy array comes back as a CuPy array,
    zero-copy both ways). Input checks happen before anything is launched, once per call
    signature (:func:`for_variant`). A bad class index an earlier kernel flagged raises first
    (:mod:`kernel_lab.cuda.deferred`).
    """
    for raised in deferred.RAISED:  # (deferred.raise_pending, read inline)
        if raised[0]:
            deferred.raise_pending()
    if len(inputs) == 1 and type(inputs[0]) is torch.Tensor:  # per-call hot path
        x = inputs[0]
        sig = (x.shape, x.stride(), x.dtype, x.get_device(), x.data_ptr() & 127, x.requires_grad)
        try:  # for_variant's key and lookup, inline: one frame fewer a call (no keywords: no
            # unpacking of them either, 0.15 us)
            plan = PLANS.get((name, *kw.items(), sig) if kw else (name, sig))
        except TypeError:  # an unhashable keyword: planned below, or run without a plan
            plan = None
        if plan is not None:
            return plan.call(inputs, kw)
        tensors, back = inputs, None
    else:
        tensors, back = interop.to_torch(inputs)
    try:
        plan = for_variant(name, tensors, kw)
    except TypeError:  # an unhashable keyword or input: checked and run without a plan
        variant = registry.get(name)
        registry.ensure_supported(variant, *tensors, **kw)
        out = variant.fn(*tensors, **kw)
    else:
        out = plan.call(tensors, kw)
    return out if back is None else back(out)
