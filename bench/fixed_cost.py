"""How a kernel's time grows with the row count: its steady speed and its fixed cost per call.

    python bench/fixed_cost.py --out DIR [--shapes bfloat16:131072,float32:65536]

For every (dtype, N): the device-to-device copy ``y.copy_(x)`` and the config
``fast_softmax_config`` picks (or ``--cfg``'s shapes), each timed by CUDA events around
back-to-back launches (``tune_long_rows.med_ms``) at many row counts M: a coarse ladder from
M0 / 4 to 2 * M0 (M0 = 2^28 / N, the sweeps' tensor) and a fine grid of M0 +- 132 rows (one
row an SM of the H200) to show steps of whole waves. A least-squares line t = a + b * M for
each gives the fixed cost a (us a call: pipeline fill and drain, the last wave, the launch)
and the steady speed 2 * N * itemsize / b (GB/s, read + write). The summary line per shape:

    bfloat16 131072 <cfg>: at M0 93.9 % of copy; steady 97.1 %; fixed 7.9 us (copy 1.2 us)

so a miss of the issue's 95 % splits into the part a longer tensor would not see (the fixed
cost, paid once a call) and the part it would (the steady speed). Writes DIR/fixed_cost.jsonl
(one line per timing) and DIR/fixed_cost.json (the fits).

A shape may name its config after '@' (KIND,THREADS,VPT,CLUSTER,SLOTS[,ahead=A][,late=1], as
bench/ab_configs.py reads it), e.g.
``bfloat16:262144@block_slots,512,8,4,8``. ``--stagger 'none;block_slots;block_slots,block'``
times each set of ``cuda_variants.STAGGERED_KINDS`` (the kinds that start their first wave in
phases) in turn at every M - an A/B in one process - with a fit and a summary line each.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import numpy as np
import torch
from ab_configs import parse_cfg  # the config grammar (KIND,THREADS,VPT,CLUSTER,SLOTS[,...])
from tune_long_rows import med_ms

from kernel_lab.benchmarking import parse_dtype
from kernel_lab.ops.softmax import cuda_variants as cv
from kernel_lab.rowkernels import forward_config as fc
from kernel_lab.rowkernels import launch as rk

SHAPES = ("bfloat16:128256", "bfloat16:131072", "bfloat16:151936", "bfloat16:262144",
          "float16:131072", "float32:131072", "float32:65536", "bfloat16:65536",
          "bfloat16:16384")


def row_counts(m0: int, sms: int) -> list[int]:
    coarse = [max(1, int(m0 * f)) for f in (0.25, 0.5, 0.75, 1.25, 1.5, 2.0)]
    fine = [m0 + d for d in range(-sms, sms + 1, max(1, sms // 11))]
    return sorted({m for m in coarse + fine if m >= 1})


def fit(ms: list[int], ts: list[float]) -> tuple[float, float]:
    """t = a + b * M by least squares; returns (a, b) in the units of ts."""
    b, a = np.polyfit(np.asarray(ms, float), np.asarray(ts, float), 1)
    return float(a), float(b)


def split_shapes(text: str) -> list[str]:
    """--shapes' specs: commas split them, but not the ones inside a spec's '@...' config."""
    return [spec for spec in re.split(r",(?=[a-z0-9]+:)", text) if spec]


def parse_stagger(text: str) -> list[set[str]]:
    """--stagger's kind sets: 'none;block_slots;block_slots,block' -> [set(), {...}, {...}]."""
    return [set() if part.strip() == "none" else {k.strip() for k in part.split(",") if k.strip()}
            for part in text.split(";") if part.strip()]


def parse_shape(spec: str) -> tuple[torch.dtype, int, fc.FastConfig | None]:
    """'DTYPE:N[@KIND,THREADS,VPT,CLUSTER,SLOTS]' -> (dtype, N, the config or None: the pick)."""
    shape, _, given = spec.partition("@")
    dname, n = shape.split(":")
    cfg, groups = parse_cfg(given) if given else (None, None)
    if groups is not None:
        raise ValueError(f"{spec!r}: groups= caps a grid in ab_configs.py, not here")
    return parse_dtype(dname), int(n), cfg


def measure(spec: str, total_log2: int, stagger: list[set[str]], log) -> list[dict]:
    dtype, n, cfg = parse_shape(spec)
    m0 = max(1, (1 << total_log2) // n)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    counts = row_counts(m0, sms)
    big = torch.randn(max(counts), n, device="cuda", dtype=dtype)
    out = torch.empty_like(big)
    aligned = n * big.element_size() % 16 == 0
    cfg = cfg or fc.fast_softmax_config(n, dtype, aligned, True)
    dname = str(dtype).replace("torch.", "")
    own_kinds = rk.STAGGERED_KINDS
    sets = stagger or [set(own_kinds)]
    rows = {i: [] for i in range(len(sets))}
    try:
        for m in counts:
            x, y = big[:m], out[:m]
            t_copy = med_ms(lambda x=x, y=y: y.copy_(x))
            for i, kinds in enumerate(sets):  # each set in turn at this M: drift cancels
                rk.STAGGERED_KINDS = kinds
                t_kern = med_ms(lambda x=x, y=y: rk.fast_launch(y, x, cfg, kernels=cv.FAST_KERNELS))
                ref = torch.softmax(x[-1:].double(), -1)
                err = (y[-1:].double() - ref).abs().max().item()
                r = {"dtype": dname, "N": n, "M": m, "cfg": cfg.label(),
                     "stagger": ",".join(sorted(kinds)) or "none", "copy_ms": t_copy,
                     "kern_ms": t_kern, "pct": round(100 * t_copy / t_kern, 2), "err": err}
                log.write(json.dumps(r) + "\n")
                rows[i].append(r)
    finally:
        rk.STAGGERED_KINDS = own_kinds  # the launcher's own set again
    fits = []
    for rs in rows.values():
        a_k, b_k = fit(counts, [r["kern_ms"] for r in rs])
        a_c, b_c = fit(counts, [r["copy_ms"] for r in rs])
        row_bytes = 2 * n * big.element_size()
        at_m0 = next(r for r in rs if r["M"] == m0)
        fits.append({
            "dtype": dname, "N": n, "M0": m0, "cfg": cfg.label(), "stagger": rs[0]["stagger"],
            "pct_at_m0": at_m0["pct"], "steady_pct": round(100 * b_c / b_k, 2),
            "steady_gbs": round(row_bytes / b_k / 1e6),
            "copy_steady_gbs": round(row_bytes / b_c / 1e6),
            "fixed_us": round(1e3 * a_k, 2), "copy_fixed_us": round(1e3 * a_c, 2),
            "fixed_share_at_m0": round(100 * a_k / at_m0["kern_ms"], 2),
            "max_err": max(r["err"] for r in rs), "by_m": {r["M"]: r["pct"] for r in rs}})
    return fits


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="bench/fixed_cost_out")
    ap.add_argument("--shapes", default=",".join(SHAPES),
                    help="comma-separated DTYPE:N[@KIND,THREADS,VPT,CLUSTER,SLOTS]")
    ap.add_argument("--total-log2", type=int, default=28, help="M0 = 2^this / N")
    ap.add_argument("--stagger", default="",
                    help="semicolon-separated sets of STAGGERED_KINDS timed in turn ('none': "
                    "the empty set); default: the launcher's own set")
    args = ap.parse_args()
    stagger = parse_stagger(args.stagger)
    unknown = {k for kinds in stagger for k in kinds} - {"block", "block_slots", "cluster"}
    if unknown:
        ap.error(f"--stagger: kinds {sorted(unknown)} take no first-wave phases (block, "
                 "block_slots, cluster do)")
    if not torch.cuda.is_available():
        raise SystemExit("fixed_cost.py: no CUDA GPU here (it times kernels against the copy)")
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    fits = []
    with open(out_dir / "fixed_cost.jsonl", "w") as log:
        for spec in split_shapes(args.shapes):
            for f in measure(spec, args.total_log2, stagger, log):
                fits.append(f)
                print(f"{f['dtype']} {f['N']} {f['cfg']} [{f['stagger']}]: at M0={f['M0']} "
                      f"{f['pct_at_m0']} % of copy; steady {f['steady_pct']} % "
                      f"({f['steady_gbs']} / {f['copy_steady_gbs']} GB/s); fixed "
                      f"{f['fixed_us']} us (copy {f['copy_fixed_us']} us, "
                      f"{f['fixed_share_at_m0']} % of the call at M0); max err "
                      f"{f['max_err']:.1e}", flush=True)
    (out_dir / "fixed_cost.json").write_text(json.dumps(fits, indent=1))
    print("== by M (% of copy)")
    for f in fits:
        print(f"{f['dtype']} {f['N']} [{f['stagger']}]: "
              + " ".join(f"{m}:{p}" for m, p in f["by_m"].items()))


if __name__ == "__main__":
    main()
