"""Sizes a CPU can take: a ``--shape`` that would not fit in memory is refused in one line,
before anything is allocated, and ``bench --device cpu --full-cpu`` caps the presets' shapes.

The presets size their shapes for a GPU (M*N = 2^28 elements: 1 GiB of fp32 a tensor, and the
float64 reference and its intermediates several times that). With ``--full-cpu`` each preset
shape keeps its row length N and gets fewer rows, M*N <= ``CPU_PRESET_ELEMENTS``; without it,
:func:`kernel_lab.measure.presets.cpu_share` picks a share of the cells that fits two minutes.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import replace

CPU_PRESET_ELEMENTS = 2**18  # a preset shape on a CPU: ~1 MB of fp32 a tensor
BYTES_PER_ELEMENT = 96  # peak bytes an element costs a benchmark cell: inputs, outputs, float64
# reference and its intermediates (softmax at 4096x50257 fp32 peaked at ~81 resident, with margin)


def available_memory() -> int:
    """Bytes of memory available now (MemAvailable), or the physical memory if unknown."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def cap_rows(shape: tuple[int, ...], elements: int = CPU_PRESET_ELEMENTS) -> tuple[int, ...]:
    """(M, ..., N) with M reduced so that M*N <= ``elements`` (at least one row)."""
    m, n = shape[0], shape[-1]
    return (max(1, min(m, elements // max(n, 1))), *shape[1:])


def cell_elements(shape: tuple[int, ...]) -> int:
    """Elements a cell holds: M*N, plus the parameters' (the lm-head's weight, hidden x N)."""
    m, n, params = shape[0], shape[-1], math.prod(shape[1:-1])
    return m * n + (params * n if len(shape) > 2 else 0)


def fit_cpu(pairs: Sequence, shapes_given: bool) -> tuple[list, str | None]:
    """``bench`` (cell, variant) pairs made to fit this CPU: preset shapes capped (and a note
    saying so), or, for shapes the user gave, a ValueError naming ``--shape`` when the largest
    would not fit in half the available memory."""
    if not pairs:
        return list(pairs), None
    if shapes_given:
        big = max((c.shape for c, _ in pairs), key=cell_elements)
        need, have = cell_elements(big) * BYTES_PER_ELEMENT, available_memory()
        if need > have // 2:
            raise ValueError(
                f"--shape {'x'.join(map(str, big))} needs ~{need / 2**30:.1f} GiB here, over "
                f"half of the {have / 2**30:.1f} GiB available: give a smaller --shape, e.g. "
                f"{'x'.join(map(str, cap_rows(big)))}")
        return list(pairs), None
    out = [(replace(c, shape=cap_rows(c.shape)), v) for c, v in pairs]
    capped = sum(a[0].shape != b[0].shape for a, b in zip(pairs, out))
    note = (f"--device cpu: preset shapes capped to M*N <= {CPU_PRESET_ELEMENTS:,} elements "
            "(rows cut, row lengths kept); --shape MxN sets any size") if capped else None
    return out, note
