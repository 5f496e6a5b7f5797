"""Where a profiled kernel's warps wait: stall reasons and the hottest SASS lines of an ncu report.

    ncu --clock-control none -k regex:fast_softmax --launch-skip 2 --launch-count 1 \\
        --section WarpStateStats --section SourceCounters -o rep \\
        python3 bench/profile_config.py --dtype bfloat16 --n 1048576
    ncu -i rep.ncu-rep --csv --page raw >raw.csv
    ncu -i rep.ncu-rep --csv --page source --print-source sass >sass.csv
    python3 bench/ncu_stalls.py raw.csv sass.csv [--top 30]

Prints the warp-state sampling totals by reason (``smsp__pcsamp_warps_issue_stalled_*`` from the
raw page, largest first, % of all samples), then the SASS instructions with the most samples, each
with its share and its top reasons (Nsight Compute's "source" page). Reads the two pages as CSV
files, so it runs without ncu (the pages of a GPU run come back as files).
"""

from __future__ import annotations

import argparse
import csv
import io
from pathlib import Path


def number(s: str) -> float:
    try:
        return float(s.replace(",", ""))
    except ValueError:
        return 0.0


def table(path: str, first: str) -> tuple[list[str], list[list[str]]]:
    """(header, rows) of an ncu CSV page, from its first line that contains ``first``."""
    lines = Path(path).read_text().splitlines()
    start = next(i for i, ln in enumerate(lines) if first in ln)
    rows = list(csv.reader(io.StringIO("\n".join(lines[start:]))))
    return rows[0], [r for r in rows[1:] if len(r) == len(rows[0])]


def reasons(raw: str) -> list[tuple[str, float]]:
    """(reason, samples) from the raw page, largest first."""
    head, rows = table(raw, "smsp__")
    values = rows[-1]  # one profiled launch: the last row holds its values (a units row first)
    prefix = "smsp__pcsamp_warps_issue_stalled_"  # sampled: SourceCounters
    out = [(h[len(prefix):], number(v)) for h, v in zip(head, values)
           if h.startswith(prefix) and not h.endswith("_not_issued")]
    if not out:  # WarpStateStats alone: cycles each warp spent stalled, per issued instruction
        prefix = "smsp__average_warps_issue_stalled_"
        out = [(h[len(prefix):].split("_per_")[0], number(v)) for h, v in zip(head, values)
               if h.startswith(prefix) and "_per_issue_active" in h]
    return sorted(out, key=lambda r: -r[1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("raw", help="ncu --page raw --csv of the report")
    ap.add_argument("sass", help="ncu --page source --print-source sass --csv of the report")
    ap.add_argument("--top", type=int, default=30)
    a = ap.parse_args()

    rs = reasons(a.raw)
    total = sum(v for _, v in rs) or 1.0
    print(f"stall samples by reason ({total:,.0f} samples):")
    for name, v in rs:
        if v:
            print(f"  {name:28s} {v:10,.0f}  {100 * v / total:5.1f} %")

    head, rows = table(a.sass, "Address")
    col = {h: i for i, h in enumerate(head)}
    all_col = next(h for h in head if h.startswith("Warp Stall Sampling (All"))
    reason_cols = [h for h in head if h.startswith("stall_") or h.endswith("(Warp Stall")]
    total = sum(number(r[col[all_col]]) for r in rows) or 1.0
    print(f"\nhottest SASS ({all_col}, {total:,.0f} samples; columns: {len(head)}):")
    for r in sorted(rows, key=lambda r: -number(r[col[all_col]]))[: a.top]:
        v = number(r[col[all_col]])
        top = sorted(((number(r[col[h]]), h) for h in reason_cols), reverse=True)[:3]
        why = ", ".join(f"{h} {x:.0f}" for x, h in top if x)
        sass = r[col["Source"]][:60]
        print(f"  {r[col['Address']]:>6s} {100 * v / total:5.1f} %  {sass:60s} {why}")
    if not reason_cols:
        print("columns:", ", ".join(head))


if __name__ == "__main__":
    main()
