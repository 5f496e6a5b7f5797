"""The path of one call through the lab's files: which files it crosses, how often it moves
between them, and whether a lower layer ever calls up into a higher one.

    python bench/call_path.py            # on a GPU: run("online_softmax"), the drop-ins, a CE step

For each call (cold: its first call in the process; warm: the fewest files of five traced after
three more, as calls in a loop run between the once-a-millisecond re-stats of a kernel's files,
with how many crossed more), a profile hook records
every Python call whose code lives in kernel_lab/ (or triton_src/); it prints the files in the
order first entered, the number of moves between files, and every "climb": a call from a file
of a lower layer into a higher one (API -> drop-in glue -> plan / pick -> variant -> launch ->
JIT, DESIGN.md "The path of a call").
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

import kernel_lab

ROOT = Path(kernel_lab.__file__).resolve().parent

# layer of a file, by its path inside kernel_lab/ (first match); lower number = higher layer;
# None: the registry and the op contract, the data every layer reads (its Variant objects
# call their launchers)
LAYERS = (
    ("__init__.py", 0), ("ops/*/api.py", 0), ("nn.py", 0),
    ("core/dropin.py", 1), ("core/custom_ops.py", 1),
    ("core/plans.py", 2), ("core/dispatch.py", 2),
    ("core/registry.py", None), ("core/contract.py", None), ("base/*", None),
    ("ops/*/auto.py", 4), ("ops/*/op.py", 4),
    ("ops/*/*_variants.py", 4), ("core/*", 4), ("cuda/rowkernels/*", 4), ("cuda/sources.py", 4),
    ("cuda/flag_words.py", 4), ("cuda/occupancy.py", 4), ("cuda/archs.py", 4),
    ("cuda/deferred.py", 4), ("triton_src/*", 4),
    ("cuda/interop.py", 5),
    ("cuda/jit.py", 6), ("cuda/cubins.py", 6),
)


def layer(rel: str) -> int | None:
    p = Path(rel)
    for pattern, k in LAYERS:
        if p.match(pattern):
            return k
    return 4


def _rel(filename: str) -> str | None:
    try:
        return Path(filename).resolve().relative_to(ROOT).as_posix()
    except ValueError:
        return None


def trace(fn) -> tuple[list[str], int, list[tuple[str, str]]]:
    """(files in order of first entry, moves between files, climbs) of one call of ``fn``."""
    files: list[str] = []
    moves = 0
    climbs: list[tuple[str, str]] = []
    last: list[str | None] = [None]

    def hook(frame, event, arg):
        nonlocal moves
        if event != "call":
            return
        rel = _rel(frame.f_code.co_filename)
        if rel is None:
            return
        if rel not in files:
            files.append(rel)
        if last[0] is not None and rel != last[0]:
            moves += 1
        caller = frame.f_back
        crel = _rel(caller.f_code.co_filename) if caller is not None else None
        lo, hi = layer(crel) if crel is not None else None, layer(rel)
        if crel != rel and lo is not None and hi is not None and hi < lo:
            climbs.append((crel, rel))
        last[0] = rel

    sys.setprofile(hook)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return files, moves, sorted(set(climbs))


WARM_CALLS = 5  # warm calls traced: the path of most of them is the steady state's


def report(label: str, fn) -> None:
    """The cold call's path, then the warm one's: of :data:`WARM_CALLS` traced calls after three
    more, the one crossing the fewest files (a replay re-stats its kernel's files once a
    millisecond, in cuda/jit.py: a slow call, a CE step on a slow host, meets that often),
    with how many crossed more and which; climbs of any traced call."""
    files, moves, climbs = trace(fn)
    print(f"{label} [cold]: {len(files)} files, {moves} moves: {' > '.join(files)}")
    for a, b in climbs:
        print(f"    climb: {a} -> {b}")
    for _ in range(3):
        fn()
    traced = [trace(fn) for _ in range(WARM_CALLS)]
    files, moves, _ = min(traced, key=lambda r: (len(r[0]), r[1]))
    more = [r[0] for r in traced if len(r[0]) > len(files)]
    extra = sorted({f for other in more for f in other if f not in files})
    print(f"{label} [warm]: {len(files)} files, {moves} moves: {' > '.join(files)}"
          + (f" ({len(more)} of {WARM_CALLS} crossed more: + {', '.join(extra)})" if more else ""))
    for a, b in sorted({c for r in traced for c in r[2]}):
        print(f"    climb: {a} -> {b}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = ap.parse_args(argv)
    dev = args.device
    if dev != "cpu":
        from gpu_check import require_gpu  # bench/ is sys.path[0] when a script runs

        require_gpu("it traces calls on CUDA tensors", argv=(), cpu_option="--device",
                    script=__file__)
    x = torch.randn(32, 1024, device=dev)
    logits = torch.randn(64, 1000, device=dev, requires_grad=True)
    target = torch.randint(0, 1000, (64,), device=dev)
    if dev == "cuda":
        report('run("online_softmax", x)', lambda: kernel_lab.run("online_softmax", x))
        report('softmax(x, variant="fast_softmax")',
               lambda: kernel_lab.softmax(x, variant="fast_softmax"))
    report("softmax(x)", lambda: kernel_lab.softmax(x))
    report("cross_entropy(logits, target).backward()",
           lambda: kernel_lab.cross_entropy(logits, target).backward())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
