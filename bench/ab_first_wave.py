"""A/B: the first wave's phase spacing (persistent.FIRST_WAVE_BYTES_PER_NS: the first wave's
rows are spread over their load time at this many bytes a ns) on the op's picks, in one process.

    python bench/ab_first_wave.py [--shape bfloat16:262144 ...] [--rates 4300,2150,8600,0]

Rate 0 launches every row at once (no phases). Timed as bench/ab_kernels.py times variants
(time_case: the copy and every rate in turn in each round); each line gives the median GB/s, % of
copy and ratio to the first rate. M = 2^28 / N.
"""

from __future__ import annotations

import argparse

import torch

from kernel_lab import occupancy as pc
from kernel_lab.benchmarking import parse_dtype
from kernel_lab.ops.softmax import cuda_variants as cv
from kernel_lab.rowkernels import launch as rk

try:  # run as a script from the repository root
    from ab_kernels import time_case
except ImportError:  # pragma: no cover - imported as bench.ab_first_wave
    from bench.ab_kernels import time_case

SHAPES = ("bfloat16:262144", "float16:262144", "bfloat16:131072", "bfloat16:151936",
          "float32:131072", "float32:65536", "bfloat16:50257")


def set_rate(rate: int, kinds: set[str]) -> None:
    """Phases at ``rate`` bytes a ns (0: none); the launch memo forgets the old spacing."""
    rk._WAVES.clear()
    if rate:
        pc.FIRST_WAVE_BYTES_PER_NS = rate
        rk.STAGGERED_KINDS = kinds
    else:
        rk.STAGGERED_KINDS = set()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", action="append", help=f"DTYPE:N (repeatable; default: "
                    f"{' '.join(SHAPES)})")
    ap.add_argument("--rates", default="4300,2150,8600,0",
                    help="comma-separated bytes a ns (0: no phases); the first is the baseline")
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("ab_first_wave.py: no CUDA GPU here")
    rates = [int(r) for r in a.rates.split(",")]
    head_rate, head_kinds = pc.FIRST_WAVE_BYTES_PER_NS, set(rk.STAGGERED_KINDS)
    current = [None]

    def at_rate(rate: int, launch):
        def run():
            if current[0] != rate:  # the memo is cleared only when the rate changes
                set_rate(rate, head_kinds)
                current[0] = rate
            launch()
        return run

    for spec in a.shape or SHAPES:
        dname, n = spec.split(":")
        dtype, n = parse_dtype(dname), int(n)
        x = torch.randn(max(1, (1 << 28) // n), n, device="cuda", dtype=dtype)
        y = torch.empty_like(x)
        cfg = rk.fast_choice(y, x)[0]
        launch = lambda x=x, y=y, cfg=cfg: rk.fast_launch(y, x, cfg, 1, kernels=cv.FAST_KERNELS)  # noqa: E731
        calls = {f"{r or 'none'}": at_rate(r, launch) for r in rates}
        print(time_case(f"softmax {dname} {x.shape[0]}x{n} {cfg.label()}", x, y, cfg, calls,
                        list(calls), a.rounds), flush=True)
    set_rate(head_rate, head_kinds)


if __name__ == "__main__":
    main()
