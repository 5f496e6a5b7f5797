"""What machine a benchmark ran on: GPU, driver, library and peer versions (pytest-benchmark's
machine_info and the sweep's JSON), and whether two saved runs may be compared."""

from __future__ import annotations

import subprocess
from typing import Any

import torch

NO_GPU = "no CUDA GPU"

PEER_DISTRIBUTIONS = ("quack-kernels", "nvidia-cutlass-dsl", "liger-kernel")


def library_versions() -> dict[str, str | None]:
    """torch / CUDA runtime / triton / cupy versions (None where absent), and the peers'
    packages where installed."""
    from importlib import metadata

    def dist(*names: str) -> str | None:
        for n in names:
            try:
                return metadata.version(n)
            except metadata.PackageNotFoundError:
                continue
        return None

    return {
        "torch": torch.__version__,
        "cuda_runtime": torch.version.cuda,
        "triton": dist("triton", "pytorch-triton"),
        "cupy": dist("cupy-cuda13x", "cupy-cuda12x", "cupy-cuda11x", "cupy"),
        **{name: v for name in PEER_DISTRIBUTIONS if (v := dist(name)) is not None},
    }


def driver_version() -> str | None:
    """The NVIDIA driver (nvidia-smi), else the CUDA driver API version (CuPy), else None."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=10, check=True,
        ).stdout.split()
        if out:
            return out[0]
    except (OSError, subprocess.SubprocessError):
        pass
    try:
        import cupy

        v = cupy.cuda.runtime.driverGetVersion()
        return f"CUDA driver API {v // 1000}.{v % 1000 // 10}"
    except Exception:  # noqa: BLE001 - no CuPy / no driver: say unknown
        return None


def gpu_info(device: str = "cuda") -> dict[str, Any] | None:
    """Name, compute capability, memory, SMs, L2 and driver of ``device``; None without a GPU."""
    if not torch.cuda.is_available():
        return None
    p = torch.cuda.get_device_properties(device)
    return {
        "name": p.name,
        "capability": f"{p.major}.{p.minor}",
        "memory_gib": round(p.total_memory / 2**30, 1),
        "sm_count": p.multi_processor_count,
        "l2_mib": round(getattr(p, "L2_cache_size", 0) / 2**20, 1),
        "driver": driver_version(),
    }


def device_label(device: str) -> str:
    """What the timings were taken on, e.g. ``cuda: NVIDIA H200 (sm_90)`` or ``cpu``."""
    info = gpu_info(device) if device.startswith("cuda") else None
    if info is None:
        return "cpu" if not device.startswith("cuda") else NO_GPU
    return f"cuda: {info['name']} (sm_{info['capability'].replace('.', '')})"


def machine_info(device: str) -> dict[str, Any]:
    """Everything added to pytest-benchmark's machine_info and to the CLI's JSON."""
    return {
        "bench_device": device_label(device),
        "gpu": gpu_info(device) if device.startswith("cuda") else None,
        "libraries": library_versions(),
    }


def device_mismatch(now: dict[str, Any], saved: dict[str, Any]) -> str | None:
    """Why two machine_infos must not be compared (different device), or None if they may."""
    here = now.get("bench_device")
    there = saved.get("bench_device", "an unknown device (saved without kernel_lab's info)")
    if here in (None, NO_GPU) or here == there:
        return None  # nothing is timed without a GPU, so nothing gets mixed
    return f"saved benchmarks were taken on {there}, this run is on {here}"
