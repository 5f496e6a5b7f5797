"""The LM-head loss race: one training step (forward + backward for hidden and classifier) per
variant and peer, bf16, next to cuBLAS's three matmuls alone, in one process.

    python bench/lm_head.py                       # 3 token counts x 3 (d, V): the issue's cells
    python bench/lm_head.py --tokens 8192 --dv 4096x128256

Per cell and variant: median step time of ``--reps`` steps (CUDA events, after a warm-up step),
its TFLOP/s (6 T d V), the ratio to the three matmuls (logits, dhidden, dweight), and the peak
memory above the inputs and their gradients' buffers (``max_memory_allocated`` after
``reset_peak_memory_stats`` with the inputs allocated). A variant that fails or refuses a cell
shows why in its cell. Peers run through their own autograd functions (nothing added).
"""

from __future__ import annotations

import argparse
import statistics

if __name__ == "__main__":  # no GPU: one line and exit 2, before torch loads
    from gpu_check import require_gpu  # bench/ is sys.path[0] when a script runs

    require_gpu("it races LM-head loss steps on CUDA tensors against cuBLAS's matmuls")

import torch  # noqa: E402

import kernel_lab  # noqa: E402
from kernel_lab.core.compiling import CompiledPerSignature  # noqa: E402
from kernel_lab.ops.linear_cross_entropy import peer_variants  # noqa: E402

CELLS = ((4096, 128256), (2304, 256000), (3584, 151936))
TOKENS = (4096, 8192, 16384)


def _lab(variant):
    def step(h, w, t):
        return kernel_lab.linear_cross_entropy(h, w, t, variant=variant)
    return step


def _compiled_step(h, w, t):
    """The baseline for inductor: logits, fp32 cross-entropy (what a compiled model runs)."""
    return torch.nn.functional.cross_entropy((h @ w.T).float(), t)


def steps() -> dict:
    out = {"torch": _lab("torch_linear_cross_entropy"),
           "chunked": _lab("torch_chunked_linear_cross_entropy")}
    out["torch.compile"] = CompiledPerSignature(_compiled_step)  # one graph per cell
    if peer_variants.LIGER() is None:
        out["Liger FLCE"] = peer_variants.liger_loss
    if peer_variants.CCE() is None:
        out["CCE"] = peer_variants.cce_loss
    return out


def _time(fn, reps: int) -> list[float]:
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return times


def run_cell(T: int, d: int, V: int, reps: int, fns: dict) -> dict:
    g = torch.Generator(device="cuda").manual_seed(0)
    h = (torch.randn(T, d, device="cuda", generator=g)).bfloat16().requires_grad_(True)
    w = (torch.randn(V, d, device="cuda", generator=g) / (2 * d ** 0.5)).bfloat16()
    w.requires_grad_(True)
    t = torch.randint(0, V, (T,), device="cuda", generator=g)
    row = {}
    z = torch.empty(T, V, dtype=torch.bfloat16, device="cuda")
    dh, dw = torch.empty_like(h), torch.empty_like(w)

    def matmuls():
        torch.matmul(h.detach(), w.detach().T, out=z)
        torch.matmul(z, w.detach(), out=dh)
        torch.matmul(z.T, h.detach(), out=dw)

    matmuls()
    row["cuBLAS 3 matmuls"] = (statistics.median(_time(matmuls, reps)), 0)
    z = dh = dw = None  # free the logits-sized buffer before the variants run
    for name, fn in fns.items():
        def step(fn=fn):
            h.grad = w.grad = None
            fn(h, w, t).backward()
        try:
            step()  # warm-up: compiles and autotunes outside the timing
            h.grad = w.grad = None
            torch.cuda.synchronize()
            base = torch.cuda.memory_allocated() + 2 * (h.numel() + w.numel())  # + gradients
            torch.cuda.reset_peak_memory_stats()
            ms = statistics.median(_time(step, reps))
            row[name] = (ms, torch.cuda.max_memory_allocated() - base)
        except Exception as e:  # a refusal or failure shows in its cell
            row[name] = f"{type(e).__name__}: {str(e)[:60]}"
        h.grad = w.grad = None
        torch.cuda.empty_cache()
    return row


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tokens", default=",".join(map(str, TOKENS)))
    p.add_argument("--dv", default=",".join(f"{d}x{v}" for d, v in CELLS))
    p.add_argument("--reps", type=int, default=5)
    a = p.parse_args(argv)
    fns = steps()
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, bf16, one step "
          f"(forward + backward for hidden and weight); ms, TFLOP/s (6 T d V), x cuBLAS, "
          f"GiB peak above inputs and gradients")
    for dv in a.dv.split(","):
        d, v = map(int, dv.split("x"))
        for T in map(int, a.tokens.split(",")):
            row = run_cell(T, d, v, a.reps, fns)
            base = row["cuBLAS 3 matmuls"][0]
            flops = 6 * T * d * v
            print(f"\n{T} x {d} x {v}")
            for name, r in row.items():
                if isinstance(r, str):
                    print(f"  {name:18s} {r}")
                    continue
                ms, mem = r
                print(f"  {name:18s} {ms:8.2f} ms {flops / ms / 1e9:7.0f} TFLOP/s "
                      f"{ms / base:5.2f}x {mem / 2**30:6.2f} GiB")


if __name__ == "__main__":
    main()
