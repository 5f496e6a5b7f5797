"""kernel_lab.cross_entropy beyond (rows, classes) class indices, against F.cross_entropy:
K-dimensional inputs (class dim 1), class-probability targets (1-D logits too), and double
backward."""

import pytest
import torch
import torch.nn.functional as F
from conftest import DEVICE, HAS_CUDA

import kernel_lab

REDUCTIONS = ("mean", "sum", "none")


def _variants():
    return [None, "triton_cross_entropy"] + (["cuda_cross_entropy"] if HAS_CUDA else [])


def _grads(fn, x, *args, g=None, **kw):
    xx = x.detach().clone().requires_grad_()
    loss = fn(xx, *args, **kw)
    loss.backward(torch.ones_like(loss) if g is None else g)
    return loss.detach(), xx.grad


@pytest.mark.parametrize("variant", _variants())
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("channels_last", [False, True])
def test_k_dimensional_inputs(variant, reduction, channels_last):
    """(N, C, d1, d2) logits with (N, d1, d2) targets, weights, smoothing and ignored entries."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(2, 11, 3, 5, generator=gen).to(DEVICE)
    if channels_last:  # class dim innermost in memory: the rows are a view
        x = x.to(memory_format=torch.channels_last)
    t = torch.randint(0, 11, (2, 3, 5), generator=gen).to(DEVICE)
    t[0, 1] = -100
    w = (torch.rand(11, generator=gen) + 0.5).to(DEVICE)
    kw = dict(weight=w, reduction=reduction, label_smoothing=0.1)
    g = torch.rand(2, 3, 5, device=DEVICE) + 0.5 if reduction == "none" else None
    a, ga = _grads(kernel_lab.cross_entropy, x, t, variant=variant, g=g, **kw)
    b, gb = _grads(F.cross_entropy, x, t, g=g, **kw)
    assert a.shape == b.shape
    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(ga, gb, rtol=1e-4, atol=1e-6)


def test_k_dimensional_target_shape_must_match():
    x = torch.randn(2, 4, 3, 5, device=DEVICE)
    with pytest.raises(ValueError, match=r"got \(2, 4, 3, 5\) and \(2, 5, 3\)"):
        kernel_lab.cross_entropy(x, torch.zeros(2, 5, 3, dtype=torch.long, device=DEVICE))


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("shape", [(6, 9), (9,), (2, 9, 4)])
def test_probability_targets(reduction, weighted, shape):
    """A float target shaped like the logits (distillation, mixup), as F.cross_entropy."""
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(shape, generator=gen, dtype=torch.float64).to(DEVICE)
    p = torch.softmax(torch.randn(shape, generator=gen, dtype=torch.float64), -1 if len(
        shape) == 1 else 1).to(DEVICE)
    w = (torch.rand(9, generator=gen, dtype=torch.float64) + 0.5).to(DEVICE) if weighted else None
    kw = dict(weight=w, reduction=reduction, label_smoothing=0.2)
    a, ga = _grads(kernel_lab.cross_entropy, x, p, **kw)
    b, gb = _grads(F.cross_entropy, x, p, **kw)
    torch.testing.assert_close(a, b)
    torch.testing.assert_close(ga, gb)
    mod = kernel_lab.CrossEntropyLoss(weight=w, reduction=reduction, label_smoothing=0.2)
    torch.testing.assert_close(mod(x, p), b)


@pytest.mark.parametrize("variant", [None, "triton_cross_entropy"])
@pytest.mark.parametrize("kw", [dict(), dict(reduction="none", label_smoothing=0.2),
                                dict(reduction="sum", weighted=True)],
                         ids=["mean", "none-smoothed", "sum-weighted"])
def test_double_backward(variant, kw):
    """gradgradcheck through the drop-in (the backward's own gradient: the PyTorch formula)."""
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(5, 7, generator=gen, dtype=torch.float64).to(DEVICE).requires_grad_()
    t = torch.tensor([1, -100, 6, 0, 3], device=DEVICE)
    w = (torch.rand(7, generator=gen, dtype=torch.float64) + 0.5).to(DEVICE) if kw.get(
        "weighted") else None
    red, eps = kw.get("reduction", "mean"), kw.get("label_smoothing", 0.0)

    def fn(x):
        return kernel_lab.cross_entropy(x, t, w, reduction=red, label_smoothing=eps,
                                        variant=variant)

    assert torch.autograd.gradgradcheck(fn, (x,))
    # and the same Hessian-vector product as PyTorch's
    v = torch.randn(5, 7, generator=gen, dtype=torch.float64).to(DEVICE)
    hv = []
    for f in (fn, lambda x: F.cross_entropy(x, t, w, reduction=red, label_smoothing=eps)):
        (gx,) = torch.autograd.grad(f(x).sum(), x, create_graph=True)
        hv.append(torch.autograd.grad((gx * v).sum(), x)[0])
    torch.testing.assert_close(hv[0], hv[1])
