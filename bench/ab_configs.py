"""A/B of launch configs at one shape, in one process: the op's pick against hand-named configs,
each optionally on a capped persistent grid.

    python bench/ab_configs.py --shape bfloat16:262144 \\
        --cfg pick --cfg block_slots,1024,8,2,8 --cfg chunks_reg,512,8,1,0 \\
        --cfg chunks_reg,512,8,1,0,groups=256 [--rounds 7]

A --cfg is ``pick`` (fast_softmax's choice) or ``KIND,THREADS,VPT,CLUSTER,SLOTS`` with optional
``ahead=A`` / ``late=1`` / ``groups=G`` (``fast_launch``'s ``max_groups``: at most G resident CTAs
or clusters on a persistent grid). M = 2^28 / N rows (``--total-log2``). Timed as
bench/ab_kernels.py times variants (``time_case``: the copy and every config in turn in each
round); the line gives each config's median GB/s, % of copy and ratio to the first, and below it
each config's grid: the resident groups and the blocks launched.
"""

from __future__ import annotations

import argparse

import torch

from kernel_lab import occupancy as persistent
from kernel_lab.benchmarking import parse_dtype
from kernel_lab.ops.softmax import cuda_variants as cv
from kernel_lab.rowkernels import forward_config as fc
from kernel_lab.rowkernels import launch as rk

try:  # run as a script from the repository root
    from ab_kernels import time_case
except ImportError:  # pragma: no cover - imported as bench.ab_configs
    from bench.ab_kernels import time_case

PERSISTENT_KINDS = ("persist", "pipe", "wide", "persist_slots", "chunks", "chunks_reg")


def parse_cfg(text: str) -> tuple[fc.FastConfig | None, int | None]:
    """'pick' -> (None, None); 'KIND,THREADS,VPT,CLUSTER,SLOTS[,ahead=A][,late=1][,groups=G]' ->
    (the config, G or None)."""
    if text == "pick":
        return None, None
    parts = text.split(",")
    if len(parts) < 5:
        raise ValueError(f"--cfg {text!r}: want KIND,THREADS,VPT,CLUSTER,SLOTS[,key=value...]")
    kind, threads, vpt, cluster, slots = parts[:5]
    if any("=" not in p for p in parts[5:]):
        raise ValueError(f"--cfg {text!r}: past the fifth field, key=value (ahead, late, groups)")
    extra = dict(p.split("=", 1) for p in parts[5:])
    unknown = set(extra) - {"ahead", "late", "groups"}
    if unknown:
        raise ValueError(f"--cfg {text!r}: unknown {sorted(unknown)} (ahead, late, groups)")
    cfg = fc.FastConfig(kind, threads=int(threads), vpt=int(vpt), cluster=int(cluster),
                        slots=int(slots), ahead=int(extra.get("ahead", 1)),
                        late=bool(int(extra.get("late", 0))))
    groups = int(extra["groups"]) if "groups" in extra else None
    return cfg, groups


def parse_shape(text: str) -> tuple[str, torch.dtype, int]:
    """'DTYPE:N' -> (the dtype's name, the dtype, N)."""
    dname, sep, n = text.partition(":")
    try:
        if not sep or int(n) < 1:
            raise ValueError
        return dname, parse_dtype(dname), int(n)
    except (ValueError, KeyError) as e:
        why = f" ({e})" if str(e) else ""
        raise ValueError(f"--shape {text!r}: want DTYPE:N, e.g. bfloat16:262144{why}") from e


def grid_note(cfg: fc.FastConfig, x: torch.Tensor, groups: int | None) -> str:
    """Resident groups of ``cfg`` on this GPU and the grid a launch over x's rows uses (the
    launcher's own ``persistent_grid``)."""
    m, n = x.shape
    src = cv.FAST_KERNELS.src
    expr = cfg.expr(cv.ctype(x.dtype), cv.FAST_KERNELS.prefix)
    dev = x.device.index or 0
    smem = cfg.shared_mem()
    resident = persistent.resident_groups(src, expr, cfg.threads, cfg.cluster, smem, dev)
    if cfg.kind in ("chunks", "chunks_reg"):
        items = m * fc.row_chunks(cfg, n, x.dtype, rk._rows_on_lines(x))
        grid = persistent.persistent_grid(src, expr, cfg.threads, 1, smem, items, dev, groups)
        return f"{resident} resident CTAs, grid {grid}, {items} chunks: {items / grid:.2f} steps"
    if cfg.kind in PERSISTENT_KINDS:
        grid = persistent.persistent_grid(src, expr, cfg.threads, cfg.cluster, smem, m, dev,
                                          groups) // cfg.cluster
        return f"{resident} resident groups, grid {grid}, {m / grid:.2f} rows each"
    return f"{resident} resident groups of {cfg.cluster}: {m / resident:.2f} waves"


def add_race_arguments(ap: argparse.ArgumentParser, rounds: int) -> None:
    """--shape, --cfg, --rounds and --total-log2 (this script's and bench/occupy_sms.py's)."""
    ap.add_argument("--shape", action="append", required=True, help="DTYPE:N (repeatable)")
    ap.add_argument("--cfg", action="append", required=True,
                    help="pick or KIND,THREADS,VPT,CLUSTER,SLOTS[,ahead=A][,late=1][,groups=G] "
                         "(repeatable; the first is the baseline)")
    ap.add_argument("--rounds", type=int, default=rounds)
    ap.add_argument("--total-log2", type=int, default=28)


def checked_calls(specs: list, x: torch.Tensor, y: torch.Tensor) -> dict:
    """name -> (call, cfg, groups) for each parsed --cfg on x into y: each config's output
    poisoned, then checked against softmax (which also checks that the config holds the row)."""
    ref = torch.softmax(x.float(), -1)
    out = {}
    for text, cfg, groups in specs:
        cfg = cfg or rk.fast_choice(y, x)[0]
        name = ("pick " if text == "pick" else "") + cfg.label() + (
            f" groups {groups}" if groups else "")
        y.fill_(float("nan"))  # poisoned: the check sees only what this config wrote
        rk.fast_launch(y, x, cfg, max_groups=groups, kernels=cv.FAST_KERNELS)
        torch.testing.assert_close(y.float(), ref, atol=2e-3, rtol=2e-2)
        out[name] = (lambda cfg=cfg, groups=groups: rk.fast_launch(y, x, cfg, 1,
                                                                   max_groups=groups, kernels=cv.FAST_KERNELS),
                     cfg, groups)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_race_arguments(ap, rounds=7)
    a = ap.parse_args()
    try:  # a bad --cfg or --shape fails before any GPU work
        specs = [(text, *parse_cfg(text)) for text in a.cfg]
        shapes = [parse_shape(text) for text in a.shape]
    except ValueError as e:
        ap.error(str(e))
    if not torch.cuda.is_available():
        raise SystemExit("ab_configs.py: no CUDA GPU here")
    for dname, dtype, n in shapes:
        x = torch.randn(max(1, (1 << a.total_log2) // n), n, device="cuda", dtype=dtype)
        y = torch.empty_like(x)
        runs = checked_calls(specs, x, y)
        calls = {name: call for name, (call, _, _) in runs.items()}
        print(time_case(f"softmax {dname} {x.shape[0]}x{n}", x, y, None, calls, list(calls),
                        a.rounds), flush=True)
        print("\n".join(f"  {name}: {grid_note(cfg, x, groups)}"
                        for name, (_, cfg, groups) in runs.items()), flush=True)


if __name__ == "__main__":
    main()
