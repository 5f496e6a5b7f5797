"""``python -m kernel_lab picks`` (CPU): the auto choice and each CUDA launcher's kernel per row
length, from the same pure config functions the launchers call."""

from __future__ import annotations

import torch

from kernel_lab import cli
from kernel_lab.cli import picks
from kernel_lab.core import dispatch
from kernel_lab.cuda.rowkernels import backward_config as bc
from kernel_lab.cuda.rowkernels import forward_config as fc
from kernel_lab.ops.log_softmax import auto as log_auto
from kernel_lab.ops.softmax import auto as softmax_auto

# the ops' own "auto" tables, side by side
PORTABLE = {**softmax_auto.PORTABLE, **log_auto.PORTABLE}
SMALL_NUMEL = {**softmax_auto.SMALL_NUMEL, **log_auto.SMALL_NUMEL}
TRITON_MIN_NUMEL = softmax_auto.TRITON_MIN_NUMEL


def test_picks_rows_name_the_config_and_its_kernel():
    header, rows = picks.pick_rows("softmax", torch.float32, [65536, 151936])
    assert header == ["N", "auto (CUDA)", "fast_softmax"]
    assert rows[0] == ["65536", "fast_softmax", "block_slots 2x512x8+8, phased start: "
                       "fast_softmax_cluster_slots<float, 8, 2>"]
    assert rows[1][2] == "persist 8x320x16 late: fast_softmax_persist_cluster<float, 16, 8>"
    _, rows = picks.pick_rows("log_softmax", torch.float32, [151936])
    assert rows[0][2] == "persist 8x320x16 late: log_softmax_persist_cluster<float, 16, 8>"
    # rows of 2^20: both ops run them in chunks, the waiting chunk in registers
    for op, prefix in (("softmax", "fast_softmax"), ("log_softmax", "log_softmax")):
        for dt, t in ((torch.bfloat16, "__nv_bfloat16"), (torch.float16, "__half"),
                      (torch.float32, "float")):
            _, rows = picks.pick_rows(op, dt, [1 << 20])
            assert rows[0][2] == f"chunks_reg 512x8 ahead 1: {prefix}_chunks_reg<{t}, 8>", rows


def test_picks_marks_the_launches_that_start_their_first_wave_in_phases():
    """block and block_slots on rows of >= 8 KB start the first wave in phases; the plan says
    so, and only there."""
    _, rows = picks.pick_rows("softmax", torch.bfloat16, [1024, 4096, 131072, 1 << 20])
    cells = [r[2] for r in rows]
    assert cells[0] == "block 32x4: fast_softmax_block<__nv_bfloat16, 4>"  # 2 KB rows
    assert cells[1] == "block 128x4, phased start: fast_softmax_block<__nv_bfloat16, 4>"
    assert cells[2].startswith("block_slots 2x512x8+8, phased start: ")
    assert cells[3].startswith("chunks_reg 512x8 ahead 1: ")  # chunks_reg: no phases
    _, rows = picks.pick_rows("log_softmax", torch.float32, [131072])
    assert rows[0][2] == ("block_slots 2x1024x8+8, phased start: "
                          "log_softmax_cluster_slots<float, 8, 2>")


def test_picks_follows_the_launchers_own_rules():
    """Odd rows (50257: not 16-byte aligned, one phase) plan as the op sizes them."""
    for n in (1, 100, 4096, 32000, 50257, 131072, 151936, 1 << 20):
        for dt in (torch.float32, torch.bfloat16):
            aligned = n * dt.itemsize % 16 == 0
            fwd = fc.fast_softmax_config(n, dt, aligned, True)
            bwd = bc.backward_config(n, dt, aligned, phase=True)
            _, rows = picks.pick_rows("softmax", dt, [n])
            assert rows[0][2].startswith(fwd.label() + ": ") or rows[0][2].startswith(
                fwd.label() + ", phased start: "), (n, dt)
            _, rows = picks.pick_rows("softmax_backward", dt, [n])
            assert rows[0][2].startswith(bwd.label() + ": "), (n, dt)


def test_auto_choice_is_the_first_measured_preference_that_holds_the_row():
    assert picks.auto_choice("softmax", 128, torch.bfloat16) == "triton_fused"
    assert picks.auto_choice("softmax", 131072, torch.float32) == "fast_softmax"
    for n, dt, want in ((128, torch.float32, "fast_softmax"), (4096, torch.float32,
                        "fast_softmax"), (512, torch.bfloat16, "fast_softmax"),
                        (2048, torch.bfloat16, "triton_fused"), (4096, torch.float16,
                        "fast_softmax")):
        assert picks.auto_choice("softmax", n, dt) == want, (n, dt)
    assert picks.auto_choice("softmax_backward", 256, torch.bfloat16) == "triton_backward"
    for n in (512, 4096, 65536):
        assert picks.auto_choice("softmax_backward", n, torch.bfloat16) == \
            "fused_softmax_backward"
    assert picks.auto_choice("softmax", 131072, torch.float16) == "fast_softmax"
    # triton_fused is first in the table at 32768 but holds rows of <= 65536 only: fine there
    assert dispatch.preferences("softmax", torch.empty(8192, 32768, device="meta"))[0] \
        == picks.auto_choice("softmax", 32768, torch.float32) == "triton_fused"


def test_auto_choice_follows_the_tensor_size():
    """plan's --numel reaches the size rule: PyTorch's kernel for small tensors."""
    for op in ("softmax", "softmax_backward", "log_softmax", "log_softmax_backward"):
        small = SMALL_NUMEL[op]
        assert picks.auto_choice(op, 4096, torch.float32, small) == PORTABLE[op]
        assert picks.auto_choice(op, 4096, torch.float32, 2 * small) != PORTABLE[op]
    # one row longer than the small limit is not small
    one_row = 2 * SMALL_NUMEL["softmax"]
    assert picks.auto_choice("softmax", one_row, torch.float32, 1) == "fast_softmax"
    big = TRITON_MIN_NUMEL
    assert picks.auto_choice("softmax", 1024, torch.bfloat16, big) == "triton_fused"
    assert picks.auto_choice("softmax", 1024, torch.bfloat16, big // 2) == "fast_softmax"


def test_picks_cli(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")  # one line per row in rich's table
    assert cli.main(["picks", "--op", "softmax_backward", "--dtype", "bf16", "--n", "229376"]) == 0
    out = capsys.readouterr().out
    assert "softmax_backward bfloat16" in out
    assert "persist 16x448x4: fused_softmax_backward_persist<__nv_bfloat16, 4, 16>" in out
    assert cli.main(["picks", "--op", "log_softmax_backward", "--dtype", "float32", "--n",
                     "2097152"]) == 0
    out = capsys.readouterr().out
    assert "chunks 256x4 ahead 2: log_softmax_backward_chunks<float, 4> (512 chunks a row; " \
           "streamed on a GPU of fewer than 511 resident CTAs)" in out
    for bad in (["--n", "abc"], ["--n", "0"], ["--op", "sofmax"], ["--dtype", "fp33"],
                ["--numel", "0"], ["--numel", "2e6"]):
        assert cli.main(["picks", *bad]) == 2, bad
        assert capsys.readouterr().err.startswith("kernel_lab picks: "), bad
    assert cli.main(["picks", "--op", "softmax", "--dtype", "fp32", "--n", "4096",
                     "--numel", "65536"]) == 0
    out = capsys.readouterr().out
    assert "a tensor of 65,536 elements (--numel)" in out and "torch_eager" in out
