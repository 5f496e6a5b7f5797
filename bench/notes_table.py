"""Markdown tables from saved ``python -m kernel_lab bench`` JSON files (for bench/NOTES.md).

    python bench/notes_table.py bench/sweep_h200.json [more.json ...] [--ratio A/B]

One table per (op, dtype): shapes down, variants across, "GB/s (% of copy)", best in bold.
``--ratio A/B`` adds a column with variant A's GB/s over variant B's per shape (e.g.
``log_softmax/fast_softmax``; the two may belong to different ops of the same run).
``--kernels V`` adds a column with what variant V launched per shape (the records' ``kernels``:
name expression and ``<<<grid, block, shared bytes>>>``; sweeps saved since 2026-11-30).
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path


def load(paths: list[Path]) -> tuple[list[dict], list[dict]]:
    metas, records = [], []
    for p in paths:
        data = json.loads(p.read_text())
        metas.append(data["meta"])
        records += data["records"]
    return metas, records


def cell(r: dict | None) -> str:
    if r is None:
        return ""
    if r["status"] != "ok":
        return r["status"]
    return f"{r['gbps']:,.0f} ({r['pct_of_copy']:.0f}%)"


def tables(records: list[dict], ratio: str | None = None, kernels: str | None = None) -> str:
    panels: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for r in records:
        panels[(r["op"], r["dtype"])].append(r)
    by_dtype_shape_variant = {(r["dtype"], r["m"], r["n"], r["variant"]): r for r in records}
    out = []
    for (op, dtype), recs in panels.items():
        names = list(dict.fromkeys(r["variant"] for r in recs))
        shapes = sorted({(r["n"], r["m"]) for r in recs})
        copy = max((r.get("copy_gbps") or 0) for r in recs)
        head = ["M x N", *names] + ([ratio] if ratio else []) + (
            [f"{kernels} launched"] if kernels else [])
        out.append(f"**{op} {dtype}** (GB/s, % of copy {copy:,.0f} GB/s; **bold** = best)\n")
        out.append("| " + " | ".join(head) + " |")
        out.append("|" + "---|" * len(head))
        for n, m in shapes:
            cells = {r["variant"]: r for r in recs if (r["n"], r["m"]) == (n, m)}
            ok = [r for r in cells.values() if r["status"] == "ok"]
            best = max(ok, key=lambda r: r["gbps"])["variant"] if ok else None
            row = [f"{m}x{n}"]
            for name in names:
                c = cell(cells.get(name))
                row.append(f"**{c}**" if name == best else c)
            if ratio:
                a, b = ratio.split("/")
                ra = by_dtype_shape_variant.get((dtype, m, n, a))
                rb = by_dtype_shape_variant.get((dtype, m, n, b))
                ok_ab = ra and rb and ra["status"] == rb["status"] == "ok"
                row.append(f"{ra['gbps'] / rb['gbps']:.3f}" if ok_ab else "")
            if kernels:
                rk = by_dtype_shape_variant.get((dtype, m, n, kernels))
                row.append(f"`{rk['kernels']}`" if rk and rk.get("kernels") else "")
            out.append("| " + " | ".join(row) + " |")
        out.append("")
    return "\n".join(out)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("files", nargs="+", type=Path)
    p.add_argument("--ratio", help="A/B: add variant A's GB/s over variant B's")
    p.add_argument("--kernels", metavar="V", help="add what variant V launched per shape")
    args = p.parse_args()
    metas, records = load(args.files)
    for m in metas:
        print(f"<!-- {m.get('created_utc')} {m.get('bench_device', m.get('device'))}, "
              f"copy {m.get('copy_gbps', 0):,.0f} GB/s -->")
    print(tables(records, args.ratio, args.kernels))


if __name__ == "__main__":
    main()
