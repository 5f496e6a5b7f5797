"""The lab against its peers, per cell: markdown from saved ``python -m kernel_lab bench`` JSON.

    python bench/peer_ratios.py SWEEP.json [MORE.json ...] > ratios.md

One table per (op, dtype), rows N (and M): the lab's best variant there and its GB/s, the best
peer's, and lab ÷ best peer (below 1, in bold: the peer is faster). "The lab" is every variant
of backend ``cuda`` or ``triton`` (fast_softmax, fused_softmax_backward, the Triton kernels ...)
and the dispatcher ``auto``; "peers" are backend ``peer`` (QuACK, Liger); ``torch`` / ``compile``
are neither. Only ``ok`` records count (an ``inexact`` one is never a shape's best, as in the
sweep). Where no peer timed, the peers' skip reasons stand in the peer column. Several files
merge (e.g. a forward sweep and a backward one, or lab and peers from separate device calls);
a variant measured in more than one keeps the last file's record. Stdlib only.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

LAB_BACKENDS = ("cuda", "triton")
LAB_NAMES = ("auto",)  # dispatchers counted as the lab whatever backend they record
PEER_BACKEND = "peer"


def is_lab(r: dict) -> bool:
    return r["backend"] in LAB_BACKENDS or r["variant"] in LAB_NAMES


def load(paths: list[Path]) -> tuple[list[dict], list[dict]]:
    """(records, metas): the last file's record wins per (op, dtype, m, n, variant)."""
    merged: dict[tuple, dict] = {}
    metas = []
    for path in paths:
        data = json.loads(Path(path).read_text())
        metas.append(data.get("meta", {}))
        for r in data["records"]:
            merged[(r["op"], r["dtype"], r["m"], r["n"], r["variant"])] = r
    return list(merged.values()), metas


def best(recs: list[dict]) -> dict | None:
    timed = [r for r in recs if r["status"] == "ok" and r.get("gbps")]
    return max(timed, key=lambda r: r["gbps"]) if timed else None


def cells(records: list[dict]) -> dict[tuple[str, str], list[dict]]:
    """(op, dtype) -> one row per (n, m): lab and peer winners, the ratio, the peers' skips."""
    groups: dict[tuple, list[dict]] = {}
    for r in records:
        groups.setdefault((r["op"], r["dtype"], r["n"], r["m"]), []).append(r)
    out: dict[tuple[str, str], list[dict]] = {}
    for (op, dtype, n, m), recs in sorted(groups.items(), key=lambda kv: kv[0][2:]):
        peers = [r for r in recs if r["backend"] == PEER_BACKEND]
        lab, peer = best([r for r in recs if is_lab(r)]), best(peers)
        if lab is None and not peers:
            continue  # a cell without the lab and without any peer says nothing here
        out.setdefault((op, dtype), []).append({
            "n": n, "m": m, "lab": lab, "peer": peer,
            "ratio": lab["gbps"] / peer["gbps"] if lab and peer else None,
            "skips": [f"{r['variant']}: {r['reason'] or r['status']}" for r in peers
                      if r["status"] != "ok"],
        })
    return out


def _gb(r: dict | None) -> str:
    return f"{r['gbps']:,.0f}" if r else "—"


def render(records: list[dict], metas: list[dict], sources: list[str]) -> str:
    gpus = sorted({m.get("bench_device", "?") for m in metas})
    lines = [f"# Lab vs peers: {', '.join(sources)} ({'; '.join(gpus)})", "",
             "GB/s of the fastest lab variant and of the fastest peer per shape; lab ÷ peer "
             "below 1 (**bold**): the peer leads.", ""]
    leads = []
    for (op, dtype), rows in cells(records).items():
        lines += [f"**{op}, {dtype}**", "",
                  "| N | M | lab best | GB/s | best peer | GB/s | lab ÷ peer |",
                  "|---:|---:|---|---:|---|---:|---:|"]
        for c in rows:
            lab, peer, ratio = c["lab"], c["peer"], c["ratio"]
            peer_name = peer["variant"] if peer else ("; ".join(c["skips"]) or "—")
            if ratio is None:
                cell = "—"
            elif ratio < 1:
                cell = f"**{ratio:.3f}**"
                leads.append(f"{op} {dtype} N={c['n']} ({peer['variant']}, {ratio:.3f})")
            else:
                cell = f"{ratio:.3f}"
            lines.append(f"| {c['n']} | {c['m']} | {lab['variant'] if lab else '—'} | "
                         f"{_gb(lab)} | {peer_name} | {_gb(peer)} | {cell} |")
        lines.append("")
    lines.append(f"Peer leads in {len(leads)} cell{'s' if len(leads) != 1 else ''}"
                 + (": " + "; ".join(leads) if leads else "") + ".")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("files", nargs="+", type=Path, help="sweep JSON files (kernel_lab bench)")
    args = p.parse_args(argv)
    records, metas = load(args.files)
    print(render(records, metas, [f.name for f in args.files]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
