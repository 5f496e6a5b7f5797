"""`python -m kernel_lab watch`: what it watches, and how it refuses what it cannot do."""

import pytest
import torch
from conftest import needs_cuda

import kernel_lab
from kernel_lab import cli, watch


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
