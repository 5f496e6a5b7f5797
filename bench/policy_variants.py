"""Copies of cuda_src/ whose 16-byte global loads and stores take other L1 / L2 cache policies,
to race with bench/ab_kernels.py.

    python bench/policy_variants.py --out /tmp/pol weak:weak cs:weak:weak
    python bench/ab_kernels.py --variant head=cuda_src --variant weak=/tmp/pol/weak-weak-cg \\
        --variant allweak=/tmp/pol/cs-weak-weak --shape float32:32768 --shape bfloat16:65536

A variant is LOAD:STORE[:ROWS] and lands in OUT/LOAD-STORE-ROWS/ (a copy of cuda_src/):
  LOAD   the single-use loads (load_vec_cs: the one-CTA-per-row kernels' rows);
  STORE  every other 16-byte store (store_vec);
  ROWS   the persistent and chunk kernels' row stores (store_vec_cg; default cg).
Policies: ``cs`` evict-first (SASS LDG/STG.E.EF.128, the lab's default for LOAD and STORE),
``cg`` L2 only at normal priority (STG.E.128.STRONG.GPU; stores only, ROWS' default), ``nc``
the read-only path (loads only), ``weak`` plain ``ld/st.global.v4.b32`` (LDG/STG.E.128, what
Triton emits). (A plain C++ ``*(uint4*)p = v`` compiled to four 4-byte stores here: the
eighteenth run's "plain store" variants were that, not a policy.)
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HEADER = "softmax_common.cuh"

# The one line of each function's body that a policy replaces, as it stands in HEADER.
LOAD_LINE = "  v.raw = __ldcs(reinterpret_cast<const uint4*>(p));"
STORE_LINE = "  __stcs(reinterpret_cast<uint4*>(p), v.raw);"
ROWS_LINE = "  __stcg(reinterpret_cast<uint4*>(p), v.raw);"

LOADS = {
    "cs": LOAD_LINE,
    "nc": "  v.raw = __ldg(reinterpret_cast<const uint4*>(p));",
    "weak": '  asm volatile("ld.global.v4.b32 {%0, %1, %2, %3}, [%4];" : "=r"(v.raw.x), '
    '"=r"(v.raw.y), "=r"(v.raw.z), "=r"(v.raw.w) : "l"(p));',
}
STORES = {
    "cs": STORE_LINE,
    "cg": ROWS_LINE,
    "weak": '  asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(v.raw.x), '
    '"r"(v.raw.y), "r"(v.raw.z), "r"(v.raw.w) : "memory");',
}


def parse(spec: str) -> tuple[str, str, str]:
    parts = spec.split(":")
    if len(parts) == 2:
        parts.append("cg")
    if len(parts) != 3 or parts[0] not in LOADS or parts[1] not in STORES or \
            parts[2] not in STORES:
        raise argparse.ArgumentTypeError(
            f"{spec!r}: LOAD:STORE[:ROWS] with LOAD in {sorted(LOADS)}, STORE and ROWS in "
            f"{sorted(STORES)}")
    return parts[0], parts[1], parts[2]


def rewrite(text: str, load: str, store: str, rows: str) -> str:
    """HEADER's text with the three policies swapped in; each line must stand exactly once
    (checked first, then all three replaced at once: one policy's line may be another's)."""
    swaps = ((LOAD_LINE, LOADS[load]), (STORE_LINE, STORES[store]), (ROWS_LINE, STORES[rows]))
    for old, _ in swaps:
        if text.count(old) != 1:
            raise SystemExit(f"{HEADER}: expected one line {old.strip()!r}, found "
                             f"{text.count(old)} (update bench/policy_variants.py)")
    lines = text.split("\n")
    by_line = dict(swaps)
    return "\n".join(by_line.get(line, line) for line in lines)


def write_variant(src: Path, out: Path, load: str, store: str, rows: str) -> Path:
    """OUT/LOAD-STORE-ROWS/cuda_src: a copy of src with the policies swapped in."""
    dst = out / f"{load}-{store}-{rows}" / "cuda_src"
    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__"))
    header = dst / HEADER
    header.write_text(rewrite(header.read_text(), load, store, rows))
    return dst


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("variants", nargs="+", type=parse, help="LOAD:STORE[:ROWS], e.g. weak:weak")
    ap.add_argument("--out", type=Path, required=True, help="where the copies go")
    ap.add_argument("--src", type=Path, default=ROOT / "cuda_src")
    a = ap.parse_args()
    for load, store, rows in a.variants:
        print(write_variant(a.src, a.out, load, store, rows))


if __name__ == "__main__":
    main()
