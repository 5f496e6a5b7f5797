"""Programmatic dependent launches (kernel_lab.cuda.launch_ex) on a CPU: the ctypes structures
lay out as cuda.h's, a launch sets the stream and reports the driver's error by name,
interop.launch takes that path (and records it) when asked, and cross-entropy's launchers ask
for it only for a kernel that follows one of their own, with PROGRAMMATIC_LAUNCH, on sm_90."""

import ctypes
import sys
import types

import numpy as np
import pytest
import torch
from test_plans_cross_entropy import stand_in  # noqa: F401 - the fixture

import kernel_lab
from kernel_lab.cuda import archs, interop, launch_ex
from kernel_lab.ops.cross_entropy import api
from kernel_lab.ops.cross_entropy import cuda_variants as cv


def test_the_structures_lay_out_as_cuda_h():
    """CUlaunchAttribute and CUlaunchConfig as gcc lays them out from CUDA 13's cuda.h
    (sizeof / offsetof), and the attribute's id."""
    assert (ctypes.sizeof(launch_ex._Attribute), launch_ex._Attribute.value.offset) == (72, 8)
    assert ctypes.sizeof(launch_ex._Config) == 56
    assert (launch_ex._Config.stream.offset, launch_ex._Config.attrs.offset,
            launch_ex._Config.num_attrs.offset) == (32, 40, 48)
    assert launch_ex.PROGRAMMATIC_STREAM_SERIALIZATION == 6


def test_a_programmatic_launch_sets_its_stream_and_names_an_error(monkeypatch):
    seen = []

    class Driver:
        @staticmethod
        def cuLaunchKernelEx(config, fn, params, extra):
            c = config._obj
            attr = c.attrs.contents
            seen.append((list(c.grid), list(c.block), c.shared_mem, c.stream, c.num_attrs,
                         attr.id, attr.value[0], fn.value, params, extra))
            return 0 if len(seen) == 1 else 700

        @staticmethod
        def cuGetErrorName(err, name):
            name._obj.value = b"CUDA_ERROR_ILLEGAL_ADDRESS"
            return 0

    monkeypatch.setattr(launch_ex, "_driver_lib", Driver)
    go = launch_ex.ProgrammaticLaunch(0x1234, (5, 2, 1), (256, 1, 1), 4096)
    go(0x77, 0x9000)
    assert seen == [([5, 2, 1], [256, 1, 1], 4096, 0x77, 1, 6, 1, 0x1234, 0x9000, None)]
    with pytest.raises(RuntimeError, match="CUDA_ERROR_ILLEGAL_ADDRESS"):
        go(0x78, 0x9000)
    assert seen[1][3] == 0x78


def test_the_bound_call_passes_the_configuration_as_a_c_function_reads_it(monkeypatch):
    """starter()'s bound call through real ctypes conversions (a C function pointer with
    cuLaunchKernelEx's prototype, calling back into Python): the one bound reference to the
    configuration is reused call after call, and the driver reads the stream last set."""
    seen = []
    proto = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(launch_ex._Config), ctypes.c_void_p,
                             ctypes.c_void_p, ctypes.c_void_p)

    def driver(config, fn, params, extra):
        c = config.contents
        seen.append((c.stream, list(c.grid), c.shared_mem, c.attrs.contents.id, fn, params,
                     extra))
        return 0 if len(seen) < 3 else 700

    fake = types.SimpleNamespace(cuLaunchKernelEx=proto(driver),
                                 cuGetErrorName=lambda err, name: 0)
    monkeypatch.setattr(launch_ex, "_driver_lib", fake)
    go = launch_ex.ProgrammaticLaunch(0x1234, (5, 2, 1), (256, 1, 1), 4096)
    start = go.starter()
    assert go.starter() is start
    for stream in (0x70, 0x71):
        go.config.stream = stream
        assert start(0x9000, None) == 0
    assert seen == [(s, [5, 2, 1], 4096, 6, 0x1234, 0x9000, None) for s in (0x70, 0x71)]
    with pytest.raises(RuntimeError, match=r"cuLaunchKernelEx failed: \? \(700\)"):
        go(0x72, 0x9000)
    assert seen[-1][0] == 0x72


def test_interop_launch_takes_the_programmatic_path_when_asked(monkeypatch):
    """launch(programmatic=True): cuLaunchKernelEx (not cuLaunchKernel), recorded as such; a
    prepared replay of that launch builds its own."""
    plain, ex = [], []

    class Driver:
        @staticmethod
        def launchKernel(*args):
            plain.append(args)

    class Runtime:
        getDevice = staticmethod(lambda: 0)
        setDevice = staticmethod(lambda _: None)

    class Programmatic:
        def __init__(self, ptr, grid, block, shared_mem):
            self.shape = (ptr, grid, block, shared_mem)

        def __call__(self, stream, params):
            ex.append((self.shape, stream))

        def starter(self):  # the bound cuLaunchKernelEx call of the driver path's replays
            return lambda params, extra: 0

    fn = types.SimpleNamespace(ptr=42)
    monkeypatch.setattr(interop.THREAD, "ready", False, raising=False)
    monkeypatch.setattr(interop, "_cuda_api", lambda: (Driver, Runtime))
    monkeypatch.setattr(interop, "current_stream_ptr", lambda dev: 5)
    # torch's raw stream getter, as a CUDA build has it: the prepared launches take the driver
    # path a GPU machine's thread takes (a CPU-only build has none, and would never)
    monkeypatch.setattr(interop, "_get_raw_stream", lambda dev: 5)
    monkeypatch.setattr(launch_ex, "ProgrammaticLaunch", Programmatic)
    with interop.record_launches() as rec:
        interop.launch(fn, (3,), (64,), (0, np.int32(1)), device_index=0)
        interop.launch(fn, (3,), (64,), (0, np.int32(1)), device_index=0, programmatic=True)
    assert len(plain) == 1 and ex == [((42, (3, 1, 1), (64, 1, 1), 0), 5)]
    assert [r.programmatic for r in rec] == [False, True]
    prepared = interop.PreparedLaunch(rec[1], [0])
    assert prepared.ex.shape == (42, (3, 1, 1), (64, 1, 1), 0)
    assert prepared.start(0, None) == 0  # its bound call, for the driver path's replays
    assert interop.PreparedLaunch(rec[0], [0]).ex is None
    assert interop.PreparedLaunch(rec[0], [0]).start is None


def test_a_replayed_programmatic_launch_is_one_c_call(monkeypatch):
    """On the driver path a prepared programmatic launch sets its configuration's stream and
    makes the bound cuLaunchKernelEx call itself: no Python frame of launch_ex.py (a warm
    cross-entropy step crosses no more files than before the programmatic launches)."""
    seen = []

    class Lib:
        @staticmethod
        def cuLaunchKernelEx(config, fn, params, extra):
            seen.append((config._obj.stream, fn.value, params, extra))
            return 0

    class Driver:
        launchKernel = staticmethod(lambda *a: None)

    class Runtime:
        getDevice = staticmethod(lambda: 0)
        setDevice = staticmethod(lambda _: None)

    fn = types.SimpleNamespace(ptr=42)
    monkeypatch.setattr(launch_ex, "_driver_lib", Lib)
    monkeypatch.setattr(interop.THREAD, "ready", False, raising=False)  # restored after
    monkeypatch.setattr(interop, "_cuda_api", lambda: (Driver, Runtime))
    monkeypatch.setattr(interop, "current_stream_ptr", lambda dev: 5)
    monkeypatch.setattr(interop, "_driver", Driver)
    monkeypatch.setattr(interop, "_runtime", Runtime)
    monkeypatch.setattr(interop, "_get_raw_stream", lambda dev: 77)
    with interop.record_launches() as rec:
        interop.launch(fn, (3,), (64,), (0, np.int32(1)), device_index=0, programmatic=True)
    assert seen == [(5, 42, seen[0][2], None)]  # launch()'s own path
    prepared = interop.PreparedLaunch(rec[0], [0])
    run = interop.sequence_runner([(prepared, (0,))])
    entered = []
    sys.setprofile(lambda frame, event, arg: event == "call"
                   and entered.append(frame.f_code.co_filename))
    try:
        run((torch.zeros(2),), [])
    finally:
        sys.setprofile(None)
    assert seen[1] == (77, 42, prepared.params, None)
    assert entered and launch_ex.__file__ not in entered


@pytest.mark.parametrize("switch, arch, expect", [
    (False, "sm_90", False), (True, "sm_90", True), (True, "sm_80", False)])
def test_the_step_launches_its_forward_and_reduction_programmatic(stand_in, monkeypatch,  # noqa: F811
                                                                   switch, arch, expect):
    """The fused step: the coefficients' kernel as usual (it follows the caller's work), the
    forward and the reduction as programmatic dependents of the kernel before them, with
    PROGRAMMATIC_LAUNCH on sm_90; the plain forward's reduction too."""
    monkeypatch.setattr(cv, "PROGRAMMATIC_LAUNCH", switch)
    monkeypatch.setattr(cv, "unit", lambda device, dtype: torch.ones((), dtype=dtype))
    monkeypatch.setattr(api, "_fused_applies", lambda *a: True)
    t = torch.randint(0, 4000, (6,))
    x = torch.randn(6, 4000, dtype=torch.bfloat16, requires_grad=True)
    with archs.as_if_on(archs.ARCHS[arch]):
        kernel_lab.cross_entropy(x, t).backward()
        step = [(la.source[1].split("<")[0], la.programmatic) for la in stand_in.launches]
        del stand_in.launches[:]
        cv.cuda_cross_entropy(x.detach(), t)
        plain = [(la.source[1].split("<")[0], la.programmatic) for la in stand_in.launches]
    assert step[0] == ("cross_entropy_coefs", False)
    assert step[1][0].startswith("cross_entropy_row") and step[1][1] == expect
    assert step[2] == ("cross_entropy_reduce", expect)
    assert step[3] == ("cross_entropy_scale", False)  # after autograd's fill: not ours
    assert plain == [("cross_entropy_fwd", False), ("cross_entropy_reduce", expect)]
