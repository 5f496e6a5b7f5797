"""A/B: the chunk kernels with their flagged words zeroed for every call (a fill kernel before
each launch, ``flag_words.REUSE = False``) against one buffer kept per stream (``True``).

    python bench/ab_flag_words.py [--shape bfloat16:524288 ...] [--rounds 7]

Forward shapes (``DTYPE:N``, M = 2^28 / N) run the op's pick, or with ``@chunks`` the chunk rule's
shape whatever the pick (``bfloat16:262144@chunks``); ``bwd:DTYPE:N`` runs the softmax backward's
pick. Timed as bench/ab_kernels.py times variants (time_case: the copy and both settings in turn
in each round); each line gives the median GB/s, % of copy and the ratio kept / zeroed.
"""

from __future__ import annotations

import argparse

import torch

from kernel_lab import flag_words as fw
from kernel_lab.benchmarking import parse_dtype
from kernel_lab.ops.softmax import cuda_variants as cv
from kernel_lab.rowkernels import backward_config as bc
from kernel_lab.rowkernels import forward_config as fc
from kernel_lab.rowkernels import launch as rk

try:  # run as a script from the repository root
    from ab_kernels import time_case
except ImportError:  # pragma: no cover - imported as bench.ab_flag_words
    from bench.ab_kernels import time_case

SHAPES = ("bfloat16:196608", "bfloat16:262144", "bfloat16:262144@chunks", "float16:262144",
          "float16:262144@chunks", "bfloat16:262145", "bfloat16:524288", "float16:524288",
          "bfloat16:1048576", "float32:196608", "float32:262144", "float32:524288",
          "float32:1048576", "bwd:float32:262144", "bwd:bfloat16:524288")


def case(spec: str):
    """(label, the call, bytes a call moves, its input x) for one --shape."""
    backward = spec.startswith("bwd:")
    spec = spec.removeprefix("bwd:")
    shape, _, forced = spec.partition("@")
    dname, n = shape.split(":")
    dtype, n = parse_dtype(dname), int(n)
    m = max(1, (1 << 28) // n)
    x = torch.randn(m, n, device="cuda", dtype=dtype)
    out = torch.empty_like(x)
    if backward:
        y, dy = torch.softmax(x.float(), -1).to(dtype), torch.randn_like(x)
        cfg = bc.backward_config(n, dtype, True)
        return (f"backward {dname} {m}x{n} {cfg.label()}",
                lambda: rk.backward_launch(out, y, dy, cfg, True, kernels=cv.BACKWARD_KERNELS), 3 * x.numel() * x.itemsize, x)
    cfg = rk.fast_choice(out, x)[0]
    if forced == "chunks":
        cfg = fc.chunk_config(n, dtype, rk._rows_on_lines(x))
    return (f"softmax {dname} {m}x{n} {cfg.label()}", lambda: rk.fast_launch(out, x, cfg, 1, kernels=cv.FAST_KERNELS),
            2 * x.numel() * x.itemsize, x)


def reusing(reuse: bool, call):
    """``call`` with flag_words.REUSE set to ``reuse``."""
    def run():
        fw.REUSE = reuse
        call()
    return run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", action="append", help=f"DTYPE:N[@chunks] or bwd:DTYPE:N "
                    f"(repeatable; default: {' '.join(SHAPES)})")
    ap.add_argument("--rounds", type=int, default=7)
    a = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("ab_flag_words.py: no CUDA GPU here")
    for spec in a.shape or SHAPES:
        label, call, nbytes, x = case(spec)
        calls = {"zeroed": reusing(False, call), "kept": reusing(True, call)}
        print(time_case(label, x, torch.empty_like(x), None, calls, list(calls), a.rounds,
                        mb=nbytes / 1e6), flush=True)
        fw.REUSE = True


if __name__ == "__main__":
    main()
