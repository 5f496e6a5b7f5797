"""kernel_lab.linear_cross_entropy: the drop-in and its gradients against float64, every
keyword, gradcheck, torch.compile, errors before launch; on a GPU, real vocabularies and memory.
(The registry-wide suites check every variant of both ops on their cases and edge cases.)"""

import pytest
import torch
from conftest import DEVICE, needs_cuda

import kernel_lab
from kernel_lab.base.errors import UnsupportedInputError
from kernel_lab.core.reference import check
from kernel_lab.ops.linear_cross_entropy import torch_variants
from kernel_lab.ops.linear_cross_entropy.op import backward_reference, make_inputs, reference

FORWARDS = ("torch_linear_cross_entropy", "torch_chunked_linear_cross_entropy", None)
KEYWORDS = [
    {},
    {"reduction": "sum", "label_smoothing": 0.1},
    {"reduction": "none", "softcap": 4.0},
    {"softcap": 3.0, "label_smoothing": 0.2, "bias": True},
    {"reduction": "sum", "bias": True, "ignore_index": 3},
]


def _inputs(t, v, dtype, seed, d=40, bias=False):
    g = torch.Generator().manual_seed(seed)
    h, w, tgt = make_inputs((t, v), dtype, DEVICE, g, d=d)
    b = (torch.randn(v, generator=g) * 0.5).to(DEVICE, dtype) if bias else None
    return h, w, tgt, b


def _assert_loss_matches_float64(loss, h, w, t, b=None, **kw):
    """``loss`` (in h's dtype) against the float64 reference under the lab's policy for the
    op's "loss" output: the op's table for h's dtype and the op's error scale (what
    ``Op.check`` applies), not assert_close's float64 default."""
    op = kernel_lab.get_op("linear_cross_entropy")
    spec = next(o for o in op.outputs if o.name == "loss")
    ref = reference(h, w, t, b, **kw)[0]
    res = check(loss, ref, h.dtype, spec.tolerances or op.tolerances,
                scale=spec.error_scale(h, w, t, b, **kw))
    assert res, res.message


@pytest.fixture
def small_chunks(monkeypatch):
    """Chunks of a few rows, so the chunked variant really loops (and its dW accumulates)."""
    monkeypatch.setattr(torch_variants, "MAX_CHUNK_BYTES", 5 * 301 * 4)
    monkeypatch.setattr(torch_variants, "MIN_CHUNK_BYTES", 0)


@pytest.mark.parametrize("variant", FORWARDS)
@pytest.mark.parametrize("kw", KEYWORDS, ids=lambda k: "-".join(f"{a}{b}" for a, b in k.items())
                         or "default")
def test_loss_and_gradients_match_float64(variant, kw, small_chunks):
    kw = dict(kw)
    bias = kw.pop("bias", False)
    h, w, t, b = _inputs(23, 301, torch.float32, 1, bias=bias)
    if "ignore_index" in kw:
        t = torch.where(t == -100, kw["ignore_index"], t)
    h.requires_grad_(True)
    w.requires_grad_(True)
    if b is not None:
        b.requires_grad_(True)
    backward = variant and variant + "_backward"
    loss = kernel_lab.linear_cross_entropy(h, w, t, b, variant=variant,
                                           backward_variant=backward, **kw)
    opkw = {**kw, "softcap": kw.get("softcap", 0.0)}
    ref, _lse = reference(h, w, t, b, **opkw)
    torch.testing.assert_close(loss.double(), ref, rtol=1e-5, atol=1e-5)
    g = torch.rand(loss.shape, dtype=torch.float64, device=loss.device) + 0.5
    loss.backward(g.to(loss.dtype))
    want = backward_reference(h, w, t, b, None, g, **opkw)
    torch.testing.assert_close(h.grad.double(), want[0], rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(w.grad.double(), want[1], rtol=1e-4, atol=1e-6)
    if b is not None:
        torch.testing.assert_close(b.grad.double(), want[2], rtol=1e-4, atol=1e-6)


def test_bf16_true_class_gradient_and_loss(small_chunks):
    """bf16: the loss within bf16's rounding of the float64 answer, and the target logits'
    gradient (p_t - 1: where in-place rounding once lost up to 100 %, Liger PR 1329) within
    bf16 tolerance, for the chunked variant (gradients in the forward) that "auto" runs."""
    h, w, t, _ = _inputs(40, 301, torch.bfloat16, 2)
    h[::3] *= 4  # confident rows: p_t near 1, the true class's gradient small
    for variant in (None, "torch_chunked_linear_cross_entropy"):
        hh = h.clone().requires_grad_(True)
        ww = w.clone().requires_grad_(True)
        loss = kernel_lab.linear_cross_entropy(hh, ww, t, variant=variant, backward_variant=(
            variant and variant + "_backward"))
        ref, _ = reference(h, w, t)
        assert abs(loss.double() - ref) <= 1.2e-2 * abs(ref) + 1e-3
        loss.backward()
        dh, dw, _ = backward_reference(h, w, t, None, None, torch.tensor(1.0, dtype=torch.float64))
        # the true class's part of dhidden: (p_t - 1) * W[t] dominates on confident rows
        err = (hh.grad.double() - dh).norm() / dh.norm()
        assert err < 2e-2, (variant, float(err))
        assert (ww.grad.double() - dw).norm() / dw.norm() < 2e-2


def test_gradcheck_float64():
    h, w, t, b = _inputs(5, 13, torch.float64, 3, d=6, bias=True)
    for variant in ("torch_linear_cross_entropy", "torch_chunked_linear_cross_entropy"):
        def f(h, w, b, variant=variant):
            return kernel_lab.linear_cross_entropy(h, w, t, b, softcap=2.0, label_smoothing=0.1,
                                                   variant=variant,
                                                   backward_variant=variant + "_backward")
        args = (h.requires_grad_(True), w.requires_grad_(True), b.requires_grad_(True))
        assert torch.autograd.gradcheck(f, args)


def test_grads_in_forward_path_matches_recomputing_backward(small_chunks):
    """"auto" with a mean loss forms gradients in the forward; naming the chunked backward
    through the custom op recomputes them: both agree."""
    h, w, t, b = _inputs(17, 301, torch.float32, 4, bias=True)
    grads = []
    for kw in ({}, {"variant": "torch_chunked_linear_cross_entropy", "backward_variant":
                    "torch_linear_cross_entropy_backward"}):
        args = [x.clone().requires_grad_(True) for x in (h, w, b)]
        kernel_lab.linear_cross_entropy(args[0], args[1], t, args[2], **kw).backward()
        grads.append([a.grad for a in args])
    for a, b_ in zip(*grads):
        torch.testing.assert_close(a, b_, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
def test_a_mean_step_with_every_row_ignored_has_torchs_zero_gradient(dtype):
    """No row kept: the mean is 0 / 0 (NaN) and the gradients 0, as ``F.cross_entropy`` gives,
    whether the mean's 1 / rows is folded into the forward's gradients (fp32) or applied in the
    backward (fp16)."""
    h, w, t, _ = _inputs(9, 30, dtype, 12)
    t = torch.full_like(t, -100)
    hh, ww = h.clone().requires_grad_(True), w.clone().requires_grad_(True)
    loss = kernel_lab.linear_cross_entropy(hh, ww, t)
    loss.backward()
    assert loss.isnan()
    assert torch.equal(hh.grad, torch.zeros_like(h)) and torch.equal(ww.grad, torch.zeros_like(w))


def test_the_mean_is_folded_into_the_forward_and_a_unit_backward_scales_nothing(monkeypatch):
    """"auto"'s mean step forms its gradients already over the kept rows, so the backward's
    scale is by the upstream gradient alone: 1 for ``loss.backward()`` (nothing to read), and
    any other value still applied (against float64)."""
    h, w, t, _ = _inputs(21, 301, torch.float32, 13)
    t[::4] = -100
    scales = []
    real = torch_variants.scale_
    monkeypatch.setattr("kernel_lab.ops.linear_cross_entropy.api.scale_",
                        lambda x, s: scales.append(float(s)) or real(x, s))
    for g in (1.0, 2.5):
        hh, ww = h.clone().requires_grad_(True), w.clone().requires_grad_(True)
        kernel_lab.linear_cross_entropy(hh, ww, t).backward(torch.tensor(g, device=DEVICE))
        want = backward_reference(h, w, t, None, None,
                                  torch.tensor(g, dtype=torch.float64, device=DEVICE))
        torch.testing.assert_close(hh.grad.double(), want[0], rtol=1e-4, atol=1e-6)
        torch.testing.assert_close(ww.grad.double(), want[1], rtol=1e-4, atol=1e-6)
    assert scales == [1.0, 1.0, 2.5, 2.5]  # dhidden and dweight, by the upstream gradient alone


def test_compile_fullgraph_and_leading_dims():
    h, w, t, b = _inputs(12, 50, torch.float32, 5, bias=True)
    h3 = h.reshape(3, 4, -1).requires_grad_(True)
    f = torch.compile(lambda h, w, t, b: kernel_lab.linear_cross_entropy(h, w, t, b, softcap=5.0),
                      fullgraph=True)
    loss = f(h3, w, t.reshape(3, 4), b)
    loss.backward()
    ref, _ = reference(h, w, t, b, softcap=5.0)
    torch.testing.assert_close(loss.double(), ref, rtol=1e-5, atol=1e-6)
    dh = backward_reference(h, w, t, b, None, torch.tensor(1.0, dtype=torch.float64),
                            softcap=5.0)[0]
    torch.testing.assert_close(h3.grad.reshape(12, -1).double(), dh, rtol=1e-4, atol=1e-7)


def test_module_and_none_reduction_shape():
    h, w, t, _ = _inputs(6, 30, torch.float32, 6)
    loss = kernel_lab.LinearCrossEntropyLoss(reduction="none")(h.reshape(2, 3, -1), w,
                                                               t.reshape(2, 3))
    assert loss.shape == (2, 3)
    _assert_loss_matches_float64(loss.reshape(-1), h, w, t, reduction="none")


@pytest.mark.parametrize("bad,match", [
    ("d", "last dims"), ("dtype", "must match"), ("target", "out of range"),
    ("bias", "bias must be"), ("shape", "same leading shape"), ("reduction", "not a valid"),
])
def test_one_line_errors_before_launch(bad, match):
    h, w, t, _ = _inputs(4, 10, torch.float32, 7)
    kw = {}
    if bad == "d":
        w = w[:, :-1]
    elif bad == "dtype":
        w = w.double()
    elif bad == "target":
        t = t.clone()
        t[1] = 10
    elif bad == "bias":
        kw["bias"] = torch.zeros(9)
    elif bad == "shape":
        t = t[:3]
    else:
        kw["reduction"] = "avg"
    with pytest.raises((ValueError, UnsupportedInputError), match=match) as e:
        kernel_lab.linear_cross_entropy(h, w, t, **kw)
    assert "\n" not in str(e.value)


def test_empty_tokens():
    h, w, t, _ = _inputs(0, 10, torch.float32, 8)
    assert kernel_lab.linear_cross_entropy(h, w, t, reduction="sum") == 0


# -- GPU ----------------------------------------------------------------------------------------
@needs_cuda
@pytest.mark.parametrize("variant", ["torch_chunked_linear_cross_entropy"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_gpu_vocabulary_scale(variant, dtype):
    """256 tokens x d 512 x V 50257 (odd V, ragged last tile) with bias and softcap: loss and
    gradients against float64, no NaN anywhere."""
    h, w, t, b = _inputs(256, 50257, dtype, 9, d=512, bias=True)
    args = [x.clone().requires_grad_(True) for x in (h, w, b)]
    loss = kernel_lab.linear_cross_entropy(args[0], args[1], t, args[2], softcap=30.0,
                                           variant=variant, backward_variant=variant + "_backward")
    loss.backward()
    ref, _ = reference(h, w, t, b, softcap=30.0)
    want = backward_reference(h, w, t, b, None, torch.tensor(1.0, dtype=torch.float64,
                                                             device=DEVICE), softcap=30.0)
    rtol = 1.2e-2 if dtype == torch.bfloat16 else 1e-4
    assert abs(float(loss) - float(ref)) <= rtol * abs(float(ref))
    for got, exp in zip((a.grad for a in args), want):
        assert int(got.isnan().sum()) == 0
        assert float((got.double() - exp).norm() / exp.norm()) < rtol


@needs_cuda
def test_gpu_chunked_holds_an_eighth_of_the_baselines_memory():
    """One bf16 step at 4096 x 1024 x 128256: the chunked variant's peak above its inputs is at
    most 1/8 of the materializing baseline's (gradients excluded from neither)."""
    h, w, t, _ = _inputs(4096, 128256, torch.bfloat16, 10, d=1024)
    peaks = {}
    for variant in ("torch_linear_cross_entropy", "torch_chunked_linear_cross_entropy"):
        hh, ww = h.clone().requires_grad_(True), w.clone().requires_grad_(True)
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        kernel_lab.linear_cross_entropy(hh, ww, t, variant=variant).backward()
        torch.cuda.synchronize()
        peaks[variant] = torch.cuda.max_memory_allocated() - before
        del hh, ww
    assert peaks["torch_chunked_linear_cross_entropy"] * 8 <= peaks["torch_linear_cross_entropy"]


@pytest.mark.parametrize("variant", [None, "torch_chunked_linear_cross_entropy"])
def test_example_model_tracks_pytorchs_loss_curve(variant):
    """The tiny attention model with linear_cross_entropy as its head + loss: PyTorch's loss
    curve step by step ("auto": gradients formed in the forward; the named chunked variant:
    its backward recomputes each chunk's logits)."""
    from kernel_lab.examples import train_tiny_attention as example

    cfg = example.Config(steps=12, device=DEVICE, loss="linear_cross_entropy")
    ref, lab = example.compare(cfg, lce_variant=variant, lce_backward_variant=(
        variant and variant + "_backward"))
    assert ref[-1] < ref[0] - 0.1  # it learns
    assert max(abs(a - b) for a, b in zip(ref, lab)) < 1e-3


def test_custom_op_opcheck_without_bias():
    """torch.library.opcheck: schema, fake kernel, autograd registration and AOT dispatch, with
    the optional bias left out (its gradient slot dropped by the contract)."""
    h, w, t, _ = _inputs(6, 20, torch.float32, 11)
    args = (h.requires_grad_(True), w.requires_grad_(True), t, None, -100, "sum", 0.1, 2.0,
            "auto", "auto")
    result = torch.library.opcheck(torch.ops.kernel_lab.linear_cross_entropy.default, args)
    assert set(result.values()) == {"SUCCESS"}


def test_chunks_fit_the_budget_on_whole_tiles():
    """The chunked variant's tokens a chunk: as many as fit MAX_CHUNK_BYTES (as many chunk-sized
    buffers as the path holds), in 256-row multiples (64 where fewer fit), no more than an even
    share of the tokens over the fewest chunks."""
    cpu = torch.device("cpu")
    budget = torch_variants.MAX_CHUNK_BYTES
    for tokens, vocab, size in ((8192, 128256, 2), (8192, 256000, 2), (16384, 128256, 2),
                                (8192, 151936, 4), (4096, 50257, 2), (23, 301, 4),
                                (300, 301, 4), (8192, 2_000_000, 2)):
        for copies in (1, 2, 6):
            rows = torch_variants.chunk_rows(tokens, vocab, size, cpu, copies)
            most = max(1, budget // (copies * vocab * size))
            even = -(-tokens // -(-tokens // most))
            assert 1 <= rows <= min(tokens, most), (tokens, vocab, copies, rows)
            assert rows <= -(-even // 256) * 256, (tokens, vocab, copies, rows)  # even share
            unit = 256 if most >= 256 else 64
            if rows != tokens and most >= 64:
                assert rows % unit == 0, (tokens, vocab, copies, rows)
                assert rows + unit > min(most, even + unit - 1), (tokens, vocab, copies, rows)
    # bf16 with the gradient over the logits: 4 chunks of 2048 tokens at 128256 (501 MiB),
    # 8 of 1024 at 256000, 6 of 1536 at 151936; with the gradient beside: 8 of 1024
    assert torch_variants.chunk_rows(8192, 128256, 2, cpu, 1) == 2048
    assert torch_variants.chunk_rows(8192, 256000, 2, cpu, 1) == 1024
    assert torch_variants.chunk_rows(8192, 151936, 2, cpu, 1) == 1536
    assert torch_variants.chunk_rows(8192, 128256, 2, cpu, 2) == 1024
    assert torch_variants.chunk_rows(300, 301, 4, cpu) == 300
    assert torch_variants.chunk_rows(0, 5, 4, cpu) == 1
    assert budget < 1 << 29  # under 0.5 GiB: room for the per-token vectors


@pytest.mark.parametrize("value", [0.37, 1.0])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32, torch.float64], ids=str)
def test_the_gradient_scale_rounds_once_without_a_sync(dtype, value):
    """scale_ (the chunked step's backward: dweight and dhidden times the upstream gradient)
    gives the product in fp32 (fp64 for fp64) rounded once, on an odd length: mul_'s bits for
    fp32 / fp64 (bf16's mul_ would round the scale to bf16 first). On a GPU by its Triton kernel
    with syncs forbidden; on a CPU the same kernel runs interpreted (bf16 there: within one
    rounding)."""
    n = 3 * torch_variants.SCALE_BLOCK + 5
    x = torch.randn(n, device=DEVICE).to(dtype)
    s = torch.tensor(value, device=DEVICE,
                     dtype=torch.float64 if dtype == torch.float64 else torch.float32)
    want = (x.to(s.dtype) * s).to(dtype)
    if DEVICE == "cuda":
        torch.cuda.set_sync_debug_mode("error")
        try:
            out = torch_variants.scale_(x, s)
        finally:
            torch.cuda.set_sync_debug_mode(0)
        assert out is x
    else:
        triton = pytest.importorskip("triton")
        from kernel_lab.core import triton_mode
        from kernel_lab.triton_src.scale import scale_kernel

        if not triton_mode.interpreting():
            pytest.skip("triton loaded before kernel_lab, without TRITON_INTERPRET")
        scale_kernel[(triton.cdiv(n, torch_variants.SCALE_BLOCK),)](
            x, s, n, BLOCK=torch_variants.SCALE_BLOCK)
        if dtype == torch.bfloat16:  # the interpreter rounds its bf16 casts toward zero
            torch.testing.assert_close(x, want, rtol=2**-7, atol=0)
            return
    assert torch.equal(x, want)
