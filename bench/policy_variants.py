"""Copies of cuda_src/ whose 16-byte global loads and stores take other L1 / L2 cache policies,
to race with bench/ab_kernels.py.

    python bench/policy_variants.py --out /tmp/pol weak:weak cs:weak:weak
    python bench/ab_kernels.py --variant head=cuda_src --variant weak=/tmp/pol/weak-weak-cg \\
        --variant allweak=/tmp/pol/cs-weak-weak --shape float32:32768 --shape bfloat16:65536

A variant is LOAD:STORE[:ROWS] and lands in OUT/LOAD-STORE-ROWS/ (a copy of cuda_src/):
  LOAD   the loads of bytes read once (load_vec_once: the warp, block and cluster kernels'
         rows, the backward's);
  STORE  every other 16-byte store (store_vec);
  ROWS   the persistent and chunk kernels' row stores (store_vec_cg).
Policies: ``weak`` plain ``ld / st.global.v4.b32`` (SASS LDG / STG.E.128, what Triton emits; the
lab's LOAD and STORE since the nineteenth H200 run), ``cs`` evict-first (LDG / STG.E.EF.128, the
lab's LOAD and STORE before it), ``cg`` L2 only at normal priority (STG.E.128.STRONG.GPU; stores
only, ROWS' own), ``nc`` the read-only path (loads only). (A plain C++ ``*(uint4*)p = v``
compiled to four 4-byte stores here: the eighteenth run's "plain store" variants were that.)
"""

from __future__ import annotations

import argparse
import re
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HEADER = "softmax_common.cuh"

# The three functions whose bodies a variant replaces: (slot, signature as in HEADER).
SLOTS = (
    ("LOAD", "Vec<T> load_vec_once(const T* p) {"),
    ("STORE", "void store_vec(T* p, const Vec<T>& v) {"),
    ("ROWS", "void store_vec_cg(T* p, const Vec<T>& v) {"),
)

_WEAK_LOAD = (
    '  Vec<T> v;\n  asm volatile("ld.global.v4.b32 {%0, %1, %2, %3}, [%4];"\n'
    '               : "=r"(v.raw.x), "=r"(v.raw.y), "=r"(v.raw.z), "=r"(v.raw.w)\n'
    '               : "l"(p));\n  return v;'
)
LOADS = {
    "cs": "  Vec<T> v;\n  v.raw = __ldcs(reinterpret_cast<const uint4*>(p));\n  return v;",
    "nc": "  Vec<T> v;\n  v.raw = __ldg(reinterpret_cast<const uint4*>(p));\n  return v;",
    "weak": _WEAK_LOAD,
}
STORES = {
    "cs": "  __stcs(reinterpret_cast<uint4*>(p), v.raw);",
    "cg": "  __stcg(reinterpret_cast<uint4*>(p), v.raw);",
    "weak": '  asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(v.raw.x), '
    '"r"(v.raw.y),\n               "r"(v.raw.z), "r"(v.raw.w)\n               : "memory");',
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
    """HEADER's text with the three functions' bodies (from the signature's line to the next
    line that is a lone ``}``) replaced by the policies'; each signature must stand once."""
    bodies = (LOADS[load], STORES[store], STORES[rows])
    for (slot, sig), body in zip(SLOTS, bodies):
        pattern = re.compile(r"(" + re.escape(sig) + r"\n)(.*?)(\n\}\n)", re.S)
        found = pattern.findall(text)
        if len(found) != 1:
            raise SystemExit(f"{HEADER}: expected one {slot} function {sig!r}, found "
                             f"{len(found)} (update bench/policy_variants.py)")
        text = pattern.sub(lambda m, body=body: m.group(1) + body + m.group(3), text)
    return text


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
