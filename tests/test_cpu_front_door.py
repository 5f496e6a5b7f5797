"""A new user's first hour on a CPU: `bench --device cpu` cuts every preset to end within its
budget (the cut is computed here, nothing is timed), a --shape too big for the CPU is refused
in one line naming the flag, `bench` that times nothing exits non-zero with one line, and the
progress of a long command (bench, check) prints an honest ETA, in a pipe at most one line a
minute (driven here with a fake clock)."""

from __future__ import annotations

import argparse
import io
import re

import pytest
import torch

import kernel_lab
from kernel_lab import cli
from kernel_lab.cli import check as check_cli
from kernel_lab.measure import benchmarking as bm
from kernel_lab.measure import presets, sweep, timing
from kernel_lab.measure.progress import Estimate, RunProgress, clock_text


def _cli(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    sweep.add_arguments(p)
    return p.parse_args(argv)


# -- the CPU's share ---------------------------------------------------------------------------

@pytest.fixture
def cpu_only_machine(monkeypatch):
    """Cuts as a machine without a GPU makes them, where Triton's interpreter runs the Triton
    variants on CPU tensors (the costliest cells). On a GPU machine Triton compiles for the GPU
    and refuses CPU tensors, so a share there would leave them out and cost less."""
    from kernel_lab.checking import checker
    from kernel_lab.core import registry

    real = checker.runs_here

    def runs_here(variant, device=None):
        v = registry.get(variant) if isinstance(variant, str) else variant
        if v.backend == "triton" and device in (None, "cpu"):
            return True
        return real(v, "cpu" if device is None else device)

    monkeypatch.setattr(checker, "runs_here", runs_here)


@pytest.mark.usefixtures("cpu_only_machine")
@pytest.mark.parametrize("preset", sorted(bm.PRESETS))
def test_cpu_share_of_every_preset_fits_the_budget(preset):
    pairs = bm.select(preset)
    share = bm.cpu_share(pairs)
    est = bm.share_cost_s(share.pairs)
    assert share.pairs and est == pytest.approx(share.estimate_s)
    assert est <= presets.CPU_SHARE_S < bm.CPU_BUDGET_S
    assert share.rounds == timing.CPU_ROUNDS
    # every op of the preset stays, each cell is small, the note is one line naming the way out
    assert {c.op for c, _ in share.pairs} == {c.op for c, _ in pairs}
    for c, _ in share.pairs:
        m, n = c.shape[0], c.shape[-1]
        assert all(p <= presets.CPU_MAX_PARAM for p in c.shape[1:-1])  # (the lm-head's d)
        assert m <= presets.CPU_MAX_ROWS and (m * n <= presets.CPU_ELEMENTS or m == 1)
    cells = {c for c, _ in share.pairs}
    assert share.note.startswith(f"CPU: {len(cells)} of {len({c for c, _ in pairs})} cells")
    assert "\n" not in share.note and "--full-cpu" in share.note and "--device cuda" in share.note
    # the preset as a GPU sizes it (rows capped only to fit memory) is far past the budget
    from kernel_lab.measure.memory_caps import fit_cpu

    assert bm.share_cost_s(fit_cpu(pairs, False)[0], full=True) > bm.CPU_BUDGET_S


@pytest.mark.usefixtures("cpu_only_machine")
@pytest.mark.parametrize("preset", sorted(bm.PRESETS))
def test_cpu_share_fits_with_every_dtype_and_each_op(preset):
    """Filters change the share's cells, never its budget: every dtype asked for, or one op."""
    both = bm.cpu_share(bm.select(preset, dtypes_filter=["float32,bfloat16"]), dtypes_given=True)
    assert {c.dtype for c, _ in both.pairs} == {torch.float32, torch.bfloat16}
    assert bm.share_cost_s(both.pairs) <= presets.CPU_SHARE_S
    for op in bm.PRESETS[preset].ops or ():
        one = bm.cpu_share(bm.select(preset, ops_filter=[op]))
        assert {c.op for c, _ in one.pairs} == {op}
        assert bm.share_cost_s(one.pairs) <= presets.CPU_SHARE_S


@pytest.mark.usefixtures("cpu_only_machine")
def test_cpu_share_spreads_row_lengths_and_keeps_the_seed_m_axis():
    share = bm.cpu_share(bm.select("sweep", ops_filter=["softmax"]))
    ns = sorted({c.shape[1] for c, _ in share.pairs})
    assert ns[0] == 128 and ns[-1] == max(bm.SWEEP_N) and 2 < len(ns) < len(bm.SWEEP_N)
    seed = bm.cpu_share(bm.select("seed"))
    ms = sorted({c.shape[0] for c, _ in seed.pairs})
    assert len(ms) > 5 and ms[-1] == presets.CPU_MAX_ROWS  # M still varies, as the seed's point
    assert {c.shape[1] for c, _ in seed.pairs} == {128}


@pytest.mark.usefixtures("cpu_only_machine")
def test_a_shape_too_big_for_the_cpu_is_refused_naming_the_flag(capsys):
    rc = cli.main(["bench", "--device", "cpu", "--op", "softmax", "--shape", "512x32000"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1, err
    assert "--shape 512x32000" in err and "--full-cpu" in err, err
    smaller = re.search(r"e\.g\. (\d+)x32000", err)
    assert smaller, err
    fits = bm.select("quick", ops_filter=["softmax"], shapes_filter=[f"{smaller[1]}x32000"])
    assert bm.share_cost_s(fits) <= bm.CPU_BUDGET_S
    # a small --shape is kept as given, timed in the CPU's short rounds
    share = bm.cpu_share(bm.select("quick", ops_filter=["softmax"], shapes_filter=["4x100"]),
                       shapes_given=True)
    assert {c.shape for c, _ in share.pairs} == {(4, 100)} and share.rounds == timing.CPU_ROUNDS


def test_short_schedule_has_the_rounds_asked_for():
    clock = [0.0]

    def call():
        clock[0] += 0.4  # an interpreted Triton call: one call a round

    s = timing.short_schedule(call, lambda: clock[0], 3)
    assert (s.rounds, s.iterations) == (3, 1) and s.estimate_s == pytest.approx(0.4)
    fast = timing.short_schedule(lambda: clock.__setitem__(0, clock[0] + 1e-5),
                                 lambda: clock[0], 3)
    assert fast.rounds == 3 and fast.iterations * 1e-5 >= timing.CPU_ROUND_S


# -- nothing timed: non-zero, one line ----------------------------------------------------------

def test_bench_without_a_gpu_exits_2_in_one_line(capsys, monkeypatch):
    monkeypatch.setattr(bm, "has_cuda", lambda: False)
    assert sweep.main(_cli("--preset", "sweep")) == 2
    out = capsys.readouterr()
    assert out.out == "" and len(out.err.strip().splitlines()) == 1, out
    assert "nothing timed" in out.err and bm.NO_GPU in out.err and "--device cpu" in out.err


def test_bench_on_cpu_that_times_nothing_exits_1(tmp_path, capsys):
    rc = sweep.main(_cli("--device", "cpu", "--op", "softmax", "--variants", "fast_softmax",
                         "--dtype", "float32", "--shape", "4x100", "--out", str(tmp_path)))
    out = capsys.readouterr()
    assert rc == 1, out
    last = out.err.strip().splitlines()
    assert len(last) == 1 and last[0].startswith("kernel_lab bench: nothing timed:"), out.err
    assert "the one run skipped or failed (1 x skipped: needs a CUDA tensor" in last[0], last


# -- progress: honest ETA, a line a minute in a pipe --------------------------------------------

def test_eta_is_hidden_until_data_then_scales_the_weights():
    est = Estimate([1.0] * 10, t0=0.0)
    assert est.eta(0.5) is None
    for t in (1.0, 2.0):
        est.finish(t)
        assert est.eta(t) is None  # fewer than MIN_ITEMS done
    est.finish(3.0)
    assert est.eta(3.0) == pytest.approx(7.0)  # 1 s a weight unit, 7 left
    assert est.eta(3.5) == pytest.approx(6.5)  # the running item half done
    # overdue: the running item has taken 4 s for 1 s of weight: the estimate grows
    assert est.eta(7.0) == pytest.approx(7.0 / 4 * 6)


def test_eta_waits_out_an_item_heavier_than_all_done():
    """The first torch.compile after instant cases: no ETA while it runs (rich's said 0:00:01)."""
    est = Estimate([0.02] * 20 + [6.0] + [0.2] * 10, t0=0.0)
    for i in range(20):
        est.finish(0.001 * (i + 1))
    assert est.eta(0.03) is None and est.eta(3.0) is None
    est.finish(5.0)
    eta = est.eta(5.0)
    assert eta is not None and eta == pytest.approx(2.0 * 5.0 / 6.4, rel=1e-6)


def test_piped_progress_prints_a_line_a_minute_at_most():
    from rich.console import Console

    buf = io.StringIO()
    now = [100.0]
    p = RunProgress("bench", "runs", [1.0] * 300, Console(file=buf, width=200),
                    clock=lambda: now[0], terminal=False, ticker=False)
    with p:
        for _ in range(300):
            p.start("softmax-float32-16x128 torch_eager")
            now[0] += 1.0
            p.done()
            p.tick(now[0] + 0.5)  # the ticker's check between items
    pattern = re.compile(r"^bench: (\d+)/300 runs, (\d+):(\d\d) elapsed, "
                         r"(?:~(\d+):(\d\d) left|time left not known yet)$")
    assert len(p.lines) == 5 and buf.getvalue().splitlines() == p.lines
    seen = []
    for line in p.lines:
        m = pattern.match(line)
        assert m, line
        done, elapsed = int(m[1]), int(m[2]) * 60 + int(m[3])
        if done < 0.05 * 300:  # progress.MIN_FRACTION of the weight: no ETA yet
            assert m[4] is None, line
        else:  # 1 s an item, 300 - done left
            assert m[4] is not None and abs(int(m[4]) * 60 + int(m[5]) - (300 - done)) <= 1, line
        seen.append(elapsed)
    assert seen[0] >= 10 and all(b - a >= 60 for a, b in zip(seen, seen[1:])), seen
    assert p.tick(now[0] + 600) is None  # nothing after the last item: the summary follows


def test_piped_line_before_any_data_says_so():
    from rich.console import Console

    now = [0.0]
    p = RunProgress("check", "cases", [0.1, 6.0, 0.1], Console(file=io.StringIO()),
                    clock=lambda: now[0], terminal=False, ticker=False)
    assert p.tick(5.0) is None  # not 10 s in yet
    assert p.tick(12.0) == "check: 0/3 cases, 0:12 elapsed, time left not known yet"
    assert p.tick(30.0) is None and clock_text(3725) == "1:02:05"
    assert p.eta_text(30.0) == "-:--"  # the terminal bar's column says the same


def test_terminal_bar_shows_the_eta_column_only_once_known():
    from rich.console import Console

    buf, now = io.StringIO(), [0.0]
    p = RunProgress("bench", "runs", [1.0] * 4, Console(file=buf, force_terminal=True, width=120),
                    clock=lambda: now[0])
    with p:
        assert p.terminal and p._bar is not None and p.eta_text() == "-:--"
        for _ in range(3):
            p.start("run")
            now[0] += 2.0
            p.done()
        assert p.eta_text() == "~0:02" and p.lines == []  # no piped lines on a terminal
        p._bar.refresh()
    assert "ETA ~0:02" in buf.getvalue() and "3/4" in buf.getvalue()


def test_check_weights_put_the_first_compile_start_up_on_its_first_case():
    chosen = [kernel_lab.get(n) for n in ("torch_eager", "compile_naive", "compile_backward")]
    jobs = [(v, torch.float32, ["a", "b"]) for v in chosen]
    w = check_cli.case_weights(jobs)
    assert len(w) == 6 and w[2] == pytest.approx(w[3] + check_cli.FIRST_COMPILE_S)
    assert w[4] == w[5] < w[2] and w[0] < w[3]
