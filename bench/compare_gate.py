"""Prove the ``pytest bench --benchmark-compare`` gate both ways on this GPU (``.ci/gpu-bench
compare``).

    python bench/compare_gate.py [PRESET ...] [--runs 5] [--no-slowdown] [--out DIR]
    python bench/compare_gate.py --merge VERDICT ... --summary FILE   # calls' verdicts, joined

Per preset (default: all of :data:`GATE`, each with a restricted variant set so the whole
proof fits one device call): one ``--benchmark-autosave``, then ``--runs`` unchanged compares
with ``--benchmark-compare-fail=median:5%``, which must all pass. Then the slowdown: an extra
pass over part of each row is added to ``cuda_src/online_softmax.cu`` (a real cost that scales
with the row, not a nap), sized on the target cell (:data:`TARGET`) to the first of
:data:`PASS_PCTS` that costs >= 8 %; the preset's compare must then fail, naming the target
cell and no cell of another variant. Then the host side: dict copies added to every
``kernel_lab.run`` call (:func:`host_work`), sized to raise HOST_TARGET's figure >= 15 %; the
compare must fail naming host cells of ``run()`` rows and no device cell. Each file is restored
whatever happens. The summary at the
end says per preset: runs passed, the worst median change (and its cell); and the slowdown's
size, what the gate named and whether that is right. Exit 0 only if every check holds.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

if __name__ == "__main__" and "--merge" not in sys.argv:  # no GPU: one line and exit 2
    from gpu_check import require_gpu  # bench/ is sys.path[0] when a script runs

    require_gpu("it proves the pytest-benchmark compare gate on this GPU's timings")

REPO = Path(__file__).resolve().parents[1]
FAIL = "median:5%"
GATE: dict[str, list[str]] = {  # preset -> the selection its gate runs (all cells of it)
    "quick": ["--op", "softmax", "--variants", "online_softmax,fast_softmax,torch_eager",
              "--dtype", "float32"],
    "sweep": ["--op", "softmax", "--variants", "fast_softmax", "--dtype", "bfloat16"],
    "vocab": ["--op", "cross_entropy", "--variants", "cuda_cross_entropy,torch_cross_entropy",
              "--dtype", "bfloat16"],
    "seed": ["--variants", "torch_eager,triton_fused"],
    "small": ["--op", "softmax", "--variants", "online_softmax,fast_softmax,torch_eager"],
    "lm_head": ["--op", "linear_cross_entropy", "--variants",
                "torch_chunked_linear_cross_entropy", "--shape", "8192x4096x128256"],
}
SLOWDOWN_PRESET = "small"
TARGET = "softmax-float32-64x4096-online_softmax"  # a launch-bound cell (graph-timed)
KERNEL = REPO / "cuda_src" / "online_softmax.cu"
ANCHOR = "  const A inv = A(1) / st.s;\n"
PASS_PCTS = (25, 50, 100, 200, 400)  # extra pass length, % of the row (> 100: passes again)
# the host side: work added to every kernel_lab.run() call, sized on HOST_TARGET until its
# figure (host time / torch's) rises >= HOST_MIN_CHANGE, 1.5x --host-fail's default 10 % (about
# +1 us a call on an H100); the compare must then name host cells (run() rows), no device cell
HOST_FILE = REPO / "kernel_lab" / "core" / "plans.py"
HOST_ANCHOR = ("            deferred.raise_pending()\n"
               "    if len(inputs) == 1 and type(inputs[0]) is torch.Tensor:")
HOST_TARGET = 'test_host[run("online_softmax")]'
HOST_REPEATS = (1, 2, 4, 8, 16, 32)
HOST_MIN_CHANGE = 0.15


def extra_pass(pct: int) -> str:
    """CUDA lines reading ``pct`` % of the row once more (a max the result cannot change: st.m
    is already the row's max, so the branch never fires, but the compiler must keep the loads)."""
    return (f"  {{  // compare_gate.py: an extra pass over {pct}% of the row\n"
            "    A em = st.m;\n"
            f"    const long long cut = (long long)n * {pct} / 100;\n"
            "    for (long long k = threadIdx.x; k < cut; k += step) {\n"
            "      const A v = klab::to_acc(xr[k % n]);\n"
            "      em = v > em ? v : em;\n"
            "    }\n"
            "    if (em > st.m) st.m = em;\n"
            "  }\n")


def host_work(repeats: int) -> str:
    """Python lines for the top of ``kernel_lab.run``: ``repeats`` dict copies of its keywords,
    each with a check that never fires (what a careless edit of the call path costs)."""
    return (f"    for _ in range({repeats}):  # compare_gate.py: host work added to every call\n"
            "        kw = dict(kw)\n"
            "        if kw.get('__compare_gate__') is not None:\n"
            "            raise AssertionError('compare_gate.py')\n")


class OutOfTime(Exception):
    """The next run would not finish inside ``--budget-s``: stop and print what was done."""


DEADLINE = [float("inf")]  # time.time() past which no new run starts
LAST_RUN_S = [0.0]
EXTRA_ARGS: list[str] = []  # --pytest-args, added to every run


def pytest_bench(preset: str, *args: str, log: Path) -> tuple[int, str, float]:
    """One ``pytest bench`` run of the preset's gate selection; (rc, output, seconds)."""
    if time.time() + LAST_RUN_S[0] > DEADLINE[0]:
        raise OutOfTime(preset)
    cmd = [sys.executable, "-m", "pytest", "bench", "-q", "-p", "no:cacheprovider",
           "--preset", preset, *GATE[preset],
           "--benchmark-storage", str(Path(".benchmarks") / f"gate-{preset}"), *EXTRA_ARGS,
           *args]
    t0 = time.time()
    r = subprocess.run(cmd, cwd=REPO, text=True, capture_output=True)
    out = r.stdout + r.stderr
    with log.open("a") as f:
        f.write(f"$ {' '.join(cmd)}\n{out}\nrc={r.returncode}\n")
    LAST_RUN_S[0] = time.time() - t0
    return r.returncode, out, LAST_RUN_S[0]


def medians(path: Path) -> dict[str, float]:
    data = json.loads(path.read_text())
    return {b["name"]: b["stats"]["median"] for b in data["benchmarks"]}


def worst_change(base: dict[str, float], run: dict[str, float]) -> tuple[float, str]:
    changes = {k: run[k] / base[k] - 1 for k in run if k in base and base[k] > 0}
    if not changes:
        return 0.0, "(no common cells)"
    name = max(changes, key=lambda k: abs(changes[k]))
    return changes[name], name


def regressed(out: str) -> list[str]:
    """The cells pytest-benchmark's ``Performance has regressed`` message names."""
    return re.findall(r"^\s+(test_\w+\[[^\]]*\])[^\n]*has failed", out, flags=re.M)


def gate_preset(preset: str, runs: int, out_dir: Path, log: Path) -> dict:
    shutil.rmtree(REPO / ".benchmarks" / f"gate-{preset}", ignore_errors=True)
    base_json = out_dir / f"{preset}-base.json"
    rc, out, secs = pytest_bench(preset, "--benchmark-autosave", "--benchmark-json",
                                 str(base_json), log=log)
    print(f"  {preset}: autosave rc={rc} ({secs:.0f} s)", flush=True)
    row = {"preset": preset, "autosave_rc": rc, "passed": 0, "runs": runs, "worst": 0.0,
           "worst_cell": "", "alarms": [], "alarm_details": []}
    if rc != 0 or not base_json.exists():
        row["alarms"].append(f"autosave failed (rc={rc})")
        return row
    base = medians(base_json)
    row["cells"] = len(base)
    for i in range(runs):
        js = out_dir / f"{preset}-run{i + 1}.json"
        rc, out, secs = pytest_bench(preset, "--benchmark-compare",
                                     f"--benchmark-compare-fail={FAIL}", "--benchmark-json",
                                     str(js), log=log)
        change, cell = worst_change(base, medians(js)) if js.exists() else (0.0, "")
        named = regressed(out)
        details = [{"run": i + 1, "cell": c, "base": cell_info(base_json, c),
                    "now": cell_info(js, c)} for c in named]  # how each alarm was timed
        row["alarm_details"] += details
        print(f"  {preset}: compare {i + 1}/{runs} rc={rc} worst {change:+.1%} {cell} "
              f"({secs:.0f} s)" + (f" ALARM: {named}" if named else ""), flush=True)
        for d in details:
            print(f"    {d['cell']}: {timed(d['base'])} -> {timed(d['now'])}", flush=True)
        row["passed"] += rc == 0
        row["alarms"] += named
        if abs(change) > abs(row["worst"]):
            row["worst"], row["worst_cell"] = change, cell
    return row


def compare_named(preset: str, js: Path, log: Path) -> tuple[int, list[str]]:
    """The preset's compare against its autosave: (rc, the cells it named)."""
    rc, out, _ = pytest_bench(preset, "--benchmark-compare", f"--benchmark-compare-fail={FAIL}",
                              "--benchmark-json", str(js), log=log)
    return rc, regressed(out)


def slowdown(out_dir: Path, log: Path) -> dict:
    """Size the extra pass on the target cell, then the preset's compare must fail on it."""
    preset = SLOWDOWN_PRESET
    base = medians(out_dir / f"{preset}-base.json")
    key = f"test_variant[{TARGET}]"
    original = KERNEL.read_text()
    assert ANCHOR in original, f"{KERNEL.name}: the line to insert before is gone"
    result = {"target": key, "pct": None, "change": None, "named": [], "rc": None}
    try:
        for pct in PASS_PCTS:
            KERNEL.write_text(original.replace(ANCHOR, extra_pass(pct) + ANCHOR))
            js = out_dir / f"slow-{pct}.json"
            pytest_bench(preset, "-k", TARGET, "--host", "none", "--benchmark-json", str(js),
                         log=log)
            change = medians(js).get(key, 0.0) / base[key] - 1 if js.exists() else 0.0
            print(f"  slowdown: extra pass over {pct}% of the row: {TARGET} {change:+.1%}",
                  flush=True)
            result["pct"], result["change"] = pct, change
            if change >= 0.08:
                break
        result["rc"], result["named"] = compare_named(preset, out_dir / "slow-compare.json",
                                                      log)
    finally:
        KERNEL.write_text(original)
    return result


DETAILS = ("method", "k", "method_from", "device_s", "event_median_s", "host_s", "host_us",
           "reference_us", "timing_note")


def timed(info: dict) -> str:
    """'7.85 us (graph, K=103)': a cell's figure and how it was timed."""
    if "median" not in info:
        return "?"
    return f"{info['median'] * 1e6:.2f} us ({info.get('method', '?')}, K={info.get('k', '?')})"


def cell_info(path: Path, name: str) -> dict:
    """A cell's median and how it was timed (its ``extra_info``) in a pytest-benchmark JSON:
    what an alarm's verdict shows beside the cell, or {} where the file or cell is missing."""
    if not path.exists():
        return {}
    for b in json.loads(path.read_text())["benchmarks"]:
        if b["name"] == name:
            info = b.get("extra_info") or {}
            return {"median": b["stats"]["median"],
                    **{k: info[k] for k in DETAILS if k in info}}
    return {}


def host_slowdown(out_dir: Path, log: Path) -> dict:
    """Size the host work on HOST_TARGET (its figure >= HOST_MIN_CHANGE over the autosaved
    run), then the preset's compare must fail naming host cells only."""
    preset = SLOWDOWN_PRESET
    base_json = out_dir / f"{preset}-base.json"
    base = medians(base_json)[HOST_TARGET]
    original = HOST_FILE.read_text()
    assert HOST_ANCHOR in original, f"{HOST_FILE.name}: the lines to insert into are gone"
    head, tail = HOST_ANCHOR.split("\n", 1)
    result = {"target": HOST_TARGET, "repeats": None, "added_us": None, "change": None,
              "named": [], "rc": None}
    try:
        for repeats in HOST_REPEATS:
            HOST_FILE.write_text(original.replace(
                HOST_ANCHOR, f"{head}\n{host_work(repeats)}{tail}"))
            js = out_dir / f"host-{repeats}.json"
            pytest_bench(preset, "-k", "test_host and online_softmax", "--host", "only",
                         "--benchmark-json", str(js), log=log)
            now = cell_info(js, HOST_TARGET)
            change = now["median"] / base - 1 if now else 0.0
            # the ratio's rise in the reference's microseconds of this run: what the work adds
            # a call (two runs' absolute host times differ by more than that on a shared machine)
            added = (now["median"] - base) * now["reference_us"] if "reference_us" in now \
                else None
            print(f"  host slowdown: {repeats} dict copies a call: {HOST_TARGET} {change:+.1%} "
                  f"({'?' if added is None else f'{added:+.2f} us'})", flush=True)
            result.update(repeats=repeats, added_us=added, change=change)
            if change >= HOST_MIN_CHANGE:
                break
        result["rc"], result["named"] = compare_named(preset, out_dir / "host-compare.json",
                                                      log)
    finally:
        HOST_FILE.write_text(original)
    return result


def host_caught(result: dict) -> tuple[bool, list[str]]:
    """Whether the host slowdown was caught: the compare failed naming host cells of run()
    rows, the target among them, and no device cell (nor a row whose path it does not touch)."""
    named = result["named"]
    others = [c for c in named if not c.startswith('test_host[run(')]
    return (result["rc"] not in (0, None) and result["target"] in named and not others), others


def row_clean(row: dict) -> bool:
    """A preset's row: its autosave ran and every unchanged compare passed, naming nothing."""
    return row["autosave_rc"] == 0 and row["passed"] == row["runs"] and not row["alarms"]


def slow_caught(result: dict) -> tuple[bool, list[str]]:
    """Whether the kernel slowdown was caught: the compare failed naming the target cell and
    no cell of another variant (the other cells it names)."""
    others = [c for c in result["named"] if "online_softmax]" not in c]
    return (result["rc"] not in (0, None) and result["target"] in result["named"]
            and not others), others


def print_table(rows: list[dict], slow: dict | None, host: dict | None, runs: int) -> bool:
    """The gate's table: per preset runs passed and the worst change; each injected slowdown
    and what it named. True if every row is clean and every slowdown given was caught."""
    ok = True
    print(f"\n== compare gate: --benchmark-compare-fail={FAIL}, {runs} unchanged runs")
    print(f"{'preset':8} {'cells':>5} {'passed':>7}  worst median change (cell)")
    for r in rows:
        good = row_clean(r)
        ok &= good
        print(f"{r['preset']:8} {r.get('cells', 0):5d} {r['passed']:>3}/{r['runs']:<3}  "
              f"{r['worst']:+.1%} {r['worst_cell']}  {'ok' if good else 'FALSE ALARM'}"
              + (f": {sorted(set(r['alarms']))}" if r["alarms"] else ""))
    if slow is not None:
        ok &= print_slowdown(
            slow, slow_caught(slow), "other variants",
            f"slowdown: online_softmax + an extra pass over {slow['pct']}% of each row:", "")
    if host is not None:
        added = f"{host['added_us']:+.2f} us" if host["added_us"] is not None else "? us"
        ok &= print_slowdown(host, host_caught(host), "other cells",
                             f"host slowdown: {host['repeats']} dict copies a run() call:",
                             f" ({added})")
    return ok


def print_slowdown(result: dict, judged: tuple[bool, list[str]], others_are: str, what: str,
                   size: str) -> bool:
    """One injected slowdown's line: its size at the target, what the compare named, and
    whether that is the catch it must be (``judged``: :func:`slow_caught` / :func:`host_caught`)."""
    caught, others = judged
    change = f"{result['change']:+.1%}" if result["change"] is not None else "?"
    print(f"{what} {result['target']} {change}{size}; compare rc={result['rc']}, named "
          f"{len(result['named'])} cell(s): {', '.join(result['named']) or 'none'}; "
          f"{'CAUGHT' if caught else 'NOT CAUGHT as it must be'}"
          + (f" ({others_are} named: {others})" if others else ""))
    return caught


def merge(parts: list[Path]) -> dict:
    """One verdict of the verdicts of several calls (the presets split over device calls, as
    ``.ci/gpu-bench compare`` says): all from one GPU and thresholds; each preset row and
    slowdown stamped with its call's commit and date, a later part's row replacing an earlier
    one. ``ok`` only where every preset and both slowdowns were run, each row clean and each
    slowdown caught (judged again here, as the table is)."""
    verdicts = [json.loads(Path(p).read_text()) for p in parts]
    for field in ("gpu", "compare_fail", "host_fail", "runs"):
        seen = {v.get(field) for v in verdicts}
        if len(seen) != 1:
            raise SystemExit(f"--merge: the parts differ in {field} ({sorted(map(str, seen))}): "
                             "a gate's verdict holds for one GPU and one setting")
    rows: dict[str, dict] = {}
    slow = host = None
    for v in verdicts:  # (a joined verdict's rows carry their stamps already)
        stamp = {"commit": v["commit"], "date": v["date"]} if "commit" in v else {}
        for r in v["presets"]:
            rows[r["preset"]] = {**stamp, **r}
        if v.get("slowdown"):
            slow = {**stamp, **v["slowdown"]}
        if v.get("host_slowdown"):
            host = {**stamp, **v["host_slowdown"]}
    late = [p for p in GATE if p not in rows] + ([] if slow and host else ["slowdown"])
    stamped = [*rows.values(), *(x for x in (slow, host) if x)]
    first = verdicts[0]
    return {"gpu": first["gpu"], "dates": sorted({x["date"] for x in stamped}),
            "commits": list(dict.fromkeys(x["commit"] for x in stamped)),
            "compare_fail": first["compare_fail"], "host_fail": first["host_fail"],
            "ok": (not late and all(map(row_clean, rows.values())) and slow_caught(slow)[0]
                   and host_caught(host)[0]), "runs": first["runs"],
            "presets": [rows[p] for p in GATE if p in rows], "slowdown": slow,
            "host_slowdown": host, "not_run": late}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("presets", nargs="*", default=list(GATE), help=f"of {', '.join(GATE)}")
    p.add_argument("--runs", type=int, default=5, help="unchanged compares per preset")
    p.add_argument("--no-slowdown", action="store_true", help="skip the slowed-kernel check")
    p.add_argument("--out", type=Path, default=Path("/tmp/kernel_lab_gate"))
    p.add_argument("--budget-s", type=float, default=560.0,
                   help="start no run that would end later than this (a summary still prints)")
    p.add_argument("--summary", type=Path, default=None,
                   help="the verdict as JSON (GPU, date, commit, every row; default "
                   "OUT/compare_gate.json)")
    p.add_argument("--pytest-args", default="",
                   help='more options for every pytest run, e.g. "-k 1x128" (shell-split)')
    p.add_argument("--merge", nargs="+", type=Path, metavar="VERDICT",
                   help="no runs: join the verdicts (--summary files) of calls that each ran "
                   "some presets on one GPU into --summary, and print their table (any machine)")
    args = p.parse_args(argv)
    if args.merge:
        if args.summary is None:
            p.error("--merge needs --summary: where the joined verdict goes")
        verdict = merge(args.merge)
        clean = print_table(verdict["presets"], verdict["slowdown"], verdict["host_slowdown"],
                            verdict["runs"])
        ok = clean and verdict["ok"]
        if verdict["not_run"]:
            print(f"not run in any part: {', '.join(verdict['not_run'])}")
        args.summary.parent.mkdir(parents=True, exist_ok=True)
        args.summary.write_text(json.dumps(verdict, indent=1) + "\n")
        word = "OK" if ok else "INCOMPLETE" if clean and verdict["not_run"] else "FAILED"
        print(f"GATE {word} on {verdict['gpu']} "
              f"(commits {', '.join(map(str, verdict['commits']))}; verdict: {args.summary})")
        return 0 if ok else 1
    DEADLINE[0] = time.time() + args.budget_s
    EXTRA_ARGS[:] = shlex.split(args.pytest_args)
    unknown = [x for x in args.presets if x not in GATE]
    if unknown:
        p.error(f"unknown preset(s) {unknown}; use {', '.join(GATE)}")
    args.out.mkdir(parents=True, exist_ok=True)
    log = args.out / "gate.log"
    rows, slow, late = [], None, []
    for name in args.presets:
        try:
            rows.append(gate_preset(name, args.runs, args.out, log))
        except OutOfTime:
            late.append(name)
    host = None
    if not args.no_slowdown and SLOWDOWN_PRESET in args.presets and not late:
        try:
            slow = slowdown(args.out, log)
            host = host_slowdown(args.out, log)
        except OutOfTime:
            late.append("slowdown")

    ok = print_table(rows, slow, host, args.runs)
    if late:
        ok = False
        print(f"not run (--budget-s {args.budget_s:.0f} s reached): {', '.join(late)}; "
              "run them in another call")
    summary = args.summary or args.out / "compare_gate.json"
    write_summary(summary, ok=ok, runs=args.runs, presets=rows, slowdown=slow,
                  host_slowdown=host, not_run=late)
    print(f"GATE {'OK' if ok else 'FAILED'} (log: {log}; verdict: {summary})")
    return 0 if ok else 1


def write_summary(path: Path, **verdict) -> None:
    """The gate's verdict with what it ran on: GPU, date, commit, thresholds."""
    import datetime

    import torch

    from kernel_lab.measure.compare import DEFAULT_HOST_FAIL

    # KLAB_COMMIT: the tree's commit where the checkout's own git does not know it (a lent GPU
    # machine gets a copy of the working tree over an older clone)
    commit = os.environ.get("KLAB_COMMIT") or subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, text=True,
        capture_output=True).stdout.strip() or None
    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else None
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({
        "gpu": gpu, "date": datetime.date.today().isoformat(), "commit": commit,
        "compare_fail": FAIL, "host_fail": DEFAULT_HOST_FAIL, **verdict}, indent=1) + "\n")


if __name__ == "__main__":
    sys.exit(main())
