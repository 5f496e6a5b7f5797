"""The speed goals of issues #5 (forward) and #6 (backward), checked against saved sweeps.

    python bench/goal_check.py bench/sweep9.json bench/sweep8_fp16.json
    python bench/goal_check.py bench/backward8_h200.json --op softmax_backward

Per dtype and row length N: the best lab kernel (of ``--lab``), its % of the copy measured in
the same run, and its speed over the best peer (of ``--peers``). Then each goal, met or with
its misses. Forward (#5): >= 95 % of copy for 1024 <= N <= 262144; >= 90 % at N = 128, 512
and 2^20; never slower than the best peer; >= 1.4x the best peer for N >= 65536; vocabulary
sizes within 3 % of their power-of-two neighbours (faster is fine). Backward (#6, lab default
``fused_softmax_backward``, peer PyTorch's eager backward): >= 90 % of copy (3 tensors) and
>= 1.5x the peer for 1024 <= N <= 262144.
Both: the op's default choice (``variant=None`` on CUDA, ``python -m kernel_lab plan``) for
each N, its % of copy in the sweep, and a goal line that it is within 1 % of the best lab kernel
(the issue holds the default to the same goals).
"""

from __future__ import annotations

import argparse
from pathlib import Path

try:  # run as a script from the repository root
    from notes_table import load
except ImportError:  # pragma: no cover - imported as bench.goal_check
    from bench.notes_table import load

VOCAB = ((32000, 32768), (50257, 65536), (128256, 131072), (151936, 131072))
AUTO_SLACK = 0.01  # the default choice may trail the best lab kernel by this much (a tie)


def auto_choice(op: str, n: int, dtype: str) -> str:
    """The variant the op's default path takes on CUDA for rows of n (kernel_lab.planning)."""
    from kernel_lab import planning
    from kernel_lab.benchmarking import parse_dtype

    return planning.auto_choice(op, n, parse_dtype(dtype))


def best(records: list[dict], dtype: str, n: int, names: set[str]) -> dict | None:
    """The fastest ok record of ``names`` at (dtype, n), or None."""
    ok = [r for r in records if r["dtype"] == dtype and r["n"] == n and r["variant"] in names
          and r["status"] == "ok"]
    return max(ok, key=lambda r: r["gbps"]) if ok else None


def auto_cell(name: str, record: dict | None) -> str:
    return f"{name} " + (f"{record['pct_of_copy']:.1f} %" if record else "(not swept)")


def check(records: list[dict], lab: set[str], peers: set[str],
          backward: bool = False) -> list[str]:
    """Lines: a per-N table per dtype, then one line per goal (met, or the misses); the
    backward goals of issue #6 when ``backward``."""
    out = []
    op = "softmax_backward" if backward else "softmax"
    for dtype in sorted({r["dtype"] for r in records}):
        rows, autos = {}, {}
        for n in sorted({r["n"] for r in records if r["dtype"] == dtype}):
            a, p = best(records, dtype, n, lab), best(records, dtype, n, peers)
            if a is not None:
                rows[n] = (a, a["gbps"] / p["gbps"] if p else None)
                name = auto_choice(op, n, dtype)
                autos[n] = (name, best(records, dtype, n, {name}))
        out.append(f"{dtype}: N, best lab kernel, % of copy, x best peer, default choice")

        out += [f"  {n:>8} {a['variant']:<14} {a['pct_of_copy']:5.1f} %  "
                + (f"{x:.3f}x" if x else "-") + f"  {auto_cell(*autos[n])}"
                for n, (a, x) in rows.items()]

        def goal(text: str, misses: list[str]) -> str:
            return f"  {text}: " + ("met" if not misses else "missed at " + ", ".join(misses))

        lagging = [f"{n} ({autos[n][0]} {autos[n][1]['pct_of_copy']:.1f} vs {a['variant']} "
                   f"{a['pct_of_copy']:.1f} %)" for n, (a, _) in rows.items()
                   if autos[n][1] and autos[n][1]["gbps"] < (1 - AUTO_SLACK) * a["gbps"]]

        pct = {n: a["pct_of_copy"] for n, (a, _) in rows.items()}
        ratio = {n: x for n, (_, x) in rows.items() if x is not None}
        if backward:
            out.append(goal(">= 90 % for 1024 <= N <= 262144",
                            [f"{n} ({p:.0f})" for n, p in pct.items() if 1024 <= n <= 262144
                             and p < 90]))
            out.append(goal(">= 1.5x the peer for 1024 <= N <= 262144 (where it is exact)",
                            [f"{n} ({x:.3f})" for n, x in ratio.items() if 1024 <= n <= 262144
                             and x < 1.5]))
            out.append(goal("the default choice within 1 % of the best lab kernel", lagging))
            continue
        out.append(goal(">= 95 % for 1024 <= N <= 262144",
                        [f"{n} ({p:.0f})" for n, p in pct.items() if 1024 <= n <= 262144
                         and p < 95]))
        out.append(goal(">= 90 % at 128, 512, 2^20",
                        [f"{n} ({pct[n]:.0f})" for n in (128, 512, 1 << 20)
                         if n in pct and pct[n] < 90]))
        out.append(goal("never slower than the best peer",
                        [f"{n} ({x:.3f})" for n, x in ratio.items() if x < 1]))
        out.append(goal(">= 1.4x the best peer for N >= 65536",
                        [f"{n} ({x:.3f})" for n, x in ratio.items() if n >= 65536 and x < 1.4]))
        vocab = [(a, b, rows[a][0]["gbps"] / rows[b][0]["gbps"] - 1) for a, b in VOCAB
                 if a in rows and b in rows]
        out.append(goal("vocabulary sizes within 3 % of their neighbours",
                        [f"{a} ({100 * d:+.1f} % vs {b})" for a, b, d in vocab if d < -0.03]))
        out.append(goal("the default choice within 1 % of the best lab kernel", lagging))
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("files", nargs="+", type=Path)
    p.add_argument("--op", default="softmax", choices=("softmax", "softmax_backward"))
    p.add_argument("--lab", help="the lab's kernels (comma-separated; default: fast_softmax,"
                   "triton_fused, or fused_softmax_backward for the backward)")
    p.add_argument("--peers", help="the peers (comma-separated; default: torch_eager,"
                   "compile_naive, or torch_eager_backward for the backward)")
    args = p.parse_args()
    backward = args.op == "softmax_backward"
    lab = args.lab or ("fused_softmax_backward" if backward else "fast_softmax,triton_fused")
    peers = args.peers or ("torch_eager_backward" if backward else "torch_eager,compile_naive")
    _, records = load(args.files)
    records = [r for r in records if r["op"] == args.op]
    if not records:
        raise SystemExit(f"no {args.op} records in {', '.join(map(str, args.files))}")
    print("\n".join(check(records, set(lab.split(",")), set(peers.split(",")), backward)))


if __name__ == "__main__":
    main()
