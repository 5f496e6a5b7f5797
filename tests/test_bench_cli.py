"""The bench CLI (`python -m kernel_lab bench`) and what it shows, checked on a CPU (no timings
are judged here): tables, CSV / JSON / PNG from fake records, the timer cross-check, shape
tokens, the timed rounds' schedule and a record's launches.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import kernel_lab
from kernel_lab.measure import benchmarking as bm
from kernel_lab.measure import sweep

REPO = Path(__file__).resolve().parents[1]
HAS_CUDA = torch.cuda.is_available()


# -- CLI: presentation from fake records, and main() ---------------------------------------------
def _fake_records() -> list[bm.Record]:
    recs = []
    copy = 4000.0
    for n in (128, 4096, 65536, 262144):
        m = 2**20 // n
        for name, gb in (("torch_eager", 3000.0), ("triton_fused", 3500.0 if n < 65536 else 0)):
            case = bm.Cell("softmax", torch.float32, (m, n))
            v = kernel_lab.get(name)
            if gb:
                r = bm.Record.start(case, v)
                r.bytes_moved, r.median_s, r.gbps = 8 * m * n, 8 * m * n / gb / 1e9, gb
                r.pct_of_copy, r.copy_gbps = 100 * gb / copy, copy
            else:
                r = bm.Record.start(case, v, "skipped", "row length too long")
            recs.append(r)
        recs.append(bm.Record.start(case, kernel_lab.get("torch_naive"), "wrong", "3 elements off"))
    return recs


def test_table_csv_json_plot_from_fake_records(tmp_path):
    from rich.console import Console

    recs = _fake_records()
    console = Console(record=True, width=200)
    for t in sweep.render_tables(recs, 4000.0):
        console.print(t)
    text = console.export_text()
    # shapes down, variants across; the best cell of each shape row is starred
    rows = {line.split("│")[1].strip(): line for line in text.splitlines()
            if line.startswith("│")}
    assert "★ 3,500" in rows["8192x128"] and "★ 3,500" in rows["256x4096"]
    assert "★ 3,000" in rows["16x65536"] and text.count("★") == 4
    assert "WRONG" in text and "skip" in text
    assert any("torch_naive: wrong" in p for p in sweep.problems(recs))

    paths = sweep.write_results(recs, {"copy_gbps": 4000.0, "preset": "fake"}, tmp_path, "run")
    assert [p.name for p in paths] == ["run.json", "run.csv", "run.png"]
    assert paths[2].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and paths[2].stat().st_size > 10_000
    rows = list(csv.DictReader(paths[1].open()))
    assert len(rows) == len(recs) and rows[0]["variant"] == "torch_eager"
    assert json.loads(paths[0].read_text())["records"][1]["gbps"] == 3500.0


def test_a_matmul_bound_op_reads_ms_and_tflops(tmp_path):
    """The lm-head's cells (Op.flops): ms and TFLOP/s of the matmuls a call must do, the best by
    time, rows by T x d x V; its workload counts 2 T d V forward, 6 T d V backward."""
    from rich.console import Console

    fwd = bm.Cell("linear_cross_entropy", torch.bfloat16, (64, 32, 300))
    work = bm.make_workload(fwd, "cpu")
    assert work.flops == 2 * 64 * 32 * 300
    back = bm.make_workload(bm.Cell("linear_cross_entropy_backward", torch.bfloat16,
                                    (64, 32, 300)), "cpu")
    assert back.flops == 6 * 64 * 32 * 300
    recs = []
    for name, seconds in (("torch_linear_cross_entropy", 2e-7),
                          ("torch_chunked_linear_cross_entropy", 1e-7)):
        recs.append(bm.Record.start(fwd, kernel_lab.get(name)).fill(work, seconds, None, 4000.0,
                                                                    {}))
    assert recs[1].tflops == pytest.approx(work.flops / 1e-7 / 1e12)  # 12.3
    console = Console(record=True, width=200)
    for t in sweep.render_tables(recs, 4000.0):
        console.print(t)
    text = console.export_text()
    assert "linear_cross_entropy bfloat16: ms (TFLOP/s)" in text and "T x d x V" in text
    assert "0.00 ms (6 TFLOP/s)" in text and "★ 0.00 ms (12 TFLOP/s)" in text
    assert text.count("★") == 1 and "GB/s" not in text.split("T x d x V")[0]
    paths = sweep.write_results(recs, {"copy_gbps": 4000.0, "preset": "lm"}, tmp_path, "lm")
    saved = json.loads(paths[0].read_text())["records"]
    assert saved[1]["flops"] == work.flops and saved[1]["tflops"] == recs[1].tflops


def test_cross_check_line_counts_long_runs_and_names_the_worst():
    from kernel_lab.measure.benchmarking import Record

    def rec(variant, median_s, event_s, status="ok"):
        return Record("softmax", "float32", 64, 4096, variant, "cuda", status,
                      median_s=median_s, event_median_s=event_s)

    recs = [rec("a", 200e-6, 205e-6), rec("b", 300e-6, 360e-6), rec("c", 50e-6, 10e-6),
            rec("d", 200e-6, None), rec("e", 400e-6, 1.0, status="wrong")]
    line = sweep.cross_check(recs)
    assert line.startswith("timer cross-check: 1 of 2 runs over 100 us")
    assert "worst b float32 64x4096: event +20.0%" in line
    assert sweep.cross_check([rec("c", 50e-6, 10e-6)]) is None


def _cli(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    sweep.add_arguments(p)
    return p.parse_args(argv)


@pytest.mark.skipif(HAS_CUDA, reason="checks the GPU-less behaviour")
def test_cli_without_gpu_says_so_once(capsys):
    assert sweep.main(_cli()) == 2  # nothing timed: non-zero, one line
    out = capsys.readouterr()
    assert out.out == "" and len(out.err.splitlines()) == 1 and bm.NO_GPU in out.err


def test_cli_cpu_sweep_writes_files(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)  # triton: skipped, not interpreted
    rc = sweep.main(_cli("--device", "cpu", "--preset", "small", "--op", "softmax",
                         "--variants", "torch_eager,triton_fused", "--dtype", "float32",
                         "--out", str(tmp_path)))
    out = capsys.readouterr().out
    assert rc == 0, out
    written = [Path(line.split(" ", 1)[1]) for line in out.splitlines()
               if line.startswith("wrote ")]
    assert sorted(p.suffix for p in written) == [".csv", ".json", ".png"]
    assert all(p.parent == tmp_path and p.stat().st_size > 0 for p in written)
    assert "triton_fused: skipped" in out


def test_shape_tokens_replace_the_preset_shapes():
    pairs = bm.select("quick", ops_filter=["softmax"], variants_filter=["torch_eager"],
                      dtypes_filter=["float32"], shapes_filter=["262144,16x1000", "128"])
    assert [c.shape for c, _ in pairs] == [(1024, 262144), (16, 1000), (2**21, 128)]
    for bad in ("0", "12x", "abc", "1x2x3", "-4x8", "8x0", "1x2x3x4"):
        with pytest.raises(ValueError, match="bad shape"):
            bm.select("quick", shapes_filter=[bad])


def test_lm_head_cells_are_tokens_hidden_vocabulary():
    """The lm_head preset's cells: (T, d, V), their inputs from Op.bench_inputs, the float64
    check on the first tokens only (Op.check_slice), the record naming the whole shape."""
    pairs = bm.select("lm_head")
    assert {c.shape for c, _ in pairs} == set(bm.PRESETS["lm_head"].shapes)
    assert {c.op for c, _ in pairs} == {"linear_cross_entropy", "linear_cross_entropy_backward"}
    (cell,) = {c for c, _ in bm.select("lm_head", ops_filter=["linear_cross_entropy_backward"],
                                       shapes_filter=["1500x24x301"])}
    work = bm.make_workload(cell, "cpu")
    h, w, t, b, lse, g = work.inputs
    assert h.shape == (1500, 24) and w.shape == (301, 24) and t.shape == (1500,) and b is None
    assert lse.shape == (1500,) and lse.dtype == torch.float32 and g.dim() == 0
    ref_lse = torch.logsumexp(h.double() @ w.double().T, 1).float()
    torch.testing.assert_close(lse, ref_lse)  # chunked over tokens, the same numbers
    ch, cw, ct, _, clse, cg = work.check_inputs
    assert ch.shape == (1024, 24) and ct.shape == (1024,) and clse.shape == (1024,)
    assert cw is w and cg is g
    v = kernel_lab.get("torch_chunked_linear_cross_entropy_backward")
    assert bm.vet(v, work) is None  # right on the checked tokens (and warmed on all)
    rec = bm.Record.start(cell, v)
    assert (rec.m, rec.n, rec.shape) == (1500, 301, "1500x24x301")
    with pytest.raises(ValueError, match="lm-head ops"):
        bm.select("quick", ops_filter=["softmax"], shapes_filter=["8x4x16"])


def test_cli_cpu_sweep_of_one_shape(tmp_path, capsys):
    rc = sweep.main(_cli("--device", "cpu", "--op", "softmax", "--variants", "torch_eager",
                         "--dtype", "float32", "--shape", "4x100", "--out", str(tmp_path)))
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "1 runs (--shape 4x100)" in out
    data = json.loads(next(tmp_path.glob("bench-shapes-cpu-*.json")).read_text())
    assert [(r["m"], r["n"]) for r in data["records"]] == [(4, 100)]
    assert sweep.main(_cli("--device", "cpu", "--shape", "4y100")) == 2
    assert "bad shape '4y100'" in capsys.readouterr().err


def test_cli_entry_point_without_gpu():
    if HAS_CUDA:
        pytest.skip("checks the GPU-less behaviour")
    r = subprocess.run([sys.executable, "-m", "kernel_lab", "bench"], cwd=REPO, text=True,
                       capture_output=True, timeout=120)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and bm.NO_GPU in r.stderr, r


def test_schedule_rounds_cover_the_host_latency_of_one_call():
    """A round starts from an idle GPU: the first call's host time must stay ~1 % of it."""
    clock = [0.0]

    def timer():
        return clock[0]

    def call():  # 650 us of work per call, as compile_naive at 32768x8192 fp32 on an H200
        clock[0] += 650e-6

    short = bm.schedule(call, timer)  # a cheap launcher: ROUND_S decides
    assert short.iterations * 650e-6 >= bm.ROUND_S and short.iterations * 650e-6 < 1.1 * bm.ROUND_S
    slow_host = bm.schedule(call, timer, host_s=500e-6)  # ~0.5 ms of host time per call
    assert slow_host.iterations * 650e-6 >= bm.HOST_LATENCY_ROUNDS * 500e-6
    assert slow_host.rounds >= bm.MIN_ROUNDS


def test_a_recorded_launch_reads_as_name_and_shape():
    """What a saved record's ``kernels`` says per launch (bm.describe_launch), and that a
    Function the JIT did not hand out has no name."""
    from kernel_lab.cuda import interop, jit

    launch = interop.Launch(object(), (315, 1, 1), (160, 1, 1), 40960)
    assert bm.describe_launch(launch, "fast_softmax_persist_cluster<float, 16, 15>") == \
        "fast_softmax_persist_cluster<float, 16, 15> <<<315, 160, 40960>>>"
    assert bm.describe_launch(interop.Launch(None, (4, 2, 1), (32, 4, 1), 0), None) == \
        "kernel <<<4x2, 32x4, 0>>>"
    assert jit.kernel_name(object()) is None


def test_list_names_every_variant_and_where_it_runs():
    """`python -m kernel_lab list` (what CI runs last): every op, optional inputs included."""
    r = subprocess.run([sys.executable, "-m", "kernel_lab", "list"], cwd=REPO, text=True,
                       capture_output=True, timeout=300, env={**os.environ, "COLUMNS": "200"})
    assert r.returncode == 0, r.stderr
    for name in ("fast_softmax", "cuda_cross_entropy_backward", "torch_cross_entropy_backward"):
        assert name in r.stdout
