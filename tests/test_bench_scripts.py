"""bench/overhead.py and bench/loss_step.py on a CPU: the host table's references and ratios,
the step-gap lines, the loss race's bounds, host column and cells, and its main() end to end,
with the GPU's timers and syncs stood in (their signatures kept)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from conftest import bench_script


def test_every_host_cell_has_a_torch_reference(monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "bench"))
    import overhead

    cells = overhead.host_cells()
    for label, (op, _) in cells.items():
        ref = overhead.reference(label)
        assert ref in cells and ref.startswith("torch.") and cells[ref][0] == op, label
    assert overhead.reference("kernel_lab.softmax (auto), autograd recording") == \
        "torch.softmax, autograd recording"
    assert overhead.reference('run("fast_log_softmax")') == "torch.log_softmax"


def test_the_overhead_table_takes_each_ratio_within_a_round(monkeypatch):
    """A host whose speed changes from round to round by up to 2x: each row's ratio to its
    reference is exact, as it is taken round by round; the absolute time is the median."""
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "bench"))
    import overhead

    cost = {"torch.softmax": 10.0, "kernel_lab.softmax (auto)": 11.0,
            'run("online_softmax")': 12.5}
    slowness, order = iter([1.0] * 3 + [2.0] * 3 + [1.5] * 3), []
    monkeypatch.setattr(overhead, "candidates", lambda x: {k: k for k in cost})

    def per_call(name, calls, rounds):
        order.append(name)
        return cost[name] * next(slowness)

    monkeypatch.setattr(overhead, "per_call_us", per_call)
    got = overhead.table(None, 3)
    assert got["kernel_lab.softmax (auto)"] == pytest.approx((16.5, 1.1))
    assert got['run("online_softmax")'] == pytest.approx((18.75, 1.25))
    assert got["torch.softmax"] == pytest.approx((15.0, 1.0))
    assert order[:3] == list(cost) and order[3:6] == list(cost)[::-1]  # alternating order


# -- bench/loss_step.py: the pass bounds, its cells ---------------------------------------------
def _loss_step():
    return bench_script("loss_step")


def _loss_step_on_a_stand_in(monkeypatch, step_ms, host_us):
    """bench/loss_step.py with its cells on the CPU and the GPU's timers, copy, name and sync
    stood in (``step_ms`` and ``host_us`` keep the real ones' signatures)."""
    ls = _loss_step()
    monkeypatch.setattr(ls, "DEVICE", "cpu")
    monkeypatch.setattr(ls, "copy_bandwidth", lambda device: 1000.0)
    monkeypatch.setattr(ls.torch.cuda, "get_device_name", lambda *a: "stand-in")
    monkeypatch.setattr(ls.torch.cuda, "synchronize", lambda *a: None)
    monkeypatch.setattr(ls, "step_ms", step_ms)
    monkeypatch.setattr(ls, "host_us", host_us)
    return ls


def test_loss_step_bounds_are_passes_at_copy_speed():
    ls = _loss_step()
    one_pass = (1 << 28) * 2  # bf16 logits, M*N = 2^28
    # the H100 figures: copy ~2,980 GB/s, a pass 180 us, a default step's bound 540 us
    assert ls.bound_us(1, one_pass, 2980.0) == pytest.approx(180.1, abs=0.1)
    assert ls.bound_us(3, one_pass, 2980.0) == pytest.approx(540.5, abs=0.1)
    assert ls.bound_us(2, one_pass, 2980.0) == pytest.approx(2 * 180.1, abs=0.2)


def test_loss_step_host_time_is_a_steps_enqueue():
    """[host]: back-to-back steps with no sync between them, after a warm one (CPU tensors: the
    step itself is the host's); host-bound where it is within 10 % of the timed median."""
    ls = _loss_step()
    calls, syncs = [], []

    def loss(x, t):
        calls.append(x._base is not None)  # the loss sees a view of the leaf
        return torch.nn.functional.cross_entropy(x, t)

    x, t = torch.randn(8, 50), torch.randint(0, 50, (8,))
    us = ls.host_us(loss, x, t, steps=7, sync=lambda: syncs.append(len(calls)))
    assert us > 0 and len(calls) == 8 and all(calls)
    assert syncs == [1, 8]  # after the warm step, and after the timed ones (not between)
    assert ls.host_bound(95.0, 100.0) and not ls.host_bound(80.0, 100.0)


@pytest.mark.parametrize("cells", ["256", "256x0", "ax262144", "1x2x3"])
def test_loss_step_refuses_a_cell_it_cannot_make(cells, capsys):
    """``--cells``: a bad pair is refused by name before anything touches a GPU."""
    with pytest.raises(SystemExit):
        _loss_step().main(["--cells", cells])
    assert "--cells" in capsys.readouterr().err


def test_loss_step_main_runs_its_cells_end_to_end_on_a_stand_in(monkeypatch, tmp_path, capsys):
    """main() over two small CPU cells, the GPU timers stood in with their own signatures: every
    mode's median, bound, [host] and the JSON written after each cell (a crash after the first
    cell's timing once went unseen until a GPU run)."""
    ls = _loss_step_on_a_stand_in(
        monkeypatch, step_ms=lambda loss_fn, x, t, inplace=False: 0.5 if inplace else 1.0,
        host_us=lambda loss_fn, x, t, inplace=False, steps=20, sync=None: 7.0 + inplace)
    out = tmp_path / "rows.json"
    ls.main(["--cells", "4x16,3x8", "--dtype", "float32", "--peers", "none", "--rounds", "2",
             "--modes", "torch,lab,lab fused", "--json", str(out)])
    rows = json.loads(out.read_text())
    assert [(r["m"], r["n"], r["gpu"]) for r in rows] == [(4, 16, "stand-in"), (3, 8, "stand-in")]
    assert rows[1]["us"] == {"torch": 1000.0, "lab": 1000.0, "lab fused": 500.0}
    assert rows[1]["host_us"] == {"torch": 7.0, "lab": 7.0, "lab fused": 8.0}
    one_pass = 3 * 8 * 4  # bytes of the 3 x 8 fp32 cell's logits
    assert rows[1]["bound_us"]["torch"] == pytest.approx(ls.bound_us(3, one_pass, 1000.0))
    assert rows[1]["bound_us"]["lab fused"] == pytest.approx(ls.bound_us(2, one_pass, 1000.0))
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("float32")]
    assert len(lines) == 2 and all("[host 8]" in ln and "x1.00" in ln for ln in lines)


def test_loss_step_keeps_why_a_mode_is_blank_in_its_row(monkeypatch, tmp_path, capsys):
    """A mode that raises on one cell (QuACK's DSL on bf16 rows of 50257) is dropped from that
    cell alone, and the row's ``errors`` says why in one line; a cell with none has no key."""
    def step_ms(loss_fn, x, t, inplace=False):
        if inplace and x.shape[1] == 8:
            raise RuntimeError("\x1b[91merror:\x1b[0m could not build IR\nmore")
        return 1.0

    ls = _loss_step_on_a_stand_in(monkeypatch, step_ms=step_ms,
                                  host_us=lambda loss_fn, x, t, inplace=False, steps=20,
                                  sync=None: 7.0)
    out = tmp_path / "rows.json"
    ls.main(["--cells", "4x16,3x8", "--dtype", "float32", "--peers", "none", "--rounds", "2",
             "--modes", "torch,lab fused", "--json", str(out)])
    first, second = json.loads(out.read_text())
    assert "errors" not in first and set(first["us"]) == {"torch", "lab fused"}
    assert second["errors"] == {"lab fused": "RuntimeError: error: could not build IR"}
    assert set(second["us"]) == set(second["host_us"]) == {"torch"}
    assert "lab fused: RuntimeError: error: could not build IR" in capsys.readouterr().out


def test_loss_step_times_a_host_bound_mode_again_from_a_cuda_graph(monkeypatch, tmp_path,
                                                                  capsys):
    """A mode whose [host] reaches its median is timed once more replayed from a CUDA graph
    (the device's own time, beside the host's figure); a mode the device keeps busy is not,
    and one that cannot be captured is said once, its cell kept as timed, and not tried again
    in a later cell; "lab sync" (a host sync by design) is never tried."""
    ls = _loss_step_on_a_stand_in(
        monkeypatch, step_ms=lambda loss_fn, x, t, inplace=False: 0.01 if loss_fn is not
        ls.F.cross_entropy else 1.0,
        host_us=lambda loss_fn, x, t, inplace=False, steps=20, sync=None: 9.5)
    captured = []

    def graph_step_ms(loss_fn, x, t, inplace=False):
        captured.append(inplace)
        if inplace:
            raise RuntimeError("operation not permitted when stream is capturing")
        return 0.004

    monkeypatch.setattr(ls, "graph_step_ms", graph_step_ms)
    out = tmp_path / "rows.json"
    ls.main(["--cells", "3x8,2x8", "--dtype", "float32", "--peers", "none", "--rounds", "2",
             "--modes", "torch,lab,lab sync,lab fused", "--json", str(out)])
    row, second = json.loads(out.read_text())
    # lab twice, lab fused once (its capture failed); torch is not host-bound; lab sync never
    assert sorted(captured) == [False, False, True]
    assert row["graph_us"] == second["graph_us"] == {"lab": 4.0}
    assert "errors" not in row and set(row["us"]) == {"torch", "lab", "lab sync", "lab fused"}
    out_lines = capsys.readouterr().out.splitlines()
    assert ("  lab fused: no graph replay: RuntimeError: operation not permitted when stream "
            "is capturing") in out_lines
    assert sum("no graph replay" in ln for ln in out_lines) == 1
    line = next(ln for ln in out_lines if ln.startswith("float32"))
    lab = line.split("lab ")[1]
    graph_x = 4.0 / row["bound_us"]["lab"]
    assert f"[host 10 host-bound; graph 4 x{graph_x:.2f}]" in lab
    assert "graph" not in line.split("lab ")[0]  # torch's cell


def test_loss_step_append_adds_cells_to_an_earlier_json_in_table_order(monkeypatch, tmp_path):
    """--append: a second process's cells join the file's rows (a cell timed again replaces
    its row), by dtype as first seen, N, then M; without --json it is refused."""
    ls = _loss_step_on_a_stand_in(
        monkeypatch, step_ms=lambda loss_fn, x, t, inplace=False: 1.0,
        host_us=lambda loss_fn, x, t, inplace=False, steps=20, sync=None: 7.0)
    out = tmp_path / "rows.json"
    run = ["--dtype", "float32,bfloat16", "--peers", "none", "--rounds", "1", "--modes", "torch"]
    ls.main(["--cells", "4x16,3x8", *run, "--json", str(out)])
    first = {(r["dtype"], r["m"], r["n"]): r["measured_utc"] for r in json.loads(out.read_text())}
    ls.main(["--cells", "2x16,3x8", *run, "--json", str(out), "--append"])
    rows = json.loads(out.read_text())
    assert [(r["dtype"], r["m"], r["n"]) for r in rows] == [
        ("float32", 3, 8), ("float32", 2, 16), ("float32", 4, 16),
        ("bfloat16", 3, 8), ("bfloat16", 2, 16), ("bfloat16", 4, 16)]
    assert len(first) == 4 and all(r["us"] == {"torch": 1000.0} for r in rows)
    with pytest.raises(SystemExit):
        ls.main(["--cells", "3x8", *run, "--append"])


def test_loss_step_graph_times_replays_and_drops_the_host_column(monkeypatch, tmp_path, capsys):
    """--graph: every mode timed by graph_step_ms (not step_ms), no host time taken or shown,
    the rows marked."""
    def no_eager(*a, **k):
        raise AssertionError("--graph timed an eager step")

    ls = _loss_step_on_a_stand_in(monkeypatch, step_ms=no_eager, host_us=no_eager)
    monkeypatch.setattr(ls, "graph_step_ms",
                        lambda loss_fn, x, t, inplace=False: 0.25 if inplace else 0.5)
    out = tmp_path / "rows.json"
    ls.main(["--cells", "3x8", "--dtype", "float32", "--peers", "none", "--rounds", "2",
             "--modes", "torch,lab fused", "--graph", "--json", str(out)])
    (row,) = json.loads(out.read_text())
    assert row["graph"] is True and row["host_us"] == {}
    assert row["us"] == {"torch": 500.0, "lab fused": 250.0}
    text = capsys.readouterr().out
    (line,) = [ln for ln in text.splitlines() if ln.startswith("float32")]
    assert "--graph: every step replayed from a CUDA graph" in text and "[host" not in line


def test_loss_step_ab_names_a_constant_of_the_launcher_or_the_drop_in():
    ls = _loss_step()
    assert ls.parse_ab("ON_CHIP_SLOTS=False") == (ls.cuda_variants, "ON_CHIP_SLOTS", False)
    assert ls.parse_ab(" DEFAULT_FUSED = False ") == (ls.api, "DEFAULT_FUSED", False)
    assert ls.parse_ab("ROW_MAX_THREADS=1024") == (ls.cuda_variants, "ROW_MAX_THREADS", 1024)
    assert ls.parse_ab("FIRST_WAVE_BYTES_PER_NS=3000") == \
        (ls.occupancy, "FIRST_WAVE_BYTES_PER_NS", 3000)
    for spec, said in [("ON_CHIP_SLOTS", "NAME=VALUE"), ("on_chip_slots=False", "upper-case"),
                       ("NO_SUCH_RULE=1", "no constant NO_SUCH_RULE"),
                       ("ON_CHIP_SLOTS=maybe", "not a Python literal"),
                       ("ON_CHIP_SLOTS=1", "is bool")]:
        with pytest.raises(ValueError, match=said):
            ls.parse_ab(spec)


def test_loss_step_ab_setting_holds_for_its_block_and_forgets_what_it_chose():
    """The constant is set inside the block and restored after (also on an error); the plan
    cache and the module's memoized rules are emptied both ways: they hold what it chose."""
    ls = _loss_step()
    cv = ls.cuda_variants
    before = cv.MAX_SLOTS
    cv.slots_shape(40000)
    ls.plans.PLANS[("a stand-in key",)] = None
    with pytest.raises(RuntimeError), ls.setting(ls.parse_ab("MAX_SLOTS=2")):
        assert cv.MAX_SLOTS == 2 and cv.slots_shape.cache_info().currsize == 0
        assert ("a stand-in key",) not in ls.plans.PLANS
        cv.slots_shape(40000)
        raise RuntimeError("the block fails")
    assert cv.MAX_SLOTS == before and cv.slots_shape.cache_info().currsize == 0
    with ls.setting(None):  # nothing asked: nothing touched
        assert cv.MAX_SLOTS == before


def test_loss_step_main_times_each_lab_mode_beside_its_ab_twin(monkeypatch, tmp_path, capsys):
    """--ab: every lab mode gets a twin timed in the same rounds with the constant set (the
    stand-in timer reads it), its bound follows the constant, and the run leaves it as it was."""
    from kernel_lab.ops.cross_entropy import api  # the script's own module

    ls = _loss_step_on_a_stand_in(
        monkeypatch, step_ms=lambda loss_fn, x, t, inplace=False: 1.0 if api.DEFAULT_FUSED else 1.5,
        host_us=lambda loss_fn, x, t, inplace=False, steps=20, sync=None: 7.0)
    assert ls.api is api
    out = tmp_path / "rows.json"
    ls.main(["--cells", "3x8", "--dtype", "float32", "--peers", "none", "--rounds", "2",
             "--modes", "torch,lab", "--ab", "DEFAULT_FUSED=False", "--json", str(out)])
    (row,) = json.loads(out.read_text())
    twin = "lab [DEFAULT_FUSED=False]"
    assert row["us"] == {"torch": 1000.0, "lab": 1000.0, twin: 1500.0}
    assert row["ab"] == ["DEFAULT_FUSED=False"] and ls.api.DEFAULT_FUSED is True
    one_pass = 3 * 8 * 4
    assert row["bound_us"]["lab"] == pytest.approx(ls.bound_us(2, one_pass, 1000.0))
    assert row["bound_us"][twin] == pytest.approx(ls.bound_us(3, one_pass, 1000.0))
    assert ("marked [DEFAULT_FUSED=False] run with kernel_lab.ops.cross_entropy.api."
            "DEFAULT_FUSED = False (else True)") in capsys.readouterr().out
    with pytest.raises(SystemExit):
        ls.main(["--cells", "3x8", "--modes", "torch", "--ab", "DEFAULT_FUSED=False"])
    assert "no lab mode" in capsys.readouterr().err


def test_loss_step_ab_repeated_gives_one_twin_a_setting(monkeypatch, tmp_path, capsys):
    """--ab twice: each lab mode beside one twin per setting, each twin timed with its own
    constant set alone, and both constants as they were after the run."""
    from kernel_lab.ops.cross_entropy import api
    from kernel_lab.ops.cross_entropy import cuda_variants as cv

    ls = _loss_step_on_a_stand_in(
        monkeypatch, step_ms=lambda loss_fn, x, t, inplace=False:
            (1.0 if api.DEFAULT_FUSED else 1.5) + (0.25 if cv.MAX_SLOTS == 2 else 0.0),
        host_us=lambda loss_fn, x, t, inplace=False, steps=20, sync=None: 7.0)
    slots = cv.MAX_SLOTS
    out = tmp_path / "rows.json"
    ls.main(["--cells", "3x8", "--dtype", "float32", "--peers", "none", "--rounds", "2",
             "--modes", "lab,lab fused", "--ab", "DEFAULT_FUSED=False", "--ab", "MAX_SLOTS=2",
             "--json", str(out)])
    (row,) = json.loads(out.read_text())
    assert row["us"] == {"lab": 1000.0, "lab fused": 1000.0,
                         "lab [DEFAULT_FUSED=False]": 1500.0,
                         "lab fused [DEFAULT_FUSED=False]": 1500.0,
                         "lab [MAX_SLOTS=2]": 1250.0, "lab fused [MAX_SLOTS=2]": 1250.0}
    assert row["ab"] == ["DEFAULT_FUSED=False", "MAX_SLOTS=2"]
    assert api.DEFAULT_FUSED is True and cv.MAX_SLOTS == slots
    printed = capsys.readouterr().out
    assert "marked [DEFAULT_FUSED=False]" in printed and "marked [MAX_SLOTS=2]" in printed


@pytest.mark.filterwarnings("ignore:CUDA is not available")  # the profiler's, on a CPU
def test_overhead_step_host_profile_names_the_calls_of_a_cpu_step(monkeypatch):
    """--step-profile's table on a small CPU step (the device sync stood in): cProfile's rows,
    the lab's drop-in among them, headed by the cell and the step count."""
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "bench"))
    import overhead

    monkeypatch.setattr(overhead, "DEVICE", "cpu")
    monkeypatch.setattr(overhead.torch.cuda, "synchronize", lambda *a: None)
    text = overhead.step_host_profile(8, 40, steps=5, top=40)
    assert text.startswith("8 x 40 bf16 cross-entropy step, host by function over 5 steps")
    assert "tottime" in text and "api.py" in text and "(cross_entropy)" in text


@pytest.mark.filterwarnings("ignore:CUDA is not available, disabling CUDA profiling")
def test_overhead_step_gaps_print_every_step_and_the_floor_on_a_stand_in(monkeypatch, capsys):
    """bench/overhead.py's step-gap lines (``.ci/gpu``'s overhead stage) on small CPU cells, the
    device sync stood in: the lab's step, F.cross_entropy's and the no-kernel floor, each with
    wall, kernels, gap and host; the lab's line marked against the goal and torch's gap."""
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "bench"))
    import overhead

    monkeypatch.setattr(overhead, "DEVICE", "cpu")
    monkeypatch.setattr(overhead, "CE_STEPS", ((8, 40),))
    monkeypatch.setattr(overhead.torch.cuda, "synchronize", lambda *a: None)
    got = overhead.step_gap(8, 40, rounds=3, profiled=1)
    assert list(got) == ["kernel_lab.cross_entropy", "F.cross_entropy", "no-kernel autograd step"]
    for r in got.values():
        assert r["wall_us"] > 0 and 0 < r["forward_us"] <= r["host_us"]
        assert r["gap_us"] == pytest.approx(r["wall_us"] - r["kernels_us"])
        assert r["loop_us"] > 0
        assert r["loop_gap_us"] == pytest.approx(r["loop_us"] - r["kernels_us"])
    overhead.print_step_gaps("no peer imported")
    lines = capsys.readouterr().out.splitlines()[1:]
    assert [ln.split()[3] for ln in lines] == ["kernel_lab.cross_entropy", "F.cross_entropy",
                                               "no-kernel"]
    assert "on F.cross_entropy's gap)" in lines[0] and ("ok" in lines[0] or "OVER" in lines[0])
    assert all("(forward " in ln and "; loop " in ln for ln in lines)
    assert lines[0].rstrip().endswith(("ok", "OVER"))  # the loop's gap marked too
