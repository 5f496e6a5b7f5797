"""The compare gate's logic on a CPU, with a fake device: a virtual host and GPU timeline in
which a call costs the host ``host_s`` and the GPU ``device_s`` (queued behind earlier work),
an event reading waits for the GPU, and a graph replay costs the host one launch. What is
checked: the timing method chosen per cell, the figure pytest-benchmark would store (device
time per call), K, the record's ``extra_info`` fields and the memory column ("n/a" off CUDA).
The same logic on the real GPU: the ``gpu`` tests at the end.
"""

from __future__ import annotations

import statistics

import pytest
import torch
from conftest import bench_script

import kernel_lab
from kernel_lab.measure import benchmarking as bm
from kernel_lab.measure import peak_memory, timing

HAS_CUDA = torch.cuda.is_available()


class FakeDevice:
    """A host and a GPU on virtual time: ``call`` is one launch of a variant."""

    def __init__(self, host_s: float, device_s: float, launch_s: float = 5e-6,
                 capture_error: Exception | None = None) -> None:
        self.host_s, self.device_s, self.launch_s = host_s, device_s, launch_s
        self.capture_error = capture_error
        self.h = self.d = 0.0  # host clock; when the GPU's queue drains
        self.captured: list[int] = []

    def call(self) -> None:
        self.h += self.host_s
        self.d = max(self.d, self.h) + self.device_s

    # the Stopwatch protocol
    def reader(self):
        def read() -> float:  # an event recorded now, waited for: the GPU's time there
            self.h = max(self.h, self.d)
            return self.h

        return read

    def host_latency(self, fn) -> float:
        self.h = max(self.h, self.d)
        t0 = self.h
        fn()
        return self.h - t0

    def capture(self, fn, k: int):
        if self.capture_error is not None:
            raise self.capture_error
        self.captured.append(k)

        def replay() -> None:
            self.h += self.launch_s
            self.d = max(self.d, self.h) + k * self.device_s

        return replay


def _figure(t: timing.Timing) -> float:
    """The median per call pytest-benchmark would store (time_rounds mirrors pedantic)."""
    return statistics.median(timing.time_rounds(t.target, t.clock, t.schedule))


def test_launch_bound_cell_is_a_graph_and_its_figure_is_device_time():
    dev = FakeDevice(host_s=12e-6, device_s=2e-6)  # fast_softmax 16x1024: host-bound
    t = timing.prepare(dev.call, copies=64, backend="cuda", stopwatch=dev)
    assert t.schedule.method == "graph" and t.note == ""
    k = t.schedule.k
    assert k == dev.captured[-1] and k * 2e-6 >= 0.9 * timing.GRAPH_REPLAY_S and k >= 64
    assert t.clock.calls == k  # the timer counts in calls
    assert _figure(t) == pytest.approx(2e-6, rel=0.01)  # not the 12 us of launching
    assert t.host_s == pytest.approx(12e-6)
    rounds = t.schedule
    assert rounds.rounds >= timing.MIN_ROUNDS
    assert rounds.iterations * k * 2e-6 >= timing.ROUND_S  # a round: >= 20 ms of replays


def test_graph_holds_every_rotation_copy():
    dev = FakeDevice(host_s=10e-6, device_s=3e-6)
    t = timing.prepare(dev.call, copies=1024, backend="triton", stopwatch=dev)
    assert t.schedule.method == "graph" and t.schedule.k >= 1024


def test_device_bound_cell_is_timed_eagerly_with_events():
    dev = FakeDevice(host_s=8e-6, device_s=400e-6)  # 2^28 elements: the GPU is the slow side
    t = timing.prepare(dev.call, backend="cuda", stopwatch=dev)
    assert t.schedule.method == "events" and t.schedule.k == 1 and not dev.captured
    assert t.clock.calls == 1
    assert _figure(t) == pytest.approx(400e-6, rel=0.01)
    assert t.schedule.iterations * 400e-6 >= timing.ROUND_S


def test_borderline_cells_agree_whichever_method_is_chosen():
    """Either side of DEVICE_BOUND the figure is the device time, so a cell whose method flips
    between two runs does not read as a regression."""
    below = FakeDevice(host_s=10e-6, device_s=19e-6)
    above = FakeDevice(host_s=10e-6, device_s=21e-6)
    tb = timing.prepare(below.call, backend="cuda", stopwatch=below)
    ta = timing.prepare(above.call, backend="cuda", stopwatch=above)
    assert (tb.schedule.method, ta.schedule.method) == ("graph", "events")
    assert _figure(tb) == pytest.approx(19e-6, rel=0.02)
    assert _figure(ta) == pytest.approx(21e-6, rel=0.02)


def test_a_compare_times_each_cell_as_its_compared_run_did():
    """pin=(method, K): a borderline cell keeps the compared run's method and K, where its own
    rule may choose the other (on a GPU the two figures differ); a peer still never captures."""
    dev = FakeDevice(host_s=10e-6, device_s=19e-6)
    assert timing.prepare(dev.call, backend="cuda", stopwatch=dev).schedule.method == "graph"
    t = timing.prepare(dev.call, backend="cuda", stopwatch=dev, pin=("events", 1))
    assert t.schedule.method == "events" and t.clock.calls == 1
    dev = FakeDevice(host_s=10e-6, device_s=21e-6)
    dev.captured.clear()
    t = timing.prepare(dev.call, backend="cuda", stopwatch=dev, pin=("graph", 77))
    assert (t.schedule.method, t.schedule.k, dev.captured) == ("graph", 77, [77])
    assert t.clock.calls == 77 and _figure(t) == pytest.approx(21e-6, rel=0.02)
    peer = FakeDevice(host_s=15e-6, device_s=2e-6)
    t = timing.prepare(peer.call, backend="peer", stopwatch=peer, pin=("graph", 64))
    assert t.schedule.method == "events" and not peer.captured


def test_compared_methods_are_read_from_the_saved_run():
    from kernel_lab.measure import compare

    saved = [
        {"fullname": "bench/test_variants.py::test_variant[a]",
         "extra_info": {"method": "graph", "k": 103}},
        {"fullname": "bench/test_variants.py::test_variant[b]", "extra_info": {"method": "events",
                                                                              "k": 1}},
        {"fullname": "bench/test_host.py::test_host[c]", "extra_info": {"method": "host"}},
        {"fullname": "bench/test_variants.py::test_variant[d]", "extra_info": {}}]
    assert compare.timing_methods(saved) == {
        "bench/test_variants.py::test_variant[a]": ("graph", 103),
        "bench/test_variants.py::test_variant[b]": ("events", 1)}


def test_peers_and_failed_captures_fall_back_to_the_event_loop():
    dev = FakeDevice(host_s=15e-6, device_s=2e-6)
    t = timing.prepare(dev.call, backend="peer", stopwatch=dev)
    assert t.schedule.method == "events" and not dev.captured
    assert "peer" in t.note
    assert _figure(t) == pytest.approx(15e-6, rel=0.02)  # the launch rate, and it says so
    bad = FakeDevice(host_s=15e-6, device_s=2e-6,
                     capture_error=RuntimeError("operation not permitted when stream is "
                                                "capturing\nmore"))
    t = timing.prepare(bad.call, backend="cuda", stopwatch=bad)
    assert t.schedule.method == "events"
    assert t.note == ("launch-bound, capture failed: RuntimeError: operation not permitted "
                      "when stream is capturing")


def test_choose_method_rule():
    assert timing.choose_method(400e-6, 8e-6, None) == "events"
    assert timing.choose_method(12e-6, 12e-6, None) == "graph"
    assert timing.choose_method(12e-6, 12e-6, "a peer") == "events"
    assert timing.capture_refusal("peer") and timing.capture_refusal("cuda") is None
    assert timing.graph_calls(2.5e-6, 1) == 400 and timing.graph_calls(1.0, 1) == 16
    assert timing.graph_calls(1e-9, 1) == timing.MAX_GRAPH_CALLS


def test_clock_counts_in_calls_and_names_itself():
    t = [0.0]
    clock = timing.Clock(lambda: t[0], calls=4, name="device_clock")
    a = clock()
    t[0] += 8e-3
    assert clock() - a == pytest.approx(2e-3)
    from pytest_benchmark.utils import funcname

    assert funcname(clock) == "device_clock"  # what the saved JSON calls the timer


def test_host_schedule_sizes_rounds():
    t = [0.0]

    def call():
        t[0] += 10e-6

    s = timing.host_schedule(call, lambda: t[0])
    assert s.method == "host" and s.rounds == timing.HOST_ROUNDS and s.iterations == 1
    assert s.k * 10e-6 == pytest.approx(timing.HOST_ROUND_S, rel=0.01)


def test_extra_info_fields_of_a_graph_cell():
    case = bm.Cell("softmax", torch.float32, (16, 1024))
    v = kernel_lab.get("torch_eager")
    work = bm.make_workload(case, "cpu")
    s = timing.Schedule(rounds=12, iterations=10, estimate_s=2e-6, method="graph", k=512)
    peak = peak_memory.Peak(65536, 131072)
    rec = bm.Record.start(case, v).fill(work, 2e-6, 12e-6, 4000.0, {}, s, peak, 12e-6)
    info = bm.extra_info(rec)
    assert info["method"] == "graph" and info["k"] == 512
    assert info["device_s"] == 2e-6 and "median_s" not in info  # the compared figure, named
    assert info["host_s"] == 12e-6 and info["event_median_s"] == 12e-6
    assert (info["mem_fwd_bytes"], info["mem_step_bytes"]) == (65536, 131072)
    assert "mem_note" not in info
    assert info["gbps"] == pytest.approx(work.bytes_moved / 2e-6 / 1e9)


def test_memory_column_is_n_a_off_cuda():
    case = bm.Cell("softmax", torch.float32, (4, 100))
    work = bm.make_workload(case, "cpu")
    peak = bm.memory(kernel_lab.get("torch_eager"), work)
    assert peak == peak_memory.Peak(None, None, peak_memory.NOT_CUDA)
    t, event = bm.prepare(kernel_lab.get("torch_eager"), work)
    assert t.schedule.method == "cpu" and event is None
    rec = bm.Record.start(case, kernel_lab.get("torch_eager")).fill(
        work, 1e-5, None, 100.0, {}, t.schedule, peak, t.host_s)
    info = bm.extra_info(rec)
    assert info["mem_note"] == "n/a: not a CUDA device" and "mem_fwd_bytes" not in info
    assert info["method"] == "cpu" and "median_s" in info and "device_s" not in info
    assert peak_memory.format_bytes(3 * 2**30 // 2) == "1.5 GiB"
    assert peak_memory.format_bytes(None) == "n/a"


def test_step_runner_differentiates_every_grad_input():
    """The memory column's step: softmax (one differentiated input) and the LM head (hidden,
    weight and bias: a tuple ``grad_of``), each gradient as autograd gives it."""
    from kernel_lab.core import registry

    x = torch.randn(4, 10, dtype=torch.float64)
    step = peak_memory.step_runner(registry.get_op("softmax"), "torch_eager", (x,), {"dim": -1})
    (dx,) = step()
    assert dx.shape == x.shape and torch.allclose(dx, torch.zeros_like(x), atol=1e-12)
    h, w, b = (torch.randn(*s, dtype=torch.float64) for s in ((6, 8), (11, 8), (11,)))
    t = torch.randint(0, 11, (6,))
    op = registry.get_op("linear_cross_entropy")
    grads = peak_memory.step_runner(op, "torch_linear_cross_entropy", (h, w, t, b), {})()
    leaves = [v.detach().requires_grad_() for v in (h, w, b)]
    torch.nn.functional.cross_entropy(leaves[0] @ leaves[1].T + leaves[2], t).backward()
    assert len(grads) == 3
    for got, leaf in zip(grads, leaves):
        torch.testing.assert_close(got, leaf.grad)


def test_memory_cells_in_the_table_and_plot_legend():
    from kernel_lab.measure import sweep

    case = bm.Cell("softmax", torch.float32, (1024, 4096))
    r = bm.Record.start(case, kernel_lab.get("torch_eager"))
    r.mem_fwd_bytes, r.mem_step_bytes = 16 * 2**20, 32 * 2**20
    assert sweep.memory_cell(r) == "16 MiB / 32 MiB"
    assert sweep.memory_label([r]) == " (mem 1.0x / 2.0x of M x N)"
    r2 = bm.Record.start(case, kernel_lab.get("torch_eager"))
    r2.mem_note = peak_memory.NOT_CUDA
    assert sweep.memory_cell(r2) == "mem n/a" and sweep.memory_label([r2]) == " (mem n/a)"


# -- on the GPU: the same logic on real kernels ---------------------------------------------------
gpu = pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU: real graph capture and events")


@gpu
@pytest.mark.gpu_exclusive  # it times / measures the GPU: no other test beside it
def test_gpu_small_cells_are_graphs_and_big_ones_events():
    small = bm.make_workload(bm.Cell("softmax", torch.float32, (16, 1024)), "cuda")
    v = kernel_lab.get("online_softmax")
    bm.vet(v, small)
    t, event = bm.prepare(v, small)
    assert t.schedule.method == "graph" and t.schedule.k >= len(small.copies), t.note
    device = statistics.median(timing.time_rounds(t.target, t.clock, t.schedule))
    assert 0 < device < event  # eager bursts are launch-bound; the graph is not
    t.close()
    big = bm.make_workload(bm.Cell("softmax", torch.float32, (2**14, 2**14)), "cuda")
    bm.vet(v, big)
    t, event = bm.prepare(v, big)
    assert t.schedule.method == "events" and t.schedule.k == 1
    device = statistics.median(timing.time_rounds(t.target, t.clock, t.schedule))
    assert device == pytest.approx(event, rel=0.05)  # device-bound: the two timers agree


@gpu
@pytest.mark.gpu_exclusive  # it times / measures the GPU: no other test beside it
def test_gpu_memory_column_counts_outputs_and_gradients():
    case = bm.Cell("softmax", torch.float32, (1024, 4096))
    work = bm.make_workload(case, "cuda")
    out_bytes = 1024 * 4096 * 4
    peak = bm.memory(kernel_lab.get("torch_eager"), work)
    assert out_bytes <= peak.forward < 1.5 * out_bytes, peak
    assert peak.step is not None and peak.step >= 2 * out_bytes, peak  # y saved + dx
    back = bm.make_workload(bm.Cell("softmax_backward", torch.float32, (1024, 4096)), "cuda")
    peak = bm.memory(kernel_lab.get("torch_eager_backward"), back)
    assert peak.step is None and peak.note == "" and peak.forward >= out_bytes


# -- bench/compare_gate.py: the slowdown edit and what it reads from pytest-benchmark ------------
def _compare_gate():
    return bench_script("compare_gate")


def test_gate_reads_the_cells_pytest_benchmark_names():
    gate = _compare_gate()
    out = ("Performance has regressed:\n"
           "\ttest_variant[softmax-float32-64x4096-online_softmax] (0001_abc) - Field 'median' "
           "has failed PercentageRegressionCheck: 11.2 > 5.0\n"
           "\ttest_host[run(\"online_softmax\")] (0001_abc) - Field 'median' has failed "
           "PercentageRegressionCheck: 6.0 > 5.0\n")
    assert gate.regressed(out) == ["test_variant[softmax-float32-64x4096-online_softmax]",
                                   'test_host[run("online_softmax")]']
    assert gate.worst_change({"a": 1.0, "b": 2.0}, {"a": 1.02, "b": 1.9}) == \
        pytest.approx((-0.05, "b"))
    assert set(gate.GATE) == set(bm.PRESETS)  # every preset is gated
    assert gate.TARGET.endswith("-online_softmax")


def test_gate_slowdown_edit_compiles_and_keeps_the_kernel(tmp_path):
    """The extra pass the gate inserts compiles with NVRTC for sm_90 (no GPU needed)."""
    pytest.importorskip("cupy")
    from kernel_lab.cuda import jit

    gate = _compare_gate()
    src = gate.KERNEL.read_text()
    assert gate.ANCHOR in src
    edited = tmp_path / "online_softmax.cu"
    edited.write_text(src.replace(gate.ANCHOR, gate.extra_pass(50) + gate.ANCHOR))
    out = jit.compile_cubin(edited, ["online_softmax<float>"], include_dirs=[jit.cuda_src_dir()])
    assert out is not None


def test_gate_host_edit_finds_its_lines_and_is_valid_python():
    """The lines the gate's host slowdown goes between are still in kernel_lab.run, and the
    edited module compiles (the slow test below runs it)."""
    gate = _compare_gate()
    src = gate.HOST_FILE.read_text()
    assert src.count(gate.HOST_ANCHOR) == 1
    head, tail = gate.HOST_ANCHOR.split("\n", 1)
    edited = src.replace(gate.HOST_ANCHOR, f"{head}\n{gate.host_work(2)}{tail}")
    compile(edited, str(gate.HOST_FILE), "exec")
    run_body = edited[edited.index("\ndef run("):]
    assert run_body.index("compare_gate.py: host work") < run_body.index("PLANS.get(")


@pytest.mark.slow  # 106 s on an H100 machine's busy cores: the full tier
def test_gate_host_edit_runs_the_same_and_costs_more(monkeypatch):
    """The host work the gate inserts into kernel_lab.run is valid Python there: run() still
    returns the same, with each repeat costing a measurable slice more; the verdict counts a
    device cell named beside the host ones as a miss."""
    import importlib.util
    import time

    import torch

    import kernel_lab

    gate = _compare_gate()
    src = gate.HOST_FILE.read_text()
    assert gate.HOST_ANCHOR in src
    head, tail = gate.HOST_ANCHOR.split("\n", 1)

    def loaded(text: str):
        spec = importlib.util.spec_from_loader("gate_plans", loader=None)
        mod = importlib.util.module_from_spec(spec)
        exec(compile(text, str(gate.HOST_FILE), "exec"), mod.__dict__)
        return mod

    # 2000 repeats (~0.3 ms a call): a cost no busy CI core's noise hides
    slow = loaded(src.replace(gate.HOST_ANCHOR, f"{head}\n{gate.host_work(2000)}{tail}"))
    x = torch.randn(4, 8)
    torch.testing.assert_close(slow.run("torch_eager", x), kernel_lab.run("torch_eager", x))

    def per_call(fn, n=200):
        fn()
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        return (time.perf_counter() - t0) / n

    fast = loaded(src)
    times = {"fast": [], "slow": []}
    for _ in range(5):  # interleaved: a busy moment slows both
        times["fast"].append(per_call(lambda: fast.run("torch_eager", x, dim=-1)))
        times["slow"].append(per_call(lambda: slow.run("torch_eager", x, dim=-1)))
    # round by round: a busy moment inside one round (seen: a 1 ms stall of one fast call,
    # against 0.3 ms of host work) moves one pair, not the median of the pairs' differences
    gaps = sorted(s - f for f, s in zip(times["fast"], times["slow"]))
    assert gaps[len(gaps) // 2] > 0, times
    target, run_cell = gate.HOST_TARGET, 'test_host[run("fast_softmax")]'
    assert gate.host_caught({"rc": 1, "target": target, "named": [target, run_cell]}) == (True, [])
    device = "test_variant[softmax-float32-1x128-online_softmax]"
    assert gate.host_caught({"rc": 1, "target": target, "named": [target, device]}) == (
        False, [device])
    assert not gate.host_caught({"rc": 0, "target": target, "named": []})[0]


def test_gate_shows_how_an_alarmed_cell_was_timed(tmp_path):
    import json

    gate = _compare_gate()
    js = tmp_path / "run.json"
    js.write_text(json.dumps({"benchmarks": [
        {"name": "test_variant[a]", "stats": {"median": 7.8e-6},
         "extra_info": {"method": "graph", "k": 103, "rounds": 13}}]}))
    info = gate.cell_info(js, "test_variant[a]")
    assert info == {"median": 7.8e-6, "method": "graph", "k": 103}
    assert gate.timed(info) == "7.80 us (graph, K=103)"
    assert gate.cell_info(js, "test_variant[b]") == {} == gate.cell_info(tmp_path / "no", "x")
    assert gate.timed({}) == "?"


def test_gate_writes_its_verdict_with_what_it_ran_on(tmp_path):
    import json

    gate = _compare_gate()
    path = tmp_path / "out" / "compare_gate.json"
    row = {"preset": "small", "passed": 5, "runs": 5, "alarms": []}
    gate.write_summary(path, ok=True, runs=5, presets=[row], slowdown=None,
                       host_slowdown=None, not_run=[])
    got = json.loads(path.read_text())
    assert got["presets"] == [row] and got["ok"] is True and got["runs"] == 5
    assert got["compare_fail"] == gate.FAIL and got["host_fail"] == "median:10%"
    assert {"gpu", "date", "commit"} <= set(got)


def test_gate_joins_the_verdicts_of_calls_on_one_gpu(tmp_path, capsys):
    """Presets split over device calls: --merge joins their verdicts (each row stamped with its
    call's commit), refuses parts from two GPUs, and is OK only with every preset and both
    slowdowns run and clean."""
    import json

    gate = _compare_gate()

    def row(preset, passed=5):
        return {"preset": preset, "autosave_rc": 0, "passed": passed, "runs": 5, "worst": 0.01,
                "worst_cell": "test_host[x]", "alarms": [], "cells": 3}

    slow = {"target": gate_target(gate), "pct": 25, "change": 0.14, "rc": 1,
            "named": [gate_target(gate)]}
    host = {"target": gate.HOST_TARGET, "repeats": 16, "added_us": 2.9, "change": 0.22, "rc": 1,
            "named": [gate.HOST_TARGET]}

    def part(name, presets, gpu="NVIDIA H100 80GB HBM3", **more):
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps({"gpu": gpu, "date": "2026-12-06", "commit": name,
                                    "compare_fail": gate.FAIL, "host_fail": "median:10%",
                                    "ok": True, "runs": 5, "presets": presets,
                                    "slowdown": None, "host_slowdown": None, "not_run": [],
                                    **more}))
        return path

    a = part("aaa", [row("small"), row("seed")], slowdown=slow, host_slowdown=host)
    b = part("bbb", [row("sweep")])
    out = tmp_path / "joined.json"
    assert gate.main(["--merge", str(a), str(b), "--summary", str(out)]) == 1  # 3 presets left
    got = json.loads(out.read_text())
    assert [r["preset"] for r in got["presets"]] == ["sweep", "seed", "small"]  # GATE's order
    assert got["not_run"] == ["quick", "vocab", "lm_head"] and got["ok"] is False
    assert set(got["commits"]) == {"aaa", "bbb"} and got["slowdown"]["commit"] == "aaa"
    assert {r["preset"]: r["commit"] for r in got["presets"]}["sweep"] == "bbb"
    assert "GATE INCOMPLETE" in capsys.readouterr().out
    c = part("ccc", [row("quick"), row("vocab"), row("lm_head")])
    joined = tmp_path / "joined-before.json"  # a joined verdict joins again, stamps kept
    joined.write_text(out.read_text())
    assert gate.main(["--merge", str(joined), str(c), "--summary", str(out)]) == 0
    assert set(json.loads(out.read_text())["commits"]) == {"aaa", "bbb", "ccc"}
    assert json.loads(out.read_text())["ok"] is True
    assert "GATE OK" in capsys.readouterr().out
    d = part("ddd", [row("quick", passed=4)])  # a later part's row replaces the earlier one
    assert gate.main(["--merge", str(a), str(b), str(c), str(d), "--summary", str(out)]) == 1
    h200 = part("eee", [row("quick")], gpu="NVIDIA H200")
    with pytest.raises(SystemExit, match="differ in gpu"):
        gate.main(["--merge", str(a), str(h200), "--summary", str(out)])


def gate_target(gate) -> str:
    return f"test_variant[{gate.TARGET}]"


class _DriftingClock:
    """A fake host clock: each call costs ``cost[name]`` seconds times the machine's current
    slowness, which changes from round to round (a shared machine)."""

    def __init__(self):
        self.t, self.slowness = 0.0, 1.0

    def read(self) -> float:
        return self.t

    def call(self, seconds: float):
        def run():
            self.t += seconds * self.slowness
        return run


def test_host_cells_compare_a_ratio_that_drift_cannot_move():
    """RatioRounds as pytest-benchmark drives it (one reading before and after each round): each
    round's figure is fn's time / its reference's, whatever the machine's speed that round; the
    two are timed in alternating order; the absolute seconds are kept beside."""
    clock = _DriftingClock()
    rounds = timing.RatioRounds(clock.call(3e-6), clock.call(2e-6), clock.read)
    figures = []
    for slowness in (1.0, 1.6, 0.7, 2.5, 1.1):
        clock.slowness = slowness
        before = rounds.reader()
        rounds.round()
        figures.append(rounds.reader() - before)
    assert figures == pytest.approx([1.5] * 5)
    assert rounds.fn_s == pytest.approx([3e-6 * s for s in (1.0, 1.6, 0.7, 2.5, 1.1)])
    assert rounds.ref_s == pytest.approx([2e-6 * s for s in (1.0, 1.6, 0.7, 2.5, 1.1)])


def test_ratio_rounds_alternate_which_runs_first():
    order = []
    rounds = timing.RatioRounds(lambda: order.append("fn"), lambda: order.append("ref"),
                                iter(range(100)).__next__)
    for _ in range(3):
        rounds.round()
    assert order == ["fn", "ref", "ref", "fn", "fn", "ref"]
