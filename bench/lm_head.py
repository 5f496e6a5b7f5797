"""The LM-head loss race: one training step (forward + backward for hidden and classifier) per
variant and peer, bf16 (``--dtype``: others too), next to cuBLAS's three matmuls alone, in one
process.

    python bench/lm_head.py                       # 3 token counts x 3 (d, V): the issue's cells
    python bench/lm_head.py --tokens 8192 --dv 4096x128256
    python bench/lm_head.py --tokens 8192 --dv 4096x128256 --dtype float32
    python bench/lm_head.py --tokens 8192 --dv 4096x128256 --profile chunked  # + its kernels
    python bench/lm_head.py --tokens 8192 --only chunked --chunk-rows 1024,1536,2048  # sizes

Before the race every step is checked against float64 (:func:`check_step`): loss, dhidden per
token and dweight, in the dtype raced, on tokens whose true class is all but certain (p_t up to
0.9997, where a true-class gradient p_t - 1 rounded in bf16 is off by up to 100 %: Liger's
in-place bug), plain and with a bias, a soft cap, label smoothing and ignored tokens. A wrong
step is named and not timed; an option a peer does not offer is said as a refusal.

Per cell and variant, after a warm-up step that also reads its peak memory above the inputs and
their gradients' buffers (``max_memory_allocated`` after ``reset_peak_memory_stats``): ``--rounds``
rounds, each timing the three matmuls (logits, dhidden, dweight) and every step ``--reps`` times
(CUDA events), the order reversed every other round (``kernel_lab.measure.rounds``). Shown: the
median step time, its TFLOP/s (6 T d V), and the ratio to the matmuls taken within each round
(median and spread over the rounds), so that the GPU's clocks drifting between rows do not
move it. A variant
that fails or refuses a cell shows why in its cell. Peers run through their own autograd
functions (nothing added).
"""

from __future__ import annotations

import argparse
import statistics

if __name__ == "__main__":  # no GPU: one line and exit 2, before torch loads
    from gpu_check import require_gpu  # bench/ is sys.path[0] when a script runs

    require_gpu("it races LM-head loss steps on CUDA tensors against cuBLAS's matmuls")

import torch  # noqa: E402

import kernel_lab  # noqa: E402
from kernel_lab.checking.checker import parse_dtype  # noqa: E402
from kernel_lab.core.compiling import CompiledPerSignature  # noqa: E402
from kernel_lab.measure.profiled import kernel_table  # noqa: E402
from kernel_lab.measure.rounds import interleaved, pick_modes, within_rounds  # noqa: E402
from kernel_lab.ops.linear_cross_entropy import op as lce  # noqa: E402
from kernel_lab.ops.linear_cross_entropy import peer_variants  # noqa: E402
from kernel_lab.ops.linear_cross_entropy import torch_variants as lce_torch  # noqa: E402

CELLS = ((4096, 128256), (2304, 256000), (3584, 151936))
TOKENS = (4096, 8192, 16384)
DEVICE = "cuda"  # where the checks and cells run (a CPU test of main() puts "cpu" here)


def _lab(variant):
    def step(h, w, t, bias=None, ignore_index=-100, label_smoothing=0.0, softcap=0.0):
        return kernel_lab.linear_cross_entropy(h, w, t, bias, ignore_index,
                                               label_smoothing=label_smoothing,
                                               softcap=softcap or None, variant=variant)
    return step


def chunked_at(rows: int):
    """The chunked variant's step with ``rows`` tokens a chunk instead of its rule's pick
    (``--chunk-rows``: the rule's evidence, time and memory per chunk size)."""
    lab = _lab("torch_chunked_linear_cross_entropy")

    def step(*args, **kw):
        rule = lce_torch.chunk_rows
        lce_torch.chunk_rows = lambda tokens, *_a, **_k: min(rows, max(tokens, 1))
        try:  # (the gradients are made in the forward: the backward takes no chunks)
            return lab(*args, **kw)
        finally:
            lce_torch.chunk_rows = rule
    return step


def _compiled_step(h, w, t, bias=None, ignore_index=-100, label_smoothing=0.0, softcap=0.0):
    """The baseline for inductor: logits, fp32 cross-entropy (what a compiled model runs)."""
    z = h @ w.T if bias is None else h @ w.T + bias
    z = softcap * torch.tanh(z.float() / softcap) if softcap else z.float()
    return torch.nn.functional.cross_entropy(z, t, ignore_index=ignore_index,
                                             label_smoothing=label_smoothing)


# -- the race's correctness check ----------------------------------------------------------------
CHECK_SHAPE = (256, 128, 2048)  # tokens, hidden, vocabulary: float64 references in a blink
CHECK_CASES = {  # what each step must get right: its keywords, "bias" / "ignored" as inputs
    "plain": {}, "bias": {"bias": True}, "softcap": {"softcap": 30.0},
    "label_smoothing": {"label_smoothing": 0.1}, "ignored tokens": {"ignored": True},
}
# relative errors allowed: a confident token's dhidden is (p_t - 1) w_t + ..., and logits held in
# the input dtype move p_t - 1 by their rounding (bf16 at z ~ 16: ~6 % measured for the torch
# variants on this check); a true-class gradient rounded in bf16 is off by ~100 %
CHECK_TOL = {torch.bfloat16: 0.2, torch.float16: 0.05, torch.float32: 0.01}
MARGINS = (3.0, 5.0, 6.5, 8.0)  # z_t - logsumexp(other logits) of the confident tokens


def check_inputs(dtype: torch.dtype, device, shape=CHECK_SHAPE, seed: int = 0):
    """(hidden, weight, target, bias): N(0, 1) logits, and every other token moved along its
    target's weight row until z_t - logsumexp(the rest) is one of :data:`MARGINS` (p_t from
    0.95 to 0.9997): a true-class gradient rounded in the low dtype is wrong by up to 100 %."""
    T, d, V = shape
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(T, d, generator=g, dtype=torch.float64)
    w = torch.randn(V, d, generator=g, dtype=torch.float64) / d ** 0.5
    b = torch.randn(V, generator=g, dtype=torch.float64) / 4
    t = torch.randint(0, V, (T,), generator=g)
    h, w, b = (x.to(dtype).double() for x in (h, w, b))  # what the dtype can hold
    rows = torch.arange(0, T, 2)
    z = h[rows] @ w.T
    wt = w[t[rows]]
    others = z.scatter(1, t[rows, None], float("-inf")).logsumexp(1)
    margin = torch.tensor(MARGINS, dtype=torch.float64).repeat(len(rows))[: len(rows)]
    step = (others + margin - z[torch.arange(len(rows)), t[rows]]) / (wt * wt).sum(1)
    h[rows] += step[:, None] * wt
    return (h.to(device=device, dtype=dtype), w.to(device=device, dtype=dtype),
            t.to(device), b.to(device=device, dtype=dtype))


def _rel(x: torch.Tensor, ref: torch.Tensor, dim=None) -> torch.Tensor:
    err = (x.double() - ref).norm(dim=dim)
    return err / ref.norm(dim=dim).clamp_min(1e-30)


def check_step(step, dtype: torch.dtype = torch.bfloat16, device=None, cases=CHECK_CASES,
               refuses=None, refused: list | None = None) -> str | None:
    """None when ``step(h, w, t[, bias], ignore_index=, label_smoothing=, softcap=)`` - a loss,
    mean over the tokens, differentiable in h, w (and the bias) - matches float64 in every case
    (loss; dhidden token by token; dweight; dbias), else why, naming the case. ``refuses(h, w,
    t, bias, **kw)``: why the step does not offer a case (a peer's ``supports``), which is then
    skipped and, with its reason, appended to ``refused``."""
    tol = CHECK_TOL[dtype]
    h0, w0, t0, b0 = check_inputs(dtype, device or DEVICE)
    for name, spec in cases.items():
        kw = {k: v for k, v in spec.items() if k not in ("bias", "ignored")}
        t = t0.clone()
        if spec.get("ignored"):
            t[1::3] = -100  # confident and plain tokens among them
        h, w = h0.clone().requires_grad_(True), w0.clone().requires_grad_(True)
        b = b0.clone().requires_grad_(True) if spec.get("bias") else None
        why = refuses(h, w, t, b, **kw) if refuses is not None else None
        if why is not None:
            if refused is not None:
                refused.append(f"{name} ({why})")
            continue
        try:
            loss = step(h, w, t, b, **kw) if b is not None else step(h, w, t, **kw)
            loss.backward()
        except Exception as e:  # a crash is a wrong step too
            return f"{name}: {type(e).__name__}: {str(e)[:80]}"
        bias = b0 if b is not None else None
        one = torch.ones((), dtype=torch.float64, device=h0.device)  # the mean's upstream grad
        ref = lce.reference(h0, w0, t, bias, **kw)[0]
        dh, dw, db = lce.backward_reference(h0, w0, t, bias, None, one, **kw)
        keep = (t != -100).nonzero().flatten()
        checks = [("loss", _rel(loss.detach(), ref)),
                  ("dhidden (worst token)", _rel(h.grad[keep], dh[keep], dim=1).max()),
                  ("dweight", _rel(w.grad, dw))]
        if b is not None:
            checks.append(("dbias", _rel(b.grad, db)))
        for what, err in checks:
            if not err <= tol:  # NaN fails too
                return f"{name}: {what} off by {float(err):.2g} (allowed {tol:g})"
    return None


PEERS = {"Liger FLCE": "peer_liger_linear_cross_entropy", "CCE": "peer_cce_linear_cross_entropy"}


def refusal(step_name: str):
    """``refuses(h, w, t, bias, **kw)`` of a peer's step: its registered variant's
    ``supports`` (None for the lab's steps: they take every option)."""
    if step_name not in PEERS:
        return None
    v = kernel_lab.get(PEERS[step_name])
    return lambda h, w, t, b=None, **kw: v.supports(h, w, t, b, **kw)


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


def run_cell(T: int, d: int, V: int, reps: int, fns: dict, profiled: tuple[str, ...] = (),
             rounds: int = 5, dtype: torch.dtype = torch.bfloat16) -> tuple[dict, dict]:
    """One cell's row: per name ``(ms, x cuBLAS, its spread, peak bytes)`` or why it did not
    run; and the profile tables of the names in ``profiled``. Inputs in ``dtype`` (cuBLAS's
    matmuls too: fp32 under PyTorch's matmul precision setting, "highest" unless changed)."""
    g = torch.Generator(device=DEVICE).manual_seed(0)
    h = torch.randn(T, d, device=DEVICE, generator=g).to(dtype).requires_grad_(True)
    w = (torch.randn(V, d, device=DEVICE, generator=g) / (2 * d ** 0.5)).to(dtype)
    w.requires_grad_(True)
    t = torch.randint(0, V, (T,), device=DEVICE, generator=g)
    hd, wd = h.detach(), w.detach()

    def matmuls():  # (the logits-sized buffer lives for the call only: a step's memory is its own)
        z = hd @ wd.T
        z @ wd, z.T @ hd

    runs, failed, peaks, tables = {"cuBLAS 3 matmuls": matmuls}, {}, {"cuBLAS 3 matmuls": 0}, {}
    for name, fn in fns.items():
        def step(fn=fn):
            h.grad = w.grad = None
            fn(h, w, t).backward()
        try:
            step()  # warm-up: compiles and autotunes outside the timing
            h.grad = w.grad = None
            torch.cuda.synchronize()
            base = torch.cuda.memory_allocated() + h.element_size() * (h.numel() + w.numel())
            torch.cuda.reset_peak_memory_stats()
            step()
            torch.cuda.synchronize()
            peaks[name] = torch.cuda.max_memory_allocated() - base
            runs[name] = step
        except Exception as e:  # a refusal or failure shows in its cell
            failed[name] = f"{type(e).__name__}: {str(e)[:60]}"
        h.grad = w.grad = None
        torch.cuda.empty_cache()
    matmuls()
    samples = interleaved({n: (lambda fn=fn: statistics.median(_time(fn, reps)))
                           for n, fn in runs.items()}, rounds)
    timed = within_rounds(samples, "cuBLAS 3 matmuls")
    for name, fn in runs.items():
        if name in profiled or "all" in profiled:
            tables[name] = kernel_table(fn)
    h.grad = w.grad = None
    row = {n: (t["median"], t["ratio"], t["ratio_spread"], peaks[n]) for n, t in timed.items()}
    row.update(failed)
    row.update({n: "failed while timed (above)" for n in runs if n not in timed})
    return row, tables


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tokens", default=",".join(map(str, TOKENS)))
    p.add_argument("--dtype", default="bfloat16", help="comma-separated: bfloat16, float16, "
                   "float32 (each checked against float64 first, then raced)")
    p.add_argument("--dv", default=",".join(f"{d}x{v}" for d, v in CELLS))
    p.add_argument("--rounds", type=int, default=5,
                   help="interleaved rounds a cell (the ratios' median and spread over them)")
    p.add_argument("--reps", type=int, default=3, help="steps a variant a round (their median)")
    p.add_argument("--profile", default="", metavar="NAMES",
                   help='comma-separated rows (e.g. "chunked,cuBLAS 3 matmuls", or "all") whose '
                   "step is also run once under torch.profiler: a table of its kernels a cell")
    p.add_argument("--chunk-rows", default="", metavar="ROWS",
                   help='comma-separated chunk sizes (e.g. "1024,1536,2048"): a "chunked @ROWS" '
                   "row each, beside the rule's pick (its time and memory per chunk size)")
    p.add_argument("--only", default="", metavar="NAMES",
                   help='comma-separated rows to race (e.g. "chunked"; default: all)')
    a = p.parse_args(argv)
    profiled = tuple(n.strip() for n in a.profile.split(",") if n.strip())
    every = steps()
    fns, unknown = pick_modes(every, a.only)
    if unknown:
        p.error(f"--only: unknown {unknown}; rows: {', '.join(every)}")
    try:
        sizes = [int(r) for r in a.chunk_rows.split(",") if r.strip()]
    except ValueError:
        p.error(f"--chunk-rows takes whole numbers, got {a.chunk_rows!r}")
    if any(r < 1 for r in sizes):
        p.error(f"--chunk-rows: sizes of at least 1 row, got {sizes}")
    fns.update({f"chunked @{r}": chunked_at(r) for r in sizes})
    unknown = [n for n in profiled if n not in (*fns, "cuBLAS 3 matmuls", "all")]
    if unknown:
        p.error(f"--profile: unknown {unknown}; rows: {', '.join(['cuBLAS 3 matmuls', *fns])}")
    try:
        dtypes = [parse_dtype(d) for d in a.dtype.split(",") if d.strip()]
    except ValueError as e:
        p.error(f"--dtype: {e}")
    taken = ", ".join(str(d).removeprefix("torch.") for d in CHECK_TOL)
    if not dtypes or any(d not in CHECK_TOL for d in dtypes):
        p.error(f"--dtype: one or more of {taken}, got {a.dtype!r}")
    for dtype in dtypes:
        race(dtype, dict(fns), a, profiled)


def race(dtype: torch.dtype, fns: dict, a, profiled: tuple[str, ...]) -> None:
    """Every step of ``fns`` checked against float64 in ``dtype`` (a wrong one is named and not
    raced), then each cell's row beside cuBLAS's matmuls."""
    dname = str(dtype).removeprefix("torch.")
    print(f"check against float64 ({' x '.join(map(str, CHECK_SHAPE))} tokens x hidden x "
          f"vocabulary, {dname}, cases: {', '.join(CHECK_CASES)}):")
    for name in list(fns):
        refused: list[str] = []
        why = check_step(fns[name], dtype, refuses=refusal(name), refused=refused)
        said = "ok" if why is None else "WRONG: " + why
        print(f"  {name:18s} {said}" + (f"; refuses {', '.join(refused)}" if refused else ""))
        if why is not None:
            del fns[name]  # a wrong step is not raced
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, {dname}, one step "
          f"(forward + backward for hidden and weight); ms, TFLOP/s (6 T d V), x cuBLAS "
          f"(median of {a.rounds} interleaved rounds, its spread), GiB peak above "
          f"inputs and gradients")
    for dv in a.dv.split(","):
        d, v = map(int, dv.split("x"))
        for T in map(int, a.tokens.split(",")):
            row, tables = run_cell(T, d, v, a.reps, fns, profiled, a.rounds, dtype)
            flops = 6 * T * d * v
            print(f"\n{T} x {d} x {v}")
            for name, r in row.items():
                if isinstance(r, str):
                    print(f"  {name:18s} {r}")
                    continue
                ms, ratio, spread, mem = r
                print(f"  {name:18s} {ms:8.2f} ms {flops / ms / 1e9:7.0f} TFLOP/s "
                      f"{ratio:5.2f}x (spread {spread:4.1%}) {mem / 2**30:6.2f} GiB")
            for name, table in tables.items():
                print(f"\n{name}, one step at {T} x {d} x {v} under torch.profiler:\n{table}")


if __name__ == "__main__":
    main()
