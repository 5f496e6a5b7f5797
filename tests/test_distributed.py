"""kernel_lab.distributed: the vocabulary-parallel losses in real process groups.

Groups of 2 and 4 processes (torch.multiprocessing, spawn; gloo on CPU) each run every case in
one go, against the single-device float64 reference of the concatenated logits: every
reduction, class weights (full and sliced), label smoothing, ignore_index rows, uneven shards
(37 classes over 4 ranks, a rank of width 0), a rank whose shard holds no target, -inf rows,
0 rows. Every torch.distributed collective is counted in the workers: the forward makes one
all_gather of O(rows) values (two with the layout inferred), the backward none; and the ranks
run their backwards in different orders, which a communicating backward would not survive.
Workers run under an init_process_group timeout and a deadline; their processes are always
joined (terminated past the deadline). The GPU tests (a 1-rank NCCL group, 2 gloo ranks on one
GPU) run the same workers on CUDA tensors.
"""

from __future__ import annotations

import datetime
import functools
import json
import os
import tempfile
import time

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

import kernel_lab.distributed as kld
from kernel_lab.base.errors import UnsupportedInputError
from kernel_lab.core.reference import check
from kernel_lab.core.registry import trusted_inputs
from kernel_lab.distributed import shard_math
from kernel_lab.ops.cross_entropy.op import (
    GRAD_TOLERANCES,
    REDUCTIONS,
    TOLERANCES,
    backward_error_scale,
    cross_entropy_backward_reference,
    cross_entropy_reference,
    loss_error_scale,
)

HAS_CUDA = torch.cuda.is_available()
GROUP_TIMEOUT_S = 60  # init_process_group: a hung collective raises after this
DEADLINE_S = 180  # the whole spawned group, imports included
V = 37
COLLECTIVES = ("all_gather", "all_gather_into_tensor", "all_gather_single", "all_reduce",
               "reduce", "reduce_scatter", "reduce_scatter_tensor", "broadcast", "all_to_all",
               "all_to_all_single", "gather", "scatter", "send", "recv", "isend", "irecv",
               "barrier", "all_gather_object", "broadcast_object_list")


# --------------------------------------------------------------------------- group running

def run_group(worker, world: int, backend: str = "gloo", device: str = "cpu") -> list[dict]:
    """Run ``worker(rank, world, device)`` in ``world`` spawned processes joined in one process
    group (a FileStore in a fresh directory: no port to choose); returns each rank's dict."""
    with tempfile.TemporaryDirectory() as d:
        ctx = mp.start_processes(_entry, args=(worker, world, backend, device, d), nprocs=world,
                                 join=False, start_method="spawn")
        deadline = time.monotonic() + DEADLINE_S
        try:
            while not ctx.join(timeout=1.0):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{worker.__name__} on {world} ranks ran past "
                                       f"{DEADLINE_S} s")
        finally:
            for p in ctx.processes:
                if p.is_alive():
                    p.terminate()
            for p in ctx.processes:
                p.join(10)
                if p.is_alive():
                    p.kill()
                    p.join()
        out = []
        for r in range(world):
            with open(os.path.join(d, f"rank{r}.json")) as f:
                out.append(json.load(f))
        return out


def _entry(rank: int, worker, world: int, backend: str, device: str, d: str) -> None:
    torch.set_num_threads(1)  # ranks share the cores: one thread each (tiny tensors anyway)
    if device == "cuda":
        torch.cuda.set_device(0)  # every rank on the one GPU
        os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # NVLink multicast off, as required
    dist.init_process_group(backend, init_method=f"file://{os.path.join(d, 'store')}",
                            rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=GROUP_TIMEOUT_S))
    try:
        result = worker(rank, world, device)
        with open(os.path.join(d, f"rank{rank}.json"), "w") as f:
            json.dump(result, f)
    finally:
        dist.destroy_process_group()


class CollectiveLog:
    """Counts every torch.distributed collective (wrapping the module's functions) and the
    largest tensor each one moved."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int]] = []
        for name in COLLECTIVES:
            fn = getattr(dist, name, None)
            if fn is not None:
                setattr(dist, name, self._wrap(name, fn))

    def _wrap(self, name, fn):
        @functools.wraps(fn)
        def counted(*args, **kw):
            sizes = [0]
            for a in (*args, *kw.values()):
                for t in (a if isinstance(a, (list, tuple)) else [a]):
                    if isinstance(t, torch.Tensor):
                        sizes.append(t.numel())
            self.calls.append((name, max(sizes)))
            return fn(*args, **kw)
        return counted

    def mark(self) -> int:
        return len(self.calls)

    def since(self, mark: int) -> list[tuple[str, int]]:
        return self.calls[mark:]


def groups_of(world: int) -> list[tuple[object, int, int]]:
    """(group, size, rank in it) for this rank: the world, plus halves (world 4: [0, 1] and
    [2, 3], where group ranks differ from global ones) or singletons (world 2). new_group is
    called by every rank for every group, in the same order."""
    rank = dist.get_rank()
    out = [(dist.group.WORLD, world, rank)]
    if world == 1:
        return out
    size = world // 2
    for first in range(0, world, size):
        members = list(range(first, first + size))
        g = dist.new_group(members)
        if rank in members:
            out.append((g, size, members.index(rank)))
    return out


# --------------------------------------------------------------------------- the logits form

UNEVEN = {1: [(37,)], 2: [(31, 6), (0, 37)], 4: [(12, 0, 20, 5)]}


def logit_cases(p: int) -> list[dict]:
    even = tuple(b - a for a, b in (kld.vocab_shard(V, r, p) for r in range(p)))
    cases = []
    for widths in [even, *UNEVEN[p]]:
        for red in REDUCTIONS:
            for wform in (None, "full", "shard"):
                for eps in (0.0, 0.15):
                    cases.append(dict(widths=widths, dtype="float64", reduction=red,
                                      weight=wform, eps=eps, given_start=len(cases) % 2 == 0,
                                      last_holds_none=len(cases) % 3 == 0, rows=13))
    base = dict(widths=even, reduction="mean", weight="full", eps=0.1, given_start=True,
                last_holds_none=False, rows=13)
    cases += [
        dict(base, dtype="float32"), dict(base, dtype="bfloat16", weight=None),
        dict(base, dtype="float32", reduction="none", contiguous=True),
        dict(base, dtype="float64", all_ignored=True),
        dict(base, dtype="float64", reduction="sum", all_ignored=True),
        dict(base, dtype="float64", rows=0), dict(base, dtype="float64", rows=0, reduction="sum"),
        dict(base, dtype="float64", one_row=True, reduction="sum"),
        dict(base, dtype="float64", reduction="none", eps=0.2),  # -inf logits smoothed: inf
    ]
    return cases


def make_inputs(case: dict, seed: int, device: str):
    """The full logits, targets, class weights and upstream gradient: the same on every rank."""
    g = torch.Generator().manual_seed(seed)
    dtype = getattr(torch, case["dtype"])
    m = case["rows"]
    x = torch.randn(m, V, generator=g, dtype=torch.float64) * 2
    hi = V - case["widths"][-1] if case["last_holds_none"] and case["widths"][-1] < V else V
    t = torch.randint(0, hi, (m,), generator=g)
    if m and (case["eps"] == 0 or case["reduction"] == "none"):  # else inf: the sum hides all
        x[0, 1::3] = float("-inf")  # -inf logits, never the target's
        t[0] = 0
    w0 = case["widths"][0]
    if m and w0 < V:  # the first shard all -inf in row 1, whose target lies elsewhere
        x[1, :w0] = float("-inf")
        t[1] = w0 if w0 < hi else -100
    if m:
        if case["dtype"] != "bfloat16":
            x[2] += 1e4  # a huge shift
        t[3::5] = -100
    if case.get("all_ignored"):
        t[:] = -100
    w = (torch.rand(V, generator=g, dtype=torch.float64) + 0.5).to(dtype)
    shape = (m,) if case["reduction"] == "none" else ()
    gup = torch.rand(shape, generator=g, dtype=torch.float64) + 0.5
    return x.to(dtype).to(device), t.to(device), w.to(device), gup.to(device)


def check_logit_case(case: dict, seed: int, group, p: int, grank: int, device: str,
                     log: CollectiveLog, failures: list[str]):
    """Run one case's forward; return what its backward needs."""
    x, t, w, gup = make_inputs(case, seed, device)
    widths = case["widths"]
    start, width = sum(widths[:grank]), widths[grank]
    shard = x[:, start:start + width]  # a strided view of the full logits
    if case.get("contiguous"):
        shard = shard.contiguous()
    shard = shard.detach().requires_grad_()
    weight = {None: None, "full": w, "shard": w[start:start + width]}[case["weight"]]
    kw = dict(group=group, weight=weight, reduction=case["reduction"],
              label_smoothing=case["eps"], vocab_start=start if case["given_start"] else None)
    mark = log.mark()
    if case.get("one_row"):  # (classes,) logits with a 0-d target
        loss = kld.vocab_parallel_cross_entropy(shard[4], t[4], **kw)
        x, t, gup = x[4:5], t[4:5], gup
    else:
        loss = kld.vocab_parallel_cross_entropy(shard, t, **kw)
    calls = log.since(mark)
    label = f"P={p} {case}"
    want = 1 if case["given_start"] else 2
    if [n for n, _ in calls] != ["all_gather"] * want:
        failures.append(f"{label}: forward collectives {calls}, expected {want} all_gather")
    if max(s for _, s in calls) > 3 + 5 * x.shape[0]:
        failures.append(f"{label}: a forward collective moved {calls} elements (O(rows) only)")
    red, eps = case["reduction"], case["eps"]
    wref = w if case["weight"] else None
    ref, _ = cross_entropy_reference(x, t, wref, -100, red, eps)
    scale = loss_error_scale(x, t, wref, -100, red, eps)
    res = check(loss.reshape(ref.shape), ref, x.dtype, TOLERANCES, scale)
    if not res:
        failures.append(f"{label}: loss {res.message}")
    dref = cross_entropy_backward_reference(x, t, wref, None, gup, -100, red, eps)
    dscale = backward_error_scale(x, t, wref, None, gup, -100, red, eps)
    cols = slice(start, start + width)
    return dict(loss=loss, shard=shard, gup=gup, dref=dref[:, cols], dscale=dscale[:, cols],
                dtype=x.dtype, label=label, one_row=bool(case.get("one_row")))


def finish_backward(run: dict, log: CollectiveLog, failures: list[str]) -> None:
    mark = log.mark()
    run["loss"].backward(run["gup"])
    if log.since(mark):
        failures.append(f"{run['label']}: backward communicated: {log.since(mark)}")
    grad = run["shard"].grad
    grad = grad[4:5] if run["one_row"] else grad
    res = check(grad, run["dref"], run["dtype"], GRAD_TOLERANCES, run["dscale"])
    if not res:
        failures.append(f"{run['label']}: dlogits {res.message}")


def logits_worker(rank: int, world: int, device: str) -> dict:
    log = CollectiveLog()
    failures: list[str] = []
    runs, losses = [], []
    for gi, (group, p, grank) in enumerate(groups_of(world)):
        for i, case in enumerate(logit_cases(p)):
            runs.append(check_logit_case(case, 1000 * gi + i, group, p, grank, device, log,
                                         failures))
            losses.append(runs[-1]["loss"].detach().double().reshape(-1))
    # the backwards, in an order that differs between ranks
    for run in (runs[::-1] if rank % 2 else runs):
        finish_backward(run, log, failures)
    # every rank of the world returned the same losses (world-group cases only, bit for bit)
    n_world = len(logit_cases(world))
    mine = torch.cat(losses[:n_world])
    every = [torch.empty_like(mine) for _ in range(world)]
    dist.all_gather(every, mine)
    if not all(torch.equal(e.nan_to_num(7.0), mine.nan_to_num(7.0)) for e in every):
        failures.append("the ranks returned different losses")
    failures += error_cases(rank, world, device)
    assert not failures, "\n".join(failures[:20])
    return {"cases": len(runs)}


def error_cases(rank: int, world: int, device: str) -> list[str]:
    """Bad input that needs the gathered layout raises on every rank, with one line."""
    failures = []
    start, stop = kld.vocab_shard(V, rank, world)
    x = torch.randn(6, stop - start, device=device)
    t = torch.randint(0, V, (6,), device=device)

    def expect(what, fn, match):
        try:
            fn()
        except UnsupportedInputError as e:
            if match not in str(e) or "\n" in str(e):
                failures.append(f"{what}: message {e}")
            return
        failures.append(f"{what}: did not raise")

    bad = t.clone()
    bad[2] = V
    expect("target out of range", lambda: kld.vocab_parallel_cross_entropy(x, bad),
           "target[2] = 37 is out of range for 37 classes")
    if world > 1:
        expect("overlapping shards", lambda: kld.vocab_parallel_cross_entropy(
            x, t, vocab_start=0), "do not tile")
    expect("weight of V + 1", lambda: kld.vocab_parallel_cross_entropy(
        x, t, weight=torch.ones(V + 1, device=device)), "neither this shard's")
    with trusted_inputs():  # no check: the row is NaN
        loss = kld.vocab_parallel_cross_entropy(x, bad, reduction="none", vocab_start=start)
    if not (bool(loss[2].isnan()) and int(loss.isnan().sum()) == 1):
        failures.append(f"trusted out-of-range target: loss {loss.tolist()}")
    return failures


# --------------------------------------------------------------------------- the linear form

def linear_cases(p: int) -> list[dict]:
    even = tuple(b - a for a, b in (kld.vocab_shard(V, r, p) for r in range(p)))
    combos = [dict(bias=False, softcap=None, weight=False, eps=0.0),
              dict(bias=True, softcap=2.0, weight=True, eps=0.1),
              dict(bias=True, softcap=None, weight=False, eps=0.2),
              dict(bias=False, softcap=3.0, weight=True, eps=0.0)]
    cases = []
    for red in REDUCTIONS:
        for c in combos:
            cases.append(dict(c, reduction=red, widths=UNEVEN[p][-1] if len(cases) % 2 else even,
                              chunk=4 if len(cases) % 3 else None, reduce=True, dtype="float64"))
    cases.append(dict(combos[1], reduction="mean", widths=even, chunk=5, reduce=False,
                      dtype="float64"))
    cases.append(dict(combos[1], reduction="sum", widths=even, chunk=None, reduce=True,
                      dtype="float32"))
    return cases


def check_linear_case(case: dict, seed: int, group, p: int, grank: int, device: str,
                      log: CollectiveLog, failures: list[str]) -> None:
    g = torch.Generator().manual_seed(seed)
    dtype = getattr(torch, case["dtype"])
    m, d = 11, 8
    h = torch.randn(m, d, generator=g, dtype=torch.float64)
    wmat = torch.randn(V, d, generator=g, dtype=torch.float64)
    b = torch.randn(V, generator=g, dtype=torch.float64)
    cw = torch.rand(V, generator=g, dtype=torch.float64) + 0.5
    t = torch.randint(0, V, (m,), generator=g)
    t[2::4] = -100
    gup = torch.rand((m,) if case["reduction"] == "none" else (), generator=g,
                     dtype=torch.float64) + 0.5
    widths = case["widths"]
    start, width = sum(widths[:grank]), widths[grank]
    cols = slice(start, start + width)

    def leaf(v):
        return v.to(device=device, dtype=dtype).detach().requires_grad_()

    hs, ws = leaf(h), leaf(wmat[cols])
    bs = leaf(b[cols]) if case["bias"] else None
    mark = log.mark()
    loss = kld.vocab_parallel_linear_cross_entropy(
        hs, ws, t.to(device), group=group, bias_shard=bs,
        class_weight=cw.to(device, dtype) if case["weight"] else None,
        reduction=case["reduction"], label_smoothing=case["eps"], softcap=case["softcap"],
        vocab_start=start, chunk_size=case["chunk"], reduce_hidden_grad=case["reduce"])
    label = f"linear P={p} {case}"
    fwd = log.since(mark)
    if [n for n, _ in fwd] != ["all_gather"] or fwd[0][1] > 3 + 5 * m:
        failures.append(f"{label}: forward collectives {fwd}")
    mark = log.mark()
    loss.backward(gup.to(device, dtype))
    bwd = [n for n, _ in log.since(mark)]
    if bwd != (["all_reduce"] if case["reduce"] and p > 1 else []):
        failures.append(f"{label}: backward collectives {bwd}")
    # float64 reference on the whole classifier
    hr, wr, br = (v.clone().requires_grad_() for v in (h, wmat, b))
    z = hr @ wr.T + (br if case["bias"] else 0.0)
    if case["softcap"]:
        z = case["softcap"] * torch.tanh(z / case["softcap"])
    ref = F.cross_entropy(z, t, weight=cw if case["weight"] else None,
                          reduction=case["reduction"], label_smoothing=case["eps"])
    ref.backward(gup)
    dh = hs.grad.double()
    if not case["reduce"] and p > 1:  # each rank holds its shard's part: sum them here
        dist.all_reduce(dh, group=group)
    tol = dict(rtol=1e-9, atol=1e-12) if dtype == torch.float64 else dict(rtol=1e-4, atol=1e-5)
    pairs = [("loss", loss, ref), ("dhidden", dh, hr.grad), ("dweight", ws.grad, wr.grad[cols])]
    if case["bias"]:
        pairs.append(("dbias", bs.grad, br.grad[cols]))
    for what, out, want in pairs:
        try:
            torch.testing.assert_close(out.double().cpu(), want, **tol)
        except AssertionError as e:
            failures.append(f"{label}: {what} {str(e).splitlines()[0:3]}")


def linear_worker(rank: int, world: int, device: str) -> dict:
    log = CollectiveLog()
    failures: list[str] = []
    n = 0
    for gi, (group, p, grank) in enumerate(groups_of(world)):
        for i, case in enumerate(linear_cases(p)):
            check_linear_case(case, 1000 * gi + i, group, p, grank, device, log, failures)
            n += 1
    assert not failures, "\n".join(failures[:20])
    return {"cases": n}


def both_workers(rank: int, world: int, device: str) -> dict:
    if rank % 2:  # odd ranks work in chunks of a few rows (the chunk loops of shard_math)
        shard_math.ROW_CHUNK_ELEMENTS = 48
    return {"logits": logits_worker(rank, world, device)["cases"],
            "linear": linear_worker(rank, world, device)["cases"]}


# --------------------------------------------------------------------------- the tests

def expected_cases(world: int) -> dict:
    sizes = [world] + [world // 2] * (1 if world > 1 else 0)
    return {"logits": sum(len(logit_cases(p)) for p in sizes),
            "linear": sum(len(linear_cases(p)) for p in sizes)}


@pytest.mark.parametrize("world", [2, 4])
def test_gloo_cpu(world):
    """P = world, and P = world / 2 in subgroups, on CPU (gloo): both losses, every case."""
    results = run_group(both_workers, world)
    assert results == [expected_cases(world)] * world


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA or not dist.is_nccl_available(),
                    reason="needs a CUDA GPU with NCCL")
def test_nccl_one_rank():
    """A 1-rank NCCL group on the GPU: both losses, every case (CUDA tensors)."""
    results = run_group(both_workers, 1, backend="nccl", device="cuda")
    assert results == [expected_cases(1)]


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")
def test_gloo_two_ranks_one_gpu():
    """Two gloo ranks sharing one GPU, over CUDA tensors: correctness and a backward without
    collectives (counted)."""
    results = run_group(both_workers, 2, backend="gloo", device="cuda")
    assert results == [expected_cases(2)] * 2


def test_local_errors_need_no_group():
    """Bad shapes, dtypes and keywords raise one line before anything touches a group."""
    x, t = torch.randn(4, 5), torch.tensor([0, 1, 2, 3])
    f = kld.vocab_parallel_cross_entropy
    cases = [
        (lambda: f(x[None], t), UnsupportedInputError, "logits_shard must be"),
        (lambda: f(x.long(), t), UnsupportedInputError, "logits_shard must be"),
        (lambda: f(x, t.float()), UnsupportedInputError, "target must be one integer"),
        (lambda: f(x, t[:3]), UnsupportedInputError, "target must be one integer"),
        (lambda: f(x, t, reduction="avg"), ValueError, "avg is not a valid value"),
        (lambda: f(x, t, label_smoothing=1.5), ValueError, "label_smoothing must be"),
        (lambda: f(x, t, weight=torch.ones(2, 5)), UnsupportedInputError, "weight must be"),
        (lambda: f(x, t, vocab_start=-1), UnsupportedInputError, "vocab_start must be"),
        (lambda: f(x, t, weight=torch.ones(7), vocab_start=3), UnsupportedInputError,
         "neither this shard's 5"),
        (lambda: f(x[0], t), UnsupportedInputError, "0-d target"),
        (lambda: kld.vocab_parallel_linear_cross_entropy(x, torch.randn(9, 4), t),
         UnsupportedInputError, "weight_shard must be"),
        (lambda: kld.vocab_parallel_linear_cross_entropy(x, torch.randn(9, 5), t,
                                                          softcap=0.0),
         UnsupportedInputError, "softcap must be"),
        (lambda: kld.vocab_parallel_linear_cross_entropy(x, torch.randn(9, 5), t,
                                                          bias_shard=torch.randn(8)),
         UnsupportedInputError, "bias_shard must be"),
    ]
    for fn, exc, match in cases:
        with pytest.raises(exc, match=match) as e:
            fn()
        assert "\n" not in str(e.value)
    if not dist.is_initialized():
        with pytest.raises(RuntimeError, match="not initialized"):
            f(x, t)


def test_vocab_shard_tiles():
    for v, p in [(37, 4), (128256, 2), (5, 8), (0, 3)]:
        spans = [kld.vocab_shard(v, r, p) for r in range(p)]
        assert spans[0][0] == 0 and spans[-1][1] == v
        assert all(a[1] == b[0] for a, b in zip(spans, spans[1:]))
        assert max(b - a for a, b in spans) - min(b - a for a, b in spans) <= 1
