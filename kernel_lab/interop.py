"""The seam between PyTorch and CUDA launches: DLPack in and out, streams, devices, pointers.

* ``to_torch(inputs)``: torch tensors pass through untouched (the fast path: no DLPack at all);
  any other DLPack producer (CuPy, NumPy, JAX ...) is wrapped zero-copy with ``torch.from_dlpack``
  and the result is handed back in the caller's framework, zero-copy too.
* ``launch(fn, ...)``: runs a CuPy ``Function`` on PyTorch's *current* stream of the tensor's own
  device, so graph capture works and later torch ops are ordered after the kernel. Pointers come
  from ``data_ptr()`` (~0.2 us) rather than ``cupy.from_dlpack`` (~20-30 us per call).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import torch


def _identity(out: Any) -> Any:
    return out


def _framework_of(obj: Any) -> str:
    return type(obj).__module__.split(".", 1)[0]


def to_torch(inputs: tuple) -> tuple[tuple, Callable[[Any], Any]]:
    """Inputs as torch tensors (zero-copy) plus a function returning a result in their framework."""
    if all(isinstance(x, torch.Tensor) or not hasattr(x, "__dlpack__") for x in inputs):
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
_streams: dict[tuple[int, int], Any] = {}
_streams_lock = threading.Lock()


def current_stream_ptr(device_index: int) -> int:
    """Raw cudaStream_t of PyTorch's current stream on ``device_index`` (~0.3 us)."""
    get_raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if get_raw is not None:
        return get_raw(device_index)
    return torch.cuda.current_stream(device_index).cuda_stream


def _cupy_stream(device_index: int, ptr: int):
    s = _streams.get((device_index, ptr))
    if s is None:
        import cupy

        with _streams_lock, cupy.cuda.Device(device_index):
            s = _streams[(device_index, ptr)] = cupy.cuda.ExternalStream(ptr, device_index)
    return s


_recorder: list | None = None  # set by record_launches(): kernels launched meanwhile


@contextlib.contextmanager
def record_launches():
    """Collect every CuPy Function launched inside the block (for register/spill reports)."""
    global _recorder
    _recorder = []
    try:
        yield _recorder
    finally:
        _recorder = None


def launch(
    fn: Any,
    grid: tuple[int, ...],
    block: tuple[int, ...],
    args: tuple,
    *,
    device_index: int,
    shared_mem: int = 0,
) -> None:
    """Launch CuPy Function ``fn`` on torch's current stream of ``device_index``.

    ``args`` must already be typed: tensor pointers as Python ints (sent as 64-bit), scalars as
    numpy scalars (``np.int32``, ``np.float32``) - a Python float would arrive as garbage.
    """
    import cupy

    if _recorder is not None:
        _recorder.append(fn)
    stream = _cupy_stream(device_index, current_stream_ptr(device_index))
    if cupy.cuda.runtime.getDevice() == device_index:
        fn(grid, block, args, shared_mem=shared_mem, stream=stream)
    else:  # a tensor on another GPU: its own device's context, never device 0's
        with cupy.cuda.Device(device_index):
            fn(grid, block, args, shared_mem=shared_mem, stream=stream)


def i32(v: int) -> np.int32:
    """A kernel ``int`` argument, range-checked (a silent wrap would be a wrong answer)."""
    if not -(2**31) <= v < 2**31:
        raise OverflowError(f"{v} does not fit a 32-bit kernel argument")
    return np.int32(v)


def i64(v: int) -> np.int64:
    return np.int64(v)


def f32(v: float) -> np.float32:
    return np.float32(v)
