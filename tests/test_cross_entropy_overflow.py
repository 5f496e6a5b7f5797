"""Cross-entropy near the top of each dtype's range: finite input gives a finite, correct loss.

Rows whose logits reach 1e37 ... 3e38 (bf16, fp32) or 1e4 ... 6e4 (fp16) are drawn for many seeds
at once and stacked into ONE batch, so a thousand seeds cost one launch a variant. Every
cross-entropy variant (forward and backward), the in-place mode and linear cross-entropy's
chunks are checked against float64; a failure names how many seeds went wrong and the first.
Seed 193857846 is the fixed regression case: it made the bf16 CUDA forward's lse NaN (an exp of
the row's max rounded to inf in its FFMA form, then inf * 0 in the merge). Seed 2547 draws two
fp32 maxima clamped to 2^127, where even float64's lse rounds log 2 away (see exact_lse_rows).
"""

import pytest
import torch
from conftest import DEVICE, HAS_CUDA

import kernel_lab
from kernel_lab.base.inputs import randn
from kernel_lab.checking.checker import dtype_name, fresh_seed, run_checked, runs_here
from kernel_lab.ops.cross_entropy.op import lse_dtype

REGRESSION_SEED = 193857846
TIED_TOP_SEED = 2547
N_CLASSES = (40, 1031)  # one window a thread; several, with rescales between them
# 1000 seeds on a GPU; the CPU runs Triton interpreted and the matmuls on two cores
SEEDS = 1000 if HAS_CUDA else 24
DTYPES = (torch.bfloat16, torch.float16, torch.float32)
TOP = {torch.bfloat16: 3e38, torch.float16: 6e4, torch.float32: 3e38}
SCALES = {torch.bfloat16: (1e30, 1e36, 1e37, 4e37), torch.float16: (1e3, 4e3, 1e4, 2e4),
          torch.float32: (1e30, 1e36, 1e37, 4e37)}


def near_overflow(dtype: torch.dtype, n: int, generator: torch.Generator):
    """Rows of n logits near dtype's top (each row one draw of the generator), and targets:
    one value near the dtype's largest among N(0, s^2) logits (s up to its largest / 8), a row
    whose max sits near the CUDA kernel's FFMA cut (2^12), and a row where the target is not
    the max."""
    big = torch.finfo(dtype).max / 2  # N(0, s^2) draws past it would round to inf in fp16

    def draw(scale: float) -> torch.Tensor:
        return randn((1, n), torch.float32, "cpu", generator, scale=scale).clamp(-big, big)

    rows = [draw(s) for s in SCALES[dtype]]
    top = draw(SCALES[dtype][2])
    top[0, int(torch.randint(n, (1,), generator=generator))] = TOP[dtype]
    cut = draw(1.0) + 4096.0
    x = torch.cat(rows + [top, cut]).to(dtype)
    t = torch.randint(n, (x.shape[0],), generator=generator)
    t[len(rows)] = int(x[len(rows)].float().argmax())
    return x, t


def batch(dtype: torch.dtype, n: int, seeds: list[int]):
    """All seeds' rows stacked, their targets, and the seed that drew each row."""
    xs, ts, owner = [], [], []
    for s in seeds:
        x, t = near_overflow(dtype, n, torch.Generator().manual_seed(s))
        xs.append(x)
        ts.append(t)
        owner += [s] * x.shape[0]
    return (torch.cat(xs).to(DEVICE), torch.cat(ts).to(DEVICE),
            torch.tensor(owner, dtype=torch.long))


def seeds_list() -> list[int]:
    base = fresh_seed()
    return [REGRESSION_SEED, TIED_TOP_SEED] + [(base + i) % 2**32 for i in range(SEEDS - 2)]


def bad_seeds(got: torch.Tensor, ref: torch.Tensor, owner: torch.Tensor, rtol: float) -> list:
    """Seeds with a row whose value is not finite where float64's is, or is off by more than
    rtol (relative, or absolute below 1; inf: finiteness only)."""
    got, ref = got.detach().double().cpu(), ref.detach().double().cpu()
    while got.dim() > 1:
        got, ref = got.abs().amax(-1), ref.abs().amax(-1)  # a row's largest gradient
    off = (~torch.isfinite(got) & torch.isfinite(ref)) | (
        (got - ref).abs() > rtol * ref.abs().clamp_min(1.0))
    return sorted(set(owner[off].tolist()))


def _report(name, dtype, n, seeds, bad) -> str:
    first = f"; first {bad[0]}" if bad else ""
    return (f"{name} {dtype_name(dtype)} N={n}: {len(bad)} of {len(seeds)} seeds "
            f"wrong{first} (regression seed {REGRESSION_SEED} included)")


def _variants(op: str) -> list[str]:
    return [v.name for v in kernel_lab.variants(op) if v.backend != "peer"]


@pytest.mark.parametrize("n", N_CLASSES)
@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_name)
@pytest.mark.parametrize("name", _variants("cross_entropy"))
def test_forward_finite_near_overflow(name, dtype, n):
    v = kernel_lab.get(name)
    if dtype not in v.dtypes or not runs_here(v, DEVICE):
        pytest.skip(f"{name} does not run {dtype_name(dtype)} on {DEVICE}")
    seeds = seeds_list()
    x, t, owner = batch(dtype, n, seeds)
    result, (loss, lse) = run_checked(v, (x, t), {"reduction": "none"})
    ref_lse = torch.logsumexp(x.double(), dim=1)
    # the loss within the op's tolerance (result.ok: ulp(lse) for 2-byte rows, whose
    # lse - x_t rounds log(sum) away past |lse| ~ 2^24); here: finite, and lse to 1e-4
    bad = sorted(set(bad_seeds(lse, ref_lse, owner, 1e-4)
                     + bad_seeds(loss, torch.nn.functional.cross_entropy(
                         x.double(), t, reduction="none"), owner, float("inf"))))
    assert result.ok and not bad, _report(name, dtype, n, seeds, bad) + f": {result.message}"


def exact_lse_rows(x: torch.Tensor, lse: torch.Tensor | None = None) -> torch.Tensor:
    """Rows whose saved lse (``lse``, default float64's rounded to the op's lse dtype: fp32 for
    2-byte logits, fp64 else) holds log(sum) to 2.4e-4. Past |lse| = 2^12 (fp32) or 2^41
    (fp64) log(sum) can round away: tied maxima then get p = exp(x - lse) = 1 each, in float64
    too. There the gradient is checked for finiteness only."""
    xd = x.double()
    if lse is None:
        lse = torch.logsumexp(xd, dim=1).to(lse_dtype(x.dtype))
    top = xd.amax(1, keepdim=True)
    log_sum = (xd - top).exp().sum(1).log()
    return ((lse.double() - top[:, 0]) - log_sum).abs() <= 2.4e-4


def off_seeds(got, ref, owner, result) -> list:
    """Seeds with an element off by more than the check allowed (its worst error / ratio)."""
    allowed = result.max_abs_err / result.ratio if result.ratio else 0.0
    err = (got.detach().double() - ref.detach().double()).abs().cpu()
    return sorted(set(owner[err.amax(1) > allowed].tolist()))


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_name)
@pytest.mark.parametrize("name", _variants("cross_entropy_backward"))
def test_backward_finite_near_overflow(name, dtype):
    v = kernel_lab.get(name)
    if dtype not in v.dtypes or not runs_here(v, DEVICE):
        pytest.skip(f"{name} does not run {dtype_name(dtype)} on {DEVICE}")
    seeds = seeds_list()
    x, t, owner = batch(dtype, N_CLASSES[1], seeds)
    lse = torch.logsumexp(x.double(), dim=1).to(lse_dtype(dtype))
    grad = torch.tensor(1.0, device=DEVICE)
    op = kernel_lab.get_op("cross_entropy_backward")
    ref = op.reference(x, t, None, lse, grad)
    _, dx = run_checked(v, (x, t, None, lse, grad), {})
    bad = bad_seeds(dx, ref, owner, float("inf"))  # finite wherever float64 is
    rows = exact_lse_rows(x, lse)
    result = op.check(dx[rows], x[rows], t[rows], None, lse[rows], grad, ref=ref[rows])
    if not result.ok:
        bad += off_seeds(dx[rows], ref[rows], owner[rows.cpu()], result)
    assert result.ok and not bad, _report(name, dtype, N_CLASSES[1], seeds, bad) + (
        f": {result.message}")


@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU: the in-place mode is eager CUDA")
@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_name)
def test_inplace_step_finite_near_overflow(dtype):
    """The fused mode: the forward writes the gradient over the logits' buffer. The loss is the
    rows' mean, summed in fp32 as torch's own: where the rows' sum (thousands of losses near
    the dtype's top) is past fp32's range it is inf - never NaN - else within 2 % of float64's."""
    seeds = seeds_list()
    x, t, owner = batch(dtype, N_CLASSES[1], seeds)
    ref_x = x.double().requires_grad_()
    ref = torch.nn.functional.cross_entropy(ref_x, t)
    ref.backward()
    leaf = x.clone().requires_grad_()
    loss = kernel_lab.cross_entropy(leaf * 1, t, inplace_backward=True)
    loss.backward()
    got = loss.double().item()
    if ref.item() * x.shape[0] < torch.finfo(torch.float32).max:
        assert abs(got - ref.item()) <= 0.02 * abs(ref.item()), (dtype_name(dtype), got, ref)
    else:
        assert got == float("inf"), f"in-place {dtype_name(dtype)}: loss {got}, the sum overflows"
    m = x.shape[0]  # the mean's 1 / m undone: each row's gradient, softmax - one-hot
    bad = bad_seeds(leaf.grad * m, ref_x.grad * m, owner, float("inf"))
    rows = exact_lse_rows(x)
    bad += bad_seeds(leaf.grad[rows] * m, ref_x.grad[rows] * m, owner[rows.cpu()], 0.05)
    assert not bad, _report("in-place step", dtype, N_CLASSES[1], seeds, sorted(set(bad)))


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_name)
@pytest.mark.parametrize("name", _variants("linear_cross_entropy"))
def test_linear_cross_entropy_finite_near_overflow(name, dtype):
    """Logits from hidden = I and weight = the logits' transpose: the matmul is exact, so the
    chunks' cross-entropy sees exactly the near-overflow rows."""
    v = kernel_lab.get(name)
    if dtype not in v.dtypes or not runs_here(v, DEVICE):
        pytest.skip(f"{name} does not run {dtype_name(dtype)} on {DEVICE}")
    seeds = seeds_list() if HAS_CUDA else seeds_list()[:4]
    x, t, owner = batch(dtype, N_CLASSES[0], seeds)
    hidden = torch.eye(x.shape[0], dtype=dtype, device=DEVICE)
    loss = kernel_lab.linear_cross_entropy(hidden, x.t().contiguous(), t, reduction="none",
                                           variant=name)
    ref = torch.nn.functional.cross_entropy(x.double(), t, reduction="none")
    bad = bad_seeds(loss, ref, owner, float("inf"))
    rows = exact_lse_rows(x)  # elsewhere a 2-byte loss is lse - x_t to ulp(lse), as above
    bad += bad_seeds(loss[rows], ref[rows], owner[rows.cpu()], 0.05)
    bad = sorted(set(bad))
    assert not bad, _report(name, dtype, N_CLASSES[0], seeds, bad)
