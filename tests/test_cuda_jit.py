"""The CUDA C++ side: every instantiation compiles (CPU, NVRTC only), each on its own; errors
name file(line); cache keys follow headers, and an edit recompiles only the instantiations that
include the edited file, each when next launched; the disk cache serves other processes. On a
GPU: hot reload, warm disk cache, zero-copy, graph capture, a second GPU.

Which files and instantiations to compile comes from ``kernel_lab.cuda.sources.SOURCES`` (filled
by the variant modules' ``cuda_source(...)`` declarations): no second list lives here. CPU tests
of the loader fake the device (``_device_arch``, ``_load_function``) and compile for real.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest
import torch
from conftest import HAS_CUDA

import kernel_lab
from kernel_lab.base.errors import KernelCompileError
from kernel_lab.core import user_kernels
from kernel_lab.cuda import jit
from kernel_lab.cuda import sources as cuda_common

kernel_lab.variants()  # import every op module: fills cuda_common.SOURCES
CUDA_SRC = jit.cuda_src_dir()
TARGETS = cuda_common.compile_targets()
needs_gpu = pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU (CuPy launches)")

# A tiny kernel in the lab's convention, scaled by a macro from its own header.
TOY_HEADER = "#pragma once\n#define TOY_SCALE 1.0f\n"
TOY_KERNEL = textwrap.dedent(
    """\
    #include "toy_scale.cuh"
    #include "softmax_common.cuh"
    template <typename T>
    __global__ void toy(T* y, const T* x, long long rows, int n, long long stride) {
      const long long r = blockIdx.x;
      for (int j = threadIdx.x; j < n; j += blockDim.x)
        y[r * n + j] = klab::from_acc<T>(klab::to_acc(x[r * stride + j]) * TOY_SCALE);
    }
    """
)


def _toy_folder(tmp_path: Path) -> Path:
    d = tmp_path / "my_kernels"
    d.mkdir()
    (d / "toy_scale.cuh").write_text(TOY_HEADER)
    (d / "toy.cu").write_text(TOY_KERNEL)
    return d


@pytest.fixture
def user_name():
    """A fresh variant name; the variant (and its source) leave the global registry afterwards,
    so registry-wide tests (e.g. "CUDA variants are named after their cuda_src/ file") never
    see the temp-folder kernel."""
    from kernel_lab.core import registry

    name = f"toy_{uuid.uuid4().hex[:8]}"
    n_sources = len(cuda_common.SOURCES)
    yield name
    registry._variants.pop(name, None)
    del cuda_common.SOURCES[n_sources:]


def _touch_later(path: Path, wait_s: float = 0.01) -> None:
    """Make sure a rewrite is seen even on filesystems with coarse mtimes, and wait out the
    loader's re-check interval: the promise is "every call that starts over 1 ms (or 100 x the
    re-stat's cost) after a save"."""
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    time.sleep(wait_s)


# -- CPU: compile everything -------------------------------------------------------------------
def test_every_cu_file_is_declared():
    declared = {p for p, _ in TARGETS if p.parent == CUDA_SRC}
    on_disk = {p.resolve() for p in CUDA_SRC.glob("*.cu")}
    assert on_disk - declared == set(), "a .cu in cuda_src/ is not declared by any variant"


@pytest.mark.parametrize(
    "path,exprs", TARGETS, ids=[jit.display_name(p) for p, _ in TARGETS]
)
def test_compiles_for_sm90(path, exprs):
    """Every declared instantiation, each its own NVRTC program as the loader builds it (through
    the disk cache, in a process pool: what ``python -m kernel_lab compile --all`` does)."""
    from kernel_lab.cli import precompile

    src = next(s for s in cuda_common.SOURCES if s.path == path)
    outcomes = precompile.compile_jobs([precompile.job_for(src, e) for e in exprs], "sm_90")
    assert [o.job.expr for o in outcomes if o.error] == []
    mod = jit.CudaModule(path, exprs, include_dirs=src.include_dirs)
    assert all(mod.is_cached(e, "sm_90") for e in exprs)


def test_syntax_error_names_real_file_and_line(tmp_path):
    src = CUDA_SRC / "online_softmax.cu"
    lines = src.read_text().splitlines()
    bad_line = len(lines) - 2  # inside the kernel body
    lines.insert(bad_line - 1, "  int oops = ;")
    bad = tmp_path / "online_softmax.cu"
    bad.write_text("\n".join(lines) + "\n")
    with pytest.raises(KernelCompileError) as info:
        jit.compile_cubin(bad, ["online_softmax<float>"], arch="sm_90",
                          include_dirs=[CUDA_SRC])
    msg = str(info.value)
    assert f"{bad.resolve()}({bad_line}): error" in msg, msg[:2000]


def test_lab_file_errors_use_repo_relative_name():
    assert jit.display_name(CUDA_SRC / "online_softmax.cu") == "cuda_src/online_softmax.cu"


def test_header_edit_changes_source_key(tmp_path):
    d = _toy_folder(tmp_path)
    mod = jit.CudaModule(d / "toy.cu", ["toy<float>"], include_dirs=[CUDA_SRC])
    key = mod.source_key()
    assert jit.CudaModule(d / "toy.cu", ["toy<float>"], include_dirs=[CUDA_SRC]).source_key() == key
    assert mod.source_key() == key  # unchanged files: same key
    hdr = d / "toy_scale.cuh"
    hdr.write_text(TOY_HEADER.replace("1.0f", "2.0f"))
    _touch_later(hdr)
    assert mod.source_key() != key
    # The lab's own header reaches every kernel's key too.
    online = jit.CudaModule(CUDA_SRC / "online_softmax.cu", ["online_softmax<float>"])
    assert CUDA_SRC / "softmax_common.cuh" in online.files


@pytest.fixture
def fake_device(monkeypatch, tmp_path):
    """The loader on a CPU: sm_90 for every device, a fresh object per loaded kernel; compiles
    are real (into a temp disk cache). Yields the list of (file, expr) NVRTC compiled."""
    monkeypatch.setattr(jit, "_device_arch", lambda device_index: "sm_90")
    monkeypatch.setattr(jit, "_load_function", lambda cubin, symbol, dev: object())
    monkeypatch.setenv("KERNEL_LAB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(jit.CudaModule, "compile_log", [])
    return jit.CudaModule.compile_log


def test_function_rechecks_files_at_most_once_per_interval(tmp_path, monkeypatch, fake_device):
    """On a fake clock: a loaded machine's scheduling cannot stretch the interval."""
    now = [1000.0]
    monkeypatch.setattr(jit, "clock", lambda: now[0])
    d = _toy_folder(tmp_path)
    mod = jit.CudaModule(d / "toy.cu", ["toy<float>"], include_dirs=[CUDA_SRC])
    monkeypatch.setattr(jit, "RELOAD_CHECK_S", 0.5)
    first = mod.function("toy<float>", 0)
    (d / "toy.cu").write_text(TOY_KERNEL + "// an edit that changes the size\n")
    now[0] += 0.499
    assert mod.function("toy<float>", 0) is first  # within the interval: no stat, same build
    assert len(fake_device) == 1
    now[0] += 0.001
    assert mod.function("toy<float>", 0) is not first  # over the interval after the save
    assert len(fake_device) == 2
    with pytest.raises(KeyError, match="no name expression"):
        mod.function("toy<double>", 0)  # undeclared: nothing compiled
    assert len(fake_device) == 2


def test_recheck_interval_grows_with_the_stat_cost(tmp_path, monkeypatch):
    """A re-stat costs at most 1 / STAT_SHARE of the time between two; 0 ms: every call."""
    now = [1000.0]

    def slow_clock():  # each reading 20 us later: the re-stat between two readings "took" that
        now[0] += 20e-6
        return now[0]

    monkeypatch.setattr(jit, "clock", slow_clock)
    d = _toy_folder(tmp_path)
    mod = jit.CudaModule(d / "toy.cu", ["toy<float>"], include_dirs=[CUDA_SRC])
    mod.source_key()
    assert mod.recheck_s == pytest.approx(jit.STAT_SHARE * 20e-6)  # 2 ms > RELOAD_CHECK_S
    monkeypatch.setattr(jit, "RELOAD_CHECK_S", 0.5)
    mod.source_key()
    assert mod.recheck_s == 0.5  # the floor holds when the stat is cheap against it
    monkeypatch.setattr(jit, "RELOAD_CHECK_S", 0.0)
    mod.source_key()
    assert mod.recheck_s == 0.0


def test_unchanged_broken_file_raises_again_without_recompiling(tmp_path, monkeypatch,
                                                               fake_device):
    d = _toy_folder(tmp_path)
    cu = d / "toy.cu"
    mod = jit.CudaModule(cu, ["toy<float>"], include_dirs=[CUDA_SRC])
    monkeypatch.setattr(jit, "RELOAD_CHECK_S", 0.0)
    good = mod.function("toy<float>", 0)
    cu.write_text(TOY_KERNEL.replace("* TOY_SCALE)", "* TOY_SCALE +)"))
    _touch_later(cu)
    for _ in range(3):
        with pytest.raises(KernelCompileError, match=r"toy\.cu\(\d+\)"):
            mod.function("toy<float>", 0)
    assert len(fake_device) == 2  # the good build, then the broken one once
    assert mod.function("toy<float>", 0, fallback=True) is good  # the last good build
    cu.write_text(TOY_KERNEL)  # back to the good source: the disk cache has it
    _touch_later(cu)
    assert mod.function("toy<float>", 0) is good
    assert len(fake_device) == 2
    cu.write_text(TOY_KERNEL + "// fixed differently\n")  # a new good source compiles
    _touch_later(cu)
    mod.function("toy<float>", 0)
    assert len(fake_device) == 3


# Two files: one includes shared.cuh (two instantiations), the other does not.
SHARED_HEADER = "#pragma once\n#define SHARED_SCALE 2\n"
USES_HEADER = textwrap.dedent(
    """\
    #include "shared.cuh"
    template <typename T>
    __global__ void scaled(T* y, const T* x, int n) {
      const int i = blockIdx.x * blockDim.x + threadIdx.x;
      if (i < n) y[i] = x[i] * T(SHARED_SCALE);
    }
    """
)
NO_HEADER = textwrap.dedent(
    """\
    template <typename T>
    __global__ void copied(T* y, const T* x, int n) {
      const int i = blockIdx.x * blockDim.x + threadIdx.x;
      if (i < n) y[i] = x[i];
    }
    """
)
SCALED = ["scaled<float>", "scaled<double>"]


def _two_files(tmp_path: Path) -> tuple[Path, Path, Path]:
    d = tmp_path / "two"
    d.mkdir()
    (d / "shared.cuh").write_text(SHARED_HEADER)
    (d / "uses.cu").write_text(USES_HEADER)
    (d / "plain.cu").write_text(NO_HEADER)
    return d / "shared.cuh", d / "uses.cu", d / "plain.cu"


def test_header_edit_recompiles_only_what_includes_it_when_launched(tmp_path, monkeypatch,
                                                                    fake_device):
    hdr, uses_cu, plain_cu = _two_files(tmp_path)
    uses = jit.CudaModule(uses_cu, SCALED)
    plain = jit.CudaModule(plain_cu, ["copied<float>"])
    monkeypatch.setattr(jit, "RELOAD_CHECK_S", 0.0)
    first = {e: uses.function(e, 0) for e in SCALED}
    first["copied<float>"] = plain.function("copied<float>", 0)
    assert sorted(e for _, e in fake_device) == sorted([*SCALED, "copied<float>"])  # one each
    fake_device.clear()
    hdr.write_text(SHARED_HEADER.replace("2", "3"))
    _touch_later(hdr)
    assert plain.function("copied<float>", 0) is first["copied<float>"]  # not including it
    assert fake_device == []
    assert uses.function("scaled<float>", 0) is not first["scaled<float>"]
    assert fake_device == [(str(uses_cu.resolve()), "scaled<float>")]  # only what ran
    assert uses.function("scaled<double>", 0) is not first["scaled<double>"]  # stale too
    assert [e for _, e in fake_device] == ["scaled<float>", "scaled<double>"]


def test_disk_cache_serves_other_processes(tmp_path):
    """A second process finds every instantiation in the disk cache and never runs NVRTC; a
    header edit sends the file that includes it back to NVRTC, and only that file."""
    hdr, uses_cu, plain_cu = _two_files(tmp_path)
    script = textwrap.dedent(
        f"""\
        from kernel_lab.cuda.jit import CudaModule
        for path, exprs in [({str(uses_cu)!r}, {SCALED!r}), ({str(plain_cu)!r}, ["copied<float>"])]:
            mod = CudaModule(path, exprs)
            for e in exprs:
                mod.cubin("sm_90", e)
        print("COMPILED", [e for _, e in CudaModule.compile_log])
        """
    )
    env = {**os.environ, "KERNEL_LAB_CACHE_DIR": str(tmp_path / "cache")}

    def compiled() -> list[str]:
        res = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                             text=True, timeout=300)
        assert res.returncode == 0, res.stderr[-3000:]
        return eval(res.stdout.split("COMPILED")[-1])

    assert compiled() == [*SCALED, "copied<float>"]
    assert compiled() == []
    hdr.write_text(SHARED_HEADER.replace("2", "4"))
    assert compiled() == SCALED


def test_user_folder_registers_and_compiles(tmp_path, user_name):
    d = _toy_folder(tmp_path)
    name = user_name
    user_kernels.register_row_kernel(d / "toy.cu", name=name, kernel="toy", op="softmax")
    v = kernel_lab.get(name)
    assert v.backend == "cuda" and v.source == str((d / "toy.cu").resolve())
    path, exprs = cuda_common.compile_targets()[-1]
    src = cuda_common.SOURCES[-1]
    assert jit.compile_cubin(path, exprs, arch="sm_90", include_dirs=src.include_dirs).cubin


# -- GPU ---------------------------------------------------------------------------------------
@needs_gpu
def test_hot_reload_of_cu_and_header(tmp_path, user_name):
    d = _toy_folder(tmp_path)
    name = user_name
    user_kernels.register_row_kernel(d / "toy.cu", name=name, kernel="toy", op="softmax",
                                    threads=64)
    x = torch.randn(5, 300, device="cuda")
    torch.testing.assert_close(kernel_lab.run(name, x), x)
    hdr = d / "toy_scale.cuh"
    hdr.write_text(TOY_HEADER.replace("1.0f", "3.0f"))
    _touch_later(hdr)
    torch.testing.assert_close(kernel_lab.run(name, x), 3 * x)
    cu = d / "toy.cu"
    cu.write_text(TOY_KERNEL.replace("* TOY_SCALE", "* TOY_SCALE + 1.0f"))
    _touch_later(cu)
    torch.testing.assert_close(kernel_lab.run(name, x), 3 * x + 1)


@needs_gpu
def test_warm_disk_cache_makes_no_nvrtc_call(tmp_path):
    script = textwrap.dedent(
        """\
        import torch, kernel_lab
        from kernel_lab.cuda.jit import CudaModule
        x = torch.randn(4, 1000, device="cuda")
        y = kernel_lab.run("online_softmax", x)
        torch.cuda.synchronize()
        assert torch.allclose(y, torch.softmax(x, -1), atol=1e-6)
        print("COMPILES", CudaModule.compile_count)
        """
    )
    env = {**os.environ, "KERNEL_LAB_CACHE_DIR": str(tmp_path / "cache")}
    counts = []
    for _ in range(2):
        res = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                             text=True, timeout=300)
        assert res.returncode == 0, res.stderr[-3000:]
        counts.append(int(res.stdout.split("COMPILES")[-1]))
    assert counts[0] >= 1 and counts[1] == 0, counts


@needs_gpu
def test_zero_copy_cupy_in_cupy_out(monkeypatch):
    cupy = pytest.importorskip("cupy")
    from kernel_lab.ops.softmax import cuda_variants

    seen = {}
    real = cuda_variants.launch_rows

    def spy(src, expr, out2d, inputs2d, **kw):
        seen["out"], seen["in"] = out2d.data_ptr(), inputs2d[0].data_ptr()
        return real(src, expr, out2d, inputs2d, **kw)

    monkeypatch.setattr(cuda_variants, "launch_rows", spy)
    xc = cupy.random.standard_normal((8, 1000), dtype=cupy.float32)
    yc = kernel_lab.run("online_softmax", xc)
    assert isinstance(yc, cupy.ndarray)
    assert seen["in"] == xc.data.ptr, "the kernel did not read the caller's memory"
    assert seen["out"] == yc.data.ptr, "the result is not the buffer the kernel wrote"
    ref = torch.softmax(torch.from_dlpack(xc), -1)
    torch.testing.assert_close(torch.from_dlpack(yc), ref)


@needs_gpu
def test_cuda_graph_capture_and_replay():
    x = torch.randn(64, 3000, device="cuda")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        kernel_lab.run("online_softmax", x)  # compile and load outside the capture
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y = kernel_lab.run("online_softmax", x)
    x.copy_(torch.randn_like(x) * 3)
    g.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(y, torch.softmax(x, -1))


@pytest.mark.skipif(not HAS_CUDA or torch.cuda.device_count() < 2, reason="needs 2 CUDA GPUs")
@pytest.mark.parametrize("name", ["online_softmax", "vec_softmax", "fast_softmax"])
def test_second_gpu(name):
    x = torch.randn(33, 5000, device="cuda:1")
    y = kernel_lab.run(name, x)
    torch.cuda.synchronize(1)
    assert y.device == x.device
    torch.testing.assert_close(y, torch.softmax(x, -1))


@needs_gpu
def test_fresh_threads_launch_concurrently():
    """Each new thread gets its own argument buffer and a current context (raw launch path)."""
    import threading

    xs = [torch.randn(17 + i, 999, device="cuda") for i in range(6)]
    outs: dict[int, torch.Tensor] = {}
    errors: list[BaseException] = []
    barrier = threading.Barrier(len(xs))

    def work(i):
        try:
            barrier.wait()
            for _ in range(20):
                outs[i] = kernel_lab.run("online_softmax", xs[i])
            torch.cuda.synchronize()
        except BaseException as e:  # noqa: BLE001 - re-raised in the main thread
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(xs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for i, x in enumerate(xs):
        torch.testing.assert_close(outs[i], torch.softmax(x, -1))


@pytest.mark.skipif(not HAS_CUDA or torch.cuda.device_count() < 2, reason="needs 2 CUDA GPUs")
def test_second_gpu_from_a_fresh_thread_and_other_current_device():
    """cuda:1 input while cuda:0 is current, launched from a thread that never used CUDA."""
    import threading

    x = torch.randn(40, 4096, device="cuda:1")
    out = {}
    t = threading.Thread(target=lambda: out.setdefault("y", kernel_lab.run("fast_softmax", x)))
    t.start()
    t.join()
    torch.cuda.synchronize(1)
    torch.testing.assert_close(out["y"], torch.softmax(x, -1))


@needs_gpu
def test_benchmark_records_name_the_kernels_a_call_launched():
    """kernel_attributes' ``launches`` (a saved sweep's ``kernels`` column): the name
    expression and launch shape of what one call ran - here fast_softmax's config for the
    shape, and the fused backward's."""
    from kernel_lab.cuda.rowkernels import backward_config as bc
    from kernel_lab.cuda.rowkernels import forward_config as fc
    from kernel_lab.measure import benchmarking as bm

    work = bm.make_workload(bm.Cell("softmax", torch.float32, (64, 65536)), "cuda")
    attrs = bm.kernel_attributes(kernel_lab.get("fast_softmax"), work)
    cfg = fc.fast_softmax_config(65536, torch.float32)
    assert attrs["launches"].startswith(cfg.expr("float") + " <<<"), attrs
    assert attrs["kernels_per_call"] == 1 and attrs["num_regs"] > 0
    work = bm.make_workload(bm.Cell("softmax_backward", torch.bfloat16, (64, 32000)), "cuda")
    attrs = bm.kernel_attributes(kernel_lab.get("fused_softmax_backward"), work)
    cfg = bc.backward_config(32000, torch.bfloat16)
    want = f"fused_softmax_backward_persist<__nv_bfloat16, {cfg.vpt}, {cfg.cluster}>"
    assert attrs["launches"].startswith(f"{want} <<<"), attrs
    assert f", {cfg.threads}, " in attrs["launches"], attrs


@pytest.mark.slow  # 45-78 s on a GPU machine's busy cores: the full tier
def test_compile_cli_fills_a_cache_to_ship(tmp_path):
    """``python -m kernel_lab compile FILE -j 2`` compiles each instantiation into
    $KERNEL_LAB_CACHE_DIR in two processes, a second run finds them cached, and the cubins'
    keys name no path: a copy of the cache elsewhere hits. The probe kernels no launcher picks
    compile only with --all."""
    cache = tmp_path / "cache"
    env = {**os.environ, "KERNEL_LAB_CACHE_DIR": str(cache)}
    cmd = [sys.executable, "-m", "kernel_lab", "compile", "-j", "2", "naive_softmax.cu"]
    first = subprocess.run(cmd, env=env, text=True, capture_output=True, timeout=600)
    assert first.returncode == 0, first.stderr
    assert "[1/1] naive_softmax.cu: 4 of 4 kernels, 4 compiled" in first.stdout, first.stdout
    assert "2 processes" in first.stdout
    assert len(list(cache.glob("*.cubin"))) == 4
    moved = tmp_path / "shipped"
    cache.rename(moved)
    again = subprocess.run(cmd, env={**env, "KERNEL_LAB_CACHE_DIR": str(moved)}, text=True,
                           capture_output=True, timeout=600)
    assert again.returncode == 0 and "4 of 4 kernels, 0 compiled" in again.stdout, again.stdout
    assert "4 cached" in again.stdout
    probe = [*cmd[:-1], "cluster_probe.cu"]
    res = subprocess.run(probe, env=env, text=True, capture_output=True, timeout=600)
    assert res.returncode == 0 and "cluster_probe.cu: 0 of 4 kernels" in res.stdout, res.stdout
    res = subprocess.run([*probe, "--all"], env=env, text=True, capture_output=True, timeout=600)
    assert res.returncode == 0 and "cluster_probe.cu: 4 of 4 kernels, 4 compiled" in res.stdout
    bad = subprocess.run([*cmd[:-1], "nope.cu"], env=env, text=True, capture_output=True,
                         timeout=600)
    assert bad.returncode == 2 and "no declared source 'nope.cu'" in bad.stderr


def test_shared_memory_opt_in_is_asked_once_per_function_and_only_rises(monkeypatch):
    """jit.set_max_dynamic_shared sits on launch paths (block_slots sets it per call): the driver
    is asked once per loaded function and size, the limit never goes down, and a new function
    object behind a reused handle (a hot reload) asks again. CPU: the driver calls are faked."""
    from cupy.cuda import driver

    limits, calls = {}, []

    def get(attr, ptr):
        calls.append(("get", ptr))
        return limits.get(ptr, 48 * 1024)

    def set_(ptr, attr, value):
        calls.append(("set", ptr, value))
        limits[ptr] = value

    monkeypatch.setattr(driver, "funcGetAttribute", get)
    monkeypatch.setattr(driver, "funcSetAttribute", set_)
    monkeypatch.setattr(jit, "_shared_limits", {})

    class Fn:
        ptr = 0xF00

    fn = Fn()
    jit.set_max_dynamic_shared(fn, 100_000)
    jit.set_max_dynamic_shared(fn, 100_000)
    jit.set_max_dynamic_shared(fn, 60_000)  # smaller: the limit stays
    assert calls == [("get", 0xF00), ("set", 0xF00, 100_000)]
    jit.set_max_dynamic_shared(fn, 200_000)
    assert calls[-1] == ("set", 0xF00, 200_000) and limits[0xF00] == 200_000
    calls.clear()
    jit.set_max_dynamic_shared(Fn(), 150_000)  # same handle, another function: asks again
    assert calls == [("get", 0xF00)]


def test_machine_code_digest_ignores_the_path_and_sees_the_code(tmp_path, monkeypatch):
    """The same kernel compiled from the lab's folder and from a copy: one machine-code digest
    (the cubins' internal names may carry a hash of the program's name; the digest reads only
    the code); a changed instruction: another digest. What ``compile --digests`` writes, so a
    refactor can show it moved no instruction."""
    from kernel_lab.cuda.cubins import machine_code_digest, text_sections

    monkeypatch.setenv("KERNEL_LAB_CACHE_DIR", str(tmp_path / "cache"))
    expr = "vec_softmax<float, 4>"
    cubins = []
    cubins.append(jit.CudaModule(CUDA_SRC / "vec_softmax.cu", (expr,)).cubin("sm_90", expr).cubin)
    for folder, edit in (("copy", None), ("edited", ("exp2f(d * CUDART_L2E_F)", "expf(d)"))):
        dst = tmp_path / folder
        dst.mkdir()
        for f in CUDA_SRC.glob("*.cu*"):
            text = f.read_text()
            if edit and f.name == "softmax_common.cuh":
                assert edit[0] in text
                text = text.replace(*edit)
            (dst / f.name).write_text(text)
        cubins.append(jit.CudaModule(dst / "vec_softmax.cu", (expr,)).cubin("sm_90", expr).cubin)
    lab, copy, edited = cubins
    assert text_sections(lab)
    assert machine_code_digest(lab) == machine_code_digest(copy) != machine_code_digest(edited)
    with pytest.raises(ValueError, match="not a 64-bit"):
        text_sections(b"not an elf")
