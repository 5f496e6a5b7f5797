"""Persistent grids for the CUDA kernels that loop over rows: how many CTAs or clusters are
resident at once (the occupancy API; cuOccupancyMaxActiveClusters for clusters, since GPCs do
not divide evenly into them), and the opt-in that clusters of more than 8 CTAs need.
"""

from __future__ import annotations

import torch

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

    from kernel_lab import jit

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
