"""Which instantiations the launchers can pick (``kernel_lab.rowkernels.reachable``): declared,
a strict subset where tuning-only shapes exist, and covering row lengths the grid skips."""

from __future__ import annotations

import os
import random

import pytest
import torch

import kernel_lab
from kernel_lab import cuda_common
from kernel_lab.cuda_common import ALL_DTYPES, ctype
from kernel_lab.rowkernels import reachable

kernel_lab.variants()
BY_FILE = {s.path.name: s for s in cuda_common.SOURCES}
FAMILY_FILES = sorted(name.split("/")[-1] for name in reachable.FAMILIES)


@pytest.mark.parametrize("name", FAMILY_FILES)
def test_reachable_instantiations_are_declared(name):
    src = BY_FILE[name]
    assert reachable.undeclared(src) == []
    picked = reachable.launchable(src)
    assert picked == [e for e in src.name_expressions if e in set(picked)]  # declaration order


def test_tuning_only_instantiations_are_left_out():
    fast = set(reachable.launchable(BY_FILE["fast_softmax.cu"]))
    assert "fast_softmax_warp<float, 4, 1>" in fast and "fast_softmax_wide<float, 16>" in fast
    assert "fast_softmax_block_slots<__nv_bfloat16, 8>" in fast
    assert not any("persist_pipe" in e for e in fast)  # timed by tuners, picked by no rule
    assert len(fast) < len(BY_FILE["fast_softmax.cu"].name_expressions)
    bwd = set(reachable.launchable(BY_FILE["fused_softmax_backward.cu"]))
    assert "fused_softmax_backward_stream<float>" in bwd  # the chunks' fallback
    assert reachable.launchable(BY_FILE["cluster_probe.cu"]) == []  # a probe's
    naive = BY_FILE["naive_softmax.cu"]
    assert reachable.launchable(naive) == list(naive.name_expressions)


def test_row_lengths_reach_the_limits():
    for dt in ALL_DTYPES:
        ns = reachable.row_lengths(dt)
        assert ns[:reachable.DENSE_N] == tuple(range(1, reachable.DENSE_N + 1))
        assert reachable.LAST_N in ns and (1 << 28) in ns


def test_random_row_lengths_launch_only_reachable_instantiations():
    """Any N (random, the grid skips most): what its configs launch - and each launch plan -
    is in the launchable set."""
    seed = int.from_bytes(os.urandom(4), "little")
    rng = random.Random(seed)
    ns = [rng.randint(1, reachable.LAST_N) for _ in range(400)]
    ns += [rng.randint(reachable.LAST_N, 1 << 26) for _ in range(20)]
    plans = {"fast_softmax.cu": "fast_softmax", "log_softmax.cu": "log_softmax",
             "fused_softmax_backward.cu": "fused_softmax_backward",
             "log_softmax_backward.cu": "log_softmax_backward"}
    for name in FAMILY_FILES:
        src = BY_FILE[name]
        picked = set(reachable.launchable(src))
        plan = kernel_lab.get(plans[name]).fn.launch_plan if name in plans else None
        for dt in ALL_DTYPES:
            for n in ns:
                got = set(reachable.launched(src, n, dt))
                assert got <= picked, (seed, name, n, dt, got - picked)
                if plan is not None:
                    text = plan(n, dt)
                    assert any(e in text for e in picked if ctype(dt) in e), (seed, n, dt, text)


def test_a_sources_own_launchable_wins(tmp_path):
    cu = tmp_path / "mine.cu"
    cu.write_text("template <int K> __global__ void k() {}\n")
    exprs = ("k<1>", "k<2>", "k<3>")
    mine = cuda_common.CudaSource(cu, exprs, launchable=lambda: ["k<3>", "k<1>"])
    assert reachable.launchable(mine) == ["k<1>", "k<3>"]
    assert reachable.launchable(cuda_common.CudaSource(cu, exprs)) == list(exprs)  # any file
    assert reachable.launched(cuda_common.CudaSource(cu, exprs), 10, torch.float32) == []
