"""The GPU-sharing locks of the suite (tests/gpu_share.py), checked with threads on any machine:
flock locks of separately opened files conflict between threads as between processes."""

import threading
import time

import pytest
from gpu_share import GpuShare, auto_workers, budget_gib, is_oom


@pytest.fixture
def folder(tmp_path):
    return tmp_path / "locks"


def _in_thread(fn) -> threading.Thread:
    t = threading.Thread(target=fn, daemon=True)
    t.start()
    return t


def test_exclusive_waits_for_shared_holders_and_blocks_new_ones(folder):
    a, b, c = GpuShare(folder, 4), GpuShare(folder, 4), GpuShare(folder, 4)
    log, a_release = [], threading.Event()

    def shared_a():
        with a.shared():
            log.append("a in")
            a_release.wait(5)
            log.append("a out")

    def exclusive_b():
        with b.exclusive():
            log.append("b alone")
            time.sleep(0.2)
            log.append("b out")

    def shared_c():
        with c.shared():
            log.append("c in")

    ta = _in_thread(shared_a)
    while "a in" not in log:
        time.sleep(0.01)
    tb = _in_thread(exclusive_b)
    time.sleep(0.2)  # b now waits for a, holding the turnstile
    tc = _in_thread(shared_c)
    time.sleep(0.2)
    assert log == ["a in"]  # neither b nor the newcomer c ran beside a
    a_release.set()
    for t in (ta, tb, tc):
        t.join(5)
    assert log == ["a in", "a out", "b alone", "b out", "c in"]  # c not starved past b either


def test_memory_pool_takes_all_or_nothing(folder):
    a, b = GpuShare(folder, 4), GpuShare(folder, 4)
    log, a_release = [], threading.Event()

    def take(share, gib, name, release=None):
        with share.memory(gib):
            log.append(f"{name} in")
            if release:
                release.wait(5)
            log.append(f"{name} out")

    ta = _in_thread(lambda: take(a, 3, "a", a_release))
    while "a in" not in log:
        time.sleep(0.01)
    tb = _in_thread(lambda: take(b, 2, "b"))  # 1 GiB left: b waits and holds nothing
    time.sleep(0.2)
    assert log == ["a in"]
    with GpuShare(folder, 4).memory(1):  # the free GiB is still free for a small taker
        log.append("small")
    a_release.set()
    ta.join(5)
    tb.join(5)
    assert log == ["a in", "small", "a out", "b in", "b out"]


def test_two_upgrades_from_shared_do_not_deadlock(folder):
    shares = [GpuShare(folder, 2) for _ in range(2)]
    inside, most = [0], [0]
    lock = threading.Lock()

    def upgrade(share):
        with share.shared():
            time.sleep(0.05)
            with share.alone_from_shared():
                with lock:
                    inside[0] += 1
                    most[0] = max(most[0], inside[0])
                time.sleep(0.1)
                with lock:
                    inside[0] -= 1

    threads = [_in_thread(lambda s=s: upgrade(s)) for s in shares]
    for t in threads:
        t.join(5)
    assert not any(t.is_alive() for t in threads) and most[0] == 1


def test_worker_count_and_budget_follow_the_card():
    assert auto_workers(16, 79.6) == 13  # H100: 80 GB at 6 GiB a worker
    assert auto_workers(16, 139.8) == 16  # H200: the cores
    assert auto_workers(16, None) == 16 and auto_workers(2, 2.0) == 1
    assert budget_gib(79.6, 13) == 56 and budget_gib(10.0, 16) == 1


@pytest.mark.parametrize("message,oom", [
    ("CUDA out of memory. Tried to allocate 2.00 GiB", True),
    ("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`", True),
    ("cudaErrorMemoryAllocation: out of memory", True),
    ("CUDA error: an illegal memory access was encountered", False),
    ("assert 3 == 4", False),
])
def test_what_counts_as_out_of_memory(message, oom):
    assert is_oom(RuntimeError(message)) is oom


def test_out_of_memory_wrapped_by_another_error_counts():
    """torch.testing.assert_close raises a RuntimeError "Comparing ..." from the OOM it met."""
    try:
        try:
            raise MemoryError("CUDA out of memory. Tried to allocate 978.00 MiB")
        except MemoryError as inner:
            raise RuntimeError("Comparing TensorLikePair(...) resulted in an exception") from inner
    except RuntimeError as outer:
        assert is_oom(outer)
    assert not is_oom(RuntimeError("Comparing", ValueError("mismatch")))
