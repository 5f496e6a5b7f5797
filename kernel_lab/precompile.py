"""``python -m kernel_lab compile``: every declared ``.cu`` compiled into the cubin cache.

    python -m kernel_lab compile                        # all sources, sm_90
    python -m kernel_lab compile fast_softmax.cu --arch sm_90
    KERNEL_LAB_CACHE_DIR=.klc python -m kernel_lab compile   # a cache to ship to a GPU machine

NVRTC needs no GPU, and the cache key (``jit.CudaModule.cubin``: the sources' and headers'
contents, the name expressions, the options, the NVRTC version and the arch) names no path or
machine, so a cache filled here is a warm cache on any GPU machine with the same NVRTC version
and arch: its first calls load cubins instead of compiling for minutes (the twenty-first H200
run carried a 12 MB cache this way: 622 GPU tests ran in 59 s with no compile on the GPU
machine, where a cold single-process run of a smaller subset had timed out at 100 s compiling).
Sources already cached are only checked.
"""

from __future__ import annotations

import argparse
import time

from .errors import KernelLabError


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("files", nargs="*", metavar="FILE",
                   help="declared .cu files by name, e.g. fast_softmax.cu (default: all)")
    p.add_argument("--arch", default="sm_90", help="target architecture (default sm_90)")


def main(args: argparse.Namespace) -> int:
    import kernel_lab

    from . import cuda_common, jit

    kernel_lab.variants()  # imports every op module: declares every source
    sources = cuda_common.SOURCES
    if args.files:
        by_name = {s.path.name: s for s in sources}
        unknown = [f for f in args.files if f not in by_name]
        if unknown:
            raise KernelLabError(f"no declared source {unknown[0]!r}; declared: "
                                 f"{', '.join(sorted(by_name))}")
        sources = [by_name[f] for f in args.files]
    print(f"{len(sources)} sources -> {jit.cache_dir()} ({args.arch}, NVRTC "
          f"{'.'.join(map(str, jit.nvrtc_version()))})", flush=True)
    for i, src in enumerate(sources, 1):
        before, t0 = jit.CudaModule.compile_count, time.perf_counter()
        src.module.cubin(args.arch)
        how = "compiled" if jit.CudaModule.compile_count > before else "cached"
        print(f"[{i}/{len(sources)}] {src.path.name}: {len(src.name_expressions)} kernels, "
              f"{how} in {time.perf_counter() - t0:.1f} s", flush=True)
    return 0
