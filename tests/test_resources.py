"""Registers / stack frame / machine-code digests read from NVRTC cubins (CPU, no GPU)."""

from __future__ import annotations

import argparse
import textwrap

import kernel_lab.cli
from kernel_lab import jit, resources

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


def _compile(tmp_path, scale: str):
    path = tmp_path / "toy.cu"
    path.write_text(f"#define SCALE {scale}\n" + KERNELS)
    exprs = ["lean<float>", "local_array<float>"]
    out = jit.compile_cubin(path, exprs, arch="sm_90")
    by_symbol = resources.cubin_resources(out.cubin)
    return {e: by_symbol[out.lowered[e]] for e in exprs}


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
