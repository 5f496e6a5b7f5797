"""One GPU shared by many pytest-xdist workers: who may run beside whom, and what each keeps.

Every worker has its own CUDA context and caching allocator on the same card. Three rules keep
the suite inside the card's memory and keep timing tests undisturbed:

- Every test runs under a shared lock; a test marked ``gpu_exclusive`` (it times the GPU, or
  holds most of it) takes it exclusively and so runs with no other test on the card. A
  turnstile lock keeps an exclusive waiter from being starved by a stream of shared holders.
- A test marked ``gpu_memory(gib)`` first takes that many GiB from a pool sized from the card
  (``budget_gib``): big cases never run side by side past what the card holds.
- After every test, a worker whose allocator keeps more than ``KEEP_BYTES`` gives it back
  (``torch.cuda.empty_cache``): no worker sits on the last big case's memory.

The locks are ``fcntl.flock`` files in one folder per test run (xdist's run id), so nested
pytest runs and other processes on the machine are not tied to this one.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

KEEP_BYTES = 1 << 30  # what a worker's allocator may keep between tests
WORKER_GIB = 6  # per worker when sizing -n auto: context + kept cache + a mid-sized case
OOM = re.compile(r"out of memory|OutOfMemory|CUBLAS_STATUS_ALLOC_FAILED|cudaErrorMemoryAllocation"
                 r"|CUDA_ERROR_OUT_OF_MEMORY", re.I)


def card_gib() -> float | None:
    """Total memory of GPU 0 in GiB, read with nvidia-smi (no CUDA context in this process)."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return None
    try:
        out = subprocess.run([smi, "--query-gpu=memory.total", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=20, check=True).stdout
        return int(out.split()[0]) / 1024  # MiB
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None


def auto_workers(cpus: int, gib: float | None) -> int:
    """Workers for ``-n auto``: one a core, at most one per WORKER_GIB of the card."""
    if gib is None:
        return cpus
    return max(1, min(cpus, int(gib // WORKER_GIB)))


def budget_gib(card: float, workers: int) -> int:
    """GiB that marked tests may hold at once: the card less what every worker keeps anyway."""
    return max(1, int(card - workers * (KEEP_BYTES / 2**30 + 0.75)))


def is_oom(exc: BaseException | None) -> bool:
    """Out of GPU memory, here or in what caused it (torch.testing wraps the error it met)."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        if OOM.search(f"{type(exc).__name__}: {exc}"):
            return True
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return False


class GpuShare:
    """The cross-process locks of one test run (see the module docstring)."""

    def __init__(self, folder: Path, pool_gib: int):
        folder.mkdir(parents=True, exist_ok=True)
        self.folder, self.pool_gib = folder, pool_gib
        self._main = self._open("gpu.lock")
        self._turnstile = self._open("turnstile.lock")
        self._pool = self._open("pool.lock")

    @classmethod
    def for_run(cls, run_id: str, pool_gib: int) -> GpuShare:
        return cls(Path(tempfile.gettempdir()) / f"kernel_lab_gpu_{run_id}", pool_gib)

    def _open(self, name: str) -> int:
        return os.open(self.folder / name, os.O_RDWR | os.O_CREAT, 0o600)

    @contextlib.contextmanager
    def shared(self):
        fcntl.flock(self._turnstile, fcntl.LOCK_EX)  # waits while an exclusive test waits
        fcntl.flock(self._turnstile, fcntl.LOCK_UN)
        fcntl.flock(self._main, fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(self._main, fcntl.LOCK_UN)

    @contextlib.contextmanager
    def exclusive(self):
        fcntl.flock(self._turnstile, fcntl.LOCK_EX)  # no new shared holder from here on
        try:
            fcntl.flock(self._main, fcntl.LOCK_EX)  # the running ones finish
            try:
                yield
            finally:
                fcntl.flock(self._main, fcntl.LOCK_UN)
        finally:
            fcntl.flock(self._turnstile, fcntl.LOCK_UN)

    @contextlib.contextmanager
    def memory(self, gib: int):
        """Hold ``gib`` one-GiB slots of the pool (all at once, or none while waiting)."""
        want = max(1, min(int(gib), self.pool_gib))
        held: list[int] = []
        while True:
            fcntl.flock(self._pool, fcntl.LOCK_EX)  # one taker at a time: no partial deadlock
            try:
                for i in range(self.pool_gib):
                    if len(held) == want:
                        break
                    fd = self._open(f"slot{i}.lock")
                    try:
                        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                        held.append(fd)
                    except BlockingIOError:
                        os.close(fd)
                if len(held) < want:
                    for fd in held:
                        os.close(fd)  # closing drops its lock
                    held = []
            finally:
                fcntl.flock(self._pool, fcntl.LOCK_UN)
            if held:
                break
            time.sleep(0.05)
        try:
            yield
        finally:
            for fd in held:
                os.close(fd)

    @contextlib.contextmanager
    def alone_from_shared(self):
        """From a shared hold to an exclusive one and back (an OOM's rerun, alone)."""
        fcntl.flock(self._main, fcntl.LOCK_UN)  # let go first: two upgraders must not deadlock
        try:
            with self.exclusive():
                yield
        finally:
            fcntl.flock(self._turnstile, fcntl.LOCK_EX)
            fcntl.flock(self._turnstile, fcntl.LOCK_UN)
            fcntl.flock(self._main, fcntl.LOCK_SH)
