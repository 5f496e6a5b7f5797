"""`python -m kernel_lab watch`: what it watches, how it refuses what it cannot do, and (CPU)
that a round compiles only what it launches, names compile errors by file(line), and that the
loop outlives a failed round."""

import os
import time
import types

import pytest
import torch
from conftest import needs_cuda

import kernel_lab
from kernel_lab import cli
from kernel_lab.cli import watch
from kernel_lab.core import registry
from kernel_lab.cuda import jit


def test_watches_the_cu_file_and_every_header_it_includes():
    files = [f.name for f in watch.watched_files(kernel_lab.get("online_softmax"))]
    assert files[0] == "online_softmax.cu" and "softmax_common.cuh" in files


def test_refuses_non_cuda_variants_with_a_pointer_to_check(capsys):
    assert cli.main(["watch", "triton_online", "--once"]) == 2
    out = capsys.readouterr().out
    assert "CUDA variants" in out and "kernel_lab check triton_online" in out


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the GPU-less refusal")
def test_says_it_needs_a_gpu(capsys):
    assert cli.main(["watch", "online_softmax", "--once"]) == 2
    assert "needs a CUDA GPU" in capsys.readouterr().out


def test_unknown_name_is_one_line_with_a_suggestion(capsys):
    assert cli.main(["watch", "onlin_softmax", "--once"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "did you mean 'online_softmax'" in err


@needs_cuda
def test_one_round_compiles_checks_and_times(capsys):
    assert cli.main(["watch", "online_softmax", "--once", "--shape", "256x4096"]) == 0
    out = capsys.readouterr().out
    assert "check" in out and "GB/s" in out and "% of copy" in out


# -- CPU: a round's compile report and errors, the loop's survival -------------------------------
TOY = "template <typename T>\n__global__ void toy(T* y, const T* x, int n) {\n  y[0] = x[0];\n}\n"


def _compiling_variant(cu):
    """A CUDA-backend variant whose call compiles ``toy<float>`` from ``cu`` with the JIT (real
    NVRTC; nothing launched) and returns the reference softmax: a round's compile step on a CPU."""
    mod = jit.CudaModule(cu, ["toy<float>"])

    def fn(x, dim=-1):
        mod.cubin("sm_90", "toy<float>")
        return torch.softmax(x, dim)

    return registry.Variant("toy_watch", "softmax", "cuda", fn, (torch.float32,), "toy",
                            source=str(cu))


def _save(path, text):
    path.write_text(text)
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))


def test_round_names_what_it_compiled_and_compile_errors_by_file_line(tmp_path, monkeypatch,
                                                                       capsys):
    monkeypatch.setenv("KERNEL_LAB_CACHE_DIR", str(tmp_path / "cache"))
    cu = tmp_path / "toy.cu"
    cu.write_text(TOY)
    v = _compiling_variant(cu)
    assert watch.one_round(v, (4, 64), torch.float32, device="cpu")
    out = capsys.readouterr().out
    assert "check" in out and "recompiled 1 instantiation: toy<float>" in out, out
    assert watch.one_round(v, (4, 64), torch.float32, device="cpu")
    assert "nothing recompiled" in capsys.readouterr().out
    _save(cu, TOY.replace("x[0];", "x[0] +;"))
    assert not watch.one_round(v, (4, 64), torch.float32, device="cpu")
    out = capsys.readouterr().out
    assert "compile error" in out and f"{cu.resolve()}(3): error" in out, out
    _save(cu, TOY.replace("x[0];", "x[0] * 2;"))
    assert watch.one_round(v, (4, 64), torch.float32, device="cpu")
    assert "recompiled 1 instantiation: toy<float>" in capsys.readouterr().out


def test_loop_keeps_watching_after_failed_rounds_and_sees_saves_during_one(tmp_path,
                                                                          monkeypatch, capsys):
    cu = tmp_path / "k.cu"
    cu.write_text("// v0\n")
    monkeypatch.setattr(watch.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(watch, "watched_files", lambda variant: [cu])
    rounds = []

    def fake_round(variant, shape, dtype):
        rounds.append(1)
        if len(rounds) == 1:  # a launch failure, and a save while the round runs
            _save(cu, "// v1, saved during the first round\n")
            raise RuntimeError("CUDA_ERROR_LAUNCH_FAILED")
        return len(rounds) == 3  # the second round fails (a compile error), the third passes

    sleeps = []

    def fake_sleep(seconds):
        sleeps.append(seconds)
        if len(rounds) == 3:
            raise KeyboardInterrupt
        if len(rounds) == 2 and len(sleeps) == 2:
            _save(cu, "// v2, the fix\n")

    monkeypatch.setattr(watch, "one_round", fake_round)
    monkeypatch.setattr(watch, "time", types.SimpleNamespace(
        sleep=fake_sleep, strftime=time.strftime, perf_counter=time.perf_counter))
    assert cli.main(["watch", "online_softmax", "--interval", "0"]) == 0
    out = capsys.readouterr().out
    assert len(rounds) == 3 and len(sleeps) == 3, (rounds, sleeps)
    assert "error: RuntimeError: CUDA_ERROR_LAUNCH_FAILED" in out and "stopped" in out
