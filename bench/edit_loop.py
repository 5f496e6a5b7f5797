"""The edit -> result loop, timed: a header edit, then the next ``run`` of one shape.

    python bench/edit_loop.py [--variant fast_softmax] [--shape 4096x50257] [--dtype bf16]

Warms the variant on the shape, appends a comment to the family's shared header (so every
instantiation that includes it is stale), times the next call to a synchronized result, then
restores the header and times a ``watch --once`` round the same way. Needs a GPU.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

if __name__ == "__main__":  # no GPU: one line and exit 2, before torch loads
    from gpu_check import require_gpu  # bench/ is sys.path[0] when a script runs

    require_gpu("it times the edit -> result loop of a CUDA kernel")

import torch  # noqa: E402

import kernel_lab  # noqa: E402
from kernel_lab.checking.checker import parse_dtype  # noqa: E402
from kernel_lab.cuda.jit import cuda_src_dir  # noqa: E402

HEADER = "row_common.cuh"


def timed_call(name: str, x: torch.Tensor) -> float:
    t0 = time.perf_counter()
    kernel_lab.run(name, x)
    torch.cuda.synchronize()
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--variant", default="fast_softmax")
    p.add_argument("--shape", default="4096x50257")
    p.add_argument("--dtype", default="bf16")
    args = p.parse_args(argv)
    m, n = (int(s) for s in args.shape.split("x"))
    x = torch.randn(m, n, device="cuda", dtype=parse_dtype(args.dtype))
    header = cuda_src_dir() / HEADER
    original = header.read_text()
    print(f"first call (compile or disk cache): {timed_call(args.variant, x):.2f} s")
    print(f"warm call: {timed_call(args.variant, x) * 1e3:.2f} ms")
    try:
        header.write_text(original + "\n// edited\n")
        time.sleep(0.01)  # past the re-stat interval
        print(f"after an edit to {HEADER}: {timed_call(args.variant, x):.2f} s to a result")
        header.write_text(original + "\n// edited again\n")
        t0 = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "kernel_lab", "watch", args.variant,
                               "--once", "--shape", args.shape, "--dtype", args.dtype],
                              capture_output=True, text=True)
        print(f"watch --once after an edit (new process): {time.perf_counter() - t0:.2f} s, "
              f"rc={done.returncode}")
        print("\n".join(done.stdout.strip().splitlines()[-4:]))
    finally:
        Path(header).write_text(original)
    return 0


if __name__ == "__main__":
    sys.exit(main())
