"""What a row spans and which CTA shapes cover it: 16-byte windows, 128-byte lines, the
smallest cluster that holds a row, and whether a shape fits an arch's limits. Pure arithmetic
shared by the forward and backward shape rules (forward_config.py, backward_config.py) and
their launchers (launch.py); no GPU needed."""

from __future__ import annotations

import torch

from kernel_lab.base.errors import UnsupportedInputError
from kernel_lab.cuda.archs import Arch
from kernel_lab.cuda.sources import cdiv, vec_width


def vector_windows(n: int, dtype: torch.dtype, aligned: bool = True) -> int:
    """16-byte windows a row spans: ceil(n / W) when rows start 16-byte aligned, else one more
    for the worst-case head offset."""
    w = vec_width(dtype)
    return cdiv(n, w) if aligned else cdiv(n + w - 1, w)


# The persistent kernels (persist, pipe) measure a row's head from its 128-byte line, not its
# 16-byte vector (softmax_common.cuh, line_head), so that each warp's windows are whole lines.
# The same shape on rows on and off 128-byte lines: fp32 151936 vs 151940 15x160x16 91.9 vs
# 84.9; 50176 vs 50256 8x128x16 86.9 vs 82.4; bf16 151936 vs 151940 15x320x4 80.1 vs 75.9.
LINE_BYTES = 128


def rows_on_lines(n: int, dtype: torch.dtype, aligned: bool = True,
                  line: bool | None = None) -> bool:
    """``line`` if given, else whether contiguous rows of ``n`` start on 128-byte lines:
    ``aligned`` (rows on 16 bytes) and N * itemsize a multiple of 128."""
    return (aligned and n * dtype.itemsize % LINE_BYTES == 0) if line is None else line


def line_windows(n: int, dtype: torch.dtype, aligned: bool = True,
                  line: bool | None = None) -> int:
    """16-byte windows a row spans in the persistent kernels: ceil(n / W) for rows that start on
    a 128-byte line, else up to 7 more (a head of up to 127 bytes). ``line`` (rows on lines)
    defaults to ``aligned`` (rows on 16 bytes) with N * itemsize a multiple of 128."""
    w = vec_width(dtype)
    line = rows_on_lines(n, dtype, aligned, line)
    return cdiv(n, w) if line else cdiv(n + LINE_BYTES // dtype.itemsize - 1, w)



def max_cluster(arch: Arch) -> int:
    """The most CTAs a cluster may have on ``arch`` (non-portable sizes where documented; 1: the
    arch has no clusters)."""
    if not arch.cluster:
        return 1
    return arch.max_cluster_nonportable or arch.max_cluster_portable


def runs_on(cfg, arch: Arch) -> bool:
    """Whether launch shape ``cfg`` (a FastConfig or a BackwardConfig) can run on ``arch``: its
    cluster and its dynamic shared memory within the arch's limits."""
    return cfg.cluster <= max_cluster(arch) and cfg.shared_mem() <= arch.smem_per_block_optin


class NoShapeForArch(UnsupportedInputError):
    """No launch shape of a kernel family holds these rows on this arch (the rules' shapes all
    need clusters or more shared memory than it has)."""


def round32(threads: int) -> int:
    return max(32, cdiv(threads, 32) * 32)


def cluster_shape(
    nw: int, vpt: int, max_threads: int, sizes: tuple[int, ...]
) -> tuple[int, int] | None:
    """(cluster, threads): the smallest cluster of ``sizes`` whose CTAs of <= ``max_threads``
    threads x ``vpt`` vectors hold ``nw`` windows, with the multiple of 32 threads that just
    covers them; None if even the largest cluster is too small."""
    for cl in sizes:
        if nw <= cl * max_threads * vpt:
            return cl, round32(cdiv(nw, vpt * cl))
    return None
