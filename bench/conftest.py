"""`pytest bench`: a pytest-benchmark suite over every registered variant (README, "Benchmarks").

Decisions:

* Parametrized from the registry (``kernel_lab.measure.benchmarking.select``) in
``pytest_configure``:
  a bad ``--variants`` / ``--op`` / ``--dtype`` is a usage error, not a collection error.
* pytest-benchmark's timer is replaced (``benchmark`` marker) by a per-test
  :class:`kernel_lab.measure.timing.Clock`: CUDA events, counting in units of one call, so its min /
  median / mean - what ``--benchmark-compare`` compares - are device time per call, whether the
  cell is timed as eager calls or as a CUDA graph of K calls (chosen per cell, recorded in
  ``extra_info``). Each test's group is its (op, dtype, shape): one table per shape compares
  the variants.
* The ``host`` group (``test_host.py``): host time per call of ``bench/overhead.py``'s rows,
  for the selected ops (softmax, log_softmax) and variants; ``--host none`` leaves it out,
  ``--host only`` runs nothing else. Without a GPU it is deselected (nothing to time).
* No GPU (and ``--device cuda``, the default): every test is still collected, skipped with the
  reason "no CUDA GPU", and the run ends with ONE summary line and exit code 0.
* ``--device cpu`` takes the CLI's CPU share of the preset (few, CPU-sized cells; its line in the
  header), or with ``--full-cpu`` every cell, rows capped to fit memory; a ``--shape`` too big
  for this machine is a usage error.
* ``--benchmark-compare`` times each device cell as its compared run did (the method and K in
  that run's ``extra_info``; kernel_lab.measure.timing): the two methods' figures differ on a
  GPU, so a cell near the rule's edge would otherwise compare one measurement with another.
* ``--benchmark-compare-fail`` judges the host group by ``--host-fail`` instead (default
  median:10 %: a host ratio holds less tightly than device time; kernel_lab.measure.compare).
* ``machine_info`` gets the GPU (name, capability, driver) and library versions;
  ``--benchmark-compare`` against a run from another device is a usage error unless
  ``--allow-device-mismatch`` is given.
"""

from __future__ import annotations

import io
import shutil
import time
from pathlib import Path

import pytest

import kernel_lab
from kernel_lab.measure import benchmarking as bm
from kernel_lab.measure import compare, sweep
from kernel_lab.measure.rounds import one_line

PAIRS = pytest.StashKey[list]()
HOST_CELLS = pytest.StashKey[list]()
RECORDS = pytest.StashKey[list]()
SKIPPED_NO_GPU = pytest.StashKey[int]()
HOST_FAIL = pytest.StashKey[object]()
CPU_NOTE = pytest.StashKey[str]()
COMPARED = pytest.StashKey[dict]()  # test id -> (method, K) of the run being compared with


def pytest_addoption(parser: pytest.Parser) -> None:
    g = parser.getgroup("kernel_lab", "kernel_lab benchmarks (README, \"Benchmarks\")")
    for flag, kw in sweep.SELECTION_OPTIONS:  # the same options as `python -m kernel_lab bench`
        g.addoption(flag, **kw)
    g.addoption("--full-cpu", action="store_true",
                help="--device cpu: every cell of the preset (rows capped to fit memory) "
                     "instead of the CPU share that ends within minutes")
    g.addoption("--allow-device-mismatch", action="store_true",
                help="let --benchmark-compare compare runs taken on different devices")
    g.addoption("--host", default="auto", choices=("auto", "none", "only"),
                help="the host group (host time per call, bench/overhead.py's rows): auto = "
                     "for the selected softmax / log_softmax (default), none, only")
    g.addoption("--host-fail", default=compare.DEFAULT_HOST_FAIL, metavar="SPEC",
                help="with --benchmark-compare-fail: the host group's threshold, in its syntax "
                     f"(default {compare.DEFAULT_HOST_FAIL}; 'same': the other cells')")


def _device(config: pytest.Config) -> str:
    return config.getoption("device")


def _no_gpu(config: pytest.Config) -> bool:
    return _device(config) == "cuda" and not bm.has_cuda()


def pytest_configure(config: pytest.Config) -> None:
    try:
        pairs = bm.select(
            config.getoption("preset"), ops_filter=config.getoption("op"),
            variants_filter=config.getoption("variants"), dtypes_filter=config.getoption("dtype"),
            shapes_filter=config.getoption("shape"),
        )
        config.stash[PAIRS], config.stash[CPU_NOTE] = _cpu_cut(config, pairs)
    except (ValueError, KeyError) as e:
        raise pytest.UsageError(f"kernel_lab bench: {e}") from None
    config.stash[HOST_CELLS] = _host_cells(config)
    config.stash[RECORDS] = []
    config.stash[SKIPPED_NO_GPU] = 0
    try:
        config.stash[HOST_FAIL] = compare.parse_host_fail(config.getoption("host_fail"))
    except ValueError as e:
        raise pytest.UsageError(f"kernel_lab bench: {e}") from None


def _cpu_cut(config: pytest.Config, pairs: list) -> tuple[list, str]:
    """The pairs a ``--device cpu`` run times, as ``python -m kernel_lab bench --device cpu``
    cuts them (the presets are sized for a GPU: an lm-head cell alone is 16384 x 128256 logits),
    and the line that says what was cut ("" off the CPU)."""
    if _device(config) != "cpu":
        return pairs, ""
    from kernel_lab.measure.memory_caps import fit_cpu

    shapes_given, full = bool(config.getoption("shape")), config.getoption("full_cpu")
    note = None
    if full or shapes_given:  # memory: preset rows capped, a huge --shape refused
        pairs, note = fit_cpu(pairs, shapes_given)
    if not full:
        share = bm.cpu_share(pairs, shapes_given=shapes_given,
                             dtypes_given=bool(config.getoption("dtype")))
        pairs, note = share.pairs, share.note
    return pairs, note or ""


def pytest_report_header(config: pytest.Config) -> list[str]:
    note = config.stash.get(CPU_NOTE, "")
    return [f"kernel_lab bench: {note}"] if note else []


def pytest_sessionstart(session: pytest.Session) -> None:
    """The host group's own compare threshold (kernel_lab.measure.compare); the compared run's
    timing methods."""
    bs = getattr(session.config, "_benchmarksession", None)
    session.config.stash[COMPARED] = {}
    if bs is None:
        return
    if bs.compare_fail:
        bs.compare_fail = compare.by_group(bs.compare_fail, session.config.stash[HOST_FAIL])
    # the run pytest-benchmark compares with (loaded when it was configured; the last one)
    compared = list((getattr(bs, "compared_mapping", None) or {}).values())
    if compared:
        session.config.stash[COMPARED] = compare.timing_methods(compared[-1].values())


def _host_cells(config: pytest.Config) -> list[str]:
    """Labels of the host group's cells for this selection (empty with ``--host none``)."""
    if config.getoption("host") == "none":
        return []
    import overhead  # bench/ is on sys.path: pytest put it there for this conftest

    p = bm.PRESETS[config.getoption("preset")]
    ops_ = bm.split_tokens(config.getoption("op")) or list(p.ops or kernel_lab.op_names())
    chosen = bm.split_tokens(config.getoption("variants")) or (
        list(p.variants) if p.variants else None)
    return list(overhead.host_cells(ops_, chosen))


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "host_cell" in metafunc.fixturenames:
        metafunc.parametrize("host_cell", metafunc.config.stash[HOST_CELLS])
    if "variant" not in metafunc.fixturenames:
        return
    metafunc.parametrize(
        "op,dtype,shape,variant",
        [(c.op, bm.dtype_name(c.dtype), c.shape_id, v.name)
         for c, v in metafunc.config.stash[PAIRS]],
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    cuda = _device(config) == "cuda"
    no_gpu = pytest.mark.skip(reason=bm.NO_GPU) if _no_gpu(config) else None
    unused = pytest.mark.filterwarnings("ignore:Benchmark fixture was not used")
    here = Path(__file__).parent
    host_only = config.getoption("host") == "only"
    keep, dropped, host = [], [], []
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        if item.path.parent != here or not ({"variant", "host_cell"} & set(params)):
            keep.append(item)
            continue  # `pytest tests bench`: leave the other suite's items alone
        if "host_cell" in params:
            if no_gpu is not None or params["host_cell"] not in config.stash[HOST_CELLS]:
                # no launch path to time (or no host cell selected): not a benchmark here
                dropped.append(item)
                continue
            clock = bm.Clock(bm.timing.host_reader, name="host_clock")
            item.add_marker(pytest.mark.benchmark(group="host", timer=clock, disable_gc=True))
            host.append(item)
            continue
        if host_only:
            dropped.append(item)
            continue
        group = f"{params['op']}-{params['dtype']}-{params['shape']}"
        timer = bm.Clock() if cuda else time.perf_counter  # one clock per cell
        item.add_marker(pytest.mark.benchmark(group=group, timer=timer))
        item.add_marker(unused)  # a skipped / wrong variant never reaches the timer
        if no_gpu is not None:
            item.add_marker(no_gpu)
            config.stash[SKIPPED_NO_GPU] += 1
        keep.append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
    # the host group first, before any device cell has run in this process: after the device
    # cells (graphs captured, large workloads made and freed) one host cell's ratio moved by up
    # to 15 % between two runs on an H100; run first, two runs agreed within 3 %
    items[:] = host + keep


def _clock_of(item: pytest.Item):
    marker = item.get_closest_marker("benchmark")
    timer = marker.kwargs.get("timer") if marker else None
    return timer if isinstance(timer, bm.Clock) else None


@pytest.fixture
def bench_clock(request: pytest.FixtureRequest):
    """The cell's pytest-benchmark timer when it is a :class:`~kernel_lab.measure.timing.Clock` (GPU
    cells, host cells), else None (``--device cpu``: ``perf_counter``)."""
    return _clock_of(request.node)


@pytest.fixture
def compared_timing(request: pytest.FixtureRequest) -> tuple[str, int] | None:
    """(method, K) the compared run timed this cell with, or None (no compare, a new cell)."""
    return request.config.stash.get(COMPARED, {}).get(request.node.nodeid)


@pytest.fixture(scope="session")
def bench_device(pytestconfig: pytest.Config) -> str:
    return _device(pytestconfig)


@pytest.fixture(scope="session")
def workloads(bench_device: str) -> bm.WorkloadCache:
    """Inputs per (op, dtype, shape), built once and shared by all its variants."""
    return bm.WorkloadCache(bench_device)


@pytest.fixture(scope="session")
def copy_gbps(bench_device: str) -> float:
    return bm.copy_bandwidth(bench_device)


@pytest.fixture(scope="session")
def host_candidates(pytestconfig: pytest.Config, bench_device: str) -> dict:
    """The host group's selected calls on one launch-bound fp32 tensor, each warmed up."""
    import overhead
    import torch

    x = torch.randn(*overhead.HOST_SHAPE, device=bench_device)
    cells = pytestconfig.stash[HOST_CELLS]  # and what each is divided by
    calls: dict = overhead.candidates(x, [*cells, *{overhead.reference(c) for c in cells}])
    for label, fn in list(calls.items()):
        try:
            fn()
        except Exception as e:  # noqa: BLE001 - one broken row (a peer) must not end the group
            calls[label] = f"{label}: {one_line(e, 120)}"
    return calls


@pytest.fixture(scope="session")
def bench_records(pytestconfig: pytest.Config) -> list:
    return pytestconfig.stash[RECORDS]


def pytest_benchmark_update_machine_info(config: pytest.Config, machine_info: dict) -> None:
    machine_info.update(bm.machine_info(_device(config)))


def pytest_benchmark_compare_machine_info(config, benchmarksession, machine_info,
                                          compared_benchmark) -> None:
    problem = bm.device_mismatch(machine_info, compared_benchmark.get("machine_info", {}))
    if problem is None:
        return
    if config.getoption("allow_device_mismatch"):
        benchmarksession.logger.warning(f"kernel_lab bench: {problem} (allowed)")
        return
    raise pytest.UsageError(
        f"kernel_lab bench: --benchmark-compare: {problem}. Compare runs from the same device "
        "(or pass --allow-device-mismatch)."
    )


@pytest.hookimpl(trylast=True)
def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:
    """No GPU: the one line that says so. Otherwise: GB/s tables, the same as the CLI's."""
    tr = terminalreporter
    if _no_gpu(config):
        n = config.stash.get(SKIPPED_NO_GPU, 0)
        tr.write_line(f"kernel_lab bench: {bm.NO_GPU} on this machine: "
                      f"{n} benchmarks collected, none timed (skipped)")
        return
    records = config.stash.get(RECORDS, [])
    timed = [r for r in records if r.status == "ok"]
    if not timed:
        return
    from rich.console import Console

    buf = io.StringIO()
    width = max(100, shutil.get_terminal_size().columns)
    console = Console(file=buf, width=width, force_terminal=tr.hasmarkup)
    console.print(sweep.legend(_device(config), timed[0].copy_gbps), markup=False)
    for table in sweep.render_tables(records, timed[0].copy_gbps):
        console.print(table)
    for line in sweep.problems(records):
        console.print(f"  {line}", markup=False)
    tr.write(buf.getvalue())
