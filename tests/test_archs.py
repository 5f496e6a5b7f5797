"""Every arch the README names, on the CPU: what each would run (``picks --arch``), that those
shapes fit the arch's limits, and that every instantiation a launcher can pick there compiles
with NVRTC for it. The rules are sm_90's; on sm_90 they pick exactly what they always did."""

from __future__ import annotations

import random

import pytest
import torch

import kernel_lab
from kernel_lab.cli import build_parser, picks
from kernel_lab.cuda import sources as cuda_common
from kernel_lab.cuda.archs import ARCHS, device_arch, nearest_arch
from kernel_lab.cuda.rowkernels import backward_config as bc
from kernel_lab.cuda.rowkernels import forward_config as fc
from kernel_lab.cuda.rowkernels import reachable

kernel_lab.variants()  # import every op module: fills cuda_common.SOURCES
OTHER_ARCHS = [a for a in ARCHS if a != "sm_90"]
CLUSTER_KERNELS = ("_cluster", "_wide<", "_pipe<")  # name parts of the cluster-only kernels
DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)


def _sample_lengths(dtype: torch.dtype, k: int = 400) -> list[int]:
    ns = reachable.row_lengths(dtype)
    return sorted(set(random.Random(7).sample(ns, k)) | {ns[-1], 50257, 151936, 262144})


@pytest.mark.parametrize("arch", list(ARCHS))
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_picked_shapes_fit_the_arch(arch, dtype):
    """Every forward and backward shape picked for ``arch`` launches there: no cluster before
    sm_90 (none past 8 CTAs on sm_120), dynamic shared memory within its per-CTA opt-in."""
    a = ARCHS[arch]
    most = 1 if not a.cluster else (a.max_cluster_nonportable or a.max_cluster_portable)
    for n in _sample_lengths(dtype):
        for aligned, vec, line in reachable.FORWARD_FLAGS:
            try:
                cfg = fc.fast_softmax_config(n, dtype, aligned, vec, line, arch=a)
            except fc.NoShapeForArch as e:
                assert not a.cluster or a.smem_per_block_optin < fc.MAX_CTA_SHARED, e
                continue
            assert cfg.cluster <= most and cfg.shared_mem() <= a.smem_per_block_optin, (n, cfg)
        for aligned, phase in reachable.BACKWARD_FLAGS:
            cfg = bc.backward_config(n, dtype, aligned, phase, a)
            assert cfg.cluster <= most and cfg.shared_mem() <= a.smem_per_block_optin, (n, cfg)


def test_sm90_is_the_rules_own():
    """Asking for sm_90 by name is the default: the shapes the rules were measured with."""
    for dtype in DTYPES:
        for n in _sample_lengths(dtype, 100):
            assert fc.fast_softmax_config(n, dtype) == fc.fast_softmax_config(
                n, dtype, arch=ARCHS["sm_90"])
            assert bc.backward_config(n, dtype) == bc.backward_config(
                n, dtype, True, None, ARCHS["sm_90"])


@pytest.mark.slow  # every source x three archs: 40 s on a busy GPU machine (CPU logic)
def test_no_cluster_kernel_is_launchable_before_sm90():
    for arch in ("sm_80", "sm_86", "sm_89"):
        for src in cuda_common.SOURCES:
            names = reachable.launchable(src, ARCHS[arch])
            assert not [e for e in names if any(k in e for k in CLUSTER_KERNELS)], (arch, src)
    fast = next(s for s in cuda_common.SOURCES if s.path.name == "fast_softmax.cu")
    assert any("_cluster" in e for e in reachable.launchable(fast, ARCHS["sm_90"]))


def test_long_rows_without_clusters_say_why():
    """fp32 rows past what one CTA's chunks hold in 99 KB: no shape on an RTX 30xx / 40xx."""
    with pytest.raises(fc.NoShapeForArch, match="sm_86.*clusters"):
        fc.fast_softmax_config(1 << 22, torch.float32, arch=ARCHS["sm_86"])
    assert "none on sm_86" in picks.pick_rows("softmax", torch.float32, [1 << 22],
                                              arch=ARCHS["sm_86"])[1][0][2]


def test_nearest_arch_plans_minor_versions_with_their_family():
    assert nearest_arch("sm_87").name == "sm_86" and nearest_arch("sm_103").name == "sm_100"
    assert nearest_arch("sm_121").name == "sm_120" and nearest_arch("sm_90a").name == "sm_90"
    assert nearest_arch("sm_75") is None


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_this_gpus_arch_is_known():
    major, minor = torch.cuda.get_device_capability(0)
    assert device_arch(0).capability[0] == major


def test_picks_cli_prints_every_arch(capsys):
    args = build_parser().parse_args(["picks", "--op", "softmax", "--dtype", "bfloat16",
                                      "--n", "50257,262144", "--arch", ",".join(ARCHS)])
    assert picks.main(args) == 0
    out = capsys.readouterr().out
    for a in ARCHS.values():
        assert f"on {a.name} ({a.gpus})" in out
    # sm_90: a 4-CTA cluster a row at 262144; sm_80: no cluster, chunks in one CTA each
    sm80 = out[out.index("on sm_80"):out.index("on sm_86")]
    assert "_cluster" not in sm80 and "chunks_reg" in sm80
    sm90 = out[out.index("on sm_90"):out.index("on sm_100")]
    assert "fast_softmax_cluster_slots" in sm90


def test_picks_auto_column_is_the_arch_s_own():
    """picks --arch: the auto column asks the fast variants' shape check for that arch (meta
    tensors, as_if_on): fp32 rows of 2^21 have a fast shape on sm_90 only with clusters, so
    sm_80 and sm_86 take the next preference; the assumed arch is forgotten afterwards."""
    from kernel_lab.cuda import archs

    n, dt = 1 << 21, torch.float32
    assert picks.auto_choice("softmax", n, dt, arch=ARCHS["sm_90"]) == "fast_softmax"
    assert picks.auto_choice("softmax", n, dt) == "fast_softmax"  # the rules' own arch
    for arch in ("sm_80", "sm_86"):
        assert picks.auto_choice("softmax", n, dt, arch=ARCHS[arch]) not in ("fast_softmax", "-")
        assert picks.auto_choice("softmax", 4096, dt, arch=ARCHS[arch]) == "fast_softmax"
    assert archs.assumed_arch() is None
    header, rows = picks.pick_rows("softmax", dt, [n], arch=ARCHS["sm_86"])
    assert rows[0][1] != "fast_softmax" and "none on sm_86" in rows[0][header.index(
        "fast_softmax")]


def test_compile_all_for_another_arch_counts_what_cannot_compile_there(monkeypatch, capsys):
    """compile --all --arch sm_80: a tuning-only instantiation that fails there (a cluster
    kernel) is counted in a line, not an error; a launchable one failing is; on sm_90 every
    declared one must compile (the compiler is faked: the rule is what is tested)."""
    from kernel_lab.cli import precompile

    fast = next(s for s in cuda_common.SOURCES if s.path.name == "fast_softmax.cu")
    sm80 = set(reachable.launchable(fast, ARCHS["sm_80"]))
    cluster = next(e for e in fast.name_expressions if "_cluster<" in e)
    picked = next(iter(sorted(sm80)))
    assert cluster not in sm80
    broken = {cluster}

    def fake_compile(jobs, arch, workers=None, progress=False):
        return [precompile.Outcome(j, True, 0.0, f"{j.path}: NVRTC_ERROR_COMPILATION (6)"
                                   if j.expr in broken else None) for j in jobs]

    monkeypatch.setattr(precompile, "compile_jobs", fake_compile)

    def run(*argv):
        args = build_parser().parse_args(["compile", "fast_softmax.cu", *argv])
        return precompile.main(args), capsys.readouterr()

    rc, out = run("--all", "--arch", "sm_80")
    assert rc == 0, out.err
    assert f"1 tuning-only instantiations do not compile for sm_80 (no launcher picks them " \
        f"there; e.g. {cluster}:" in out.out and "0 failed" in out.out
    rc, out = run("--all", "--arch", "sm_90")  # the rules' own arch: every one must compile
    assert rc == 1 and f"error: {cluster}" in out.err
    broken.add(picked)  # a launchable one failing on sm_80 is an error there too
    rc, out = run("--all", "--arch", "sm_80")
    assert rc == 1 and f"error: {picked}" in out.err and f"error: {cluster}" not in out.err


def test_picks_cli_refuses_an_unknown_arch(capsys):
    args = build_parser().parse_args(["picks", "--arch", "sm_70"])
    assert picks.main(args) == 2
    assert "unknown arch 'sm_70'" in capsys.readouterr().err


@pytest.mark.parametrize("arch", OTHER_ARCHS)
def test_launchable_instantiations_compile_for(arch):
    """Each arch's launchable instantiations, each its own NVRTC program as the loader builds it
    (sm_90's: test_cuda_jit.py::test_compiles_for_sm90, every declared one)."""
    from kernel_lab.cli import precompile

    jobs = [precompile.job_for(s, e) for s in cuda_common.SOURCES
            for e in reachable.launchable(s, ARCHS[arch])]
    outcomes = precompile.compile_jobs(jobs, arch)
    assert len(outcomes) == len(jobs) > 200
    assert [(o.job.expr, o.error.splitlines()[0]) for o in outcomes if o.error] == []


def test_auto_passes_over_the_fast_kernels_where_this_arch_has_no_shape(monkeypatch):
    """The fast variants' check: on an sm_86 GPU, rows no shape holds there are refused (auto
    then takes the next preference), with the phase the launch will see; on sm_90 the check
    never asks the rules."""
    from kernel_lab.cuda.rowkernels import launch

    long, vocab = torch.empty(2, 1 << 22), torch.empty(2, 50257)
    monkeypatch.setattr(torch.Tensor, "device", property(lambda t: torch.device("cuda", 0)))
    monkeypatch.setattr(launch, "device_index", lambda t: 0)
    monkeypatch.setattr(launch, "device_arch", lambda i: ARCHS["sm_86"])
    assert "sm_86" in launch.fast_shape_missing(long)
    assert launch.fast_shape_missing(vocab) is None  # block_slots, one CTA a row
    # a view off its output's 16-byte phase: element-wise shapes, the long ones clusters
    assert "sm_86" in launch.fast_shape_missing(long[:, :50257])
    monkeypatch.setattr(launch, "device_arch", lambda i: ARCHS["sm_90"])
    assert launch.fast_shape_missing(long) is None


def test_a_gpu_before_sm80_is_a_reason_not_a_crash(monkeypatch):
    """A T4 (sm_75): the fast variants' check says why (auto then takes the next preference)."""
    from kernel_lab.cuda import archs
    from kernel_lab.cuda.rowkernels import launch

    x = torch.empty(2, 4096)
    monkeypatch.setattr(torch.Tensor, "device", property(lambda t: torch.device("cuda", 0)))
    monkeypatch.setattr(launch, "device_index", lambda t: 7)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda i: (7, 5))
    monkeypatch.delitem(archs._DEVICE_ARCH, 7, raising=False)
    assert "sm_75" in launch.fast_shape_missing(x) and "sm_80" in launch.fast_shape_missing(x)
