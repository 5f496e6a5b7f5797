"""The seam between PyTorch and CUDA launches: DLPack in and out, streams, devices, pointers.

* ``to_torch(inputs)``: torch tensors pass through untouched (the fast path: no DLPack at all);
  any other DLPack producer (CuPy, NumPy, JAX ...) is wrapped zero-copy with ``torch.from_dlpack``
  and the result is handed back in the caller's framework, zero-copy too.
* ``launch(fn, ...)``: runs a loaded kernel on PyTorch's *current* stream of the tensor's own
  device, so graph capture works and later torch ops are ordered after the kernel. Pointers come
  from ``data_ptr()`` (~0.2 us) rather than ``cupy.from_dlpack`` (~20-30 us per call), and the
  launch is a raw ``cuLaunchKernel`` with a cached argument buffer (``pack_args``).
"""

from __future__ import annotations

import contextlib
import ctypes
import struct
import threading
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

import numpy as np
import torch

from kernel_lab.cuda import jit as _jit
from kernel_lab.cuda import launch_ex


def _identity(out: Any) -> Any:
    return out


def _framework_of(obj: Any) -> str:
    return type(obj).__module__.split(".", 1)[0]


def to_torch(inputs: tuple) -> tuple[tuple, Callable[[Any], Any]]:
    """Inputs as torch tensors (zero-copy) plus a function returning a result in their framework."""
    for x in inputs:
        if not isinstance(x, torch.Tensor) and hasattr(x, "__dlpack__"):
            break
    else:
        return inputs, _identity
    converted = []
    framework = None
    for x in inputs:
        if not isinstance(x, torch.Tensor) and hasattr(x, "__dlpack__"):
            framework = framework or _framework_of(x)
            x = _from_dlpack(x)
        converted.append(x)
    return tuple(converted), _returner(framework)


def _from_dlpack(x: Any) -> torch.Tensor:
    if _framework_of(x) == "cupy":
        import cupy

        with cupy.cuda.Device(x.device.id), torch.cuda.device(x.device.id):
            return torch.from_dlpack(x)
    return torch.from_dlpack(x)


def _returner(framework: str | None) -> Callable[[Any], Any]:
    if framework == "cupy":
        import cupy

        def back(out):
            if isinstance(out, torch.Tensor):
                with torch.cuda.device(out.device):
                    return cupy.from_dlpack(out.detach())
            return out

        return back
    if framework == "numpy":
        return lambda out: out.detach().numpy() if isinstance(out, torch.Tensor) else out
    return _identity


# -- streams and launches ---------------------------------------------------------------------
_get_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def current_stream_ptr(device_index: int) -> int:
    """Raw cudaStream_t of PyTorch's current stream on ``device_index`` (~0.3 us)."""
    if _get_raw_stream is not None:
        return _get_raw_stream(device_index)
    return torch.cuda.current_stream(device_index).cuda_stream


class Recording(list):
    """The :class:`Launch` es of one :func:`record_launches` block, and what its launchers
    declared for a replay of the call (:mod:`kernel_lab.core.plans`): ``fresh``, the tensors
    they allocated uninitialized for it (:func:`fresh`), and ``born``, how many launches came
    before each; ``guards``, (object, attribute, value) states their choices read
    (:func:`guard`); ``refused``, a launcher did what a replay would skip
    (:func:`refuse_replay`)."""

    def __init__(self) -> None:
        super().__init__()
        self.fresh: list[torch.Tensor] = []
        self.born: list[int] = []  # per fresh tensor: the launches recorded before it was made
        self.guards: list[tuple[Any, str, Any]] = []
        self.refused = False


_recorder: Recording | None = None  # set by record_launches(): kernels launched meanwhile


class Launch(NamedTuple):
    """One recorded kernel launch: the CuPy Function, its launch shape, its arguments (and
    their pack signature) and, from the row launcher, its (CudaSource, name expression)."""

    fn: Any
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_mem: int
    args: tuple = ()
    signature: str | None = None
    source: tuple | None = None
    device_index: int = 0
    programmatic: bool = False  # a programmatic dependent of the kernel before it (launch_ex)


def current_recording() -> Recording | None:
    """The :class:`Recording` collecting launches now, or None (a stand-in launch of the tests
    appends its :class:`Launch` to it)."""
    return _recorder


def recording() -> bool:
    """Whether a :func:`record_launches` block is collecting launches now."""
    return _recorder is not None


@contextlib.contextmanager
def record_launches():
    """Collect every launch made inside the block as a :class:`Launch` (for the register /
    spill and launch-shape reports of benchmarks, and the plans' replays): a
    :class:`Recording`."""
    global _recorder
    _recorder = Recording()
    try:
        yield _recorder
    finally:
        _recorder = None


def fresh(t: torch.Tensor) -> torch.Tensor:
    """``t``, declared a tensor this launcher allocated uninitialized (``torch.empty``) for this
    call - an output or a scratch buffer - that nothing but its launches touch: a replay of the
    call allocates it anew (contiguous, same shape, dtype and device) and points the launches
    at it. Returns ``t``; a no-op outside a recording."""
    if _recorder is not None:
        _recorder.fresh.append(t)
        _recorder.born.append(len(_recorder))
    return t


def guard(obj: Any, attribute: str) -> None:
    """Declare that this launcher's choices read ``obj.attribute`` (a mode such as a
    thread's switch): a replay of the call runs only while it holds the recorded value."""
    if _recorder is not None:
        _recorder.guards.append((obj, attribute, getattr(obj, attribute)))


def refuse_replay() -> None:
    """Declare that this call did what a replay would skip (a check of the inputs' values): the
    call signature keeps running its launcher."""
    if _recorder is not None:
        _recorder.refused = True


# Kernel arguments -> the ``void**`` that cuLaunchKernel takes. Every argument gets an 8-byte
# slot of one buffer (little-endian: a 4-byte int or float sits in the slot's low half, which
# is where the pointer points); the pointer array is built once per argument-type signature and
# thread, so a launch costs one ``struct.pack_into``. The driver copies the values at launch
# (and into the graph node during capture), so the buffer is free again when the call returns.
_SLOT_FORMATS: dict[type, str] = {
    int: "Q",  # device pointers (data_ptr()); use np.int64 for signed 64-bit values
    np.uint64: "Q",
    np.int64: "q",
    np.int32: "i4x",
    np.uint32: "I4x",
    np.float32: "f4x",
    np.float64: "d",
}


def slot_format(types: Iterable[type]) -> str:
    """The :func:`pack_args` ``signature`` of arguments of these Python types."""
    types = tuple(types)
    try:
        return "".join(_SLOT_FORMATS[t] for t in types)
    except KeyError:
        bad = next(t for t in types if t not in _SLOT_FORMATS)
        raise TypeError(
            f"kernel argument of type {bad.__name__}: pass device pointers as Python ints "
            "and scalars as numpy scalars (np.int32, np.int64, np.float32, np.float64) - "
            "a Python float or bool has no defined C type"
        ) from None


class _ArgPacker:
    def __init__(self, signature: str) -> None:
        self.struct = struct.Struct("<" + signature)
        if self.struct.size % 8:  # a slot short: the kernel would read its last argument from
            raise ValueError(f"kernel signature {signature!r} is {self.struct.size} bytes, "
                             "not whole 8-byte slots (pad a 4-byte value: 'i4x', 'f4x')")
        slots = self.struct.size // 8
        self.values = ctypes.create_string_buffer(max(8, self.struct.size))
        base = ctypes.addressof(self.values)
        self.pointers = (ctypes.c_void_p * max(1, slots))(*(base + 8 * i for i in range(slots)))
        self.address = ctypes.addressof(self.pointers)

    def pack(self, args: tuple) -> int:
        self.struct.pack_into(self.values, 0, *args)
        return self.address


# Per thread: ``packers`` (signature -> _ArgPacker) and ``ready`` (the driver has a current
# context here, see launch).
_thread = threading.local()
THREAD = _thread  # (a stand-in launch of the tests clears its ``ready``: replays then call launch)


def pack_args(args: tuple, signature: str | None = None) -> int:
    """Address of a ``void*[]`` pointing at ``args`` packed as C values (this thread's buffer,
    valid until its next launch with the same signature).

    ``signature``: one struct code per 8-byte slot (``Q`` pointer, ``q`` int64, ``i4x`` int32,
    ``f4x`` float, ``d`` double); then ``args`` may be plain Python numbers, range-checked by
    ``struct``. Without it the codes come from the argument types (see ``slot_format``).
    """
    cache = getattr(_thread, "packers", None)
    if cache is None:
        cache = _thread.packers = {}
    if signature is None:
        signature = slot_format(map(type, args))
    packer = cache.get(signature)
    if packer is None:
        packer = cache[signature] = _ArgPacker(signature)
    try:
        return packer.pack(args)
    except struct.error as e:
        raise OverflowError(f"kernel argument out of range for its C type: {e}") from None


_driver = None
_runtime = None


def _cuda_api():
    global _driver, _runtime
    if _driver is None:
        from cupy.cuda import driver, runtime

        _driver, _runtime = driver, runtime
    return _driver, _runtime


def launch(
    fn: Any,
    grid: tuple[int, ...],
    block: tuple[int, ...],
    args: tuple,
    *,
    device_index: int,
    shared_mem: int = 0,
    signature: str | None = None,
    source: tuple | None = None,
    programmatic: bool = False,
) -> None:
    """Launch kernel ``fn`` (a CuPy ``Function``) on torch's current stream of ``device_index``.

    ``source``: (CudaSource, name expression) of ``fn``, kept by :func:`record_launches` so a
    recorded launch can be replayed (:mod:`kernel_lab.core.plans`). ``programmatic`` (sm_90): a
    programmatic dependent launch of the kernel before it in the stream
    (:mod:`kernel_lab.cuda.launch_ex`); the kernel must call ``grid_dependency_wait()`` before it
    reads what that one writes.
    ``args`` must already be typed: tensor pointers as Python ints (sent as 64-bit), scalars as
    numpy scalars (``np.int32``, ``np.float32``); anything else raises ``TypeError``. Or give
    the C types as a ``signature`` (see :func:`pack_args`) and pass plain Python numbers.
    The launch is one ``cuLaunchKernel`` (CuPy's driver binding) with a cached argument buffer,
    instead of CuPy's ``Function.__call__``, which boxes every argument on every call.
    """
    driver, runtime = _cuda_api()
    if not getattr(_thread, "ready", False):
        # The driver API needs a current context on each thread; a thread that has not called
        # the runtime yet may have none. cudaSetDevice makes the primary context current.
        runtime.setDevice(runtime.getDevice())
        _thread.ready = True
    params = pack_args(args, signature)
    gx, gy, gz = (*grid, 1, 1)[:3]
    bx, by, bz = (*block, 1, 1)[:3]
    if _recorder is not None:
        _recorder.append(Launch(fn, (gx, gy, gz), (bx, by, bz), shared_mem, args, signature,
                                source, device_index, programmatic))
    stream = current_stream_ptr(device_index)
    ex = (launch_ex.ProgrammaticLaunch(fn.ptr, (gx, gy, gz), (bx, by, bz), shared_mem)
          if programmatic else None)
    if runtime.getDevice() == device_index:
        _launch_now(driver, ex, fn.ptr, (gx, gy, gz, bx, by, bz, shared_mem), stream, params)
    else:  # a tensor on another GPU: its own device's context, never the current one's
        import cupy

        with cupy.cuda.Device(device_index):
            _launch_now(driver, ex, fn.ptr, (gx, gy, gz, bx, by, bz, shared_mem), stream, params)


def _launch_now(driver: Any, ex: launch_ex.ProgrammaticLaunch | None, ptr: int, shape: tuple,
                stream: int, params: int) -> None:
    """``driver``'s ``cuLaunchKernel``, or ``ex``'s programmatic ``cuLaunchKernelEx`` when
    given."""
    if ex is None:
        driver.launchKernel(ptr, *shape, stream, params, 0)
    else:
        ex(stream, params)


class PreparedLaunch:
    """A recorded :class:`Launch`, ready to go again with new pointers (the replayed launches of
    :mod:`kernel_lab.core.plans`): its arguments are packed once into a buffer of its own, and a
    launch writes the pointer slots (argument indices ``slots``) and calls ``cuLaunchKernel``.
    On another thread, under :func:`record_launches`, on a thread without a current context or
    for a tensor on another GPU it takes :func:`launch`'s path with the full arguments."""

    __slots__ = ("launch", "slots", "ptr", "shape", "packer", "params", "words", "owner",
                 "several", "ex", "start")

    def __init__(self, launch: Launch, slots: list[int]) -> None:
        self.launch, self.slots = launch, slots
        self.ptr = launch.fn.ptr
        self.shape = (*launch.grid, *launch.block, launch.shared_mem)
        # its own buffer and pointer array, kept alive with it (the driver reads them at launch)
        self.packer = packer = _ArgPacker(launch.signature or slot_format(map(type, launch.args)))
        self.params = packer.pack(launch.args)
        self.words = (ctypes.c_uint64 * (len(packer.values) // 8)).from_buffer(packer.values)
        # the driver path is this thread's, once its launch made the driver's context current
        # (a test's stand-in launch does not: then never), and only where torch has CUDA streams
        self.owner = (threading.get_ident() if getattr(_thread, "ready", False)
                      and _get_raw_stream is not None else None)
        self.several = torch.cuda.device_count() > 1  # else the current device is the one
        self.ex = (launch_ex.ProgrammaticLaunch(self.ptr, launch.grid, launch.block,
                                                launch.shared_mem)
                   if launch.programmatic else None)
        # its bound cuLaunchKernelEx call, for the driver path (an owner) of the hot replays
        self.start = self.ex.starter() if self.ex is not None and self.owner is not None else None

    def replayer(self, owners: tuple[int, ...], dense: bool, module: Any, expr: str, fn: Any,
                 fallback: Callable[[tuple, dict], Any]):
        """``call(tensors, kw)``: this launch again on ``tensors``, into a fresh output shaped like
        the first tensor (contiguous; ``dense``: the first tensor is, so ``empty_like`` needs no
        layout keyword), which it returns. ``owners``: per pointer slot, -1 for the output or k
        for ``tensors[k]``. When ``module`` (the :class:`~kernel_lab.cuda.jit.CudaModule` of
        ``fn``) is due a re-stat or its sources changed, and its ``function(expr, device)`` no
        longer gives ``fn`` (the kernel was hot-reloaded), it returns ``fallback(tensors, kw)``
        instead. One Python frame from the plan to ``cuLaunchKernel``: a warm
        ``kernel_lab.run``'s host time is mostly this."""
        dev = self.launch.device_index
        words, params, ptr, shape, owner = self.words, self.params, self.ptr, self.shape, self.owner
        several, ex, start = self.several, self.ex, self.start
        config = ex.config if ex is not None else None
        slots = tuple(self.slots)
        pairs = tuple(zip(slots, owners))
        two = len(slots) == 2 and tuple(owners) == (-1, 0)  # (out, x): the row kernels' case
        s_out, s_in = slots if two else (0, 0)
        empty_like, fmt, ident = torch.empty_like, torch.contiguous_format, threading.get_ident
        load, key = module.function, module.key

        def call(tensors: tuple, kw: dict) -> Any:
            if ((_jit.clock() >= module.due_at or module.key != key)
                    and load(expr, dev) is not fn):  # (the reload check, inline while not due)
                return fallback(tensors, kw)
            x = tensors[0]
            out = empty_like(x) if dense else empty_like(x, memory_format=fmt)
            if (_recorder is None and ident() == owner
                    and not (several and _runtime.getDevice() != dev)):
                if two:
                    words[s_out] = out.data_ptr()
                    words[s_in] = x.data_ptr()
                else:
                    for i, w in pairs:
                        words[i] = (out if w < 0 else tensors[w]).data_ptr()
                if ex is None:
                    _driver.launchKernel(ptr, *shape, _get_raw_stream(dev), params, 0)
                else:  # programmatic: the bound cuLaunchKernelEx, its stream set in place
                    config.stream = _get_raw_stream(dev)
                    err = start(params, None)
                    if err:
                        launch_ex.raise_error(err)
            else:  # recording, another thread or device: the full path
                self([(out if w < 0 else tensors[w]).data_ptr() for w in owners])
            return out

        return call

    def __call__(self, pointers: list[int]) -> None:
        rec = self.launch
        dev = rec.device_index
        if (_recorder is None and threading.get_ident() == self.owner
                and not (self.several and _runtime.getDevice() != dev)):
            words = self.words
            for i, p in zip(self.slots, pointers):
                words[i] = p
            _launch_now(_driver, self.ex, self.ptr, self.shape, _get_raw_stream(dev), self.params)
            return
        args = list(rec.args)
        for i, p in zip(self.slots, pointers):
            args[i] = p
        launch(rec.fn, rec.grid, rec.block, tuple(args), device_index=dev,
               shared_mem=rec.shared_mem, signature=rec.signature, source=rec.source,
               programmatic=rec.programmatic)


def sequence_runner(steps: list[tuple[PreparedLaunch, tuple[int, ...]]]
                    ) -> Callable[[tuple, list], None]:
    """``run(tensors, fresh)``: the prepared launches of one call, in order, each pointer slot
    taken from ``tensors[k]`` (owner ``k >= 0``) or ``fresh[j]`` (owner ``~j``: the address of
    the call's fresh tensor j). Where every launch may take the driver path
    (:meth:`PreparedLaunch.__call__`: this thread, no recording, one device) it is one frame for
    all of them and one stream read; else each launch's own path."""
    launches = tuple(p for p, _ in steps)
    owner, dev = launches[0].owner, launches[0].launch.device_index
    direct = tuple((p.words, tuple(zip(p.slots, owners)), p.ptr, p.shape, p.params,
                    None if p.ex is None else p.ex.config, p.start) for p, owners in steps)
    several = any(p.several for p in launches)
    same = all(p.owner == owner and p.launch.device_index == dev for p in launches)
    ident = threading.get_ident

    def run(tensors: tuple, fresh: list) -> None:
        if (same and _recorder is None and ident() == owner
                and not (several and _runtime.getDevice() != dev)):
            stream = _get_raw_stream(dev)
            for words, pairs, ptr, shape, params, config, start in direct:
                for i, w in pairs:
                    words[i] = tensors[w].data_ptr() if w >= 0 else fresh[~w]
                if config is None:
                    _driver.launchKernel(ptr, *shape, stream, params, 0)
                else:  # programmatic (PreparedLaunch.replayer's branch)
                    config.stream = stream
                    err = start(params, None)
                    if err:
                        launch_ex.raise_error(err)
            return
        for p, owners in steps:
            p([tensors[w].data_ptr() if w >= 0 else fresh[~w] for w in owners])

    return run


def i32(v: int) -> np.int32:
    """A kernel ``int`` argument, range-checked (a silent wrap would be a wrong answer)."""
    if not -(2**31) <= v < 2**31:
        raise OverflowError(f"{v} does not fit a 32-bit kernel argument")
    return np.int32(v)


def i64(v: int) -> np.int64:
    return np.int64(v)


def f32(v: float) -> np.float32:
    return np.float32(v)
