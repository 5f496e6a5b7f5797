"""Persistent grids for the CUDA kernels that loop over rows: how many CTAs or clusters are
resident at once (the occupancy API; cuOccupancyMaxActiveClusters for clusters, since GPCs do
not divide evenly into them), the opt-in that clusters of more than 8 CTAs need, and a probe
that checks the API's answer on the hardware (:func:`cluster_placement`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

from kernel_lab.cuda.sources import cuda_source

_NON_PORTABLE_CLUSTER_ATTR = 14  # CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED
_non_portable_done: set[tuple[int, int]] = set()


def allow_non_portable_cluster(src, expr: str, dev: int) -> None:
    """Clusters of 16 CTAs are 'non-portable' on H100/H200: the kernel must opt in."""
    fn = src.function(expr, dev)
    if (fn.ptr, dev) in _non_portable_done:  # keyed by the loaded function: reloads re-opt-in
        return
    from cupy.cuda import driver

    driver.funcSetAttribute(fn.ptr, _NON_PORTABLE_CLUSTER_ATTR, 1)
    _non_portable_done.add((fn.ptr, dev))


_resident: dict[tuple[int, int, int, int, int], int] = {}


def persistent_grid(src, expr: str, threads: int, cluster: int, smem: int, m: int, dev: int,
                    max_groups: int | None = None) -> int:
    """Blocks to launch for a persistent kernel over ``m`` rows: one group (CTA or cluster) per
    row up to the resident groups (:func:`resident_groups`), at most ``max_groups`` (>= 1; tests
    use it to make each group loop over many rows), times ``cluster``."""
    groups = min(m, resident_groups(src, expr, threads, cluster, smem, dev))
    if max_groups is not None:
        groups = max(1, min(groups, max_groups))
    return groups * cluster


def resident_groups(src, expr: str, threads: int, cluster: int, smem: int, dev: int) -> int:
    """CTAs (cluster 1) or clusters of ``cluster`` CTAs of ``threads`` threads and ``smem`` bytes
    of dynamic shared memory that are resident at once on device ``dev``: a persistent grid.
    Sets the kernel's dynamic shared memory limit (and the non-portable cluster opt-in) first.
    Keyed by the loaded function, so a hot reload asks again.

    A grid larger than this would run a second, mostly idle wave (each group owns ~M / grid
    rows), so it must not be overestimated: clusters are counted by the driver
    (cuOccupancyMaxActiveClusters), since GPCs do not divide evenly into clusters.
    """
    fn = src.function(expr, dev)
    key = (fn.ptr, dev, threads, cluster, smem)
    got = _resident.get(key)
    if got is not None:
        return got
    from cupy.cuda import driver

    from kernel_lab.cuda import jit

    jit.set_max_dynamic_shared(fn, smem)
    if cluster > 8:
        allow_non_portable_cluster(src, expr, dev)
    sms = torch.cuda.get_device_properties(dev).multi_processor_count
    per_sm = driver.occupancyMaxActiveBlocksPerMultiprocessor(fn.ptr, threads, smem)
    if per_sm <= 0:  # e.g. 608 threads x 107 registers: more than one SM's register file
        raise RuntimeError(f"{expr}: {threads} threads with {smem} B of shared memory "
                           "do not fit on one SM")
    if cluster == 1:
        got = per_sm * sms
    else:
        got = _max_active_clusters(fn.ptr, threads, smem, cluster, dev)
        if got <= 0:  # no driver answer: whole clusters per SM-aligned share, one spare
            got = max(1, per_sm * sms // cluster - 1)
    _resident[key] = got
    return got


# The first wave in phases (kinds block, block_slots): the wave's load time at a copy speed.
# FIRST_WAVE_BYTES_PER_NS is the H200's measured one (4.2-4.3 TB/s), the softmax launches' (A/B
# there: 4,300 is the optimum; 2,150 / 1,075 / 8,600 lose 0.2-2.9 points at 2-byte 50257-262144
# and fp32 65536-131072). The cross-entropy forward takes the device's own (copy_bytes_per_ns):
# on an H100 (3,000 against 4,300, bf16 256 / 512 rows of 262144 from a CUDA graph, one
# process) 117 / 208 us against 120 / 211.
FIRST_WAVE_BYTES_PER_NS = 4300
COPY_OF_PEAK = 0.88  # measured copy / DRAM peak (GB/s): H100 SXM 2,981 / 3,352, H200 ~4,200 / 4,915


@functools.lru_cache(maxsize=None)
def copy_bytes_per_ns(dev: int) -> int:
    """Device ``dev``'s copy speed in bytes a nanosecond, estimated as COPY_OF_PEAK of its DRAM
    peak (memory clock x bus width x 2, from the driver): ~2,950 on an H100 SXM, ~4,330 on an
    H200. FIRST_WAVE_BYTES_PER_NS where the driver gives no answer or an implausible one."""
    from cupy.cuda import runtime

    try:
        khz = runtime.deviceGetAttribute(runtime.cudaDevAttrMemoryClockRate, dev)
        bits = runtime.deviceGetAttribute(runtime.cudaDevAttrGlobalMemoryBusWidth, dev)
    except Exception:  # noqa: BLE001 - no device, or an attribute this driver lacks
        return FIRST_WAVE_BYTES_PER_NS
    got = round(khz * 1e3 * 2 * bits / 8 / 1e9 * COPY_OF_PEAK)  # bytes a ns
    return got if 500 <= got <= 50000 else FIRST_WAVE_BYTES_PER_NS  # else not a DRAM answer


def first_wave(src, expr: str, threads: int, cluster: int, smem: int, m: int, row_bytes: int,
               dev: int, bytes_per_ns: int | None = None) -> tuple[int, int]:
    """(wave_rows, wave_ns) for a kernel that starts its first wave in phases: the rows resident
    at once (:func:`resident_groups`, at most ``m``) and the time they take to load at
    ``bytes_per_ns`` (default :data:`FIRST_WAVE_BYTES_PER_NS`), ``row_bytes`` each."""
    rows = min(m, resident_groups(src, expr, threads, cluster, smem, dev))
    return rows, rows * row_bytes // (bytes_per_ns or FIRST_WAVE_BYTES_PER_NS)


def _max_active_clusters(func: int, threads: int, smem: int, cluster: int, dev: int) -> int:
    """cuOccupancyMaxActiveClusters through ctypes (CuPy does not wrap it); 0 if unavailable."""
    import ctypes

    class LaunchConfig(ctypes.Structure):  # CUlaunchConfig
        _fields_ = [("grid", ctypes.c_uint * 3), ("block", ctypes.c_uint * 3),
                    ("shared", ctypes.c_uint), ("stream", ctypes.c_void_p),
                    ("attrs", ctypes.c_void_p), ("num_attrs", ctypes.c_uint)]

    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return 0
    import cupy

    cfg = LaunchConfig((cluster, 1, 1), (threads, 1, 1), smem, None, None, 0)
    count = ctypes.c_int(0)
    with cupy.cuda.Device(dev):
        rc = lib.cuOccupancyMaxActiveClusters(ctypes.byref(count), ctypes.c_void_p(func),
                                              ctypes.byref(cfg))
    return count.value if rc == 0 else 0


# -- checking the occupancy API against the hardware ---------------------------------------------
PROBE_CLUSTERS = (1, 8, 15, 16)
PROBE = cuda_source("cluster_probe.cu", [f"cluster_probe<{c}>" for c in PROBE_CLUSTERS])


@dataclass(frozen=True)
class Placement:
    """Where one grid of ``cluster``-CTA clusters ran (:func:`cluster_placement`): the occupancy
    API's resident count, and per CTA (SM id, cluster index, rank, start ns, end ns)."""

    cluster: int
    threads: int
    smem: int
    resident: int  # clusters the occupancy API calls resident at once
    records: tuple[tuple[int, int, int, int, int], ...]

    def clusters(self) -> int:
        return len(self.records) // self.cluster

    def sms(self) -> int:
        """Distinct SMs the grid ran on."""
        return len({r[0] for r in self.records})

    def late_clusters(self) -> int:
        """Clusters whose first CTA started after some CTA of the grid had finished: they did
        not run alongside the rest (0 when every launched cluster was resident at once)."""
        first_end = min(r[4] for r in self.records)
        starts: dict[int, int] = {}
        for _sm, c, _rank, start, _end in self.records:
            starts[c] = min(start, starts.get(c, start))
        return sum(1 for s in starts.values() if s > first_end)

    def summary(self) -> str:
        return (f"{self.cluster:2d}-CTA clusters of {self.threads} threads, {self.smem} B shared: "
                f"{self.resident} resident by the occupancy API, {self.clusters()} launched on "
                f"{self.sms()} SMs, {self.late_clusters()} started after another had finished")


def cluster_placement(cluster: int, threads: int = 128, smem: int = 120 * 1024,
                      clusters: int | None = None, spin_us: float = 200.0,
                      dev: int = 0) -> Placement:
    """Launch ``clusters`` (default: as many as :func:`resident_groups` allows) clusters of
    ``cluster`` CTAs that each hold their SM for ``spin_us`` microseconds, with ``threads``
    threads and ``smem`` bytes of dynamic shared memory per CTA (the default, over half of an
    SM's 228 KB, keeps one CTA per SM, like the persistent kernels' large shapes), and record
    where and when each CTA ran (cuda_src/cluster_probe.cu). A persistent grid sized by the
    occupancy API assumes every one of its clusters runs at once; ``late_clusters()`` says
    whether that held."""
    import numpy as np

    from kernel_lab.cuda import interop

    if cluster not in PROBE_CLUSTERS:
        raise ValueError(f"cluster_probe is instantiated for {PROBE_CLUSTERS} CTAs, not {cluster}")
    expr = f"cluster_probe<{cluster}>"
    resident = resident_groups(PROBE, expr, threads, cluster, smem, dev)
    n = resident if clusters is None else clusters
    out = torch.zeros(n * cluster, 5, dtype=torch.int64, device=f"cuda:{dev}")
    fn = PROBE.function(expr, dev)
    with torch.cuda.device(dev):
        interop.launch(fn, (n * cluster,), (threads,),
                       (out.data_ptr(), np.int64(int(spin_us * 1000))), device_index=dev,
                       shared_mem=smem)
        torch.cuda.synchronize(dev)
    records = tuple(tuple(int(v) for v in row) for row in out.tolist())
    return Placement(cluster, threads, smem, resident, records)
