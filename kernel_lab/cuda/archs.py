"""Per-architecture limits of the NVIDIA GPUs the lab names, as data (no device query).

For picking a kernel kind, a launch shape and a shared-memory size that a device can run, and
for the picks and compile checks of a GPU that is not here (``picks --arch``, ``compile --arch``).
Values:

- shared memory per SM, reserved per block, resident blocks and threads per SM, clusters:
  CCCL's ``cuda/__device/arch_traits.h`` (``cuda::arch::traits<id::sm_XX>``; opt-in maximum
  per block = per-SM shared memory minus the 1 KB the driver reserves per block), which
  transcribes the CUDA C++ Programming Guide's "Technical Specifications per Compute
  Capability" table;
- threads per block (1024), registers (64K per SM and per block, 255 per thread) and the 48 KB
  a block gets without opting in: the same table, equal on every architecture here;
- cluster sizes: the Programming Guide's "Thread Block Clusters" (8 CTAs is the portable
  maximum) and the Hopper / Blackwell tuning guides (16 with
  ``cudaFuncAttributeNonPortableClusterSizeAllowed`` on sm_90 and sm_100). None: no larger size
  is documented; ask the device (``cudaOccupancyMaxPotentialClusterSize``).

On a device, its own attributes (``cudaDevAttrMaxSharedMemoryPerBlockOptin`` ...) are the
truth; this table is for the devices that are not here.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass

KB = 1024


@dataclass(frozen=True)
class Arch:
    """Limits of one compute capability (``sm_90``: 9.0)."""

    name: str  # "sm_90"
    gpus: str  # examples, for messages
    smem_per_sm: int  # bytes of shared memory per SM
    smem_per_block_optin: int  # bytes a block may opt in to (dynamic shared memory attribute)
    max_blocks_per_sm: int
    max_threads_per_sm: int
    cluster: bool  # thread-block clusters (and distributed shared memory)
    max_cluster_portable: int = 1
    max_cluster_nonportable: int | None = None  # None: not documented beyond the portable size
    smem_per_block_default: int = 48 * KB  # without opting in
    smem_reserved_per_block: int = 1 * KB
    max_threads_per_block: int = 1024
    registers_per_sm: int = 64 * KB
    registers_per_block: int = 64 * KB
    max_registers_per_thread: int = 255

    @property
    def capability(self) -> tuple[int, int]:
        n = int(self.name.removeprefix("sm_"))
        return divmod(n, 10)


ARCHS: dict[str, Arch] = {a.name: a for a in (
    Arch("sm_80", "A100, A30", 164 * KB, 163 * KB, 32, 2048, cluster=False),
    Arch("sm_86", "RTX 30xx, A10, A40", 100 * KB, 99 * KB, 16, 1536, cluster=False),
    Arch("sm_89", "RTX 40xx, L4, L40", 100 * KB, 99 * KB, 24, 1536, cluster=False),
    Arch("sm_90", "H100, H200, GH200", 228 * KB, 227 * KB, 32, 2048, cluster=True,
         max_cluster_portable=8, max_cluster_nonportable=16),
    Arch("sm_100", "B200, GB200", 228 * KB, 227 * KB, 32, 2048, cluster=True,
         max_cluster_portable=8, max_cluster_nonportable=16),
    Arch("sm_120", "RTX 50xx, RTX PRO 6000 Blackwell", 100 * KB, 99 * KB, 32, 1536,
         cluster=True, max_cluster_portable=8),
)}


def get_arch(name: str) -> Arch:
    """The limits of ``name`` ("sm_90", "90" or "9.0"); ValueError naming the known ones."""
    key = name.strip().lower()
    if "." in key:
        major, _, minor = key.partition(".")
        key = f"{major}{minor}"
    key = key if key.startswith("sm_") else f"sm_{key}"
    key = key.removesuffix("a")  # sm_90a: the same limits as sm_90
    try:
        return ARCHS[key]
    except KeyError:
        raise ValueError(f"unknown arch {name!r}; known: {', '.join(ARCHS)}") from None


def nearest_arch(name: str) -> Arch | None:
    """The limits to pick with for ``name`` ("sm_87"): its own, else those of the closest known
    arch of the same major version below it (sm_87 -> sm_86, sm_103 -> sm_100); None before
    sm_80 (the kernels' cp.async needs sm_80)."""
    cc = int(name.strip().lower().removeprefix("sm_").removesuffix("a"))
    known = [a for a in ARCHS.values() if a.capability[0] == cc // 10 and int(a.name[3:]) <= cc]
    return max(known, key=lambda a: int(a.name[3:]), default=None)


_DEVICE_ARCH: dict[int, Arch] = {}
_ASSUMED = threading.local()  # as_if_on's arch, per thread


def device_arch(device_index: int) -> Arch:
    """The limits of CUDA device ``device_index`` (:func:`nearest_arch` of its compute
    capability; remembered per device). ValueError for a GPU before sm_80 or of an unknown
    major version."""
    got = _DEVICE_ARCH.get(device_index)
    if got is None:
        import torch

        major, minor = torch.cuda.get_device_capability(device_index)
        got = nearest_arch(f"sm_{major}{minor}")
        if got is None:
            raise ValueError(f"GPU {device_index} is sm_{major}{minor}: the lab's CUDA kernels "
                             f"need one of {', '.join(ARCHS)} (or a later minor version)")
        _DEVICE_ARCH[device_index] = got
    return got


def assumed_arch() -> Arch | None:
    """The arch :func:`as_if_on` assumes on this thread, or None (the devices' own)."""
    return getattr(_ASSUMED, "arch", None)


@contextlib.contextmanager
def as_if_on(arch: Arch) -> Iterator[None]:
    """Plan for ``arch`` on this thread (``picks --arch``): the fast variants' shape checks ask it,
    also for meta tensors, where no device can be asked."""
    before = assumed_arch()
    _ASSUMED.arch = arch
    try:
        yield
    finally:
        _ASSUMED.arch = before


def assume_device_arch(device_index: int, arch: Arch) -> None:
    """Plan for device ``device_index`` as ``arch`` (the CPU simulations of launches in the
    tests, where no device can be asked)."""
    _DEVICE_ARCH[device_index] = arch
