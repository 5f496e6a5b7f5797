"""`pytest bench`: a pytest-benchmark suite over every registered variant (README, "Benchmarks").

Decisions:

* Parametrized from the registry (``kernel_lab.benchmarking.select``) in ``pytest_configure``:
  a bad ``--variants`` / ``--op`` / ``--dtype`` is a usage error, not a collection error.
* pytest-benchmark's timer is replaced (``benchmark`` marker) by ``cuda_sync_timer``, so its
  min / median / mean are per-call GPU times. Each test's group is its (op, dtype, shape): one
  table per shape compares the variants.
* No GPU (and ``--device cuda``, the default): every test is still collected, skipped with the
  reason "no CUDA GPU", and the run ends with ONE summary line and exit code 0.
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

from kernel_lab import benchmarking as bm
from kernel_lab import sweep

PAIRS = pytest.StashKey[list]()
RECORDS = pytest.StashKey[list]()
SKIPPED_NO_GPU = pytest.StashKey[int]()


def pytest_addoption(parser: pytest.Parser) -> None:
    g = parser.getgroup("kernel_lab", "kernel_lab benchmarks (README, \"Benchmarks\")")
    for flag, kw in sweep.SELECTION_OPTIONS:  # the same options as `python -m kernel_lab bench`
        g.addoption(flag, **kw)
    g.addoption("--allow-device-mismatch", action="store_true",
                help="let --benchmark-compare compare runs taken on different devices")


def _device(config: pytest.Config) -> str:
    return config.getoption("device")


def _no_gpu(config: pytest.Config) -> bool:
    return _device(config) == "cuda" and not bm.has_cuda()


def pytest_configure(config: pytest.Config) -> None:
    try:
        config.stash[PAIRS] = bm.select(
            config.getoption("preset"), ops_filter=config.getoption("op"),
            variants_filter=config.getoption("variants"), dtypes_filter=config.getoption("dtype"),
            shapes_filter=config.getoption("shape"),
        )
    except (ValueError, KeyError) as e:
        raise pytest.UsageError(f"kernel_lab bench: {e}") from None
    config.stash[RECORDS] = []
    config.stash[SKIPPED_NO_GPU] = 0


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "variant" not in metafunc.fixturenames:
        return
    metafunc.parametrize(
        "op,dtype,shape,variant",
        [(c.op, bm.dtype_name(c.dtype), c.shape_id, v.name)
         for c, v in metafunc.config.stash[PAIRS]],
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    timer = bm.cuda_sync_timer if _device(config) == "cuda" else time.perf_counter
    no_gpu = pytest.mark.skip(reason=bm.NO_GPU) if _no_gpu(config) else None
    unused = pytest.mark.filterwarnings("ignore:Benchmark fixture was not used")
    here = Path(__file__).parent
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        if item.path.parent != here or "variant" not in params:
            continue  # `pytest tests bench`: leave the other suite's items alone
        group = f"{params['op']}-{params['dtype']}-{params['shape']}"
        item.add_marker(pytest.mark.benchmark(group=group, timer=timer))
        item.add_marker(unused)  # a skipped / wrong variant never reaches the timer
        if no_gpu is not None:
            item.add_marker(no_gpu)
            config.stash[SKIPPED_NO_GPU] += 1


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
