"""A/B: the first wave's phase spacing (persistent.FIRST_WAVE_BYTES_PER_NS: the first wave's
rows are spread over their load time at this many bytes a ns) on the op's picks, in one process.

    python bench/ab_first_wave.py [--shape bfloat16:262144 ...] [--rates 4300,2150,8600,0]

Rate 0 launches every row at once (no phases). In each round the copy and every rate are timed in
turn (tune_long_rows.med_ms); each line gives the median % of copy per rate. M = 2^28 / N.
"""

from __future__ import annotations

import argparse
import statistics

import torch

from kernel_lab.benchmarking import parse_dtype
from kernel_lab.ops.softmax import cuda_variants as cv
from kernel_lab.ops.softmax import persistent as pc

try:  # run as a script from the repository root
    from tune_long_rows import med_ms
except ImportError:  # pragma: no cover - imported as bench.ab_first_wave
    from bench.tune_long_rows import med_ms

SHAPES = ("bfloat16:262144", "float16:262144", "bfloat16:131072", "bfloat16:151936",
          "float32:131072", "float32:65536", "bfloat16:50257")


def set_rate(rate: int, kinds: set[str]) -> None:
    """Phases at ``rate`` bytes a ns (0: none); the launch memo forgets the old spacing."""
    cv._WAVES.clear()
    if rate:
        pc.FIRST_WAVE_BYTES_PER_NS = rate
        cv.STAGGERED_KINDS = kinds
    else:
        cv.STAGGERED_KINDS = set()


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
    head_rate, head_kinds = pc.FIRST_WAVE_BYTES_PER_NS, set(cv.STAGGERED_KINDS)
    for spec in a.shape or SHAPES:
        dname, n = spec.split(":")
        dtype, n = parse_dtype(dname), int(n)
        x = torch.randn(max(1, (1 << 28) // n), n, device="cuda", dtype=dtype)
        y = torch.empty_like(x)
        cfg = cv.fast_choice(y, x)[0]
        mb = 2 * x.numel() * x.element_size() / 1e6
        pct = {r: [] for r in rates}
        for _ in range(a.rounds):
            copy = mb / med_ms(lambda x=x, y=y: y.copy_(x))
            for r in rates:
                set_rate(r, head_kinds)
                g = mb / med_ms(lambda x=x, y=y, cfg=cfg: cv.fast_launch(y, x, cfg, 1))
                pct[r].append(100 * g / copy)
        set_rate(head_rate, head_kinds)
        base = statistics.median(pct[rates[0]])
        cells = [f"{r or 'none'} {statistics.median(p):.1f} % ({statistics.median(p) - base:+.1f})"
                 for r, p in pct.items()]
        print(f"softmax {dname} {x.shape[0]}x{n} {cfg.label()} | " + " | ".join(cells),
              flush=True)


if __name__ == "__main__":
    main()
