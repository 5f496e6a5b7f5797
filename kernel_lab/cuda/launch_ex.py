"""Programmatic dependent launches (sm_90): ``cuLaunchKernelEx`` with the attribute that lets a
kernel start while the kernel before it in the stream still runs, once every CTA of that one
has called ``launch_dependents()`` or ended (the kernels' side: ``cuda_src/grid_dependency.cuh``,
whose ``grid_dependency_wait()`` a dependent calls before it reads what that kernel writes).

CuPy binds ``cuLaunchKernel`` only: this binds the driver's ``cuLaunchKernelEx`` through ctypes.
A :class:`ProgrammaticLaunch` builds its launch configuration once; a call sets the stream and
launches (one ctypes call; a replay's hot path calls :meth:`ProgrammaticLaunch.starter`'s
function itself: no Python frame). Captured into a CUDA graph as a programmatic edge."""

from __future__ import annotations

import ctypes
import functools

PROGRAMMATIC_STREAM_SERIALIZATION = 6  # CUlaunchAttributeID (cuda.h)


class _Attribute(ctypes.Structure):
    """CUlaunchAttribute: the id, padding to 8 bytes, a 64-byte value union."""

    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_char * 4), ("value", ctypes.c_int * 16)]


class _Config(ctypes.Structure):
    """CUlaunchConfig."""

    _fields_ = [("grid", ctypes.c_uint * 3), ("block", ctypes.c_uint * 3),
                ("shared_mem", ctypes.c_uint), ("stream", ctypes.c_void_p),
                ("attrs", ctypes.POINTER(_Attribute)), ("num_attrs", ctypes.c_uint)]


_driver_lib = None


def _lib() -> ctypes.CDLL:
    global _driver_lib
    if _driver_lib is None:
        lib = ctypes.CDLL("libcuda.so.1")
        lib.cuLaunchKernelEx.argtypes = [ctypes.POINTER(_Config), ctypes.c_void_p,
                                         ctypes.c_void_p, ctypes.c_void_p]
        lib.cuLaunchKernelEx.restype = ctypes.c_int
        lib.cuGetErrorName.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
        _driver_lib = lib
    return _driver_lib


class ProgrammaticLaunch:
    """``launch(stream, params)``: kernel ``fn_ptr`` (a CUfunction) with this grid, block and
    dynamic shared memory, its arguments at ``params`` (the ``void**`` of
    :func:`kernel_lab.cuda.interop.pack_args`), launched as a programmatic dependent of the
    kernel before it in ``stream``."""

    __slots__ = ("attribute", "config", "fn", "_start")

    def __init__(self, fn_ptr: int, grid: tuple[int, int, int], block: tuple[int, int, int],
                 shared_mem: int) -> None:
        self.attribute = _Attribute(id=PROGRAMMATIC_STREAM_SERIALIZATION)
        self.attribute.value[0] = 1  # programmaticStreamSerializationAllowed
        self.config = _Config((ctypes.c_uint * 3)(*grid), (ctypes.c_uint * 3)(*block),
                              shared_mem, None, ctypes.pointer(self.attribute), 1)
        self.fn = ctypes.c_void_p(fn_ptr)
        self._start = None

    def starter(self):
        """``start(params, None)``: ``cuLaunchKernelEx`` with this configuration and kernel bound
        (a C call: no Python frame), launching on ``config.stream`` as last set; it returns
        the driver's error code (:func:`raise_error` raises it by name)."""
        if self._start is None:  # libcuda loaded on first use (never on a CPU-only machine)
            self._start = functools.partial(_lib().cuLaunchKernelEx,
                                            ctypes.byref(self.config), self.fn)
        return self._start

    def __call__(self, stream: int, params: int) -> None:
        self.config.stream = stream
        err = self.starter()(params, None)
        if err:
            raise_error(err)


def raise_error(err: int) -> None:
    """Raise the driver's error ``err`` (non-zero) of a ``cuLaunchKernelEx`` by its name."""
    name = ctypes.c_char_p()
    _lib().cuGetErrorName(err, ctypes.byref(name))
    raise RuntimeError(f"cuLaunchKernelEx failed: {(name.value or b'?').decode()} ({err})")
