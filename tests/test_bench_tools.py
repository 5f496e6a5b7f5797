"""The maintained tools in bench/ (tune_long_rows.py, tune_backward.py, auto_check.py,
results_table.py), checked on a CPU without a GPU: the launch shapes each tuner times, auto
against its candidates on PyTorch's kernels, and the result set's tables.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _bench_script(code: str) -> list[str]:
    """Run ``code`` with bench/ as the working directory (its scripts import each other by
    name); the lines it prints."""
    r = subprocess.run([sys.executable, "-c", code], cwd=REPO / "bench", text=True,
                       capture_output=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout.splitlines()


def test_tune_backward_times_the_shape_the_op_launches():
    """bench/tune_backward.py's "default" row is the registered op's own shape: odd rows
    (50257 fp32: not 16-byte aligned, one phase) are sized with room for a line head (up to 7
    windows before the row: 12572), as the op sizes them, not as aligned rows (which once
    labelled a shape the op never ran)."""
    code = ("import torch, tune_backward as t; "
            "from kernel_lab.cuda.rowkernels import backward_config as bc; "
            "c = t.candidates(50257, torch.float32, (), aligned=False); "
            "d = [k for k in c if k.startswith('default')]; "
            "print(d[0], bc.backward_config(50257, torch.float32, False, True).label()); "
            "print(all(v.threads * v.vpt * v.cluster >= 12572 for v in c.values()))")
    first, second = _bench_script(code)
    assert first == "default persist 8x416x4 persist 8x416x4", first
    assert second == "True"


def test_tune_backward_times_chunks_and_the_stream_on_long_rows():
    """bench/tune_backward.py on a row past the persistent shapes (fp32 2^20): the op's own chunk
    shape is the default, each chunk CTA size comes fitted to the row (no emptier last chunk
    than one CTA size smaller would leave) with 1-4 chunks in flight where shared memory holds
    them, and the two-pass stream is timed beside them."""
    code = ("import torch, tune_backward as t; "
            "from kernel_lab.cuda.rowkernels import forward_config as fc; "
            "c = t.candidates(1 << 20, torch.float32); nw = 1 << 18; "
            "ch = [v for v in c.values() if v.kind == 'chunks']; "
            "print(next(k for k in c if k.startswith('default'))); "
            "print(sorted({v.threads for v in ch}), sorted({v.stages for v in ch})); "
            "print(all(v.shared_mem() <= fc.MAX_CTA_SHARED for v in ch), "
            "all((v.threads - 32) * 4 * -(-nw // (v.threads * 4)) < nw for v in ch), "
            "'stream' in c)")
    default, shapes, checks = _bench_script(code)
    assert default == "default chunks 256x4 ahead 2", default
    assert shapes == "[128, 256, 384, 512] [1, 2, 3, 4]", shapes
    assert checks == "True True True", checks


def _tune_candidates(n: int, keep: str) -> list[str]:
    """bench/tune_long_rows.py's candidate labels for a bf16 row of ``n`` (rows on 16 bytes)
    that ``keep`` (a Python expression in the label ``k``) accepts, sorted; run from bench/."""
    code = ("import torch, tune_long_rows as t; "
            f"print(sorted(k for k in t.candidates({n}, torch.bfloat16, True) if {keep}))")
    return ast.literal_eval(_bench_script(code)[0])


def test_tune_long_rows_times_late_copies_with_two_stages():
    """bench/tune_long_rows.py's candidates for a cluster shape: early / late copies, one and
    two rows in flight - all four."""
    assert _tune_candidates(65536, "k.startswith('persist 8x256x4')") == sorted(
        ["persist 8x256x4", "persist 8x256x4 s2", "persist 8x256x4 late",
         "persist 8x256x4 late s2"])


def test_tune_long_rows_sizes_chunks_reg_to_fill_its_chunks():
    """A row that leaves 512 x 8's last chunk mostly empty also times chunks_reg with its CTA
    sized down to as many chunks, nearly full (bf16 200000: 7 chunks of 448 x 8 vectors); a row
    that fills them (2^20) gets no such shape."""
    keep = "k.startswith('chunks_reg') and k.endswith(' ahead 1')"
    assert _tune_candidates(200000, keep) == ["chunks_reg 448x8 ahead 1",
                                              "chunks_reg 512x8 ahead 1"]
    assert _tune_candidates(1 << 20, keep) == ["chunks_reg 512x8 ahead 1"]


def test_tune_long_rows_times_one_cta_per_row_where_one_holds_it():
    """2-byte rows of 16K-64K also time the block kernel (one CTA of <= 1024 threads x 4 or 8
    vectors), which the rule gives them x 4 up to 16384, then x 8 at the CTA sizes that won
    (fast_config.block_x8_threads); longer rows get none."""
    keep = "k.startswith('block ')"
    assert _tune_candidates(32768, keep) == ["block 1024x4", "block 512x8"]
    assert _tune_candidates(65536, keep) == ["block 1024x8"]
    assert _tune_candidates(131072, keep) == []


def test_tune_long_rows_times_block_slots_where_registers_do_not_hold_the_row():
    """block_slots (a CTA or a cluster of SLOTS_CL CTAs of BLOCK_SLOTS_THREADS x 8 vectors, the
    rest in shared-memory slots) is timed wherever the row needs at least one slot and at most
    SLOTS_MOST slots a thread hold it in one CTA's shared memory."""
    keep = "k.startswith('block_slots')"
    assert _tune_candidates(32768, keep) == ["block_slots 256x8+8", "block_slots 384x8+3"]
    assert _tune_candidates(131072, keep) == [
        "block_slots 1024x8+8", "block_slots 2x512x8+8", "block_slots 2x640x8+5",
        "block_slots 2x768x8+3", "block_slots 4x256x8+8", "block_slots 4x384x8+3"]
    assert _bench_script("import tune_long_rows as t; print(t.SLOTS_MOST)") == ["12"]


def test_tune_long_rows_times_log_softmax_kernels_on_request():
    """--ops softmax,log_softmax times every shape with both ops' instantiations (log rows
    labelled 'log_softmax: SHAPE', checked as logs); the default is softmax's alone."""
    code = ("import tune_long_rows as t; "
            "print({op: (k.prefix, log) for op, (k, log) in t.OPS.items()})")
    assert ast.literal_eval(_bench_script(code)[0]) == {
        "softmax": ("fast_softmax", False), "log_softmax": ("log_softmax", True)}
    r = subprocess.run([sys.executable, str(REPO / "bench" / "tune_long_rows.py"), "--help"],
                       cwd=REPO / "bench", text=True, capture_output=True, timeout=120)
    assert r.returncode == 0 and "--ops OPS" in r.stdout, r.stderr


@pytest.mark.slow  # 45-78 s on a GPU machine's busy cores: the full tier
def test_auto_check_races_auto_against_its_candidates(tmp_path):
    """bench/auto_check.py on a CPU: auto is PyTorch's kernel there, timed with the candidates
    and written to --json; bad arguments are refused before any work."""
    script = str(REPO / "bench" / "auto_check.py")
    base = [sys.executable, script, "--device", "cpu", "--dtype", "float32", "--shape", "4x64",
            "--op", "softmax,log_softmax_backward"]
    env = {**os.environ, "COLUMNS": "200"}
    out = tmp_path / "auto.json"
    # a tolerance no timing can miss: on a busy CPU one median has read 1000x off (both ways);
    # this checks the harness and its files, not a speed
    r = subprocess.run([*base, "--tolerance", "1e9", "--json", str(out)], cwd=REPO, text=True,
                       capture_output=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr
    assert "torch_eager" in r.stdout and "torch_log_softmax_backward" in r.stdout
    assert "0 of 2 cases where auto is more than 1000000000.00x" in r.stdout
    saved = json.loads(out.read_text())
    assert saved["meta"]["tolerance"] == 1e9
    assert [(c["op"], c["shape"], c["picked"]) for c in saved["cases"]] == [
        ("softmax", "4x64", "torch_eager"),
        ("log_softmax_backward", "4x64", "torch_log_softmax_backward")]
    for c in saved["cases"]:
        assert c["best"] in c["times"] and c["auto_s"] > 0
        # the JSON keeps 4 decimals: on a busy machine the ratio can be far from 1 (0.0011 once,
        # 16 test workers on the GPU machine), so allow the rounding as well as 0.1 %
        assert c["ratio"] == pytest.approx(c["auto_s"] / c["times"][c["best"]], rel=1e-3,
                                           abs=5e-5)
    assert saved["meta"]["path"] == "eager"
    r = subprocess.run([*base, "--tolerance", "1e9", "--path", "custom"], cwd=REPO, text=True,
                       capture_output=True, timeout=300, env=env)
    assert r.returncode == 0 and "custom path" in r.stdout, r.stderr
    for bad, msg in ((["--op", "sofmax"], "unknown op 'sofmax'"), (["--shape", "3xq"],
                     "bad shape '3xq'"), (["--tolerance", "0.5"], "--tolerance must be >= 1"),
                     (["--path", "graph"], "invalid choice: 'graph'")):
        r = subprocess.run([sys.executable, script, *bad], cwd=REPO, text=True,
                           capture_output=True, timeout=120)
        assert r.returncode == 2 and msg in r.stderr, (bad, r.stderr)


def _results_table(*args: str) -> str:
    r = subprocess.run([sys.executable, str(REPO / "bench" / "results_table.py"), *args],
                       cwd=REPO, text=True, capture_output=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_results_table_puts_the_lab_first_and_stamps_the_sweep(tmp_path):
    """bench/results_table.py on a synthetic saved sweep: a section stamped with the GPU, the
    date and the commit; per (op, dtype) a table of N / M with the lab's kernel (backend cuda)
    first, every cell "GB/s (% of copy)", the fastest bold, skipped and inexact cells said."""

    def rec(variant, backend, n, gbps, status="ok", dtype="float32"):
        timed = status in ("ok", "inexact")
        return {"op": "softmax", "dtype": dtype, "n": n, "m": 2**20 // n, "variant": variant,
                "backend": backend, "status": status, "gbps": gbps if timed else None,
                "pct_of_copy": 100 * gbps / 4000 if timed else None}

    recs = [rec("torch_eager", "torch", 128, 3000), rec("triton_fused", "triton", 128, 3900),
            rec("fast_softmax", "cuda", 128, 3800),
            rec("torch_eager", "torch", 65536, 2000), rec("triton_fused", "triton", 65536, 0,
                                                          "skipped"),
            rec("fast_softmax", "cuda", 65536, 3960),
            rec("torch_eager", "torch", 1024, 1990, "inexact", "bfloat16"),
            rec("fast_softmax", "cuda", 1024, 4010, dtype="bfloat16")]
    meta = {"copy_gbps": 4000.0, "created_utc": "20261202-075854",
            "gpu": {"name": "NVIDIA H200"}, "libraries": {"torch": "2.11"}}
    path = tmp_path / "forward_h200.json"
    path.write_text(json.dumps({"meta": meta, "records": recs}))
    text = _results_table(str(path), "--commit", "abc1234", "--no-header")
    lines = text.splitlines()
    assert lines[0] == "## softmax: `forward_h200.json`"
    assert "NVIDIA H200, measured 2026-12-02 07:58 UTC, recorded at commit abc1234; copy " \
        "4,000 GB/s; torch 2.11." in text
    assert "| N | M | lab: fast_softmax | torch.softmax | Triton (fused) |" in lines
    assert "| 128 | 8192 | 3,800 (95%) | 3,000 (75%) | **3,900 (98%)** |" in lines
    assert "| 65536 | 16 | **3,960 (99%)** | 2,000 (50%) | skipped |" in lines
    assert "| 1024 | 1024 | **4,010 (100%)** | 1,990 (50%) inexact |" in lines
    assert text.index("**softmax, float32**") < text.index("**softmax, bfloat16**")
    assert "# Benchmark results" not in text and "![" not in text  # no header, no PNG here


def test_results_table_shows_a_matmul_bound_op_in_ms_and_tflops(tmp_path):
    """The LM head's tables (records carrying tflops: Op.flops, 2 T d V forward, 6 T d V
    backward): rows by T x d x V, each cell "ms (TFLOP/s)", the fastest by time in bold."""

    def rec(op, variant, backend, seconds):
        flops = (6 if op.endswith("backward") else 2) * 500 * 200 * 1000
        return {"op": op, "dtype": "bfloat16", "n": 1000, "m": 500, "shape": "500x200x1000",
                "variant": variant, "backend": backend, "status": "ok", "median_s": seconds,
                "gbps": 1.0, "pct_of_copy": 0.1, "flops": flops, "tflops": flops / seconds / 1e12}

    recs = [rec("linear_cross_entropy", "torch_linear_cross_entropy", "torch", 2e-6),
            rec("linear_cross_entropy", "torch_chunked_linear_cross_entropy", "torch", 1e-6),
            rec("linear_cross_entropy_backward", "torch_linear_cross_entropy_backward", "torch",
                3e-6)]
    meta = {"copy_gbps": 3000.0, "created_utc": "20261206-225710", "gpu": {"name": "H100"}}
    path = tmp_path / "lmhead_h100.json"
    path.write_text(json.dumps({"meta": meta, "records": recs}))
    lines = _results_table(str(path), "--commit", "abc1234", "--no-header").splitlines()
    assert "**linear_cross_entropy, bfloat16** (ms, TFLOP/s; **bold**: fastest)" in lines
    assert "| T x d x V | torch | lab: chunked |" in lines
    # 2 * 500 * 200 * 1000 = 2e8 FLOPs: in 2 us 100 TFLOP/s, in 1 us 200
    assert "| 500x200x1000 | 0.00 ms (100 TFLOP/s) | **0.00 ms (200 TFLOP/s)** |" in lines
    assert "| 500x200x1000 | **0.00 ms (200 TFLOP/s)** |" in lines  # the backward: 6e8 in 3 us


def test_results_readme_is_generated_from_the_result_set():
    """bench/results/README.md holds exactly the tables results_table.py prints for the JSON
    files it names, and every JSON / PNG in bench/results/ is one it shows (but the files
    `python -m kernel_lab bench` writes there by default, bench-*, which git ignores)."""
    results = REPO / "bench" / "results"
    readme = (results / "README.md").read_text()
    names = [line.split("`")[1] for line in readme.splitlines() if line.startswith("## ")]

    def kept(ext: str) -> list[str]:
        return sorted(p.name for p in results.glob(f"*.{ext}") if not p.name.startswith("bench-"))

    assert kept("json") == sorted(names) and names
    sweeps = [n for n in names if "records" in json.loads((results / n).read_text())]
    assert kept("png") == sorted(n.replace(".json", ".png") for n in sweeps)  # other tables: none
    fresh = _results_table(*(str(results / n) for n in names), "--commit", "-")
    tables = [line for line in readme.splitlines() if line.startswith(("|", "**", "## "))]
    assert tables == [line for line in fresh.splitlines() if line.startswith(("|", "**", "## "))]


def test_results_table_says_why_a_loss_step_cell_is_blank(tmp_path):
    """A loss-step row whose mode raised: its cell reads "error" and a line under the table
    gives the row's recorded reason (bench/loss_step.py's ``errors``)."""
    row = {"dtype": "bfloat16", "m": 4, "n": 50257, "gpu": "stand-in", "copy_gbps": 1000.0,
           "measured_utc": "2026-12-07 16:47 UTC", "us": {"torch": 10.0, "lab": 5.0}}
    rows = [row, {**row, "m": 2, "n": 8, "us": {"torch": 10.0},
                  "errors": {"lab": "DSLRuntimeError: could not build IR"}}]
    path = tmp_path / "steps.json"
    path.write_text(json.dumps(rows))
    lines = _results_table(str(path), "--commit", "abc1234", "--no-header").splitlines()
    assert "| bfloat16 | 8 | 2 | **10 (x1.00)** | error |" in lines
    assert "- bfloat16 2 x 8, lab: DSLRuntimeError: could not build IR" in lines
    assert not any("graph" in line for line in lines)


def test_results_table_shows_a_host_bound_steps_graph_replay_beside_it(tmp_path):
    """A loss-step row with ``graph_us`` (a host-bound mode timed again from a CUDA graph):
    that cell reads "us (x torch) · graph us", and the section says what graph means."""
    row = {"dtype": "bfloat16", "m": 256, "n": 262144, "gpu": "stand-in", "copy_gbps": 1000.0,
           "measured_utc": "2026-12-07 16:47 UTC", "us": {"torch": 434.0, "lab": 160.0},
           "graph_us": {"lab": 114.4}}
    path = tmp_path / "steps.json"
    path.write_text(json.dumps([row]))
    text = _results_table(str(path), "--commit", "abc1234", "--no-header")
    assert "| bfloat16 | 262144 | 256 | 434 (x1.00) | **160 (x2.71)** · graph 114 |" in text
    assert "graph: a host-bound step replayed from a CUDA graph" in text


def test_results_table_shows_the_memory_column_where_the_json_has_it():
    """A saved sweep with the memory column: each timed cell reads "GB/s (% of copy) · forward /
    step" (older JSON without it keeps the plain cell)."""
    code = ("import results_table as t; "
            "print(t.cell({'status': 'ok', 'gbps': 4000.0, 'pct_of_copy': 95.0, "
            "'mem_fwd_bytes': 2**30, 'mem_step_bytes': 3 * 2**30})); "
            "print(t.cell({'status': 'ok', 'gbps': 4000.0, 'pct_of_copy': 95.0, "
            "'mem_fwd_bytes': 640 * 2**10, 'mem_step_bytes': None})); "
            "print(t.cell({'status': 'ok', 'gbps': 4000.0, 'pct_of_copy': 95.0}))")
    assert _bench_script(code) == ["4,000 (95%) · 1.0 GiB / 3.0 GiB", "4,000 (95%) · 640 KiB",
                                   "4,000 (95%)"]
