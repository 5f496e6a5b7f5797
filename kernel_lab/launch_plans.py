"""Recorded launches, replayed: the per-call path of a CUDA variant on a signature seen before.

A CUDA launcher spends most of a small call in Python: choosing its shape, checking alignment,
packing arguments. For one call signature (shape, strides, dtype, device, the data pointer's
offset in a 128-byte line: what every choice depends on) all of that comes out the same every
time, so :class:`ReplayingCall` runs the launcher once under :func:`interop.record_launches`
and, when that call was exactly one launch whose pointer arguments are the inputs and the
fresh output, replays it: allocate the output, write the new pointers, one ``cuLaunchKernel``.

Never replayed (the launcher runs every time): calls of several launches or none, launches
with any other pointer (the chunk kernels' flag words carry a per-launch epoch), inputs the
launcher copied first (non-contiguous rows, another dim). A hot reload loads a new function:
the replay notices (it asks the source for the function, a cached check) and records anew.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from . import interop


class _Replay:
    __slots__ = ("launch", "slots", "args")

    def __init__(self, launch: interop.Launch, slots: list[tuple[int, int]]) -> None:
        self.launch = launch
        self.slots = slots  # (argument index, -1 for the output or the input's index)
        self.args = list(launch.args)

    def __call__(self, tensors: tuple) -> torch.Tensor | None:
        """The output, or None when the kernel was reloaded since the recording."""
        launch = self.launch
        src, expr = launch.source
        if src.function(expr, launch.device_index) is not launch.fn:
            return None
        out = torch.empty_like(tensors[0], memory_format=torch.contiguous_format)
        args = self.args
        for i, which in self.slots:
            args[i] = (out if which < 0 else tensors[which]).data_ptr()
        interop.launch(launch.fn, launch.grid, launch.block, tuple(args),
                       device_index=launch.device_index, shared_mem=launch.shared_mem,
                       signature=launch.signature, source=launch.source)
        return out


def _pointer_slots(signature: str) -> list[int]:
    """Indices of the ``Q`` (pointer) arguments in a pack signature."""
    codes, i = [], 0
    while i < len(signature):
        code = signature[i]
        codes.append(code)
        i += 3 if signature[i + 1:i + 3] in ("4x",) else 1
    return [k for k, c in enumerate(codes) if c == "Q"]


def _replay_of(launches: list, tensors: tuple, out: Any) -> _Replay | None:
    """A replay of this call's recorded launches, or None if they cannot be replayed."""
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
    for i in _pointer_slots(launch.signature):
        which = owners.get(launch.args[i])
        if which is None:  # a pointer that is neither an input nor the output
            return None
        slots.append((i, which))
    if -1 not in {w for _, w in slots}:
        return None
    return _Replay(launch, slots)


class ReplayingCall:
    """``fn(*tensors, **kw)`` for one call signature: recorded on its first call, replayed
    after when that call was one plain launch (module docstring)."""

    __slots__ = ("fn", "replay", "recorded")

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn
        self.replay: _Replay | None = None
        self.recorded = False

    def __call__(self, tensors: tuple, kw: dict) -> Any:
        replay = self.replay
        if replay is not None:
            out = replay(tensors)
            if out is not None:
                return out
            self.replay, self.recorded = None, False  # reloaded: record the new kernel
        if self.recorded or interop._recorder is not None:  # a caller is recording already
            return self.fn(*tensors, **kw)
        with interop.record_launches() as launches:
            out = self.fn(*tensors, **kw)
        self.recorded = True
        self.replay = _replay_of(launches, tensors, out)
        return out


def signature(tensors: tuple) -> tuple:
    """Everything of the tensors a launcher's choices may depend on: shape, strides, dtype,
    device, the data pointer's offset in a 128-byte line (vector and line heads), and whether
    autograd would record the call."""
    return tuple(None if t is None else (t.shape, t.stride(), t.dtype, t.get_device(),
                                         t.data_ptr() & 127, t.requires_grad) for t in tensors)


_calls: dict[tuple, ReplayingCall] = {}
_MAX_CALLS = 4096


def replaying(key: tuple, fn: Callable[..., Any]) -> ReplayingCall:
    """The process-wide :class:`ReplayingCall` of ``fn`` for ``key`` (a call signature)."""
    call = _calls.get(key)
    if call is None:
        if len(_calls) >= _MAX_CALLS:
            _calls.clear()
        call = _calls[key] = ReplayingCall(fn)
    return call
