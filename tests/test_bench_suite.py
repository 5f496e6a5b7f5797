"""The pytest-benchmark suite (`pytest bench`), checked on a CPU (no timings are judged here).

`pytest bench` runs in subprocesses (as a person would run it), started together to keep this
file fast. The subprocesses get TRITON_INTERPRET removed: the suite must behave as on a plain
machine, not as under tests/conftest.py.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import kernel_lab
from kernel_lab.measure import benchmarking as bm

# ~15 `pytest bench` processes at once: 40+ s on a busy GPU machine; CPU logic, so the GPU
# tier leaves it to the full tier and the plain run (CI)
pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
HAS_CUDA = torch.cuda.is_available()
# The registry as the package builds it, taken at collection: later tests register toy kernels
# in this process, which a fresh `pytest bench` process rightly does not see.
REGISTERED = {op: [(v.name, v.backend) for v in kernel_lab.variants(op)]
              for op in kernel_lab.op_names()}
FAKE_PLUGIN = '''
import torch
import kernel_lab
from kernel_lab.core.registry import register

kernel_lab.op_names()  # load the registry, then add two test doubles to it


def _limit(x, dim=-1):
    return "fake limit: rows longer than 1000" if x.shape[-1] > 1000 else None


@register("fake_limited", op="softmax", backend="torch", dtypes=(torch.float32,),
          description="right, but refuses long rows", check=_limit)
def fake_limited(x, dim=-1):
    return torch.softmax(x, dim)


# the optional kernel_attributes protocol (a CUDA launcher returns jit.function_attributes)
fake_limited.kernel_attributes = lambda x, dim=-1: {"num_regs": 32, "local_size_bytes": 8,
                                                    "launches": "fake<float> <<<1, 32, 0>>>"}


@register("fake_wrong", op="softmax", backend="torch", dtypes=(torch.float32,),
          description="1% off everywhere")
def fake_wrong(x, dim=-1):
    return torch.softmax(x, dim) * 1.01


@register("fake_inexact", op="softmax", backend="torch", dtypes=(torch.float32,),
          description="1% off, and says so", known_inexact={torch.float32: "a known 1% miss"})
def fake_inexact(x, dim=-1):
    return torch.softmax(x, dim) * 1.01


@register("fake_crash", op="softmax", backend="torch", dtypes=(torch.float32,),
          description="raises")
def fake_crash(x, dim=-1):
    raise RuntimeError("fake launch failure\\nsecond line of a long log")
'''


def _start(*args: str, pythonpath: Path | None = None, cwd: Path = REPO) -> subprocess.Popen:
    # a plain process: no interpreter switch, no options, and not an xdist worker (under -n the
    # worker's PYTEST_XDIST_* would make pytest-benchmark disable itself)
    env = {k: v for k, v in os.environ.items()
           if k not in ("TRITON_INTERPRET", "PYTEST_ADDOPTS") and not k.startswith("PYTEST_XDIST")}
    paths = [str(pythonpath) if pythonpath else "", str(REPO), env.get("PYTHONPATH", "")]
    env["PYTHONPATH"] = os.pathsep.join(filter(None, paths))  # kernel_lab from any cwd
    cmd = [sys.executable, "-m", "pytest", str(REPO / "bench"), "-p", "no:cacheprovider", *args]
    return subprocess.Popen(cmd, cwd=cwd, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def _finish(p: subprocess.Popen) -> tuple[int, str]:
    out, _ = p.communicate(timeout=180)
    return p.returncode, out


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, tuple[int, str]]:
    """Every `pytest bench` subprocess this file needs, started at once."""
    tmp = tmp_path_factory.mktemp("bench")
    (tmp / "fake_bench_plugin.py").write_text(FAKE_PLUGIN)
    from pytest_benchmark.utils import get_machine_id

    saved = tmp / "storage" / get_machine_id()
    saved.mkdir(parents=True)
    (saved / "0001_other_gpu.json").write_text(json.dumps({
        "machine_info": {"bench_device": "cuda: NVIDIA H100 80GB HBM3 (sm_90)"},
        "commit_info": {}, "benchmarks": [], "datetime": "2025-01-01T00:00:00", "version": "5",
    }))
    # pytest-benchmark wants its storage under the working folder: run these from tmp
    compare = ("--collect-only", "-q", "--device", "cpu", "--benchmark-storage", "storage",
               "--benchmark-compare", "0001")
    procs = {f"collect-{name}": _start("--collect-only", "-q", "--preset", name)
             for name in bm.PRESETS}
    procs["filtered"] = _start("--collect-only", "-q", "--op", "softmax", "--variants", "triton",
                               "--dtype", "bf16")
    procs["unknown"] = _start("--collect-only", "-q", "--variants", "triton_fussed")
    if not HAS_CUDA:  # on a GPU this would be a real benchmark run
        procs["no-gpu"] = _start("-q", "--preset", "small")
    procs["compare"] = _start(*compare, cwd=tmp)
    procs["compare-allowed"] = _start(*compare, "--allow-device-mismatch", cwd=tmp)
    procs["cpu"] = _start(
        "-rA", "--device", "cpu", "--preset", "small", "--op", "softmax", "--dtype", "float32",
        "--variants", "torch_eager,triton_fused,fake_limited,fake_wrong,fake_inexact,fake_crash",
        "-k", "1x128 or 1x151936", "-p", "fake_bench_plugin",
        "--benchmark-json", str(tmp / "cpu.json"), pythonpath=tmp,
    )
    procs["host-collect"] = _start("--collect-only", "-q", "--device", "cpu", "--preset", "small",
                                   "--op", "softmax", "--variants", "online_softmax,torch_eager")
    procs["host-none"] = _start("--collect-only", "-q", "--device", "cpu", "--preset", "small",
                                "--host", "none")
    procs["cpu-share"] = _start("--collect-only", "--device", "cpu", "--preset", "lm_head",
                                "--host", "none")
    procs["cpu-full"] = _start("--collect-only", "-q", "--device", "cpu", "--preset", "lm_head",
                               "--host", "none", "--full-cpu")
    procs["host-cpu"] = _start("-q", "--device", "cpu", "--host", "only", "--op", "softmax",
                               "-k", "torch.softmax and not autograd",
                               "--benchmark-json", str(tmp / "host.json"))
    out = {k: _finish(p) for k, p in procs.items()}
    for name in ("cpu.json", "host.json"):
        out[name] = (0, (tmp / name).read_text() if (tmp / name).exists() else "")
    return out


def _ids(output: str) -> set[str]:
    return {line.strip() for line in output.splitlines() if "::test_variant[" in line}


def _expected(preset: bm.Preset) -> set[str]:
    """Node ids rebuilt from the registry and the preset, independently of ``bm.select``."""
    ids = set()
    for op in preset.ops or REGISTERED:
        chosen = [name for name, backend in REGISTERED[op]
                  if preset.variants is None or name in preset.variants
                  or backend in preset.variants]
        for dt in preset.dtypes:
            for shape in preset.shapes:
                case = f"{op}-{bm.dtype_name(dt)}-{'x'.join(map(str, shape))}"
                ids |= {f"bench/test_variants.py::test_variant[{case}-{v}]" for v in chosen}
    return ids


@pytest.mark.parametrize("name", sorted(bm.PRESETS))
def test_collection_covers_registry(runs, name):
    rc, out = runs[f"collect-{name}"]
    assert rc == 0, out
    ids = _ids(out)
    assert ids == _expected(bm.PRESETS[name])
    preset = bm.PRESETS[name]
    if preset.variants is None:  # every registered variant of its ops is benchmarked
        assert {i.rsplit("-", 1)[1].rstrip("]") for i in ids} == {
            name for op, vs in REGISTERED.items() if op in (preset.ops or REGISTERED)
            for name, _ in vs}


def test_presets_are_the_documented_shapes():
    seed = bm.PRESETS["seed"]
    assert seed.shapes == tuple((m, 128) for m in range(256, 2433, 128))
    assert seed.dtypes == (torch.float32,)
    picked = {v.name for c, v in bm.select("seed")}
    assert picked == {"torch_eager", "torch_naive"} | {
        v.name for v in kernel_lab.variants("softmax", backend="triton")}
    sweep_n = [n for _, n in bm.PRESETS["sweep"].shapes]
    assert {128, 1_048_576, 32000, 50257, 128256, 151936} <= set(sweep_n)
    assert all(2**28 - n < m * n <= 2**28 for m, n in bm.PRESETS["sweep"].shapes)
    assert all(m * n * 4 <= 2**21 for m, n in bm.PRESETS["small"].shapes)  # launch-bound


def test_filters_and_unknown_names(runs):
    rc, out = runs["filtered"]
    assert rc == 0, out
    triton = {name for name, backend in REGISTERED["softmax"] if backend == "triton"}
    ids = _ids(out)
    assert ids and {i.rsplit("-", 1)[1].rstrip("]") for i in ids} == triton
    assert all("-bfloat16-" in i and "[softmax-" in i for i in ids)
    rc, out = runs["unknown"]
    assert rc == 4 and "triton_fused" in out, out  # usage error with a suggestion


@pytest.mark.skipif(HAS_CUDA, reason="checks the GPU-less behaviour")
def test_no_gpu_says_so_once_and_exits_0(runs):
    rc, out = runs["no-gpu"]
    assert rc == 0, out
    ours = [line for line in out.splitlines() if line.startswith("kernel_lab bench:")]
    assert len(ours) == 1 and bm.NO_GPU in ours[0], out
    n = len(_expected(bm.PRESETS["small"]))
    assert f"{n} skipped" in out and "passed" not in out and "failed" not in out
    assert f"SKIPPED [{n}] bench/test_variants.py: {bm.NO_GPU}" in out


@pytest.mark.skipif(torch.cuda.is_available(),
                    reason="exercises the --device cpu harness; on a GPU the real timing runs")
def test_cpu_run_checks_times_and_skips_with_supports_reasons(runs, monkeypatch):
    rc, out = runs["cpu"]
    assert rc == 1, out  # fake_wrong and fake_crash must fail
    # triton_fused runs interpreted on 1x128 (a plain process without a GPU: kernel_lab's
    # import turns Triton's interpreter on) and skips 1x151936 with its own limit
    assert re.search(r"\b6 passed\b", out) and re.search(r"\b4 failed\b", out), out
    assert re.search(r"\b2 skipped\b", out), out
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    x = torch.randn(1, 151936)
    for name in ("triton_fused", "fake_limited"):
        reason = kernel_lab.get(name).supports(x) if name != "fake_limited" else (
            "fake limit: rows longer than 1000")
        assert f"{name}: {reason}" in out, out
    assert "fake_wrong is wrong on softmax-float32-1x128" in out
    # the GB/s table after pytest-benchmark's, with the outcomes it cannot show as numbers
    assert "★" in out and "% of device copy" in out
    assert "fake_crash: error (2 cells): RuntimeError: fake launch failure" in out

    data = json.loads(runs["cpu.json"][1])
    assert data["machine_info"]["bench_device"] == "cpu"
    assert data["machine_info"]["libraries"]["torch"] == torch.__version__
    benches = {b["param"]: b for b in data["benchmarks"]}
    b = benches["softmax-float32-1x151936-torch_eager"]
    assert b["group"] == "softmax-float32-1x151936"
    info = b["extra_info"]
    assert info["bytes_moved"] == 2 * 151936 * 4
    assert info["gbps"] == pytest.approx(info["bytes_moved"] / b["stats"]["median"] / 1e9)
    assert info["pct_of_copy"] == pytest.approx(100 * info["gbps"] / info["copy_gbps"])
    assert b["options"]["timer"] == "perf_counter"
    assert "registers" not in info
    # how it was timed and the memory column, which has no figure off CUDA
    assert (info["method"], info["k"]) == ("cpu", 1) and info["median_s"] > 0
    assert info["mem_note"] == "n/a: not a CUDA device" and "mem_fwd_bytes" not in info
    attrs = benches["softmax-float32-1x128-fake_limited"]["extra_info"]
    assert (attrs["registers"], attrs["spill_bytes"]) == (32, 8)
    assert attrs["kernels"] == "fake<float> <<<1, 32, 0>>>"  # what one call launched
    assert not any("fake_wrong" in k for k in benches)
    # triton_fused is timed interpreted where it runs, not past its row limit
    assert "softmax-float32-1x128-triton_fused" in benches
    assert "softmax-float32-1x151936-triton_fused" not in benches
    # a declared miss is timed and marked, never a failure
    known = benches["softmax-float32-1x128-fake_inexact"]["extra_info"]["inexact"]
    assert known.startswith("a known 1% miss; here:")
    assert "inexact │" in out and "fake_inexact: inexact (1 cell): a known 1% miss; here:" in out


def test_cpu_runs_take_the_clis_share_of_a_gpu_sized_preset(runs):
    """`pytest bench --device cpu` cuts a preset as `kernel_lab bench --device cpu` does (the
    header line says how), and --full-cpu keeps every cell with rows capped to fit memory: an
    lm-head cell is never 16384 x 128256 logits on a CPU."""
    rc, out = runs["cpu-share"]
    assert rc == 0, out
    share = bm.cpu_share(bm.select("lm_head"))
    assert f"kernel_lab bench: {share.note}" in out
    ids = {line.strip() for line in out.splitlines() if "test_variant[" in line}
    assert ids and all("x64x" in i for i in ids)  # hidden cut to 64, one token a row
    rc, out = runs["cpu-full"]
    assert rc == 0, out
    shapes = {i.split("-")[2] for i in _ids(out)}
    assert shapes == {"2x4096x128256", "1x2304x256000", "1x3584x151936"}  # M*N <= 2^18


def test_compare_refuses_another_device(runs):
    rc, out = runs["compare"]
    assert rc == 4, out
    assert "NVIDIA H100" in out and "this run is on cpu" in out
    rc, out = runs["compare-allowed"]
    assert rc == 0, out


def _overhead():
    """bench/overhead.py as a module (bench/ is a folder of scripts, not a package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("overhead", REPO / "bench" / "overhead.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_host_group_is_collected_for_the_selection_and_timed(runs):
    rc, out = runs["host-collect"]
    assert rc == 0, out
    labels = {line.strip().split("::test_host[", 1)[1][:-1] for line in out.splitlines()
              if "::test_host[" in line}
    assert labels == set(_overhead().host_cells(["softmax"], ["online_softmax", "torch_eager"]))
    assert {"torch.softmax", "kernel_lab.softmax (auto)", 'run("online_softmax")',
            "kernel_lab.softmax (auto), autograd recording"} <= labels
    assert 'run("fast_softmax")' not in labels and "torch.log_softmax" not in labels
    order = [line for line in out.splitlines()
             if "::test_host[" in line or "::test_variant[" in line]
    hosts = sum("::test_host[" in line for line in order)
    assert all("::test_host[" in line for line in order[:hosts])  # the host group runs first
    rc, out = runs["host-none"]
    assert rc == 0 and "::test_variant[" in out and "::test_host[" not in out, out

    rc, out = runs["host-cpu"]
    assert rc == 0, out
    data = json.loads(runs["host.json"][1])
    benches = {b["param"]: b for b in data["benchmarks"]}
    assert set(benches) == {"torch.softmax"}, out
    b = benches["torch.softmax"]
    assert b["group"] == "host" and b["options"]["timer"] == "host_clock"
    assert b["extra_info"]["method"] == "host" and b["extra_info"]["k"] >= 1
    assert b["stats"]["rounds"] == bm.timing.HOST_ROUNDS and b["stats"]["median"] > 0


# -- the host group's own compare threshold (--host-fail) ---------------------------------------

class _Check:
    """A stand-in for one of pytest-benchmark's regression checks: fails naming itself."""

    def __init__(self, name: str) -> None:
        self.name = name

    def fails(self, current, compared):
        return f"{self.name} failed"


class _Bench:
    def __init__(self, group: str) -> None:
        self.group = group


def test_host_cells_are_judged_by_the_host_threshold_and_only_once():
    from kernel_lab.measure import compare

    device, second, host = _Check("device"), _Check("second"), _Check("host")
    checks = compare.by_group([device, second], host)
    assert [c.fails(_Bench("softmax-float32-1x128"), {}) for c in checks] == [
        "device failed", "second failed"]
    assert [c.fails(_Bench("host"), {}) for c in checks] == ["host failed", None]
    # the group read from the compared run's entry where the current one has none
    assert checks[0].fails(object(), {"group": "host"}) == "host failed"
    assert compare.by_group([device], None) == [device]  # --host-fail same
    assert compare.by_group([], host) == []
    assert compare.parse_host_fail("same") is None
    assert compare.parse_host_fail("median:10%").threshold == 10
    with pytest.raises(ValueError, match="--host-fail 'median:ten'.*median:10%"):
        compare.parse_host_fail("median:ten")


@pytest.mark.slow  # 78 s on an H100 machine's busy cores (two pytest-benchmark runs): the full tier
def test_host_fail_judges_the_host_group_in_a_real_compare(tmp_path):
    """A stored host figure far below today's: --benchmark-compare-fail=median:5% alone fails
    naming the host cell; with --host-fail at a difference no ratio reaches, the compare passes."""
    common = ("-q", "--device", "cpu", "--host", "only", "--op", "softmax",
              "-k", "torch.softmax and not autograd", "--benchmark-storage", "storage")
    rc, out = _finish(_start(*common, "--benchmark-autosave", cwd=tmp_path))
    assert rc == 0, out
    (saved,) = (tmp_path / "storage").glob("*/0001_*.json")
    data = json.loads(saved.read_text())
    (b,) = data["benchmarks"]
    for k in ("min", "max", "mean", "median"):
        b["stats"][k] = 1e-12  # "today" is then ~10^12 times slower
    saved.write_text(json.dumps(data))
    compare_args = (*common, "--benchmark-compare", "0001", "--benchmark-compare-fail=median:5%")
    rc, out = _finish(_start(*compare_args, "--host-fail", "same", cwd=tmp_path))
    assert rc != 0 and "test_host[torch.softmax]" in out and "has failed" in out, out
    rc, out = _finish(_start(*compare_args, "--host-fail", "median:1e9", cwd=tmp_path))
    assert rc == 0 and "has failed" not in out, out
    rc, out = _finish(_start(*compare_args, "--host-fail", "median:ten", cwd=tmp_path))
    assert rc == 4 and "--host-fail 'median:ten'" in out, out
