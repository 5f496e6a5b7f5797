"""Cross-entropy as a model's loss: forward + backward through the drop-ins, against PyTorch.

    python bench/loss_step.py [--n 32000,50257,...] [--dtype float32,bfloat16] [--json FILE]

Per (N, dtype), M = 2^28 / N rows of logits that require grad: one training step's loss,
``loss = f(logits, target); loss.backward()``, timed with ``triton.testing.do_bench`` (L2
flushed between calls) for
  torch       F.cross_entropy (PyTorch's kernels; no target check);
  lab         kernel_lab.cross_entropy (variant "auto"; targets validated by the kernels, no
              host sync: ``validate="async"``);
  lab sync    the same with ``validate="sync"``: what the check before launch (one host
              sync) costs;
  lab fused   kernel_lab.cross_entropy(..., inplace_backward=True): dlogits written into the
              logits by the forward kernel;
  peers       QuACK / Liger through their own autograd functions, where they import.
The % column counts one read of the logits and one write of dlogits (the fewest bytes a step
needs) over the device-to-device copy's GB/s in the same process; x torch is torch's time over
the row's. Needs a GPU.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
from datetime import datetime, timezone

if __name__ == "__main__":  # no GPU: one line and exit 2, before torch loads
    from gpu_check import require_gpu  # bench/ is sys.path[0] when a script runs

    require_gpu("it times a cross-entropy training step on CUDA tensors against PyTorch's")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from triton.testing import do_bench  # noqa: E402

import kernel_lab  # noqa: E402
from kernel_lab.checking.checker import parse_dtype  # noqa: E402
from kernel_lab.measure.benchmarking import VOCAB_N, copy_bandwidth  # noqa: E402


def _peers() -> dict:
    out = {}
    if importlib.util.find_spec("quack") is not None:
        try:
            from quack.cross_entropy import cross_entropy as quack_ce

            out["QuACK"] = lambda x, t: quack_ce(x, t)
            out["QuACK in-place"] = lambda x, t: quack_ce(x, t, inplace_backward=True)
        except Exception as e:  # noqa: BLE001 - a broken peer is reported, not fatal
            print(f"QuACK does not import: {type(e).__name__}: {e}")
    if importlib.util.find_spec("liger_kernel") is not None:
        try:
            from liger_kernel.transformers.functional import liger_cross_entropy

            out["Liger (fused)"] = lambda x, t: liger_cross_entropy(x, t)
        except Exception as e:  # noqa: BLE001
            print(f"Liger does not import: {type(e).__name__}: {e}")
    return out


def step_ms(loss_fn, x: torch.Tensor, t: torch.Tensor, inplace: bool = False) -> float:
    """Median ms of one forward + backward; in-place modes get a fresh leaf over x's buffer
    (their forward overwrites it, so the timed inputs are the previous step's gradient). The
    loss sees a view of the leaf, as a model's loss sees a matmul's output: a gradient that is
    the logits' own tensor object would otherwise be copied by the leaf's AccumulateGrad."""
    leaf = x.detach().requires_grad_()

    def run():
        v = x.detach().requires_grad_() if inplace else leaf
        v.grad = None
        loss_fn(v.view_as(v), t).backward()

    return do_bench(run, warmup=5, rep=50, return_mode="median")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", default=",".join(map(str, VOCAB_N)))
    p.add_argument("--dtype", default="float32,bfloat16")
    p.add_argument("--json", default=None, help="write the rows here")
    args = p.parse_args(argv)
    copy = copy_bandwidth("cuda")
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    gpu = torch.cuda.get_device_name()
    print(f"{gpu}: loss forward + backward, M*N = 2^28; copy {copy:,.0f} GB/s")
    modes = {"torch": (F.cross_entropy, False),
             "lab": (kernel_lab.cross_entropy, False),
             "lab sync": (lambda x, t: kernel_lab.cross_entropy(x, t, validate="sync"), False),
             "lab fused": (lambda x, t: kernel_lab.cross_entropy(x, t, inplace_backward=True),
                           True)}
    for name, fn in _peers().items():
        modes[name] = (fn, "in-place" in name or "fused" in name)
    rows = []
    for dtype in map(parse_dtype, args.dtype.split(",")):
        for n in map(int, args.n.split(",")):
            m = (1 << 28) // n
            gen = torch.Generator(device="cuda").manual_seed(n)
            x = torch.randn(m, n, device="cuda", dtype=dtype, generator=gen) * 2
            t = torch.randint(0, n, (m,), device="cuda", generator=gen)
            nbytes = 2 * x.numel() * x.element_size()
            times = {}
            for name, (fn, inplace) in modes.items():
                try:
                    times[name] = step_ms(fn, x, t, inplace)
                except Exception as e:  # noqa: BLE001 - a peer's limit is a cell, not a stop
                    print(f"  {name} {m}x{n}: {type(e).__name__}: {str(e)[:100]}")
            cells = "  ".join(
                f"{k} {v * 1e3:6.0f} us {nbytes / v / 1e6 / copy:4.0%} x{times['torch'] / v:4.2f}"
                for k, v in times.items())
            print(f"{str(dtype)[6:]:8s} {m:5d} x {n:6d}  {cells}", flush=True)
            rows.append({"dtype": str(dtype)[6:], "m": m, "n": n, "gpu": gpu, "copy_gbps": copy,
                         "measured_utc": stamp, "us": {k: v * 1e3 for k, v in times.items()}})
            del x, t
            torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
