"""linear_cross_entropy in PyTorch: the baseline (logits materialized, then F.cross_entropy),
the same under ``torch.compile``, and the chunked variant (cuBLAS over chunks of tokens, the
lab's cross-entropy per chunk: memory O(chunk x V)). Backwards of each."""

from __future__ import annotations

import torch

from kernel_lab.base.inputs import acc_dtype
from kernel_lab.core import plans, triton_mode
from kernel_lab.core.compiling import CompiledPerSignature
from kernel_lab.core.dispatch import AUTO
from kernel_lab.core.registry import registrar, trusted_inputs
from kernel_lab.core.rows import named_as
from kernel_lab.ops.cross_entropy.op import cross_entropy_backward_math
from kernel_lab.ops.cross_entropy.torch_variants import cross_entropy_math, torch_cross_entropy
from kernel_lab.ops.linear_cross_entropy.op import DTYPES, check_all, check_inputs

SOURCE = "kernel_lab/ops/linear_cross_entropy/torch_variants.py"
variant = registrar(op="linear_cross_entropy", dtypes=DTYPES, check=check_inputs, source=SOURCE)
# What the chunked variant's chunk-sized buffers may hold at once (bytes): one chunk of logits
# where the CUDA cross-entropy kernel writes the gradient over it (the step "auto" runs), else
# the logits, their gradient and a soft cap's fp32 temporaries (:func:`chunk_copies`). Under
# 0.5 GiB with room for the per-token vectors; tests lower it to force many chunks.
MAX_CHUNK_BYTES = 502 << 20
MIN_CHUNK_BYTES = 16 << 20
# The compile variants are registered for CUDA tensors only: on CPU, inductor takes seconds per
# signature and the registry suites would compile ~60 of them (CI's budget). The drop-in's
# torch.compile(fullgraph=True) test covers the compiled path on CPU.


def logits(hidden, weight, bias=None, softcap: float = 0.0) -> torch.Tensor:
    """z = hidden @ weight.T + bias, capped (``softcap * tanh(z / softcap)``) when softcap > 0,
    in the input dtype (cuBLAS accumulates in fp32 and rounds once)."""
    z = hidden @ weight.T if bias is None else torch.addmm(bias, hidden, weight.T)
    return softcap * torch.tanh(z / softcap) if softcap else z


def cap_chain(dzc: torch.Tensor, zc: torch.Tensor, softcap: float) -> torch.Tensor:
    """Gradient through the cap: d(cap tanh(z / cap)) / dz = 1 - (z_c / cap)^2, in place."""
    acc = acc_dtype(zc.dtype)
    return dzc.mul_(1 - (zc.to(acc) / softcap).square())


def check_call(hidden, weight, target, bias, ignore_index, reduction, label_smoothing, softcap):
    check_all(hidden, weight, target, bias, ignore_index, reduction, label_smoothing, softcap)
    return target.long()


def _ce_kw(kw_ignore: int, eps: float, reduction: str) -> dict:
    return {"ignore_index": kw_ignore, "reduction": reduction, "label_smoothing": eps}


def checked_forward(body):
    """A forward variant from ``body(hidden, weight, target, bias, ignore_index, reduction,
    label_smoothing, softcap)``: the inputs checked first, the target as int64, and a problem
    with no tokens or no classes answered by the baseline (nothing to launch or compile)."""

    def forward(hidden, weight, target, bias=None, ignore_index=-100, reduction="mean",
                label_smoothing=0.0, softcap=0.0):
        t = check_call(hidden, weight, target, bias, ignore_index, reduction, label_smoothing,
                       softcap)
        if hidden.numel() == 0 or weight.shape[0] == 0:
            return torch_linear_cross_entropy(hidden, weight, t, bias, ignore_index, reduction,
                                              label_smoothing, softcap)
        return body(hidden, weight, t, bias, ignore_index, reduction, label_smoothing, softcap)

    return named_as(forward, body)


def checked_backward(body):
    """A backward variant from ``body(hidden, weight, target, bias, lse, grad, ignore_index,
    reduction, label_smoothing, softcap)``: the inputs checked first, the target as int64, and
    zero gradients for a problem with no tokens or no classes."""

    def backward(hidden, weight, target, bias, lse, grad, ignore_index=-100, reduction="mean",
                 label_smoothing=0.0, softcap=0.0):
        t = check_call(hidden, weight, target, bias, ignore_index, reduction, label_smoothing,
                       softcap)
        if hidden.numel() == 0 or weight.shape[0] == 0:
            db = torch.zeros_like(bias) if bias is not None else hidden.new_empty((0,))
            return torch.zeros_like(hidden), torch.zeros_like(weight), db
        return body(hidden, weight, t, bias, lse, grad, ignore_index, reduction,
                    label_smoothing, softcap)

    return named_as(backward, body)


@variant(
    "torch_linear_cross_entropy",
    backend="torch",
    description="hidden @ weight.T (+ bias, soft cap), then F.cross_entropy: the logits "
          "in memory (the baseline)",
)
def torch_linear_cross_entropy(hidden, weight, target, bias=None, ignore_index=-100,
                               reduction="mean", label_smoothing=0.0, softcap=0.0):
    target = check_call(hidden, weight, target, bias, ignore_index, reduction, label_smoothing,
                      softcap)
    z = logits(hidden, weight, bias, softcap)
    loss, lse = torch_cross_entropy(z, target, None, ignore_index, reduction, label_smoothing)
    return loss, lse.to(acc_dtype(hidden.dtype))  # the op's lse: fp32 (fp64 for fp64)


def linear_cross_entropy_math(hidden, weight, target, bias, ignore_index: int, reduction: str,
                              label_smoothing: float, softcap: float):
    """(loss, lse) as one graph for inductor: the matmul, the cap and cross-entropy's
    decomposition (fp32 logsumexp and gathers)."""
    z = logits(hidden, weight, bias, softcap)
    loss, lse = cross_entropy_math(z, target, None, ignore_index, reduction, label_smoothing)
    return loss, lse.to(acc_dtype(hidden.dtype))


_compiled = CompiledPerSignature(linear_cross_entropy_math)


@variant(
    "compile_linear_cross_entropy",
    backend="compile",
    needs_cuda=True,
    description="the matmul and the cross-entropy decomposition under torch.compile",
)
@checked_forward
def compile_linear_cross_entropy(hidden, weight, target, bias, ignore_index, reduction,
                                 label_smoothing, softcap):
    return _compiled(hidden, weight, target, bias, ignore_index=ignore_index,
                     reduction=reduction, label_smoothing=label_smoothing, softcap=softcap)


def backward_math(hidden, weight, target, bias, lse, grad, ignore_index: int, reduction: str,
                  label_smoothing: float, softcap: float):
    """(dhidden, dweight, dbias) with the logits materialized: dz by cross-entropy's formula,
    through the cap, then two matmuls and a column sum."""
    z = logits(hidden, weight, bias, softcap)
    dz = cross_entropy_backward_math(z, target, None, lse, grad, ignore_index, reduction,
                                     label_smoothing)
    if softcap:
        acc = acc_dtype(z.dtype)
        dz = (dz.to(acc) * (1 - (z.to(acc) / softcap).square())).to(z.dtype)
    db = dz.sum(0, dtype=torch.float32 if dz.dtype != torch.float64 else dz.dtype)
    db = db.to(hidden.dtype) if bias is not None else hidden.new_empty((0,))
    return dz @ weight, dz.T @ hidden, db


torch_linear_cross_entropy_backward = variant(
    "torch_linear_cross_entropy_backward",
    op="linear_cross_entropy_backward",
    backend="torch",
    description="logits recomputed whole, dz by the cross-entropy formula, two matmuls",
)(checked_backward(backward_math))

_compiled_backward = CompiledPerSignature(backward_math)


@variant(
    "compile_linear_cross_entropy_backward",
    op="linear_cross_entropy_backward",
    backend="compile",
    needs_cuda=True,
    description="the backward formula under torch.compile",
)
@checked_backward
def compile_linear_cross_entropy_backward(hidden, weight, target, bias, lse, grad, ignore_index,
                                          reduction, label_smoothing, softcap):
    return _compiled_backward(hidden, weight, target, bias, lse, grad,
                              ignore_index=ignore_index, reduction=reduction,
                              label_smoothing=label_smoothing, softcap=softcap)


# -- chunked --------------------------------------------------------------------------------------
def chunk_rows(tokens: int, vocab: int, element_size: int, device: torch.device,
               copies: int = 1) -> int:
    """Tokens per chunk: the most whose ``copies`` chunk-sized logits buffers fit in
    MAX_CHUNK_BYTES (and in a quarter of the free device memory), in multiples of 256 (64 where
    fewer fit), and no more than an even share of the tokens over the chunks that takes.

    Why: each chunk's dW matmul reads dW back (V x d), so fewer chunks are faster, and chunks
    off the matmuls' 256-row tiles run slower. On an H100, bf16, 8192 tokens, x cuBLAS's three
    matmuls (``bench/lm_head.py --chunk-rows``, medians of 7 interleaved rounds), rows 1024 /
    1280 / 1536 / 1664 / 2048: d x V 4096 x 128256 1.11 / 1.10 / 1.10 / 1.15 / 1.06; 3584 x
    151936 1.19 / 1.17 / 1.17 / 1.17 / 1.10 (0.58 GiB); 2304 x 256000 1.20 / 1.18 / 1.16 /
    1.14 / 1.12 (0.98 GiB). So 8192 x 128256 in place takes 4 chunks of 2048 (501 MiB), x 256000
    8 of 1024, x 151936 5 of 1536 and one of 512; the last two stay above 1.08x at any chunk
    the budget allows: each re-read of dW (2.36 GB at 256000 x 2304) adds ~0.02x, fully exposed
    (1024 -> 2048 rows: 7 -> 3 re-reads, 1.20 -> 1.12), so one chunk would give ~1.06x; below
    that needs dW made without dlogits in memory (a fused matmul epilogue)."""
    budget = MAX_CHUNK_BYTES
    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        budget = max(min(budget, free // 4), min(MIN_CHUNK_BYTES, budget))
    most = max(1, budget // max(1, copies * vocab * element_size))
    tokens = max(tokens, 1)
    even = -(-tokens // -(-tokens // most))  # ceil(tokens / the fewest chunks)
    for unit in (256, 64):
        if most >= unit and even > unit:
            return min(tokens, -(-even // unit) * unit, most // unit * unit)
    return even


def chunk_copies(hidden: torch.Tensor, softcap: float, in_place: bool) -> int:
    """Chunk-sized logits buffers a chunk's step holds at once: the logits alone where the
    gradient is written over them; else also the gradient; a soft cap adds its fp32 temporaries
    (two tensors of twice the size)."""
    if softcap:
        return 6
    return 1 if in_place and hidden.is_cuda and hidden.dtype != torch.float64 else 2


def token_chunks(hidden: torch.Tensor, vocab: int, copies: int = 1) -> list[tuple[int, int]]:
    """The [start, stop) token ranges a step takes a chunk at a time (:func:`chunk_rows`)."""
    c = chunk_rows(hidden.shape[0], vocab, hidden.element_size(), hidden.device, copies)
    return [(i, min(i + c, hidden.shape[0])) for i in range(0, hidden.shape[0], c)]


def _in_place_ce(z: torch.Tensor, t: torch.Tensor) -> bool:
    """Whether the CUDA cross-entropy kernel can write the chunk's gradient over its logits
    (decided once per chunk signature: :func:`kernel_lab.core.plans.runs`)."""
    if not z.is_cuda or z.dtype == torch.float64:
        return False
    return plans.runs("cuda_cross_entropy", (z, t, None), {})


def reduce_rows(loss_rows: torch.Tensor, target, ignore_index: int, reduction: str,
                dtype: torch.dtype) -> torch.Tensor:
    """PyTorch's reduction of per-row losses (0 on ignored rows): "mean" over kept rows (0 / 0
    = NaN when all are ignored)."""
    if reduction == "none":
        return loss_rows.to(dtype)
    total = loss_rows.sum()
    if reduction == "mean":
        total = total / (target != ignore_index).sum()
    return total.to(dtype)


SCALE_BLOCK = 4096  # elements a program of triton_src/scale.py: 16 a thread at 8 warps


def scale_(t: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    """``t *= s`` in place, ``s`` a one-element tensor on t's device (an upstream gradient): on
    CUDA by ``triton_src/scale.py`` (no host sync, at copy speed: PyTorch's ``mul_`` by a 0-d CUDA
    tensor takes its unvectorized path, 2.0 against 0.70 ms for 128256 x 4096 bf16 on an H100;
    nothing read or written when s is 1, as ``loss.backward()`` hands it), elsewhere by
    ``mul_`` (skipped for a 1 on the CPU)."""
    if t.device.type == "cpu" and s.numel() == 1 and s.device.type == "cpu" and float(s) == 1:
        return t
    if (t.is_cuda and t.is_contiguous() and t.numel() and s.numel() == 1
            and s.device == t.device and not triton_mode.interpreting()):
        import triton

        from kernel_lab.triton_src.scale import scale_kernel

        scale_kernel[(triton.cdiv(t.numel(), SCALE_BLOCK),)](t, s, t.numel(),
                                                              BLOCK=SCALE_BLOCK, num_warps=8)
        return t
    return t.mul_(s)


def add_weight_grad(dw: torch.Tensor, dz: torch.Tensor, h: torch.Tensor, first: bool) -> None:
    """dweight += dlogits.T @ hidden for one chunk of tokens; the first chunk writes it (beta 0:
    dweight is neither zeroed nor read first, one pass over V x d fewer each, 2 GiB of traffic at
    d = 4096, V = 128256 bf16)."""
    if first:
        torch.matmul(dz.T, h, out=dw)
    else:
        dw.addmm_(dz.T, h)


def chunked_forward(hidden, weight, target, bias, ignore_index: int, reduction: str,
                    label_smoothing: float, softcap: float, with_grads: bool = False,
                    grad_scale: torch.Tensor | None = None):
    """(loss, lse) chunk by chunk; ``with_grads``: also (dhidden, dweight, dbias) of the
    *summed* loss times ``grad_scale`` (a 0-d tensor on the device, in the accumulation dtype:
    every row's gradient, applied in that dtype before anything is rounded; 1 when None), so
    the backward is at most a scale and nothing is recomputed. Each chunk's dlogits are written
    over its logits by the CUDA cross-entropy kernel where it runs (without a soft cap), else
    come from the cross_entropy_backward variant "auto" picks."""
    t_all, v = target.long(), weight.shape[0]
    acc = acc_dtype(hidden.dtype)
    rows = torch.empty(hidden.shape[0], dtype=acc, device=hidden.device)
    lse = torch.empty(hidden.shape[0], dtype=acc, device=hidden.device)
    if with_grads:
        dh = torch.empty_like(hidden, memory_format=torch.contiguous_format)
        dw = torch.empty_like(weight, memory_format=torch.contiguous_format)  # (add_weight_grad)
        db = torch.zeros(v, dtype=acc, device=hidden.device) if bias is not None else None
    none = _ce_kw(ignore_index, label_smoothing, "none")
    # the step with gradients writes them over the logits (fused_forward); without, the logits
    # are the one buffer
    for a, b in token_chunks(hidden, v, chunk_copies(hidden, softcap, True)):
        h, t = hidden[a:b], t_all[a:b]
        z = logits(h, weight, bias, softcap)
        with trusted_inputs():
            if with_grads and not softcap and _in_place_ce(z, t):
                from kernel_lab.ops.cross_entropy.cuda_variants import fused_forward

                loss_c, lse_c, dz = fused_forward(z, t, None, ignore_index, "none",
                                                  label_smoothing, grad_scale=grad_scale)
            else:
                loss_c, lse_c = plans.run_op("cross_entropy", AUTO, (z, t, None), none)
                if with_grads:
                    g_rows = (torch.ones(b - a, dtype=acc, device=z.device) if grad_scale is None
                              else grad_scale.to(acc).expand(b - a).contiguous())
                    dz = plans.run_op("cross_entropy_backward", AUTO,
                                      (z, t, None, lse_c, g_rows), none)
                    if softcap:
                        dz = cap_chain(dz, z, softcap)
        rows[a:b], lse[a:b] = loss_c, lse_c
        if with_grads:
            torch.matmul(dz, weight, out=dh[a:b])
            add_weight_grad(dw, dz, h, first=a == 0)
            if db is not None:
                db += dz.sum(0, dtype=acc)
            del dz
        del z  # before the next chunk's logits: one chunk's buffers alive at a time
    loss = reduce_rows(rows, t_all, ignore_index, reduction, hidden.dtype)
    if not with_grads:
        return loss, lse
    return loss, lse, dh, dw, (db.to(hidden.dtype) if db is not None else None)


@variant(
    "torch_chunked_linear_cross_entropy",
    backend="torch",
    description="cuBLAS over chunks of tokens, each chunk's loss by the lab's "
          "cross_entropy (auto): logits O(chunk x V)",
)
@checked_forward
def torch_chunked_linear_cross_entropy(hidden, weight, target, bias, ignore_index, reduction,
                                       label_smoothing, softcap):
    return chunked_forward(hidden, weight, target, bias, ignore_index, reduction,
                           label_smoothing, softcap)


@variant(
    "torch_chunked_linear_cross_entropy_backward",
    op="linear_cross_entropy_backward",
    backend="torch",
    description="logits recomputed chunk by chunk, dz by the lab's cross_entropy_backward "
          "(auto), dhidden and dweight by cuBLAS",
)
@checked_backward
def torch_chunked_linear_cross_entropy_backward(hidden, weight, t_all, bias, lse, grad,
                                                ignore_index, reduction, label_smoothing,
                                                softcap):
    acc = acc_dtype(hidden.dtype)
    g = grad.to(acc)
    if reduction == "mean":
        g = g / (t_all != ignore_index).sum()
    summed = _ce_kw(ignore_index, label_smoothing, "sum" if reduction != "none" else "none")
    dh = torch.empty_like(hidden, memory_format=torch.contiguous_format)
    dw = torch.empty_like(weight, memory_format=torch.contiguous_format)  # (add_weight_grad)
    db = torch.zeros(weight.shape[0], dtype=acc, device=hidden.device)
    for a, b in token_chunks(hidden, weight.shape[0], chunk_copies(hidden, softcap, False)):
        h, t = hidden[a:b], t_all[a:b]
        z = logits(h, weight, bias, softcap)
        g_c = g[a:b] if reduction == "none" else g
        with trusted_inputs():
            dz = plans.run_op("cross_entropy_backward", AUTO,
                              (z, t, None, lse[a:b], g_c), summed)
        if softcap:
            dz = cap_chain(dz, z, softcap)
        torch.matmul(dz, weight, out=dh[a:b])
        add_weight_grad(dw, dz, h, first=a == 0)
        if bias is not None:
            db += dz.sum(0, dtype=acc)
        del z, dz  # before the next chunk's logits
    return dh, dw, db.to(hidden.dtype) if bias is not None else hidden.new_empty((0,))
