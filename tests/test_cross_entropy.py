"""kernel_lab.cross_entropy: the drop-in against F.cross_entropy, its errors, autograd, the
custom op (opcheck, compile, CUDA graphs) and the fused in-place mode.

The registry's suites (test_correctness) already check every variant of ``cross_entropy`` and
``cross_entropy_backward`` against the float64 reference, edge cases included; this file checks
what only the public function and its autograd do.
"""

import pytest
import torch
import torch.nn.functional as F
from conftest import DEVICE, HAS_CUDA, needs_cuda

import kernel_lab
from kernel_lab.ops.cross_entropy.op import lse_dtype

KWARGS = [dict(reduction=r, label_smoothing=s, weighted=w)
          for r in ("mean", "sum", "none") for s in (0.0, 0.1) for w in (False, True)]


def _case(m=9, c=67, dtype=torch.float32, device=DEVICE, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(m, c, generator=g) * 2).to(device, dtype)
    t = torch.randint(0, c, (m,), generator=g).to(device)
    t[::4] = -100
    w = (torch.rand(c, generator=g) + 0.5).to(device, dtype)
    return x, t, w


def _both(x, t, w, kw, **lab):
    """(loss, dlogits) of the lab's drop-in and of F.cross_entropy on copies of x."""
    out = []
    for fn in (lambda *a, **k: kernel_lab.cross_entropy(*a, **k, **lab), F.cross_entropy):
        xx = x.detach().clone().requires_grad_()
        loss = fn(xx, t, w if kw["weighted"] else None, reduction=kw["reduction"],
                  label_smoothing=kw["label_smoothing"])
        gen = torch.Generator().manual_seed(1)  # the same upstream gradient for both
        g = (torch.rand(loss.shape, generator=gen) + 0.5).to(loss.device, loss.dtype)
        loss.backward(g)
        out.append((loss.detach(), xx.grad, g))
    return out


@pytest.mark.parametrize("kw", KWARGS, ids=lambda k: "-".join(map(str, k.values())))
def test_matches_torch(kw):
    x, t, w = _case()
    (a, ga, _), (b, gb, _) = _both(x, t, w, kw)
    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(ga, gb, rtol=1e-4, atol=1e-6)


def test_module_one_dim_logits_and_int32_targets():
    x, t, w = _case()
    mod = kernel_lab.CrossEntropyLoss(weight=w, label_smoothing=0.2)
    ref = torch.nn.CrossEntropyLoss(weight=w, label_smoothing=0.2)
    torch.testing.assert_close(mod(x, t.int()), ref(x, t))
    torch.testing.assert_close(kernel_lab.cross_entropy(x[1], t[1]), F.cross_entropy(x[1], t[1]))
    assert "label_smoothing=0.2" in repr(mod)


def test_every_row_ignored_gives_pytorchs_nan():
    x, t, _ = _case()
    t[:] = -100
    assert torch.isnan(kernel_lab.cross_entropy(x, t)) and torch.isnan(F.cross_entropy(x, t))
    assert kernel_lab.cross_entropy(x, t, reduction="sum") == 0


def test_bad_inputs_raise_before_running():
    x, t, _ = _case()
    bad = t.clone()
    bad[3] = x.shape[1]
    with pytest.raises(kernel_lab.UnsupportedInputError, match=r"target\[3\] = 67 is out of"):
        kernel_lab.cross_entropy(x, bad, validate="sync")
    bad[3] = -1
    for v in kernel_lab.variants("cross_entropy"):
        if v.supports(x, bad) is None:
            with pytest.raises(kernel_lab.UnsupportedInputError, match="out of range"):
                kernel_lab.run(v.name, x, bad)
    with pytest.raises(ValueError, match="not a valid value for reduction"):
        kernel_lab.cross_entropy(x, t, reduction="avg")
    with pytest.raises(ValueError, match="label_smoothing must be between"):
        kernel_lab.cross_entropy(x, t, label_smoothing=1.5)
    with pytest.raises(ValueError, match=r"takes logits \(N, C\)"):
        kernel_lab.cross_entropy(x[None], t[None])  # (1, 9, 67) wants targets (1, 67)
    with pytest.raises(ValueError, match="validate must be one of"):
        kernel_lab.cross_entropy(x, t, validate="later")
    with pytest.raises(kernel_lab.UnsupportedInputError, match="integer tensor"):
        kernel_lab.cross_entropy(x, t.float())  # one float a row: neither indices nor probabilities
    with pytest.raises(kernel_lab.UnsupportedInputError, match=r"weight must be a \(67,\)"):
        kernel_lab.cross_entropy(x, t, torch.ones(5, device=DEVICE))


def _variants(backend):
    fwd = [v.name for v in kernel_lab.variants("cross_entropy", backend)]
    bwd = [v.name for v in kernel_lab.variants("cross_entropy_backward", backend)]
    return list(zip(fwd, bwd))


def _gradcheck_pairs():
    pairs = _variants("torch") + _variants("triton")
    return pairs + (_variants("cuda") if HAS_CUDA else [])


@pytest.mark.parametrize("fwd,bwd", _gradcheck_pairs())
@pytest.mark.parametrize("kw", [KWARGS[0], KWARGS[7], KWARGS[11]], ids=["mean", "sum-w-s",
                                                                        "none-w-s"])
def test_gradcheck_float64(fwd, bwd, kw):
    x, t, w = _case(5, 13, torch.float64)
    x.requires_grad_()
    weight = w if kw["weighted"] else None

    def fn(x):
        return kernel_lab.cross_entropy(x, t, weight, reduction=kw["reduction"],
                                        label_smoothing=kw["label_smoothing"], variant=fwd,
                                        backward_variant=bwd)

    assert torch.autograd.gradcheck(fn, (x,))


def test_opcheck():
    x, t, w = _case(6, 40)
    op = torch.ops.kernel_lab.cross_entropy
    x.requires_grad_()
    t3 = torch.where(t == -100, 3, t)
    for args in ((x, t, None, -100, "mean", 0.0), (x, t3, w, 3, "none", 0.3)):
        torch.library.opcheck(op, (*args, "auto", "auto"))


def test_compile_fullgraph():
    """One inductor graph on the CPU (seconds): the custom op with its fake kernel inside."""
    x, t, w = _case(6, 40)
    lin = torch.nn.Linear(40, 40, device=DEVICE)

    def step(x):
        return kernel_lab.cross_entropy(lin(x), t, w, label_smoothing=0.1)

    loss = torch.compile(step, fullgraph=True)(x)
    loss.backward()
    got = lin.weight.grad.clone()
    lin.zero_grad()
    ref = F.cross_entropy(lin(x), t, w, label_smoothing=0.1)
    ref.backward()
    torch.testing.assert_close(loss, ref, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(got, lin.weight.grad, rtol=1e-4, atol=1e-6)


@needs_cuda
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("c", [50257, 32000, 128256])
def test_cuda_grads_match_torch_at_vocab_scale(dtype, c):
    x, t, w = _case(33, c, dtype, "cuda", seed=c)
    for kw in (KWARGS[0], KWARGS[11]):
        (a, ga, g), (b, gb, _) = _both(x, t, w, kw, variant="cuda_cross_entropy",
                                       backward_variant="cuda_cross_entropy_backward")
        op, bop = kernel_lab.get_op("cross_entropy"), kernel_lab.get_op("cross_entropy_backward")
        weight = w if kw["weighted"] else None
        kk = dict(reduction=kw["reduction"], label_smoothing=kw["label_smoothing"])
        lse = torch.logsumexp(x.to(lse_dtype(dtype)), 1)
        assert op.check((a, lse), x, t, weight, **kk).ok
        res = bop.check(ga, x, t, weight, lse, g, **kk)
        assert res.ok, res.message
        if dtype != torch.float16:  # PyTorch's fp16 loss rounds its log-probabilities to fp16
            torch.testing.assert_close(a.float(), b.float(), rtol=2e-2, atol=1e-3)


@needs_cuda
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_fused_inplace_backward(dtype, reduction):
    """inplace_backward: the same loss and gradient, written into the logits' own buffer."""
    x, t, _ = _case(17, 50257, dtype, "cuda")
    ref_x = x.clone().requires_grad_()
    ref = kernel_lab.cross_entropy(ref_x, t, reduction=reduction, label_smoothing=0.1)
    g = torch.rand_like(ref) + 0.5 if reduction == "none" else torch.tensor(2.0, device="cuda",
                                                                           dtype=dtype)
    ref.backward(g)
    leaf = x.clone().requires_grad_()
    logits = leaf * 1  # the buffer the forward overwrites
    ptr = logits.data_ptr()
    loss = kernel_lab.cross_entropy(logits, t, reduction=reduction, label_smoothing=0.1,
                                    inplace_backward=True)
    torch.testing.assert_close(loss, ref.detach())
    loss.backward(g)
    assert logits.data_ptr() == ptr
    torch.testing.assert_close(leaf.grad, ref_x.grad)


@needs_cuda
def test_cuda_graph_capture_and_bad_targets_during_capture():
    x, t, w = _case(8, 4096, torch.bfloat16, "cuda")
    x.requires_grad_()
    kernel_lab.cross_entropy(x, t, w).backward()  # warm: compile, plans
    graph = torch.cuda.CUDAGraph()
    x.grad = None
    with torch.cuda.graph(graph):
        loss = kernel_lab.cross_entropy(x, t, w)
        loss.backward()
    x.grad.zero_()
    graph.replay()
    ref_x = x.detach().clone().requires_grad_()
    ref = F.cross_entropy(ref_x, t, w)
    ref.backward()
    torch.testing.assert_close(loss.float(), ref.float(), rtol=2e-2, atol=1e-3)
    torch.testing.assert_close(x.grad.float(), ref_x.grad.float(), rtol=2e-2, atol=1e-4)
    t[1] = 10 ** 6  # out of range after capture: the replay cannot raise, so NaN, no fault
    graph.replay()
    torch.cuda.synchronize()
    assert torch.isnan(loss)
    with pytest.raises(kernel_lab.UnsupportedInputError, match=r"target\[1\] = 1000000"):
        kernel_lab.cross_entropy(x, t.clamp(0, 4095))  # ... and the next call says so


@needs_cuda
@pytest.mark.parametrize("mode", [None, "reduce-overhead"])
def test_compile_cuda(mode):
    _, t, w = _case(64, 32000, torch.bfloat16, "cuda")
    # a 1024 -> 32000 head: the vocabulary the CE kernels see, ~0.1 GB of weight and gradient
    x = torch.randn(64, 1024, device="cuda", dtype=torch.bfloat16)
    lin = torch.nn.Linear(1024, 32000, bias=False, device="cuda", dtype=torch.bfloat16)

    def step(x):
        return kernel_lab.cross_entropy(lin(x), t, w, label_smoothing=0.1)

    compiled = torch.compile(step, fullgraph=True, mode=mode)
    for _ in range(3):
        loss = compiled(x)
        loss.backward()
        got = lin.weight.grad.clone()
        lin.zero_grad()
        ref = F.cross_entropy(lin(x), t, w, label_smoothing=0.1)
        ref.backward()
        torch.testing.assert_close(loss.float(), ref.float(), rtol=2e-2, atol=1e-3)
        torch.testing.assert_close(got.float(), lin.weight.grad.float(), rtol=5e-2, atol=1e-3)
        lin.zero_grad()


def _grad_error(fwd, bwd, x, t, w, kw):
    xx = x.detach().clone().requires_grad_()
    kernel_lab.cross_entropy(xx, t, w, variant=fwd, backward_variant=bwd, **kw).sum().backward()
    ref = x.detach().double().requires_grad_()
    F.cross_entropy(ref, t, None if w is None else w.double(), **kw).sum().backward()
    return (xx.grad.double() - ref.grad).abs().max().item(), ref.grad.abs().max().item()


@pytest.mark.parametrize("fwd,bwd", _variants("torch") + _variants("triton")
                         + (_variants("cuda") if HAS_CUDA else []))
@pytest.mark.parametrize("shift", [0.0, 300.0, -700.0])
def test_fp32_gradient_as_exact_as_torchs(fwd, bwd, shift):
    """fp32 gradients within 2x PyTorch's own error against float64 (+ 4 ulp of the largest
    gradient: the coefficients' own rounding), at any logit magnitude: p from (x - max) -
    log(sum), never from an lse rounded to fp32, which is off by ulp(|lse|) * p (~1e-5 at
    |lse| = 300). The OpInfo case (2 x 3, class weights, reduction "none") and rows of logits
    in the hundreds."""
    g = torch.Generator().manual_seed(7)
    for m, c, scale in ((2, 3, 1.0), (6, 50, 100.0)):
        x = (torch.randn(m, c, generator=g) * scale + shift).to(DEVICE)
        t = torch.randint(0, c, (m,), generator=g).to(DEVICE)
        w = (torch.rand(c, generator=g) + 0.5).to(DEVICE)
        for kw in (dict(reduction="none"), dict(label_smoothing=0.1)):
            lab, top = _grad_error(fwd, bwd, x, t, w, kw)
            xx = x.detach().clone().requires_grad_()
            F.cross_entropy(xx, t, w, **kw).sum().backward()
            ref = x.detach().double().requires_grad_()
            F.cross_entropy(ref, t, w.double(), **kw).sum().backward()
            torch_err = (xx.grad.double() - ref.grad).abs().max().item()
            assert lab <= 2 * torch_err + 4 * 2**-24 * top, (m, c, kw, lab, torch_err)
