"""Tolerance policy and the one checker every test, benchmark and CLI check uses.

Each op owns exactly one float64 reference (``Op.reference``); this module decides whether a
variant's output is close enough to it. The rule, elementwise:

* NaN in the reference <=> NaN in the output (an unwritten, NaN-poisoned element fails);
* infinities must match exactly (sign included);
* finite values: ``|out - ref| <= atol + rtol * |ref|`` with (atol, rtol) from the table below,
  indexed by the *input* dtype (fp16/bf16 outputs are rounded once, from fp32 accumulators).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Tolerance:
    atol: float
    rtol: float


# One table for every op whose outputs are O(1) probabilities or log-probabilities. fp32 allows
# for approximate exp2 and flushed denormals (CuPy/NVRTC -ftz=true); fp16/bf16 for one final
# rounding (2^-11 and 2^-8 relative) plus accumulation-order noise.
TOLERANCES: dict[torch.dtype, Tolerance] = {
    torch.float64: Tolerance(atol=1e-12, rtol=1e-9),
    torch.float32: Tolerance(atol=1e-6, rtol=1e-4),
    torch.float16: Tolerance(atol=1e-5, rtol=2e-3),
    torch.bfloat16: Tolerance(atol=1e-5, rtol=1.2e-2),
}


@dataclass(frozen=True)
class CheckResult:
    ok: bool
    max_abs_err: float
    max_rel_err: float
    message: str
    ratio: float = 0.0  # the largest |err| / allowed: the pass test is ratio <= 1


    def __bool__(self) -> bool:
        return self.ok


def check(
    out: torch.Tensor,
    ref: torch.Tensor,
    dtype: torch.dtype,
    tolerances: dict[torch.dtype, Tolerance] | None = None,
    scale: torch.Tensor | None = None,
    out_dtype: torch.dtype | None = None,
) -> CheckResult:
    """Compare a variant's ``out`` with the float64 ``ref``; never raises on a mismatch.

    ``dtype``: the input's, which picks the tolerance; ``out_dtype`` (default ``dtype``) the
    dtype ``out`` must have.
    ``scale`` (default ``|ref|``) is the magnitude ``rtol`` applies to, element by element. Ops
    whose result is a difference of larger terms (a backward's ``dy - sum(dy * y)``) pass the
    size of those terms: rounding of the terms, not of the small result, sets the honest bound.
    """
    if not isinstance(out, torch.Tensor):
        return CheckResult(False, float("inf"), float("inf"), f"returned {type(out).__name__}")
    if tuple(out.shape) != tuple(ref.shape):
        return CheckResult(False, float("inf"), float("inf"), f"shape {tuple(out.shape)} != "
                           f"{tuple(ref.shape)}")
    if out.dtype != (out_dtype or dtype):
        return CheckResult(False, float("inf"), float("inf"),
                           f"dtype {out.dtype} != {out_dtype or dtype}")
    if out.numel() == 0:
        return CheckResult(True, 0.0, 0.0, "empty")
    tol = (tolerances or TOLERANCES)[dtype]
    o = out.detach().to(device=ref.device, dtype=torch.float64)
    r = ref.detach()
    nan_o, nan_r = torch.isnan(o), torch.isnan(r)
    if not torch.equal(nan_o, nan_r):
        bad = int((nan_o != nan_r).sum())
        first = tuple(int(i) for i in torch.nonzero(nan_o != nan_r)[0])
        what = "NaN where the reference is not" if bool(nan_o[first]) else "a number where NaN"
        return CheckResult(False, float("nan"), float("nan"),
                           f"{bad} NaN mismatches (first at {first}: {what})")
    inf_o, inf_r = torch.isinf(o), torch.isinf(r)
    if not torch.equal(inf_o, inf_r) or not torch.equal(o[inf_r], r[inf_r]):
        return CheckResult(False, float("inf"), float("inf"), "infinities differ")
    fin = ~(nan_r | inf_r)
    if not bool(fin.any()):
        return CheckResult(True, 0.0, 0.0, "no finite elements")
    diff = (o[fin] - r[fin]).abs()
    mag = r[fin].abs() if scale is None else scale.to(r.device, torch.float64).expand_as(r)[fin]
    rel = diff / mag.clamp_min(tol.atol)
    allowed = tol.atol + tol.rtol * mag
    over = diff > allowed
    max_abs, max_rel = float(diff.max()), float(rel.max())
    ratio = float((diff / allowed).max())
    if bool(over.any()):
        n = int(over.sum())
        worst = int(torch.argmax(diff - allowed))
        return CheckResult(False, max_abs, max_rel,
                           f"{n} of {int(fin.sum())} elements off (worst |err| "
                           f"{float(diff[worst]):.3g} vs allowed {float(allowed[worst]):.3g})",
                           ratio)
    return CheckResult(True, max_abs, max_rel, "ok", ratio)
