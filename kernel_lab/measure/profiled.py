"""One call under ``torch.profiler``: its kernels by device time, and how much of the call's span
the device sat idle between them (the benches' ``--profile``: ``bench/loss_step.py``,
``bench/lm_head.py``). A step whose kernels sum to less than its timed span waits on the host
(launches, a sync, an allocation); the largest gaps name the kernel that ended each one."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch


def device_gaps(kernels: Iterable[tuple[float, float, str]], largest: int = 3) -> dict[str, Any]:
    """From each device activity's (start, end, name) in microseconds: ``span`` (first start to
    last end), ``busy`` (the union of the intervals: overlapping kernels count once), ``idle``
    (span - busy) and the ``largest`` gaps between them as (microseconds, the name after)."""
    spans = sorted(kernels)
    if not spans:
        return {"span": 0.0, "busy": 0.0, "idle": 0.0, "gaps": []}
    busy, gaps = 0.0, []
    run_start, run_end = spans[0][0], spans[0][1]
    for start, end, name in spans[1:]:
        if start > run_end:  # a gap: the device had nothing to run
            busy += run_end - run_start
            gaps.append((start - run_end, name))
            run_start = start
        run_end = max(run_end, end)
    busy += run_end - run_start
    span = run_end - spans[0][0]
    gaps.sort(key=lambda g: -g[0])
    return {"span": span, "busy": busy, "idle": span - busy, "gaps": gaps[:largest]}


def gaps_line(gaps: dict[str, Any]) -> str:
    """One line of :func:`device_gaps`: busy of span, idle, the largest gaps."""
    if not gaps["span"]:
        return "device: no kernels"
    largest = ", ".join(f"{us / 1e3:.2f} ms before {name[:40]}" for us, name in gaps["gaps"])
    return (f"device busy {gaps['busy'] / 1e3:.2f} of {gaps['span'] / 1e3:.2f} ms (idle "
            f"{gaps['idle'] / gaps['span']:.0%})" + (f"; largest gaps: {largest}" if largest
                                                       else ""))


def kernel_table(fn: Callable[[], Any], rows: int = 14) -> str:
    """``fn()`` once under torch.profiler (after the caller's warm-up): its kernels by total
    device time (CPU time off CUDA) and, on CUDA, :func:`gaps_line`."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    cuda = torch.cuda.is_available()
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    sync()
    with profile(activities=[ProfilerActivity.CPU]
                 + ([ProfilerActivity.CUDA] if cuda else [])) as prof:
        fn()
        sync()
    table = prof.key_averages().table(sort_by="device_time_total" if cuda else "cpu_time_total",
                                      row_limit=rows, max_name_column_width=60)
    if not cuda:
        return table
    kernels = [(e.time_range.start, e.time_range.end, e.name) for e in prof.events()
               if e.device_type == DeviceType.CUDA]
    return f"{table}\n{gaps_line(device_gaps(kernels))}"
