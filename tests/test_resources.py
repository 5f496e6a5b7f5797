"""Registers / stack frame / machine-code digests read from NVRTC cubins (CPU, no GPU)."""

from __future__ import annotations

import argparse
import textwrap

import pytest

import kernel_lab.cli
from kernel_lab.cli import resources
from kernel_lab.cuda import jit

KERNELS = textwrap.dedent(
    """\
    template <typename T>
    __global__ void lean(T* y, const T* x, long long rows, int n, long long stride) {
      const long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
      if (i < n) y[i] = x[i] * T(SCALE);
    }
    template <typename T>
    __global__ void local_array(T* y, const T* x, long long rows, int n, long long stride) {
      T buf[64];  // indexed at run time: lives in the stack frame, like spilled registers
      for (int i = 0; i < 64; ++i) buf[i] = x[i * n + threadIdx.x];
      for (int i = 0; i < 64; ++i) buf[(i * 7 + n) & 63] += buf[(i + n) & 63];
      y[threadIdx.x] = buf[n & 63];
    }
    """
)


# kernel_sass's own lookup (PATH, then the nvidia-cuda-* wheels): skip where it would raise.
needs_sass_tools = pytest.mark.skipif(resources.sass_tools() is None,
                                      reason=resources.SASS_TOOLS_MISSING)


def _cubin(tmp_path, scale: str):
    path = tmp_path / "toy.cu"
    path.write_text(f"#define SCALE {scale}\n" + KERNELS)
    return jit.compile_cubin(path, ["lean<float>", "local_array<float>"], arch="sm_90")


def _compile(tmp_path, scale: str):
    out = _cubin(tmp_path, scale)
    by_symbol = resources.cubin_resources(out.cubin)
    return {e: by_symbol[out.lowered[e]] for e in out.lowered}


def test_registers_frames_and_digests(tmp_path):
    a = _compile(tmp_path, "2.0f")
    assert a["lean<float>"].registers > 0 and not a["lean<float>"].spills
    assert a["local_array<float>"].frame_bytes >= 64 * 4 and a["local_array<float>"].spills
    b = _compile(tmp_path, "2.0f")
    assert b["lean<float>"].text_digest == a["lean<float>"].text_digest  # same code, same bytes
    c = _compile(tmp_path, "3.0f")
    assert c["lean<float>"].text_digest != a["lean<float>"].text_digest
    assert c["local_array<float>"].text_digest == a["local_array<float>"].text_digest


def test_cli_reports_a_variants_kernels(capsys):
    p = argparse.ArgumentParser()
    resources.add_arguments(p)
    assert resources.main(p.parse_args(["fused_softmax_backward", "-k", "persist"])) == 0
    out = capsys.readouterr().out
    assert "fused_softmax_backward_persist<float, 4, 2>" in out and "regs" in out
    assert resources.main(p.parse_args(["torch_eager"])) == 2


def test_cli_entry_point_lists_resources():
    assert kernel_lab.cli.main(["resources", "naive_softmax"]) == 0


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNEL_LAB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(jit.CudaModule, "compile_log", [])
    return jit.CudaModule.compile_log


def test_n_and_dtype_compile_only_what_that_row_launches(capsys, fresh_cache):
    """--n / --dtype: the launch plan's line and that one kernel, compiled alone."""
    assert kernel_lab.cli.main(["resources", "fast_softmax", "--n", "100", "--dtype", "fp32"]) == 0
    out = capsys.readouterr().out
    assert "rows of 100 float32: launches (contiguous rows) warp g16x2: " \
           "fast_softmax_warp<float, 16, 2>" in out, out
    assert "  fast_softmax_warp<float, 16, 2>  " in out and "1 kernels" in out
    assert [e for _, e in fresh_cache] == ["fast_softmax_warp<float, 16, 2>"]
    # without a launch plan: the variant's own dispatch, every alignment
    assert kernel_lab.cli.main(["resources", "warp_softmax", "--n", "100",
                                "--dtype", "float16"]) == 0
    out = capsys.readouterr().out
    assert "launches (any alignment): warp_softmax<__half, 4>" in out and "1 kernels" in out
    assert kernel_lab.cli.main(["resources", "naive_softmax", "--n", "7",
                                "--dtype", "bfloat16"]) == 0
    out = capsys.readouterr().out
    assert "  naive_softmax<__nv_bfloat16>  " in out and "1 kernels" in out
    assert kernel_lab.cli.main(["resources", "naive_softmax", "--dtype", "fp64"]) == 0
    assert "  naive_softmax<double>  " in capsys.readouterr().out


def test_bad_dtype_is_one_line(capsys):
    assert kernel_lab.cli.main(["resources", "naive_softmax", "--n", "7", "--dtype", "int8"]) == 2
    assert "unknown dtype 'int8'" in capsys.readouterr().err


def test_digests_in_a_pool_match_a_compile_in_this_process(capsys, fresh_cache):
    """--digests -j 2: each instantiation compiled in a worker process, read back from the disk
    cache: the same machine code as NVRTC compiling it here."""
    assert kernel_lab.cli.main(["resources", "online_softmax", "--digests", "-j", "2"]) == 0
    lines = [ln.split() for ln in capsys.readouterr().out.splitlines() if " regs " in ln]
    assert len(lines) == 4 and fresh_cache == []  # compiled by the workers
    src = jit.cuda_src_dir() / "online_softmax.cu"
    for parts in lines:
        expr = parts[0] if parts[0].endswith(">") else f"{parts[0]} {parts[1]}"
        out = jit.compile_cubin(src, [expr], arch="sm_90")
        assert resources.cubin_resources(out.cubin)[out.lowered[expr]].text_digest == parts[-1]


def test_elf_size_pads_the_byte_cupy_drops(tmp_path):
    """The cubin CuPy hands back ends one byte before its last program header does; elf_size
    reads what the headers call for (cuobjdump refuses the short file)."""
    cubin = _cubin(tmp_path, "2.0f").cubin
    need = resources.elf_size(cubin)
    assert len(cubin) <= need <= len(cubin) + 8
    with pytest.raises(ValueError, match="ELF64"):
        resources.elf_size(b"not a cubin")


@needs_sass_tools
def test_sass_listing_and_opcode_counts(tmp_path):
    out = _cubin(tmp_path, "2.0f")
    sass = resources.kernel_sass(out.cubin, out.lowered["lean<float>"])
    assert out.lowered["lean<float>"] in sass
    ops = resources.opcode_counts(sass)
    assert ops["EXIT"] >= 1 and ops["LDG"] == 1 and ops["STG"] == 1, ops  # y[i] = x[i] * 2
    assert all(op.isupper() and "." not in op for op in ops)  # modifiers dropped
    with pytest.raises(RuntimeError, match="cuobjdump"):
        resources.kernel_sass(out.cubin, "no_such_kernel")


@needs_sass_tools
def test_cli_prints_opcode_counts(capsys):
    p = argparse.ArgumentParser()
    resources.add_arguments(p)
    assert resources.main(p.parse_args(["naive_softmax", "-k", "float>", "--opcodes"])) == 0
    out = capsys.readouterr().out
    assert "naive_softmax<float>: " in out and "instructions (static)" in out and "MUFU" in out
    assert resources.main(p.parse_args(["naive_softmax", "-k", "float>", "--sass"])) == 0
    assert "Function : " in capsys.readouterr().out


def test_sass_without_the_tools_says_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setattr(resources, "_tool", lambda name: None)
    with pytest.raises(RuntimeError, match="pip install nvidia-cuda-cuobjdump"):
        resources.kernel_sass(_cubin(tmp_path, "2.0f").cubin, "x")


# Kernels whose dynamic shared memory takes cp.async copies of 128-byte-aligned global lines.
_SLOT_KERNELS = ("_persist", "_wide<", "_chunks<", "_chunks_reg<")


@pytest.mark.parametrize("prefix", ["fast_softmax", "log_softmax", "fused_softmax_backward"])
def test_prefetch_slots_start_on_a_128_byte_line(prefix):
    """Dynamic shared memory begins where the static window ends. Off a 128-byte line, each
    warp's 16-byte cp.async copies (lines of global memory) land across shared-memory lines and
    every 32-byte sector is fetched twice: Nsight on the H200 gave the 16-CTA backward 134 M L2
    read sectors against 67 M for 15 CTAs (static 1424 vs 1408 B), the bf16 forward 8 x 256 x 4
    2x as well. The slots are declared __align__(128) so that no CL or dtype can shift them."""
    from kernel_lab.cuda import sources
    from kernel_lab.cuda.rowkernels import reachable

    kernel_lab.variants()
    src = next(s for s in sources.SOURCES if (reachable.family_of(s) or ("", ""))[1] == prefix)
    exprs = [e for e in src.name_expressions if any(k in e for k in _SLOT_KERNELS)]
    rows = resources.source_resources(src, exprs=exprs)  # each compiled alone, in a pool
    assert rows, f"no persistent kernels declared in {src.path.name}"
    off = {r.name: r.static_shared for r in rows}
    assert all(v >= 1024 for v in off.values()), off  # the reserved 1 KB is part of the window
    assert {e: v for e, v in off.items() if v % 128} == {}


def test_pool_runs_under_a_fork_server(tmp_path, monkeypatch):
    """The start method Python 3.12+ gets (fork there warns about torch's threads): workers
    from a fork server that imported the compiler side once."""
    import multiprocessing

    from kernel_lab.cli import precompile

    monkeypatch.setenv("KERNEL_LAB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(precompile, "_FORK_WARNS", True)
    if "forkserver" not in multiprocessing.get_all_start_methods():
        pytest.skip("no fork server on this platform")
    assert precompile._pool_context().get_start_method() == "forkserver"
    cu = tmp_path / "k.cu"
    cu.write_text("template <int K> __global__ void k(float* y) { y[threadIdx.x] = K; }\n")
    jobs = [precompile.Job(str(cu), f"k<{i}>") for i in range(3)]
    outcomes = precompile.compile_jobs(jobs, "sm_90", workers=2)
    assert [(o.compiled, o.error) for o in outcomes] == [(True, None)] * 3
    monkeypatch.setenv("KERNEL_LAB_CACHE_DIR", str(tmp_path / "other"))  # the server's is older
    assert all(o.compiled for o in precompile.compile_jobs(jobs, "sm_90", workers=2))
    mod = jit.CudaModule(cu, [j.expr for j in jobs])
    assert all(mod.is_cached(j.expr, "sm_90") for j in jobs)  # in the caller's cache dir
