"""The launch seam's argument packing (CPU): what cuLaunchKernel reads is what we passed."""

from __future__ import annotations

import ctypes
import threading

import numpy as np
import pytest

from kernel_lab.cuda import interop


def _read(addr: int, ctypes_types: list) -> list:
    pointers = (ctypes.c_void_p * len(ctypes_types)).from_address(addr)
    return [t.from_address(p).value for t, p in zip(ctypes_types, pointers)]


def test_pack_args_round_trips_every_supported_type():
    args = (2**63 + 5, np.uint64(7), np.int64(-(2**40)), np.int32(-7), np.uint32(2**32 - 1),
            np.float32(1.5), np.float64(-2.25))
    got = _read(interop.pack_args(args), [ctypes.c_uint64, ctypes.c_uint64, ctypes.c_int64,
                                          ctypes.c_int32, ctypes.c_uint32, ctypes.c_float,
                                          ctypes.c_double])
    assert got == [2**63 + 5, 7, -(2**40), -7, 2**32 - 1, 1.5, -2.25]


def test_a_signature_short_of_whole_slots_is_refused():
    """A 4-byte value last without its padding would leave the kernel's last argument pointer
    out of the array (the launch then fails with CUDA_ERROR_INVALID_VALUE, or reads garbage)."""
    with pytest.raises(ValueError, match="not whole 8-byte slots"):
        interop.pack_args((1, 2), "Qi")
    assert interop.pack_args((1, 2), "Qi4x")


def test_pack_args_reuses_one_buffer_per_signature_and_overwrites_it():
    a = interop.pack_args((1, np.int32(2)))
    b = interop.pack_args((3, np.int32(4)))
    assert a == b  # same signature, same thread: the cached buffer
    assert _read(b, [ctypes.c_uint64, ctypes.c_int32]) == [3, 4]
    c = interop.pack_args((np.int32(4), 3))
    assert c != a  # another signature, another buffer


@pytest.mark.parametrize("bad", [1.5, True, "x", None])
def test_pack_args_rejects_untyped_scalars(bad):
    with pytest.raises(TypeError, match="numpy scalars"):
        interop.pack_args((1, bad))


def test_pack_args_rejects_negative_pointers():
    with pytest.raises(OverflowError, match="out of range"):
        interop.pack_args((-1,))


def test_pack_args_buffers_are_per_thread():
    addrs, seen = {}, {}

    def pack(i):
        addrs[i] = interop.pack_args((i, np.int64(i)))
        barrier.wait()  # the other thread has packed meanwhile; our values must be intact
        seen[i] = _read(addrs[i], [ctypes.c_uint64, ctypes.c_int64])

    barrier = threading.Barrier(2)
    threads = [threading.Thread(target=pack, args=(i,)) for i in (11, 22)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen == {11: [11, 11], 22: [22, 22]}
    assert addrs[11] != addrs[22]


def test_i32_range_checked():
    assert interop.i32(2**31 - 1) == 2**31 - 1
    with pytest.raises(OverflowError):
        interop.i32(2**31)


def test_signature_packs_plain_python_numbers_and_range_checks_them():
    addr = interop.pack_args((7, 9, -3, 2**31 - 1, 5), "QQqi4xq")
    assert _read(addr, [ctypes.c_uint64, ctypes.c_uint64, ctypes.c_int64, ctypes.c_int32,
                        ctypes.c_int64]) == [7, 9, -3, 2**31 - 1, 5]
    with pytest.raises(OverflowError):
        interop.pack_args((7, 9, -3, 2**31, 5), "QQqi4xq")  # n must fit a C int
    assert interop.slot_format([int, np.int32, np.float64]) == "Qi4xd"


def test_record_launches_collects_name_and_shape(monkeypatch):
    """interop.launch under record_launches() (CPU: a fake driver and runtime): each launch is
    recorded as a Launch with 3-D grid / block and the dynamic shared bytes, and the benchmark's
    description of it (what a saved record's ``kernels`` says) carries the JIT's name."""
    from kernel_lab.cuda import jit
    from kernel_lab.measure import benchmarking as bm

    launched = []

    class FakeDriver:
        @staticmethod
        def launchKernel(*args):
            launched.append(args)

    class FakeRuntime:
        @staticmethod
        def getDevice():
            return 0

        @staticmethod
        def setDevice(_):
            pass

    class FakeFunction:
        ptr = 1234

    fn = FakeFunction()
    # this thread's "context is current" flag is restored afterwards (real launches need it)
    monkeypatch.setattr(interop.THREAD, "ready", False, raising=False)
    monkeypatch.setattr(interop, "_cuda_api", lambda: (FakeDriver, FakeRuntime))
    monkeypatch.setattr(interop, "current_stream_ptr", lambda dev: 0)
    monkeypatch.setitem(jit._names, id(fn), "my_kernel<float, 4>")
    with interop.record_launches() as rec:
        interop.launch(fn, (315,), (160,), (0, np.int32(7)), device_index=0, shared_mem=40960)
        interop.launch(fn, (4, 2), (32, 4), (0,), device_index=0)
    assert len(launched) == 2 and launched[0][1:9] == (315, 1, 1, 160, 1, 1, 40960, 0)
    assert rec == [interop.Launch(fn, (315, 1, 1), (160, 1, 1), 40960, (0, np.int32(7))),
                   interop.Launch(fn, (4, 2, 1), (32, 4, 1), 0, (0,))]
    assert [bm.describe_launch(r, jit.kernel_name(r.fn)) for r in rec] == [
        "my_kernel<float, 4> <<<315, 160, 40960>>>", "my_kernel<float, 4> <<<4x2, 32x4, 0>>>"]
    interop.launch(fn, (1,), (32,), (0,), device_index=0)  # outside the block: not recorded
    assert len(rec) == 2


def test_a_sequence_of_prepared_launches_is_one_frame_on_the_driver_path(monkeypatch):
    """sequence_runner: on the driver path (this thread made the context current, nothing
    records, one device) every launch gets its pointer slots from the inputs (owner k) or the
    fresh tensors' addresses (~j) and goes to cuLaunchKernel in order, the stream read once; off
    it (another thread's launches) each prepared launch runs its own path with the same
    pointers."""
    import types

    import torch

    class Prepared(types.SimpleNamespace):  # a PreparedLaunch's fields; its own path recorded
        def __call__(self, pointers):
            self.calls.append(list(pointers))

    def fake(ptr, slots, owner, device=0, ex=None):
        return Prepared(words=(ctypes.c_uint64 * 4)(), slots=slots, ptr=ptr,
                        shape=(ptr, 1, 1, 32, 1, 1, 0), params=ptr * 10, owner=owner,
                        several=False, launch=types.SimpleNamespace(device_index=device),
                        calls=[], ex=ex, start=None if ex is None else ex.starter())

    launched, streams = [], []

    def launch_kernel(ptr, *rest):
        words = {11: a, 22: b}[ptr].words  # what the driver reads at the launch
        launched.append((ptr, rest[7], rest[8], list(words)))  # rest: 7 shape, stream, params

    monkeypatch.setattr(interop, "_driver", types.SimpleNamespace(launchKernel=launch_kernel))
    monkeypatch.setattr(interop, "_get_raw_stream", lambda dev: streams.append(dev) or 77)
    monkeypatch.setattr(interop, "_recorder", None)
    me = threading.get_ident()
    a, b = fake(11, [0, 2], me), fake(22, [1, 3], me)
    x, y = torch.randn(3), torch.randn(3)
    made = [0x7f0000000200, 0x7f0000001000]  # two fresh tensors' addresses
    run = interop.sequence_runner([(a, (0, ~1)), (b, (~0, 1))])
    run((x, y), made)
    assert streams == [0]  # once for both launches
    assert launched == [
        (11, 77, 110, [x.data_ptr(), 0, made[1], 0]),
        (22, 77, 220, [0, made[0], 0, y.data_ptr()])]  # (a buffer a launch)
    assert a.calls == b.calls == []
    # launches prepared on another thread: each its own path, the same pointers
    a2, b2 = fake(11, [0, 2], me + 1), fake(22, [1, 3], me + 1)
    interop.sequence_runner([(a2, (0, ~1)), (b2, (~0, 1))])((x, y), made)
    assert a2.calls == [[x.data_ptr(), made[1]]]
    assert b2.calls == [[made[0], y.data_ptr()]]
    assert len(launched) == 2
    # a programmatic launch (launch_ex) goes through its own cuLaunchKernelEx, in order: its
    # configuration's stream set, its bound C call made; a driver error raised by name
    ex_calls, codes = [], [0, 700]

    class Programmatic:
        config = types.SimpleNamespace(stream=None)

        def starter(self):
            return lambda params, extra: ex_calls.append(
                (self.config.stream, params, extra, list(c.words), len(launched))) or codes.pop(0)

    def raise_error(err):
        raise RuntimeError(f"failed {err}")

    monkeypatch.setattr(interop.launch_ex, "raise_error", raise_error)
    c = fake(33, [0, 1], me, ex=Programmatic())
    run = interop.sequence_runner([(a, (0, ~1)), (c, (~0, 1))])
    run((x, y), made)
    assert launched[-1][0] == 11 and len(launched) == 3
    assert ex_calls == [(77, 330, None, [made[0], y.data_ptr(), 0, 0], 3)]
    with pytest.raises(RuntimeError, match="failed 700"):
        run((x, y), made)
