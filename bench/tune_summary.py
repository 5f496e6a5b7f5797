"""One line per (dtype, N, op) of bench/tune_long_rows.py's tune.jsonl files: every shape's % of
copy, the default pick marked *, a wrong output marked WRONG; then the registered variants'.

    python bench/tune_summary.py DIR    # every DIR/tune*/tune.jsonl (the device calls' layout)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def summary(rows: list[dict]) -> list[str]:
    by, registered = {}, []
    for r in rows:
        if "cfg" in r:
            cell = f"{r['cfg'].split(': ')[-1]}{'*' if r['default'] else ''} {r['pct']}"
            by.setdefault((r["dtype"], r["N"], r["op"], r["copy"]), []).append(
                cell + ("" if r["ok"] else " WRONG"))
        else:
            registered.append(f"{r['dtype']} {r['N']} registered: fast_softmax {r['fast_pct']}, "
                              f"log_softmax {r['log_pct']}")
    lines = [f"{d} {n} {op} (copy {copy}): " + " | ".join(cells)
             for (d, n, op, copy), cells in by.items()]
    return lines + registered


def main() -> None:
    if len(sys.argv) != 2:
        raise SystemExit(__doc__.strip().splitlines()[-1].strip())
    for f in sorted(Path(sys.argv[1]).glob("tune*/tune.jsonl")):
        print("\n".join(summary([json.loads(line) for line in f.read_text().splitlines()])))


if __name__ == "__main__":
    main()
