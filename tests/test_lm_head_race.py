"""bench/lm_head.py's correctness check, run on a CPU: the lab's steps pass it in every case, and
a step that forms the true-class gradient in bf16 (Liger's in-place rounding) is named."""

from __future__ import annotations

import pytest
import torch
from conftest import bench_script


@pytest.fixture(scope="module")
def lm_head():
    return bench_script("lm_head")


class _RoundedTrueClass(torch.autograd.Function):
    """The loss right, its gradient's softmax formed in the input dtype and p_t - 1 taken there:
    for a token with p_t = 0.9997 that is 0 or -0.0039 in bf16 instead of -0.0003."""

    @staticmethod
    def forward(ctx, h, w, t):
        z = (h @ w.T).float()
        p = torch.softmax(z, 1).to(h.dtype)
        p[torch.arange(len(t)), t] -= 1
        ctx.save_for_backward(h, w, p / len(t))
        return torch.nn.functional.cross_entropy(z, t)

    @staticmethod
    def backward(ctx, g):
        h, w, dz = ctx.saved_tensors
        return (dz @ w) * g, (dz.T @ h) * g, None


def _rounded(h, w, t, bias=None, **kw):
    return _RoundedTrueClass.apply(h, w, t)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=str)
def test_the_labs_steps_pass_every_case(lm_head, dtype):
    for variant in ("torch_linear_cross_entropy", "torch_chunked_linear_cross_entropy"):
        assert lm_head.check_step(lm_head._lab(variant), dtype, "cpu") is None, variant
    assert lm_head.check_step(lm_head._compiled_step, dtype, "cpu") is None  # (uncompiled)


def test_inputs_hold_confident_tokens(lm_head):
    h, w, t, _ = lm_head.check_inputs(torch.float32, "cpu")
    z = (h.double() @ w.double().T)
    p_t = torch.softmax(z, 1)[torch.arange(len(t)), t]
    assert p_t[::2].min() > 0.9 and p_t[::2].max() > 0.999  # the margins' tokens
    assert p_t[1::2].max() < 0.5  # the plain ones


def test_a_true_class_gradient_rounded_in_bf16_is_named(lm_head):
    why = lm_head.check_step(_rounded, torch.bfloat16, "cpu")
    assert why is not None and why.startswith("plain: dhidden (worst token) off by"), why
    assert lm_head.check_step(_rounded, torch.float32, "cpu", cases={"plain": {}}) is None


def test_a_refused_case_is_skipped_and_a_crash_is_wrong(lm_head):
    def no_bias(h, w, t, bias=None, **kw):
        if bias is not None:
            raise AssertionError("the check called a refused case")
        return lm_head._lab("torch_linear_cross_entropy")(h, w, t, **kw)

    refuses = lambda h, w, t, b=None, **kw: "no bias" if b is not None else None  # noqa: E731
    refused = []
    assert lm_head.check_step(no_bias, torch.bfloat16, "cpu", refuses=refuses,
                              refused=refused) is None
    assert refused == ["bias (no bias)"]
    why = lm_head.check_step(no_bias, torch.bfloat16, "cpu")
    assert why.startswith("bias: AssertionError: the check called a refused case"), why


def test_profile_refuses_an_unknown_row(lm_head, capsys):
    with pytest.raises(SystemExit):
        lm_head.main(["--profile", "nope"])
    assert "--profile: unknown ['nope']" in capsys.readouterr().err


def test_a_forced_chunk_size_chunks_so_and_is_checked(lm_head, monkeypatch):
    """``--chunk-rows``: the chunked step at a forced size cuts its tokens so (the last chunk
    short), passes the float64 check, and leaves the rule as it was."""
    lce = lm_head.lce_torch
    rule, seen = lce.chunk_rows, []
    real_chunks = lce.token_chunks
    monkeypatch.setattr(lce, "token_chunks", lambda *a, **k: seen.append(real_chunks(*a, **k))
                        or seen[-1])
    assert lm_head.check_step(lm_head.chunked_at(96), torch.float32, "cpu") is None
    assert seen and all(c[0] == (0, 96) and c[-1] == (192, 256) for c in seen)
    assert lce.chunk_rows is rule



def test_the_race_names_a_dtype_it_does_not_take(lm_head, capsys):
    """``--dtype``: bfloat16, float16 and float32, comma-separated; anything else is a usage
    error before a step runs."""
    with pytest.raises(SystemExit) as e:
        lm_head.main(["--dtype", "bfloat16,int8"])
    assert e.value.code == 2
    assert "--dtype" in capsys.readouterr().err


def test_main_checks_then_races_a_cell_end_to_end_on_a_stand_in(lm_head, monkeypatch, capsys):
    """main() on a CPU, the GPU's timer and memory counters stood in (signatures kept): the
    float64 check, then a cell's row per step beside cuBLAS's matmuls, each with its ratio and
    memory (the scripts' per-cell code had run on GPUs only)."""
    cuda = lm_head.torch.cuda
    monkeypatch.setattr(lm_head, "DEVICE", "cpu")
    monkeypatch.setattr(lm_head, "_time", lambda fn, reps: [fn() or 2.0] * reps)
    for name, value in (("synchronize", None), ("empty_cache", None),
                        ("reset_peak_memory_stats", None), ("memory_allocated", 0),
                        ("max_memory_allocated", (1 << 30) + 4 * (64 * 32 + 300 * 32)),
                        ("get_device_name", "stand-in")):
        monkeypatch.setattr(cuda, name, lambda *a, value=value: value)
    lm_head.main(["--tokens", "64", "--dv", "32x300", "--dtype", "float32", "--rounds", "2",
                  "--reps", "1", "--only", "torch,chunked"])
    out = capsys.readouterr().out
    assert "  torch              ok" in out and "  chunked            ok" in out
    cell = out.split("\n64 x 32 x 300\n")[1].splitlines()
    assert [ln.split()[0] for ln in cell[:3]] == ["cuBLAS", "torch", "chunked"]
    assert all("1.00x (spread 0.0%)" in ln for ln in cell[:3])
    # the peak above the fp32 inputs (64 x 32 hidden, 300 x 32 weight): 1 GiB; cuBLAS's is 0
    assert cell[0].endswith("0.00 GiB") and cell[1].endswith("1.00 GiB") and cell[2].endswith(
        "1.00 GiB")
