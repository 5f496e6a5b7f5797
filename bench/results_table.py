"""Markdown tables from saved ``python -m kernel_lab bench`` JSON files (bench/results/README.md).

    python bench/results_table.py bench/results/forward_h200.json \\
        bench/results/backward_h200.json > bench/results/README.md

Per file: a heading stamped with the GPU, the date the sweep was measured and the commit that
recorded it (the JSON's ``meta["commit"]`` if it has one, else the oldest commit holding the
file's content; ``--commit`` overrides), then one table per (op, dtype): N (and M)
down; the lab's CUDA kernel first, then every peer in the file; each cell "GB/s (% of copy)"
(and "· forward / step" peak memory above the inputs where the JSON has it), the row's fastest
in bold. Stdlib only: it runs where torch is not installed.
"""

from __future__ import annotations

import argparse
import json
import subprocess
from collections import defaultdict
from datetime import datetime
from pathlib import Path

# what each variant of a saved sweep is, for the column headers (other names print as they are)
LABELS = {
    "fast_softmax": "lab: fast_softmax",
    "fused_softmax_backward": "lab: fused_softmax_backward",
    "log_softmax": "lab: log_softmax",
    "fast_log_softmax": "lab: fast_log_softmax",
    "log_softmax_backward": "lab: log_softmax_backward",
    "fused_log_softmax_backward": "lab: fused_log_softmax_backward",
    "torch_eager": "torch.softmax",
    "torch_eager_backward": "torch softmax backward",
    "torch_log_softmax": "torch.log_softmax",
    "torch_log_softmax_backward": "torch log_softmax backward",
    "compile_naive": "torch.compile",
    "triton_fused": "Triton (fused)",
    "triton_backward": "Triton backward",
    "triton_log_softmax_backward": "Triton backward",
    "cuda_cross_entropy": "lab: cuda_cross_entropy",
    "cuda_cross_entropy_backward": "lab: cuda_cross_entropy_backward",
    "torch_cross_entropy": "F.cross_entropy (+ lse)",
    "torch_cross_entropy_backward": "torch backward formula",
    "compile_cross_entropy": "torch.compile",
    "compile_cross_entropy_backward": "torch.compile",
    "triton_cross_entropy": "Triton",
    "triton_cross_entropy_backward": "Triton",
    "peer_quack_cross_entropy": "QuACK",
    "peer_quack_cross_entropy_backward": "QuACK",
    "peer_liger_cross_entropy": "Liger",
    "torch_linear_cross_entropy": "torch",
    "torch_linear_cross_entropy_backward": "torch",
    "compile_linear_cross_entropy": "torch.compile",
    "compile_linear_cross_entropy_backward": "torch.compile",
    "torch_chunked_linear_cross_entropy": "lab: chunked",
    "torch_chunked_linear_cross_entropy_backward": "lab: chunked",
    "peer_liger_linear_cross_entropy": "Liger FLCE",
    "peer_cce_linear_cross_entropy": "CCE",
}
TIMED = ("ok", "inexact")  # statuses with timings (kernel_lab.measure.benchmarking.TIMED)
HEADER = """# Benchmark results

One result set: the latest sweeps of softmax forward and backward and of cross-entropy (GPU,
date and commit in each section), M*N = 2^28 elements per shape (1 GiB of fp32: far past L2),
a training step's loss (`bench/loss_step.py`), the LM-head loss (the `lm_head` preset,
matmul-bound: ms and TFLOP/s of the matmuls a call must do, 2 T d V forward, 6 T d V backward)
and the compare gate's verdict
(`bench/compare_gate.py`). GB/s counts the fewest
bytes a call must read plus write; % of copy is that over a device-to-device copy's GB/s on the
same GPU; "inexact": outside the lab's tolerance for that dtype (timed all the same); "skipped":
the variant does not take that row. Generated (do not edit):

    python bench/results_table.py bench/results/forward_h200.json \\
        bench/results/backward_h200.json bench/results/loss_h200.json \\
        bench/results/loss_step_h100.json bench/results/lmhead_h100.json \\
        bench/results/compare_gate_h100.json \\
        > bench/results/README.md

A new sweep (`bash .ci/gpu-bench forward backward loss lossstep lmhead`) or gate verdict
(`bash .ci/gpu-bench compare`, joined by `bench/compare_gate.py --merge`) replaces the files
here.
"""


def when(meta: dict) -> str:
    """The sweep's UTC time from ``created_utc`` (``YYYYmmdd-HHMMSS``), as ``YYYY-mm-dd HH:MM``."""
    stamp = meta.get("created_utc")
    try:
        return datetime.strptime(stamp, "%Y%m%d-%H%M%S").strftime("%Y-%m-%d %H:%M UTC")
    except (TypeError, ValueError):
        return "unknown date"


def added_in(path: Path) -> str | None:
    """The short hash of the oldest commit holding ``path``'s exact content (at any path, so a
    move is not taken for the commit that recorded it), or None outside a git checkout."""
    cwd = path.resolve().parent
    try:
        blob = subprocess.run(["git", "hash-object", path.name], cwd=cwd, capture_output=True,
                              text=True, timeout=60).stdout.strip()
        out = subprocess.run(["git", "log", "--format=%h", f"--find-object={blob}"], cwd=cwd,
                             capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    lines = out.stdout.split()
    return lines[-1] if blob and out.returncode == 0 and lines else None


def size(n: int) -> str:
    """Bytes as the sweep's tables show them (kernel_lab.measure.peak_memory.format_bytes; this
    script
    stays stdlib-only, so it cannot import the package)."""
    for unit, step in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= step:
            v = n / step
            return f"{v:.1f} {unit}" if v < 10 else f"{v:.0f} {unit}"
    return f"{n} B"


def cell(r: dict | None) -> str:
    """``GB/s (% of copy)`` (a matmul-bound op: ``ms (TFLOP/s)``), then the memory column when
    the sweep measured it: peak above the inputs, forward / step."""
    if r is None:
        return ""
    if r["status"] not in TIMED:
        return r["status"]
    if r.get("tflops") is not None:  # a matmul-bound op's (Op.flops)
        text = f"{r['median_s'] * 1e3:.2f} ms ({r['tflops']:.0f} TFLOP/s)"
    else:
        text = f"{r['gbps']:,.0f} ({r['pct_of_copy']:.0f}%)"
    if r.get("mem_fwd_bytes") is not None:
        step = r.get("mem_step_bytes")
        text += f" · {size(r['mem_fwd_bytes'])}" + (f" / {size(step)}" if step is not None else "")
    return text + " inexact" if r["status"] == "inexact" else text


def columns(records: list[dict]) -> list[str]:
    """Variant names: the lab's (backend ``cuda``) first, then the others in file order."""
    names = list(dict.fromkeys(r["variant"] for r in records))
    lab = {r["variant"] for r in records if r.get("backend") == "cuda"}
    return [n for n in names if n in lab] + [n for n in names if n not in lab]


def tables(records: list[dict]) -> list[str]:
    panels: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for r in records:
        panels[(r["op"], r["dtype"])].append(r)
    out = []
    for (op, dtype), recs in panels.items():
        names = columns(recs)
        # a matmul-bound op (its records carry tflops): rows by T x d x V, the fastest by time
        matmul = any(r.get("tflops") is not None for r in recs)
        head = ["T x d x V"] if matmul else ["N", "M"]
        head += [LABELS.get(n, n) for n in names]
        out += [f"**{op}, {dtype}** ({'ms, TFLOP/s' if matmul else 'GB/s, % of copy'}; "
                "**bold**: fastest)", "",
                "| " + " | ".join(head) + " |", "|" + "---:|" * len(head)]
        for n, m in sorted({(r["n"], r["m"]) for r in recs}):
            by = {r["variant"]: r for r in recs if (r["n"], r["m"]) == (n, m)}
            timed = [r for r in by.values() if r["status"] in TIMED]
            best = (min(timed, key=lambda r: r["median_s"]) if matmul else
                    max(timed, key=lambda r: r["gbps"]))["variant"] if timed else None
            row = [next(iter(by.values()))["shape"]] if matmul else [str(n), str(m)]
            for name in names:
                c = cell(by.get(name))
                row.append(f"**{c}**" if name == best else c)
            out.append("| " + " | ".join(row) + " |")
        out.append("")
    return out


def step_section(path: Path, rows: list[dict], commit: str | None) -> str:
    """A ``bench/loss_step.py --json`` file: microseconds per forward + backward, x torch."""
    names = list(dict.fromkeys(k for r in rows for k in r["us"]))
    commit = commit or rows[0].get("commit") or added_in(path) or "unknown"
    when_ = rows[0].get("measured_utc", "unknown date")
    lines = [f"## cross_entropy forward + backward: `{path.name}`", "",
             f"{rows[0]['gpu']}, measured {when_} at commit {commit}; copy "
             f"{rows[0]['copy_gbps']:,.0f} "
             "GB/s. One training step's loss (`loss.backward()` included), microseconds and the "
             "speed-up over F.cross_entropy (**bold**: fastest)"
             + ("; graph: a host-bound step replayed from a CUDA graph, the device's own "
                "microseconds" if any(r.get("graph_us") for r in rows) else "") + "."
             + (f" {rows[0]['note']}" if rows[0].get("note") else ""), "",
             "| dtype | N | M | " + " | ".join(names) + " |", "|" + "---:|" * (3 + len(names))]
    for r in rows:
        us, best, graph = r["us"], min(r["us"], key=r["us"].get), r.get("graph_us") or {}
        cells = [("**{}**" if k == best else "{}").format(
            f"{us[k]:,.0f} (x{us['torch'] / us[k]:.2f})")
            + (f" · graph {graph[k]:,.0f}" if k in graph else "") if k in us else "error"
            for k in names]
        lines.append(f"| {r['dtype']} | {r['n']} | {r['m']} | " + " | ".join(cells) + " |")
    said = [f"- {r['dtype']} {r['m']} x {r['n']}, {name}: {why}"
            for r in rows for name, why in (r.get("errors") or {}).items()]
    return "\n".join(lines + ([""] + said if said else []) + [""])


def gate_section(path: Path, v: dict) -> str:
    """A ``bench/compare_gate.py`` verdict: per preset the unchanged compares that passed and
    the worst median change; each injected slowdown, its size and what the compare named."""
    state = "OK" if v["ok"] else "INCOMPLETE" if v.get("not_run") else "FAILED"
    commits = v.get("commits") or [v.get("commit")]
    lines = [f"## compare gate: `{path.name}`", "",
             f"{v['gpu']}, {', '.join(v.get('dates') or [v.get('date')])}, commit "
             f"{', '.join(map(str, commits))}; `--benchmark-compare-fail={v['compare_fail']}`, "
             f"host cells `{v['host_fail']}`; {v['runs']} unchanged compares a preset after "
             f"one autosave. **{state}**"
             + (f": not run yet: {', '.join(v['not_run'])}." if v.get("not_run") else "."), "",
             "| preset | cells | clean compares | worst median change (cell) |",
             "|---|---:|---:|---|"]
    for r in v["presets"]:
        lines.append(f"| {r['preset']} | {r.get('cells', 0)} | {r['passed']}/{r['runs']} | "
                     f"{r['worst']:+.1%} `{r['worst_cell']}` |")
    lines += ["", "| injected slowdown | its size | compare | cells it named |",
              "|---|---|---|---|"]
    for what, s in (("an extra pass over {pct}% of each row in `online_softmax`",
                     v.get("slowdown")),
                    ("{repeats} dict copies in every `kernel_lab.run` call",
                     v.get("host_slowdown"))):
        if not s:
            continue
        size = f"{s['change']:+.1%} at `{s['target']}`" + (
            f" ({s['added_us']:+.2f} us)" if s.get("added_us") is not None else "")
        verdict = "failed" if s["rc"] not in (0, None) else "passed"
        lines.append(f"| {what.format(**s)} | {size} | {verdict} | {len(s['named'])}: "
                     + ", ".join(f"`{c}`" for c in s["named"]) + " |")
    return "\n".join(lines + [""])


def section(path: Path, commit: str | None = None) -> str:
    data = json.loads(path.read_text())
    if isinstance(data, list):
        return step_section(path, data, commit)
    if "compare_fail" in data:
        return gate_section(path, data)
    meta, records = data["meta"], data["records"]
    gpu = (meta.get("gpu") or {}).get("name") or meta.get("bench_device") or meta.get("device")
    commit = commit or meta.get("commit") or added_in(path) or "unknown"
    ops = ", ".join(dict.fromkeys(r["op"] for r in records))
    libs = ", ".join(f"{k} {v}" for k, v in (meta.get("libraries") or {}).items() if v)
    lines = [f"## {ops}: `{path.name}`", "",
             f"{gpu}, measured {when(meta)}, recorded at commit {commit}; copy "
             f"{meta.get('copy_gbps', 0):,.0f} GB/s" + (f"; {libs}" if libs else "") + ".", ""]
    png = path.with_suffix(".png")
    if png.exists():
        lines += [f"![{ops}]({png.name})", ""]
    return "\n".join(lines + tables(records))


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("files", nargs="+", type=Path, help="saved sweep JSON files")
    p.add_argument("--commit", help="the commit to stamp (default: the JSON's, else git's)")
    p.add_argument("--no-header", action="store_true", help="only the tables, no README header")
    args = p.parse_args(argv)
    parts = [] if args.no_header else [HEADER]
    parts += [section(f, args.commit) for f in args.files]
    print("\n".join(parts).rstrip("\n"))


if __name__ == "__main__":
    main()
