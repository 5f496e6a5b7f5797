"""The peers (QuACK, Liger) in the sweep, checked on a CPU: their short skip reasons, the sweep
adding them (``--peers``) and showing why a peer skipped a cell, and bench/peer_ratios.py's
lab ÷ best-peer table from a sweep JSON written as ``kernel_lab bench`` writes it. The
cross-entropy QuACK launchers run against a stand-in for ``quack.cross_entropy`` (its documented
outputs in PyTorch): what the launcher adds (the reduction, dloss, the target check) is checked.
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import sys
import types
from pathlib import Path

import pytest
import torch

import kernel_lab
from kernel_lab.base.errors import UnsupportedInputError
from kernel_lab.measure import benchmarking as bm
from kernel_lab.measure import sweep
from kernel_lab.ops.cross_entropy import peer_variants as cpv
from kernel_lab.ops.softmax import peer_variants as pv

REPO = Path(__file__).resolve().parents[1]


def _peer_ratios():
    spec = importlib.util.spec_from_file_location("peer_ratios", REPO / "bench" / "peer_ratios.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _rec(op, dtype, n, variant, gbps=None, status="ok", reason=""):
    case = bm.Cell(op, bm.parse_dtype(dtype), (2**28 // n, n))
    r = bm.Record.start(case, kernel_lab.get(variant), status, reason)
    if gbps is not None:
        r.gbps, r.median_s, r.bytes_moved = gbps, 1e-3, int(gbps * 1e6)
        r.copy_gbps, r.pct_of_copy = 4000.0, gbps / 40
    return r


def _sweep_json(path: Path, records: list[bm.Record]) -> Path:
    """The file as sweep.write_results lays it out (meta + Record.as_dict rows)."""
    meta = {"preset": "sweep", "device": "cuda", "copy_gbps": 4000.0,
            "bench_device": "cuda: NVIDIA H200 (sm_90)"}
    path.write_text(json.dumps({"meta": meta, "records": [r.as_dict() for r in records]}))
    return path


# -- the peers' reasons ---------------------------------------------------------------------------
def test_quack_and_liger_reasons_are_short_and_name_the_limit(monkeypatch):
    monkeypatch.setattr(pv, "QUACK", lambda: None)
    monkeypatch.setattr(pv, "LIGER", lambda: None)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (9, 0))

    def x(n, dtype=torch.float32, m=2):
        return torch.empty(m, n, dtype=dtype)

    assert pv._quack_check(x(50257, torch.bfloat16)) == \
        "N=50257 not a multiple of 8 (16-byte rows)"
    assert pv._quack_check(x(50257)) == "N=50257 not a multiple of 4 (16-byte rows)"
    assert pv._quack_check(x(65536)) is None and pv._quack_check(x(131072, torch.bfloat16)) is None
    assert "row too long" in pv._quack_check(x(1048576, m=1))
    assert "row too long" in pv._quack_check(x(524288, m=1), x(524288, m=1), need="softmax_bwd")
    assert pv._quack_check(x(64), dim=0) == "works over the last dim only"
    assert pv._liger_check(x(131072)) == "N=131072 > 65536 (Liger's block limit)"
    assert pv._liger_check(x(65536)) is None


def test_a_missing_or_broken_peer_says_which(tmp_path, monkeypatch):
    assert pv.package_missing("kernel_lab_no_such_peer", "no-such-peer") == \
        "not installed (pip install no-such-peer)"
    pkg = tmp_path / "kernel_lab_half_peer"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("raise ImportError('libcute_dsl_runtime.so: not found')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert pv.package_missing("kernel_lab_half_peer", "half") == (
        "kernel_lab_half_peer does not import: ImportError: libcute_dsl_runtime.so: not found")
    sys.modules.pop("kernel_lab_half_peer", None)
    # every peer launcher carries its probe (the sweep's --peers auto asks it)
    for name in ("peer_quack", "peer_quack_backward", "peer_liger", "peer_quack_cross_entropy",
                 "peer_quack_cross_entropy_backward", "peer_liger_cross_entropy"):
        assert callable(kernel_lab.get(name).fn.peer_missing)


# -- the cross-entropy peers ---------------------------------------------------------------------
def _fake_quack_fwd(x, target, target_logit=None, weight=None, ignore_index=-100,
                    return_lse=False, return_dx=False, inplace_backward=False):
    """quack.cross_entropy.cross_entropy_fwd's contract: fp32 per-row w_t * (lse - x_t), 0 on
    ignored rows, and the fp32 lse of every row."""
    assert x.dim() == 2 and x.is_contiguous() and x.dtype in cpv.PEER_DTYPES
    assert target.dtype in (torch.int32, torch.int64) and target.is_contiguous()
    assert weight is None or weight.is_contiguous()
    assert return_lse and not return_dx and target_logit is None
    xf = x.float()
    lse = torch.logsumexp(xf, 1)
    keep = target != ignore_index
    t = torch.where(keep, target, 0).long()
    wt = weight.float()[t] if weight is not None else torch.ones_like(lse)
    loss = torch.where(keep, wt * (lse - xf.gather(1, t[:, None])[:, 0]), 0.0)
    return loss, lse


def _fake_quack_bwd(x, target, dloss, lse, weight=None, ignore_index=-100,
                    inplace_backward=False):
    """quack.cross_entropy.cross_entropy_bwd's: (p - onehot) * dloss * w_t, 0 on ignored rows."""
    assert dloss.dtype == torch.float32 and dloss.shape == target.shape
    assert lse.dtype == torch.float32 and lse.is_contiguous() and x.is_contiguous()
    keep = target != ignore_index
    t = torch.where(keep, target, 0).long()
    wt = weight.float()[t] if weight is not None else torch.ones_like(lse)
    g = torch.exp(x.float() - lse[:, None])
    g[torch.arange(len(t)), t] -= 1.0
    return (g * torch.where(keep, dloss * wt, 0.0)[:, None]).to(x.dtype)


@pytest.fixture
def fake_quack(monkeypatch):
    """``quack`` and ``quack.cross_entropy`` as the launchers import them (CPU stand-ins)."""
    mod = types.ModuleType("quack.cross_entropy")
    mod.cross_entropy_fwd, mod.cross_entropy_bwd = _fake_quack_fwd, _fake_quack_bwd
    monkeypatch.setitem(sys.modules, "quack", types.ModuleType("quack"))
    monkeypatch.setitem(sys.modules, "quack.cross_entropy", mod)
    monkeypatch.setattr(cpv, "QUACK", lambda: None)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (9, 0))
    return mod


def test_cross_entropy_peer_reasons_are_short_and_name_the_limit(fake_quack, monkeypatch):
    monkeypatch.setattr(cpv, "LIGER", lambda: None)
    liger = types.ModuleType("liger_kernel.ops.cross_entropy")
    liger.liger_cross_entropy_kernel = types.SimpleNamespace(
        arg_names=list(cpv.LIGER_KERNEL_ARGS))
    monkeypatch.setitem(sys.modules, "liger_kernel.ops.cross_entropy", liger)

    def x(n, dtype=torch.float32, m=2):
        return torch.empty(m, n, dtype=dtype), torch.zeros(m, dtype=torch.long)

    bwd = functools.partial(cpv._quack_check, need="cross_entropy_bwd")
    # QuACK's forward takes any N (vector width gcd(N, 16 B)), rows split over a cluster, but
    # odd 2-byte rows did not compile on the H200
    for n in (32000, 50257, 65536, 128256, 151936, 262144):
        for dtype in cpv.PEER_DTYPES:
            if n % 2 and dtype != torch.float32:
                assert cpv._quack_check(*x(n, dtype)) == bwd(*x(n, dtype)) == \
                    f"N={n}: QuACK 0.6.5 does not compile odd 2-byte rows"
                continue
            assert cpv._quack_check(*x(n, dtype)) is None and bwd(*x(n, dtype)) is None
            assert cpv._liger_check(*x(n, dtype)) is None  # Liger's CE loops over 32K blocks
    assert [cpv.quack_cluster_n(n, 2, 9) for n in (32000, 50257, 128256, 151936)] == [2, 4, 8, 16]
    assert [cpv.quack_cluster_n(n, 4, 9) for n in (32000, 128256, 151936, 262144)] == [2, 4, 8, 8]
    assert cpv._quack_check(*x(2**22, torch.bfloat16, m=1)) == \
        "N=4194304: row too long for a 16-CTA cluster's smem"
    assert bwd(*x(2**22, torch.bfloat16, m=1)) is None  # the backward tiles the row
    assert cpv._quack_check(*x(128), label_smoothing=0.1) == "no label_smoothing in QuACK"
    assert bwd(*x(128), label_smoothing=0.1) == "no label_smoothing in QuACK"
    del fake_quack.cross_entropy_bwd
    assert bwd(*x(128)) == "this quack version has no quack.cross_entropy.cross_entropy_bwd"
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (8, 0))
    assert cpv._quack_check(*x(128)) == "QuACK's CuTe kernels need sm_90 or newer"
    liger.liger_cross_entropy_kernel.arg_names.append("NEW_ARG")
    assert cpv._liger_check(*x(128)) == \
        "liger_cross_entropy_kernel's arguments differ from 0.8.5's"


def test_cross_entropy_peers_on_cpu_name_what_is_missing():
    for name in ("peer_quack_cross_entropy", "peer_quack_cross_entropy_backward",
                 "peer_liger_cross_entropy"):
        v = kernel_lab.get(name)
        assert v.backend == "peer" and v.op.startswith("cross_entropy")
        logits, target = kernel_lab.get_op("cross_entropy").make_inputs((4, 128), torch.float32)
        inputs = (logits, target) if v.op == "cross_entropy" else \
            kernel_lab.get_op(v.op).make_inputs((4, 128), torch.float32)
        assert v.supports(*inputs, **kernel_lab.get_op(v.op).kwargs) == \
            "needs a CUDA tensor, got device cpu"
        why = v.fn.peer_missing()
        assert why is None or why.startswith(("not installed", "quack.", "liger_kernel."))


def test_quack_cross_entropy_launchers_reduce_like_the_reference(fake_quack):
    """Every edge case QuACK supports (no label smoothing), forward and backward, against the
    float64 reference: the launcher's reduction, mean denominator and dloss."""
    gen = torch.Generator().manual_seed(0)
    for op_name in ("cross_entropy", "cross_entropy_backward"):
        op = kernel_lab.get_op(op_name)
        v = kernel_lab.get(f"peer_quack_{op_name}")
        ran = 0
        for dtype in cpv.PEER_DTYPES:
            cases = op.edge_cases(dtype, "cpu", gen)
            cases.append(("random", op.make_inputs((37, 1000), dtype, "cpu", gen), {}))
            for label, inputs, kw in cases:
                if kw.get("label_smoothing"):
                    continue
                before = [t if t is None else t.clone() for t in inputs]
                out = v.fn(*inputs, **kw)
                res = op.check(out, *inputs, **kw)
                assert res.ok, f"{op_name} {dtype} {label}: {res.message}"
                assert all(b is None or torch.equal(b, a) for b, a in zip(before, inputs))
                ran += 1
        assert ran == 3 * 12 + 1  # 17 edge cases less the 6 smoothed, a random one; huge_bf16
    logits, target = kernel_lab.get_op("cross_entropy").make_inputs((4, 50), torch.float32)
    target[1] = 50
    with pytest.raises(UnsupportedInputError, match=r"target\[1\] = 50 is out of range"):
        cpv.peer_quack_cross_entropy(logits, target)


def test_add_peers_races_the_cross_entropy_peers(monkeypatch):
    pairs = bm.select("quick", ops_filter=["cross_entropy,cross_entropy_backward"],
                      variants_filter=["torch_cross_entropy,torch_cross_entropy_backward"],
                      dtypes_filter=["bfloat16"], shapes_filter=["50257"])
    monkeypatch.setattr(bm, "peer_missing", lambda v: None)
    got = [(c.op, c.shape, v.name) for c, v in bm.add_peers(pairs)]
    shape = (2**28 // 50257, 50257)
    assert got == [("cross_entropy", shape, "torch_cross_entropy"),
                   ("cross_entropy", shape, "peer_quack_cross_entropy"),
                   ("cross_entropy", shape, "peer_liger_cross_entropy"),
                   ("cross_entropy_backward", shape, "torch_cross_entropy_backward"),
                   ("cross_entropy_backward", shape, "peer_quack_cross_entropy_backward")]


# -- the sweep ------------------------------------------------------------------------------------
def test_add_peers_appends_importable_peers_case_by_case(monkeypatch):
    pairs = bm.select("quick", ops_filter=["softmax", "softmax_backward"],
                      variants_filter=["torch_eager,torch_eager_backward,peer_quack"],
                      dtypes_filter=["float32"], shapes_filter=["4x128,4x256"])
    monkeypatch.setattr(bm, "peer_missing",
                        lambda v: None if v.name.startswith("peer_quack") else "not installed")
    got = [(c.op, c.shape[1], v.name) for c, v in bm.add_peers(pairs)]
    assert got == [("softmax", 128, "torch_eager"), ("softmax", 128, "peer_quack"),
                   ("softmax", 256, "torch_eager"), ("softmax", 256, "peer_quack"),
                   ("softmax_backward", 128, "torch_eager_backward"),
                   ("softmax_backward", 128, "peer_quack_backward"),
                   ("softmax_backward", 256, "torch_eager_backward"),
                   ("softmax_backward", 256, "peer_quack_backward")]
    every = {v.name for _, v in bm.add_peers(pairs, importable_only=False)}
    assert {"peer_liger", "peer_quack", "peer_quack_backward"} <= every


def test_peer_cells_show_their_skip_reason():
    from rich.console import Console

    recs = [_rec("softmax", "bfloat16", 50257, "fast_softmax", 3900.0),
            _rec("softmax", "bfloat16", 50257, "triton_fused", status="skipped",
                 reason="row length 50257 > 32768"),
            _rec("softmax", "bfloat16", 50257, "peer_quack", status="skipped",
                 reason="N=50257 not a multiple of 8 (16-byte rows)"),
            _rec("softmax", "bfloat16", 50257, "peer_liger", status="skipped",
                 reason="not installed (pip install liger-kernel)")]
    console = Console(record=True, width=400)
    for t in sweep.render_tables(recs, 4000.0):
        console.print(t)
    text = console.export_text()
    assert "skip: N=50257 not a multiple of 8 (16-byte rows)" in text
    assert "skip: not installed (pip install liger-kernel)" in text
    assert "row length 50257" not in text  # the lab's own skips stay "skip" (listed below)


def _cli(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    sweep.add_arguments(p)
    return p.parse_args(argv)


def test_cpu_sweep_peer_columns_carry_skip_reasons(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    args = ("--device", "cpu", "--op", "softmax", "--variants", "torch_eager", "--dtype",
            "float32", "--shape", "4x128", "--out", str(tmp_path))
    assert sweep.main(_cli(*args, "--peers", "all")) == 0
    out = capsys.readouterr().out
    assert "peer_quack" in out and "peer_liger" in out and "skip: needs a CUDA tensor" in out
    data = json.loads(next(tmp_path.glob("bench-shapes-cpu-*.json")).read_text())
    peers = {r["variant"]: r for r in data["records"] if r["backend"] == "peer"}
    assert set(peers) == {"peer_quack", "peer_liger"}
    assert all(r["status"] == "skipped" and r["reason"] for r in peers.values())
    # auto (the default) adds peers on a GPU only: a CPU sweep keeps its selection
    for f in tmp_path.iterdir():
        f.unlink()
    assert sweep.main(_cli(*args)) == 0
    data = json.loads(next(tmp_path.glob("bench-shapes-cpu-*.json")).read_text())
    assert [r["variant"] for r in data["records"]] == ["torch_eager"]


def test_cpu_sweep_shows_the_cross_entropy_peers(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    args = ("--device", "cpu", "--op", "cross_entropy,cross_entropy_backward", "--variants",
            "torch_cross_entropy,torch_cross_entropy_backward", "--dtype", "bfloat16",
            "--shape", "4x128", "--out", str(tmp_path), "--peers", "all")
    assert sweep.main(_cli(*args)) == 0
    data = json.loads(next(tmp_path.glob("bench-shapes-cpu-*.json")).read_text())
    status = {r["variant"]: (r["status"], r["reason"]) for r in data["records"]}
    assert status.pop("torch_cross_entropy")[0] == status.pop("torch_cross_entropy_backward")[0] \
        == "ok"
    assert status == dict.fromkeys(
        ("peer_quack_cross_entropy", "peer_liger_cross_entropy",
         "peer_quack_cross_entropy_backward"), ("skipped", "needs a CUDA tensor, got device cpu"))


# -- bench/peer_ratios.py -------------------------------------------------------------------------
def test_peer_ratios_table_from_sweep_json(tmp_path, capsys):
    fwd = _sweep_json(tmp_path / "fwd.json", [
        _rec("softmax", "float32", 4096, "fast_softmax", 4000.0),
        _rec("softmax", "float32", 4096, "triton_fused", 3900.0),
        _rec("softmax", "float32", 4096, "torch_eager", 4300.0),  # neither lab nor peer
        _rec("softmax", "float32", 4096, "peer_quack", 4200.0),
        _rec("softmax", "float32", 4096, "peer_liger", 3800.0),
        _rec("softmax", "bfloat16", 50257, "fast_softmax", 3900.0),
        _rec("softmax", "bfloat16", 50257, "peer_quack", status="skipped",
             reason="N=50257 not a multiple of 8 (16-byte rows)"),
        _rec("softmax", "bfloat16", 50257, "peer_liger", 1950.0),
        _rec("softmax", "bfloat16", 131072, "fast_softmax", 3950.0),
        _rec("softmax", "bfloat16", 131072, "peer_quack", status="skipped",
             reason="not installed (pip install quack-kernels)"),
        _rec("softmax", "bfloat16", 131072, "peer_liger", status="skipped",
             reason="N=131072 > 65536 (Liger's block limit)"),
    ])
    bwd = _sweep_json(tmp_path / "bwd.json", [
        _rec("softmax_backward", "float32", 65536, "fused_softmax_backward", 3000.0),
        _rec("softmax_backward", "float32", 65536, "triton_backward", 3100.0),
        _rec("softmax_backward", "float32", 65536, "peer_quack_backward", 3300.0),
        _rec("softmax", "float32", 4096, "peer_quack", 3000.0),  # a later file's record wins
    ])
    pr = _peer_ratios()
    assert pr.main([str(fwd), str(bwd)]) == 0
    out = capsys.readouterr().out
    rows = {line.split("|")[1].strip() + " " + line.split("|")[3].strip(): line
            for line in out.splitlines() if line.startswith("| ") and "---" not in line}
    assert rows["4096 fast_softmax"].replace(" ", "") == \
        "|4096|65536|fast_softmax|4,000|peer_liger|3,800|1.053|"
    assert "| peer_liger | 1,950 | 2.000 |" in rows["50257 fast_softmax"]
    assert ("peer_quack: not installed (pip install quack-kernels); peer_liger: N=131072 > "
            "65536 (Liger's block limit) | — | — |") in rows["131072 fast_softmax"]
    assert "| triton_backward | 3,100 | peer_quack_backward | 3,300 | **0.939** |" in \
        rows["65536 triton_backward"]
    assert "**softmax_backward, float32**" in out and "**softmax, bfloat16**" in out
    assert out.rstrip().endswith(
        "Peer leads in 1 cell: softmax_backward float32 N=65536 (peer_quack_backward, 0.939).")
