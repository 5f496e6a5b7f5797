"""``python -m kernel_lab watch NAME``: recompile, re-check and re-time a CUDA kernel on every save.

The loop polls the variant's ``.cu`` and every header it includes (re-resolved after each save,
so a newly included header is watched too). On a change it checks a few shapes - the calls make
the JIT recompile the instantiations those shapes launch, and only those (one NVRTC program
each; the round names them) - and then:

* a compile error prints NVRTC's ``cuda_src/<file>.cu(line): error ...`` and keeps watching, as
  does any other error of a round (a launch failure, a bad result);
* otherwise it checks a few shapes against the float64 reference and times one default shape
  with CUDA events, printing microseconds, GB/s and % of the copy bandwidth.

A save during a round is seen by the next poll.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch

from kernel_lab.base.errors import KernelCompileError
from kernel_lab.checking.checker import DTYPE_NAMES, fresh_seed, run_checked
from kernel_lab.core import registry

CHECK_SHAPES = ((1, 1), (3, 127), (8, 781), (4, 4096), (2, 50257))


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("name", metavar="NAME", help="a CUDA variant, e.g. online_softmax")
    p.add_argument("--shape", default="8192x4096", help="timed shape MxN (default 8192x4096)")
    p.add_argument("--dtype", default="float32", choices=list(DTYPE_NAMES))
    p.add_argument("--interval", type=float, default=0.3, help="poll interval in seconds")
    p.add_argument("--once", action="store_true", help="one round, then exit (for scripts)")


def watched_files(variant: registry.Variant) -> list[Path]:
    from kernel_lab.cuda.jit import cuda_src_dir, source_files

    src = Path(variant.source)
    path = src if src.is_absolute() else cuda_src_dir().parent / src
    return source_files(path, [cuda_src_dir()])


def _stamp(files: list[Path]) -> tuple:
    out = []
    for f in files:
        try:
            st = f.stat()
            out.append((str(f), st.st_mtime_ns, st.st_size))
        except FileNotFoundError:
            out.append((str(f), None, None))
    return tuple(out)


def _recompiled(since: int) -> str:
    """What NVRTC compiled since entry ``since`` of the JIT's compile log."""
    from kernel_lab.cuda.jit import CudaModule

    exprs = [e for _, e in CudaModule.compile_log[since:]]
    if not exprs:
        return "nothing recompiled"
    return f"recompiled {len(exprs)} instantiation{'s' * (len(exprs) > 1)}: {', '.join(exprs)}"


def one_round(variant: registry.Variant, shape: tuple[int, int], dtype: torch.dtype,
              device: str = "cuda") -> bool:
    """Compile (by calling), check, time. Returns False when compile or check failed.
    ``device`` other than cuda: compile and check only (timing takes CUDA events)."""
    from kernel_lab.cuda.jit import CudaModule
    from kernel_lab.measure.benchmarking import copy_bandwidth, cuda_event_median, gbps

    op = registry.get_op(variant.op)
    gen = torch.Generator().manual_seed(fresh_seed())
    since = len(CudaModule.compile_log)
    try:
        t0 = time.perf_counter()
        for s in CHECK_SHAPES:
            inputs = op.make_inputs(s, dtype, device, gen)
            if variant.supports(*inputs) is not None:
                continue
            result, _ = run_checked(variant, inputs, {})
            status = "ok" if result.ok else f"FAIL {result.message}"
            print(f"  check {'x'.join(map(str, s)):>10}: {status}")
            if not result.ok:
                return False
        print(f"  compiled + checked in {time.perf_counter() - t0:.2f} s "
              f"({_recompiled(since)})")
    except KernelCompileError as e:
        print(f"  compile error:\n{e}")
        return False
    if device != "cuda":
        return True
    inputs = op.make_inputs(shape, dtype, "cuda", gen)
    reason = variant.supports(*inputs)
    if reason is not None:
        print(f"  not timed: {reason}")
        return True
    def fn():
        return variant.fn(*inputs)

    fn()
    torch.cuda.synchronize()
    secs = cuda_event_median(fn, 1e-3)
    rate = gbps(op.bytes_moved(*inputs), secs)
    copy = copy_bandwidth("cuda")
    print(f"  {variant.name} {'x'.join(map(str, shape))} {str(dtype)[6:]}: {secs * 1e6:.1f} us, "
          f"{rate:.0f} GB/s = {100 * rate / copy:.0f}% of copy ({copy:.0f} GB/s)")
    return True


def main(args: argparse.Namespace) -> int:
    variant = registry.get(args.name)
    if variant.backend != "cuda":
        print(f"watch hot-reloads CUDA variants; {variant.name} is a {variant.backend} variant "
              f"({variant.source}). Re-run `python -m kernel_lab check {variant.name}` instead.")
        return 2
    if not torch.cuda.is_available():
        print("watch needs a CUDA GPU to run the kernel; none is available here.")
        return 2
    shape = tuple(int(s) for s in args.shape.lower().split("x"))
    dtype = DTYPE_NAMES[args.dtype]
    files = watched_files(variant)
    print(f"watching {', '.join(str(f) for f in files)} (Ctrl-C to stop)")
    stamp: tuple | None = None
    try:
        while True:
            now = _stamp(files)
            if now != stamp:
                print(f"[{time.strftime('%H:%M:%S')}] {variant.name}: change seen")
                try:
                    ok = one_round(variant, shape, dtype)
                except Exception as e:  # noqa: BLE001 - a failed round must not end the watch
                    if args.once:
                        raise
                    print(f"  error: {type(e).__name__}: {e}")
                    ok = False
                if args.once:
                    return 0 if ok else 1
                files, stamp = _rewatch(variant, now)
            time.sleep(args.interval)
    except KeyboardInterrupt:
        print("stopped")
        return 0


def _rewatch(variant: registry.Variant, seen: tuple) -> tuple[list[Path], tuple]:
    """The files to watch after a round (a save may have added an include) and the stamp the
    round saw: a file saved during the round differs from it, so the next poll runs again.
    Files new to the list count as seen now."""
    files = watched_files(variant)
    before = {entry[0]: entry for entry in seen}
    now = _stamp(files)
    return files, tuple(before.get(entry[0], entry) for entry in now)
