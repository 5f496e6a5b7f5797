"""Sweep fast_softmax launch configs per (N, dtype) at M*N = 2^28 and compare with copy speed.

    python bench/tune_long_rows.py --out DIR [--ns 1024,65536] [--dtypes float32,bfloat16]

For every (N, dtype): the device-to-device copy ``y.copy_(x)`` on the same tensors, the config
``fast_softmax_config`` picks, the pre-persistent ("legacy": vec=False rules) config, and every
persistent shape that fits (one and two rows in flight, ``stages``; clusters also with the
next row's copies issued late, with one and two stages, and pipelined, ``pipe``) and, for rows
of >= 32768
windows, the wide kernel's shapes (8 / 16 CTAs, keep nothing, 512 threads) and, for rows of
>= 4096 windows, the chunk kernel's (CHUNK_SHAPES), each timed by CUDA
events around back-to-back launches (one call queued first, then events around K calls, / K,
median of R: the kernel's own time). Then the
registered ``fast_softmax`` and ``log_softmax`` variants through their full launch path.
Writes DIR/tune.jsonl (one line per timing) and DIR/attrs.json (registers / spills of every
instantiation, resident groups of each persistent shape timed); prints a summary last.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from pathlib import Path

if __name__ == "__main__":  # no GPU: one line and exit 2, before torch loads
    from gpu_check import require_gpu  # bench/ is sys.path[0] when a script runs

    require_gpu("it times fast_softmax's launch configs against the copy")

import torch  # noqa: E402

import kernel_lab  # noqa: E402
from kernel_lab.cuda import jit  # noqa: E402
from kernel_lab.cuda import occupancy as pc  # noqa: E402
from kernel_lab.cuda.rowkernels import forward_config as fc  # noqa: E402
from kernel_lab.cuda.rowkernels import launch as rk  # noqa: E402
from kernel_lab.cuda.sources import cdiv  # noqa: E402
from kernel_lab.ops.log_softmax import cuda_variants as lcv  # noqa: E402
from kernel_lab.ops.softmax import cuda_variants as cv  # noqa: E402

NS = (1024, 2048, 4096, 8192, 16384, 32000, 32768, 50257, 65536, 128256, 131072, 151936,
      262144, 524288, 1048576)


def med_ms(fn, reps: int = 9, k: int = 5) -> float:
    fn()
    torch.cuda.current_stream().synchronize()  # this stream only: other streams may stay busy
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    ts = []
    for _ in range(reps):
        fn()  # queued ahead: the events below bracket GPU work only
        e0.record()
        for _ in range(k):
            fn()
        e1.record()
        e1.synchronize()
        ts.append(e0.elapsed_time(e1) / k)
    return statistics.median(ts)


def pipe_twins(c: fc.FastConfig, dtype: torch.dtype) -> list[fc.FastConfig]:
    """The pipelined forms (``pipe``, one and two rows of slots) of a persistent cluster
    shape, where it is instantiated and the slots fit shared memory."""
    if c.kind != "persist" or c.cluster not in fc.PIPE_CL or c.vpt not in fc.pipe_vpts(dtype):
        return []
    twins = [fc.FastConfig("pipe", threads=c.threads, vpt=c.vpt, cluster=c.cluster, stages=s)
             for s in (1, 2)]
    return [p for p in twins if p.shared_mem() <= fc.MAX_CTA_SHARED]


def candidates(n: int, dtype: torch.dtype, aligned: bool) -> dict[str, fc.FastConfig]:
    out = {}
    for c in (fc.fast_softmax_config(n, dtype, aligned, True),
              fc.fast_softmax_config(n, dtype, aligned, False)):
        out[c.label()] = c
    nw = fc.vector_windows(n, dtype, aligned)
    nwl = fc.line_windows(n, dtype, aligned)
    for vpt in (4, 8):  # one CTA per row, where one holds it (block x 8 takes 2-byte rows of
        # 16K-64K from the persistent kernels while its loads are plain, not evict-first)
        threads = fc.round32(cdiv(nw, vpt))  # as fast_softmax_config sizes its block CTAs
        if threads <= 1024 and nw > fc.WARP_MAX_WINDOWS:
            c = fc.FastConfig("block", threads=threads, vpt=vpt)
            out.setdefault(c.label(), c)
    if dtype in fc.PERSIST_DTYPES:  # block_slots / persist_slots: one CTA (or cluster) a row,
        # 8 vectors a thread in registers + slots in shared memory
        for cl in (1, *fc.SLOTS_CL):
            for threads in BLOCK_SLOTS_THREADS:  # rows that need a slot, slots that fit a CTA
                most_slots = min(fc.MAX_CTA_SHARED // (16 * threads), SLOTS_MOST)
                per = cl * threads
                if per * fc.BLOCK_SLOTS_VPT < nwl <= per * (fc.BLOCK_SLOTS_VPT + most_slots):
                    c = fc.block_slots_config(nwl, threads, cluster=cl)
                    out.setdefault(c.label(), c)
                    # persist_slots: the same CTAs resident, rows rolled through them
                    c = fc.block_slots_config(nwl, threads, cluster=cl, kind="persist_slots")
                    out.setdefault(c.label(), c)
    # ``cluster`` (a row on a cluster, registers only) on 8 and 16 CTAs. These (and block_slots
    # on 8 CTAs) read 40-82 % of copy at fp32 151936-262144 and 2-byte 196608-262144: a cluster
    # spread over more than two SMs likely waits for that many free slots in one GPC at every
    # launch. Timed for comparison; the rules do not pick them there.
    if nw >= 16384:
        big = fc._fast_vpt_cap(dtype)
        for cl in (8, 16):
            shape = fc.cluster_shape(nw, big, fc.block_max_threads(big), (cl,))
            if shape and shape[1] >= 128:
                c = fc.FastConfig("cluster", threads=shape[1], vpt=big, cluster=cl)
                out.setdefault(c.label(), c)
    for vpt in fc.PERSIST_VPT[dtype.itemsize]:
        for cl in fc.PERSIST_CL:
            c = fc.persist_config(nwl, vpt, cl)
            if c.threads > fc.persist_max_threads(vpt, dtype) or (cl > 1 and c.threads < 64):
                continue
            if c.capacity() > 1.5 * nw + 32 * vpt * cl:
                continue
            out.setdefault(c.label(), c)
            c2 = fc.persist_config(nwl, vpt, cl, stages=2)
            if c2.shared_mem() <= fc.MAX_CTA_SHARED:
                out.setdefault(c2.label(), c2)
            if cl > 1:
                c = fc.persist_config(nwl, vpt, cl, late=True)
                out.setdefault(c.label(), c)
                c2 = fc.persist_config(nwl, vpt, cl, late=True, stages=2)
                if c2.shared_mem() <= fc.MAX_CTA_SHARED:  # late copies, two rows in flight
                    out.setdefault(c2.label(), c2)
                for p in pipe_twins(c, dtype):
                    out.setdefault(p.label(), p)
    if nw >= 32768:  # where the persistent shapes start to strain: the two-pass kernels
        half = fc.WIDE_KEEP_BYTES // 2 - 1024  # two CTAs per SM
        for c in (fc.wide_config(nw), fc.wide_config(nw, cluster=16),
                  fc.wide_config(nw, keep_bytes=0),
                  fc.wide_config(nw, threads=512, keep_bytes=half)):
            out.setdefault(c.label(), c)
    if nw >= 4096:  # rows in chunks of one CTA (``chunks``): (threads, vpt, lag, ahead)
        for t, v, lag, ahead in CHUNK_SHAPES:
            c = fc.FastConfig("chunks", threads=t, vpt=v, lag=lag, ahead=ahead)
            if c.shared_mem() <= fc.MAX_CTA_SHARED:
                out.setdefault(c.label(), c)
        for t, v, ahead in CHUNK_REG_SHAPES:  # chunks_reg: the waiting chunk in registers
            c = fc.FastConfig("chunks_reg", threads=t, vpt=v, ahead=ahead)
            out.setdefault(c.label(), c)
        # the chunk rule's shape (chunks_reg's CTA sized down so that the row's chunks come out
        # full, 200000 bf16: 448 x 8), also where a persistent rule takes the row
        c = fc.chunk_config(n, dtype, fc.rows_on_lines(n, dtype, aligned, None))
        out.setdefault(c.label(), c)
    return out


# block_slots' CTA sizes timed (<= 512 threads: two or more CTAs an SM), on one CTA and on
# clusters of SLOTS_CL CTAs; at most SLOTS_MOST slots a thread (past ~12 they lose 5-20 points
# of copy speed)
BLOCK_SLOTS_THREADS = (256, 384, 512, 640, 768, 1024)
SLOTS_MOST = 12
# the chunk kernel's shapes timed (one to four CTAs per SM by shared memory and threads)
CHUNK_SHAPES = ((1024, 4, 1, 1), (512, 4, 1, 1), (768, 4, 2, 1), (1024, 2, 1, 2), (1024, 2, 2, 1),
                (1024, 2, 2, 2), (1024, 2, 3, 1), (512, 4, 1, 2), (512, 4, 2, 1), (512, 4, 2, 2),
                (512, 2, 2, 2), (256, 4, 2, 2))
CHUNK_REG_SHAPES = ((512, 8, 1), (512, 8, 2), (512, 8, 3), (512, 4, 2), (512, 4, 4), (384, 8, 4))


# --ops: the kernel family instantiation each shape is timed with, and whether its output is a log
OPS = {"softmax": (cv.FAST_KERNELS, False), "log_softmax": (lcv.FORWARD_KERNELS, True)}


def sane(out: torch.Tensor, x: torch.Tensor, log: bool) -> bool:
    rows = [0, 1, out.shape[0] - 1]
    a = x[rows].double()
    ref = torch.log_softmax(a, -1) if log else torch.softmax(a, -1)
    err = (out[rows].double() - ref).abs().max().item()
    return err < (2e-2 if log else 1e-2) * (1 if x.dtype == torch.float32 else 4)


def attrs(out_dir: Path, timed: dict) -> None:
    res = {"functions": {}, "resident": timed}
    for src in (cv.FAST, lcv.FORWARD):
        for e in src.name_expressions:
            try:
                a = jit.function_attributes(src.function(e, 0))
                res["functions"][e] = [a["num_regs"], a["local_size_bytes"]]
            except Exception as ex:  # noqa: BLE001 - record, keep going
                res["functions"][e] = str(ex)
    (out_dir / "attrs.json").write_text(json.dumps(res, indent=1))
    spills = {e: v for e, v in res["functions"].items() if not isinstance(v, list) or v[1]}
    print("ATTR spills/errors:", json.dumps(spills))
    sel = {e: v for e, v in res["functions"].items() if "persist" in e and "fast" in e}
    print("ATTR persist:", json.dumps(sel))


def measure(n: int, dtype: torch.dtype, args, resident: dict) -> tuple[dict, list[dict]]:
    fast_v, log_v = kernel_lab.get("fast_softmax"), kernel_lab.get("log_softmax")
    dname = str(dtype).replace("torch.", "")
    m = max(1, (1 << args.total_log2) // n)
    x = torch.randn(m, n, device="cuda", dtype=dtype)
    y = torch.empty_like(x)
    nbytes = 2 * x.numel() * x.element_size()

    def gbs(ms: float) -> float:
        return nbytes / ms / 1e6

    copy = gbs(med_ms(lambda: y.copy_(x)))
    aligned = n * x.element_size() % 16 == 0
    default = fc.fast_softmax_config(n, dtype, aligned, True)
    cands = candidates(n, dtype, aligned)
    if args.only:  # a subset of the sweep, and the default
        cands = {k: c for k, c in cands.items() if re.search(args.only, k) or c == default}
    if args.no_sweep:
        legacy = fc.fast_softmax_config(n, dtype, aligned, False)
        twins = pipe_twins(default, dtype)
        cands = {c.label(): c for c in (default, legacy, *twins)}
    runs = [(label, c, None) for label, c in cands.items()]
    for g in args.groups:  # persistent shapes on fewer clusters than the occupancy API allows
        runs += [(f"{label} g{g}", c, g) for label, c in cands.items()
                 if c.kind in ("persist", "pipe", "wide") and c.cluster > 1]
    rows = []
    ops = [(op, OPS[op]) for op in args.ops.split(",")]
    for (label, c, g), (op, (kernels, log)) in [(r, o) for r in runs for o in ops]:
        try:
            t = med_ms(lambda c=c, g=g, k=kernels: rk.fast_launch(y, x, c, 1, k, max_groups=g,
                kernels=cv.FAST_KERNELS))
            ok = sane(y, x, log)
        except Exception as ex:  # noqa: BLE001
            print(f"ERR {dname} {n} {op} {label}: {ex}", flush=True)
            continue
        if op != "softmax":  # the log_softmax kernels of the same shape: their own label
            label = f"{op}: {label}"
        if c.kind in ("persist", "pipe"):
            e = c.expr(cv.ctype(dtype))
            resident[f"{e} t{c.threads}"] = pc.resident_groups(cv.FAST, e, c.threads, c.cluster,
                                                                c.shared_mem(), 0)
        rows.append({"dtype": dname, "op": op, "M": m, "N": n, "cfg": label, "gbs": round(gbs(t)),
                     "pct": round(100 * gbs(t) / copy, 1), "copy": round(copy), "ok": ok,
                     "default": c == default and g is None and op == "softmax"})
    tf = med_ms(lambda: fast_v(x))
    ok_f = sane(fast_v(x), x, False)
    tl = med_ms(lambda: log_v(x))
    ok_l = sane(log_v(x), x, True)
    if n >= 1 << 19:  # the streaming kernel the op prefers for the longest rows
        vec_v = kernel_lab.get("vec_softmax")
        extra = {"vec_softmax_pct": round(100 * gbs(med_ms(lambda: vec_v(x))) / copy, 1)}
    else:
        extra = {}
    var = {**extra, "dtype": dname, "M": m, "N": n, "copy": round(copy),
           "fast_softmax": round(gbs(tf)), "log_softmax": round(gbs(tl)),
           "fast_pct": round(100 * gbs(tf) / copy, 1), "log_pct": round(100 * gbs(tl) / copy, 1),
           "log_vs_fast": round(tf / tl, 3), "ok": ok_f and ok_l}
    return var, rows


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="bench/tune_out")
    ap.add_argument("--ns", default=",".join(map(str, NS)))
    ap.add_argument("--dtypes", default="float32,bfloat16")
    ap.add_argument("--total-log2", type=int, default=28)
    ap.add_argument("--only", default=None, help="time only the shapes whose label matches "
                    "this regular expression (and the default), e.g. 'pipe|late'")
    ap.add_argument("--groups", default="", type=lambda v: [int(g) for g in v.split(",") if g],
                    help="also run each persistent cluster shape on this many clusters "
                    "(comma-separated, e.g. 5,6,7: do all the resident clusters run at once?)")
    ap.add_argument("--ops", default="softmax",
                    help="whose kernels each shape is timed with: softmax, log_softmax or both "
                    "(comma-separated; log_softmax rows are labelled 'log_softmax: SHAPE')")
    ap.add_argument("--no-sweep", action="store_true",
                    help="only default / legacy / the default's pipelined twins / variants")
    args = ap.parse_args(argv)
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    log = open(out_dir / "tune.jsonl", "w")
    summary = []
    resident = {}
    for dname in args.dtypes.split(","):
        dtype = getattr(torch, dname)
        for n in map(int, args.ns.split(",")):
            var, rows = measure(n, dtype, args, resident)
            for r in rows:
                log.write(json.dumps(r) + "\n")
            log.write(json.dumps(var) + "\n")
            log.flush()
            soft = [r for r in rows if r["op"] == "softmax"]
            best = max(soft, key=lambda r: r["gbs"]) if soft else None
            summary.append((var, best, next((r for r in rows if r["default"]), None)))
            print(json.dumps({"N": n, "dtype": dname, "copy": var["copy"],
                              "rows": [(r["cfg"], r["gbs"], r["pct"], r["ok"]) for r in rows],
                              "variants": var}), flush=True)
            torch.cuda.empty_cache()
    attrs(out_dir, resident)
    print("\nSUMMARY  dtype N copy | default cfg GB/s % | best cfg GB/s % | fast% log% log/fast ok")
    for var, best, dflt in summary:
        d = f"{dflt['cfg']} {dflt['gbs']} {dflt['pct']}" if dflt else "-"
        b = f"{best['cfg']} {best['gbs']} {best['pct']}" if best else "-"
        vec = f" | vec_softmax {var['vec_softmax_pct']}" if "vec_softmax_pct" in var else ""
        print(f"{var['dtype']:9s} {var['N']:8d} {var['copy']} | {d} | {b} | {var['fast_pct']} "
              f"{var['log_pct']} {var['log_vs_fast']} {var['ok']}{vec}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
