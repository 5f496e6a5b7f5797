"""The chunk kernels' flagged words kept per stream (kernel_lab/cuda/flag_words.py).

CPU: each launch on a stream takes the next epoch over one buffer, zeroed once when it is fresh
(first use, too small, the epochs used up); other streams and devices keep their own; graph
capture and REUSE = False get a zeroed buffer and epoch 1. GPU: the chunk kernels stay right
when the kept buffer is full of words of earlier epochs (random values), call after call on
rows of other chunk counts, in both ops and the backward, and under CUDA graph replay.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import HAS_CUDA

import kernel_lab
from kernel_lab.core.reference import check
from kernel_lab.cuda import flag_words as fw
from kernel_lab.cuda.rowkernels import backward_config as bc
from kernel_lab.cuda.rowkernels import forward_config as fc
from kernel_lab.cuda.rowkernels import launch as rk
from kernel_lab.ops.log_softmax import cuda_variants as lcv
from kernel_lab.ops.log_softmax import op as log_op
from kernel_lab.ops.softmax import cuda_variants as cv

CPU = torch.device("cpu")


@pytest.fixture(autouse=True)
def fresh_buffers():
    fw.forget()
    yield
    fw.forget()


def test_one_buffer_a_stream_next_epoch_each_launch():
    words, epoch = fw.flag_words(10, CPU)
    assert epoch == 1 and isinstance(epoch, np.uint32)
    assert words.dtype == torch.int64 and words.numel() == 10 and not words.any()
    words.fill_(-1)  # what a launch leaves behind: kept, not zeroed again
    again, epoch2 = fw.flag_words(7, CPU)
    assert epoch2 == 2 and again.data_ptr() == words.data_ptr() and (again == -1).all()
    assert fw.flag_words(16, CPU)[1] == 3  # the buffer was grown to 16 words at once


def test_a_larger_launch_gets_a_fresh_zeroed_buffer_and_epoch_one():
    small, _ = fw.flag_words(3, CPU)
    small.fill_(-1)
    fw.flag_words(3, CPU)
    big, epoch = fw.flag_words(1000, CPU)
    assert epoch == 1 and big.numel() == 1000 and not big.any()
    assert fw.flag_words(1000, CPU)[1] == 2


def test_used_up_epochs_start_over_on_a_zeroed_buffer(monkeypatch):
    monkeypatch.setattr(fw, "EPOCH_LIMIT", 3)
    words, _ = fw.flag_words(4, CPU)
    words.fill_(-1)
    assert [int(fw.flag_words(4, CPU)[1]) for _ in range(2)] == [2, 3]
    fresh, epoch = fw.flag_words(4, CPU)  # no epoch past the limit: zeroed, 1 again
    assert epoch == 1 and not fresh.any()


def test_streams_keep_their_own_buffers(monkeypatch):
    handle = [11]
    monkeypatch.setattr(fw, "_stream_handle", lambda device: handle[0])
    a, ea = fw.flag_words(4, CPU)
    handle[0] = 12
    b, eb = fw.flag_words(4, CPU)
    assert (ea, eb) == (1, 1) and a.data_ptr() != b.data_ptr()
    handle[0] = 11
    assert fw.flag_words(4, CPU)[1] == 2


def test_threads_on_one_stream_never_share_an_epoch():
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(8) as pool:
        epochs = list(pool.map(lambda _: int(fw.flag_words(4, CPU)[1]), range(400)))
    assert sorted(epochs) == list(range(1, 401))


@pytest.mark.parametrize("why", ["capture", "no reuse"])
def test_capture_and_no_reuse_zero_a_buffer_for_every_launch(monkeypatch, why):
    if why == "capture":
        monkeypatch.setattr(fw, "_capturing", lambda device: True)
    else:
        monkeypatch.setattr(fw, "REUSE", False)
    first, e1 = fw.flag_words(8, CPU)
    first.fill_(-1)
    second, e2 = fw.flag_words(8, CPU)
    assert (e1, e2) == (1, 1) and not second.any()
    assert not fw._BUFFERS  # nothing kept


# -- GPU ---------------------------------------------------------------------------------------
needs_cuda = pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")
REG = fc.FastConfig("chunks_reg", threads=64, vpt=4, ahead=2)  # many chunks a row, small CTAs
BOTH_OPS = [(cv.FAST_KERNELS, lambda x: torch.softmax(x.double(), -1), None),
            (lcv.FORWARD_KERNELS, lambda x: torch.log_softmax(x.double(), -1), log_op.TOLERANCES)]


def _poison_kept_buffers(gen: torch.Generator) -> None:
    """Every kept word: a random value under an earlier epoch (or under none: 0)."""
    for words, epoch in fw._BUFFERS.values():
        old = torch.randint(0, int(epoch) + 1, words.shape, device=words.device, generator=gen)
        bits = torch.randint(0, 2**31, words.shape, device=words.device, generator=gen)
        words.copy_((old << 32) | bits)


@needs_cuda
@pytest.mark.parametrize("dtype", fc.PERSIST_DTYPES, ids=str)
@pytest.mark.parametrize("cfg", [REG, fc.FastConfig("chunks", threads=64, vpt=2, lag=2, ahead=1)],
                         ids=lambda c: c.label())
def test_chunk_kernels_ignore_words_of_earlier_launches(dtype, cfg):
    """Calls back to back on one stream, rows of other chunk counts in turn, the kept buffer
    poisoned with random words of earlier epochs before each: every output right."""
    gen = torch.Generator(device="cuda").manual_seed(7)
    cap = cfg.threads * cfg.vpt * 16 // dtype.itemsize  # elements a chunk
    for n in (5 * cap, 3 * cap - 9, 7 * cap + 1, 5 * cap):
        x = torch.randn(37, n, device="cuda", generator=gen).to(dtype)
        for kernels, ref_fn, tol in BOTH_OPS:
            _poison_kept_buffers(gen)
            out = torch.full_like(x, float("nan"))
            rk.fast_launch(out, x, cfg, kernels=kernels)
            res = check(out, ref_fn(x), dtype, tol)
            assert res.ok, f"{kernels.prefix} {cfg.label()} n={n}: {res.message}"
    assert fw._BUFFERS, "the launches kept no buffer"


@needs_cuda
@pytest.mark.parametrize("dtype", bc.BACKWARD_PERSIST_DTYPES, ids=str)
@pytest.mark.parametrize("op_name,kernels,make_y", [
    ("softmax_backward", cv.BACKWARD_KERNELS, lambda x: torch.softmax(x, -1)),
    ("log_softmax_backward", lcv.BACKWARD_KERNELS, lambda x: torch.log_softmax(x, -1))])
def test_backward_chunks_ignore_words_of_earlier_launches(dtype, op_name, kernels, make_y):
    gen = torch.Generator(device="cuda").manual_seed(3)
    cfg = bc.BackwardConfig("chunks", 64, 4, 1, 2)
    cap = 64 * 4 * 16 // dtype.itemsize
    op = kernel_lab.get_op(op_name)
    for n in (4 * cap, 6 * cap - 5, 4 * cap):
        y = make_y(torch.randn(19, n, device="cuda", generator=gen)).to(dtype)
        dy = torch.randn(19, n, device="cuda", generator=gen).to(dtype)
        _poison_kept_buffers(gen)
        dx = torch.full_like(y, float("nan"))
        rk.backward_launch(dx, y, dy, cfg, True, kernels=kernels)
        res = op.check(dx, y, dy)
        assert res.ok, f"{op_name} chunks n={n}: {res.message}"


@needs_cuda
def test_chunk_kernel_under_cuda_graph_replay():
    """A captured chunk launch replays right every time (it captured a zeroed buffer, epoch 1,
    not the stream's kept one), and the stream's own launches after it stay right."""
    x = torch.randn(16, 4096, device="cuda")
    out = torch.empty_like(x)
    # warm up: the kernel loads before the capture
    rk.fast_launch(out, x, REG, kernels=cv.FAST_KERNELS)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        rk.fast_launch(out, x, REG, kernels=cv.FAST_KERNELS)
    for seed in range(3):
        x.copy_(torch.randn(16, 4096, device="cuda", generator=torch.Generator(
            device="cuda").manual_seed(seed)) * (seed + 1))
        out.fill_(float("nan"))
        graph.replay()
        res = check(out, torch.softmax(x.double(), -1), torch.float32)
        assert res.ok, f"replay {seed}: {res.message}"
        eager = torch.empty_like(x)
        rk.fast_launch(eager, x, REG, kernels=cv.FAST_KERNELS)
        assert torch.equal(eager, out), f"replay {seed}: eager and graph differ"
