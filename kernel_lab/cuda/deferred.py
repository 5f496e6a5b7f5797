"""Deferred index validation: kernels record a bad class index, the host raises on a later call.

Checking targets before a launch costs a host synchronization (``bool(bad.any())``). Instead, a
kernel that meets a target outside [0, C) that is not ``ignore_index`` gives that row a NaN loss
and records it in its device's two flag words:

* ``first`` (device memory, int64): ``atomicMin`` of ``row << 32 | (value + 2^31)`` (row and
  value saturated to 31 / 32 bits), so it holds the first bad row of every launch since the
  last report, whatever order the rows ran in; ``SENTINEL`` when none.
* ``raised`` (pinned host memory, int32, mapped into the device's address space): the kernel
  stores 1. The host reads it with a plain load (no CUDA call, no synchronization).

:func:`raise_pending`, called at the start of every cross-entropy call (and meant for the start
of any ``kernel_lab`` call), does nothing while no flag is raised. When one is, it waits for the
device (the only synchronization, on the error path), reads ``first``, resets both words and
raises a one-line :class:`UnsupportedInputError` naming the first bad index. So a bad target
never trains silently: its loss is NaN at once, and the error comes at the first call after the
flagging kernel has run (the host sees the flag as soon as the kernel stores it; a GPU that runs
far behind the host may delay it by the depth of its queue). A CUDA-graph replay writes the same
words (their addresses are fixed per device for the process), so a replayed call flags too;
during a capture nothing is raised (a capture cannot synchronize), the next call does.

Nothing here names an op: the words live per device, shared by every kernel that validates
indices this way (today the cross-entropy CUDA and Triton forwards).
"""

from __future__ import annotations

import threading

import torch

from kernel_lab.base.errors import UnsupportedInputError

SENTINEL = 2**63 - 1  # "no bad row": larger than any packed key
_ROW_MAX = 2**31 - 1
_VALUE_BIAS = 2**31


class Flags:
    """One device's flag words: ``first`` (int64 on the device), ``raised`` (int32 in mapped
    pinned host memory on CUDA, a CPU tensor for the Triton interpreter on the CPU), and the
    addresses a CUDA kernel takes."""

    __slots__ = ("device", "first", "raised", "_view", "first_ptr", "raised_ptr")

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.first = torch.full((1,), SENTINEL, dtype=torch.int64, device=device)
        cuda = device.type == "cuda"
        self.raised = torch.zeros(1, dtype=torch.int32, pin_memory=cuda)
        # a plain host load per check: a memoryview item is a Python int (18 ns; numpy 40 ns)
        self._view = memoryview(self.raised.numpy())
        self.first_ptr = self.first.data_ptr()
        self.raised_ptr = _device_pointer(self.raised.data_ptr(), device) if cuda else 0

    def is_raised(self) -> bool:
        return bool(self._view[0])


def _device_pointer(host_ptr: int, device: torch.device) -> int:
    """The device address of pinned host memory. PyTorch pins with ``cudaHostAlloc``, and on a
    platform with unified addressing (every 64-bit CUDA platform) such memory is mapped into
    every device's address space at its host address (CUDA Programming Guide, "Unified Virtual
    Address Space"), so the kernels take the host pointer itself."""
    return host_ptr


_flags: dict[torch.device, Flags] = {}
FLAGS = _flags  # (read-only outside): empty until a kernel made flag words (plans: fixed pointers)
# each device's raised word as a host view, for hot paths that read it inline (no call):
#     for raised in deferred.RAISED:
#         if raised[0]:
#             deferred.raise_pending()
RAISED: list = []
_lock = threading.Lock()


def flags(device: torch.device) -> Flags:
    """The flag words of ``device`` (made once per device and process, never freed: a captured
    CUDA graph keeps their addresses)."""
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    got = _flags.get(device)
    if got is None:
        with _lock:
            got = _flags.get(device)
            if got is None:
                got = _flags[device] = Flags(device)
                RAISED.append(got._view)
    return got


def flags_or_none(device: torch.device) -> Flags | None:
    """:func:`flags`, or None when they do not exist yet and a CUDA graph is being captured:
    they cannot be allocated then (the graph's pool would own them). A graph captured before
    any eager call on its device gives bad rows NaN without flagging them; warming up before
    capture, as CUDA graphs require anyway, makes them."""
    got = _flags.get(device)
    if got is not None:
        return got
    if device.type == "cuda" and torch.cuda.is_current_stream_capturing():
        return None
    return flags(device)


def pack(row: int, value: int) -> int:
    """The key a kernel atomicMin's for bad row ``row`` holding target ``value`` (as the kernels
    compute it)."""
    row = min(max(row, 0), _ROW_MAX)
    value = min(max(value, -_VALUE_BIAS), _VALUE_BIAS - 1)
    return (row << 32) | (value + _VALUE_BIAS)


def unpack(key: int) -> tuple[int, int]:
    """(row, value) of a key; a row of 2^31 - 1 or a value at the int32 limits is saturated."""
    return key >> 32, (key & 0xFFFFFFFF) - _VALUE_BIAS


def raise_pending() -> None:
    """Raise UnsupportedInputError if a kernel flagged a bad index since the last report (module
    docstring); a host load per device otherwise. No-op during a CUDA-graph capture. Every
    ``kernel_lab.run`` and drop-in call starts with it."""
    if not _flags or torch.compiler.is_compiling():  # none made yet (one test); or traced:
        return  # a compiled graph reports on the next eager call
    for f in tuple(_flags.values()):
        if f.is_raised():
            _report(f)


def _report(f: Flags) -> None:
    if f.device.type == "cuda":
        if torch.cuda.is_current_stream_capturing():
            return  # the next call outside the capture reports it
        mode = torch.cuda.get_sync_debug_mode()
        torch.cuda.set_sync_debug_mode(0)  # the error path may wait: training stops here
        try:
            torch.cuda.synchronize(f.device)  # every flagging launch has finished
            key = int(f.first.cpu()[0])
            f.first.fill_(SENTINEL)
            torch.cuda.synchronize(f.device)
        finally:
            torch.cuda.set_sync_debug_mode(mode)
    else:
        key = int(f.first[0])
        f.first.fill_(SENTINEL)
    f._view[0] = 0
    if key == SENTINEL:  # a flag without a key: a kernel stores both, so never; say so
        raise UnsupportedInputError("a class index out of range was flagged on "
                                    f"{f.device} (no row recorded)")
    row, value = unpack(key)
    raise UnsupportedInputError(
        f"target[{row}] = {value} is out of range for its classes and not ignore_index (a "
        f"kernel_lab cross-entropy call on {f.device} since the last check; its loss is NaN; "
        f"validate='sync' raises at that call)")


def clear() -> None:
    """Forget a pending flag without raising (tests)."""
    for f in tuple(_flags.values()):
        if f.device.type == "cuda":
            torch.cuda.synchronize(f.device)
        f.first.fill_(SENTINEL)
        f._view[0] = 0
