"""Which instantiations the launchers can pick (``kernel_lab.cuda.rowkernels.reachable``): declared,
a strict subset where tuning-only shapes exist, and covering row lengths the grid skips."""

from __future__ import annotations

import os
import random

import pytest
import torch

import kernel_lab
from kernel_lab.cuda import jit
from kernel_lab.cuda import sources as cuda_common
from kernel_lab.cuda.archs import ARCHS
from kernel_lab.cuda.rowkernels import reachable
from kernel_lab.cuda.sources import ALL_DTYPES, ctype

kernel_lab.variants()
# the lab's sources by kernel-name prefix (files and variants get renamed; kernel names stay)
BY_PREFIX = {fam[1]: s for s in cuda_common.SOURCES if (fam := reachable.family_of(s))}


def test_every_family_has_its_source():
    assert sorted(BY_PREFIX) == sorted(reachable.FAMILIES)


@pytest.mark.parametrize("prefix", sorted(reachable.FAMILIES))
def test_reachable_instantiations_are_declared(prefix):
    src = BY_PREFIX[prefix]
    assert reachable.undeclared(src) == []
    picked = reachable.launchable(src)
    assert picked == [e for e in src.name_expressions if e in set(picked)]  # declaration order


def test_tuning_only_instantiations_are_left_out():
    fast = set(reachable.launchable(BY_PREFIX["fast_softmax"]))
    assert "fast_softmax_warp<float, 4, 1>" in fast and "fast_softmax_wide<float, 16>" in fast
    assert "fast_softmax_block_slots<__nv_bfloat16, 8>" in fast
    assert not any("persist_pipe" in e for e in fast)  # timed by tuners, picked by no rule
    assert len(fast) < len(BY_PREFIX["fast_softmax"].name_expressions)
    bwd = set(reachable.launchable(BY_PREFIX["fused_softmax_backward"]))
    assert "fused_softmax_backward_stream<float>" in bwd  # the chunks' fallback
    assert reachable.launchable(BY_PREFIX["cluster_probe"]) == []  # a probe's
    naive = BY_PREFIX["naive_softmax"]
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
    for prefix, src in sorted(BY_PREFIX.items()):
        picked = set(reachable.launchable(src))
        plans = [v.fn.launch_shape for v in kernel_lab.variants()
                 if v.source == jit.display_name(src.path) and hasattr(v.fn, "launch_shape")]
        for dt in ALL_DTYPES:
            for n in ns:
                got = set(reachable.launched(src, n, dt))
                assert got <= picked, (seed, prefix, n, dt, got - picked)
                for plan in plans:
                    text = plan(n, dt)
                    assert any(e in text for e in picked if ctype(dt) in e), (seed, n, dt, text)


def test_a_sources_own_launchable_wins(tmp_path):
    cu = tmp_path / "mine.cu"
    cu.write_text("template <int K> __global__ void k() {}\n")
    exprs = ("k<1>", "k<2>", "k<3>")
    mine = cuda_common.CudaSource(cu, exprs, launchable=lambda arch: ["k<3>", "k<1>"]
                                  if arch.cluster else ["k<1>"])  # asked per arch
    assert reachable.launchable(mine) == ["k<1>", "k<3>"]
    assert reachable.launchable(mine, ARCHS["sm_80"]) == ["k<1>"]
    assert reachable.launchable(cuda_common.CudaSource(cu, exprs)) == list(exprs)  # any file
    # a kernel name that merely starts like a lab family's keeps every instantiation
    fast = tmp_path / "fast.cu"
    fast.write_text("template <typename T> __global__ void fast_softmax_v2() {}\n")
    lookalike = cuda_common.CudaSource(fast, ("fast_softmax_v2<float>",))
    assert reachable.launchable(lookalike) == ["fast_softmax_v2<float>"]
    assert reachable.launched(cuda_common.CudaSource(cu, exprs), 10, torch.float32) == []
