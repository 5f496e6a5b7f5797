"""How a config's speed follows the SMs it may use: the same A/B as bench/ab_configs.py, timed
while a spinning kernel on another stream holds K whole SMs (one CTA each, all of an SM's shared
memory, so nothing else is placed there).

    python bench/occupy_sms.py --shape bfloat16:131072 --shape bfloat16:262144 \\
        --cfg pick --occupy 0 --occupy 8 --occupy 16 [--rounds 11]

Question it answers (thirty-second run): kernel 3b on clusters of 4 (2-byte 262144) has 62
clusters resident, 248 of the 264 CTA slots its shape fills on 2-CTA clusters (131072). Is a
kernel of that kind paced by the SMs it gets - would it lose as much on 2-CTA clusters with 8 SMs
(16 slots) taken away? The copy is timed in the same rounds under the same occupation, so each
line's % of copy compares the config against what DRAM gives the rest of the GPU. The occupying
CTAs record the SMs they sit on (printed); a line whose timing outlasted the occupation says so.
"""

from __future__ import annotations

import argparse
import time

import torch

try:  # run as a script from the repository root
    from ab_configs import add_race_arguments, checked_calls, parse_cfg, parse_shape
    from ab_kernels import time_case
except ImportError:  # pragma: no cover - imported as bench.occupy_sms
    from bench.ab_configs import add_race_arguments, checked_calls, parse_cfg, parse_shape
    from bench.ab_kernels import time_case

# One CTA per SM (it takes all the shared memory a CTA may have), spinning on the global timer
# for `ns` nanoseconds; CTA b writes its SM id to sm[b].
OCCUPY_SRC = r"""
extern "C" __global__ void occupy(unsigned long long ns, int* sm) {
  extern __shared__ char held[];
  unsigned long long t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  if (threadIdx.x == 0) {
    int id;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
    sm[blockIdx.x] = id;
    held[0] = 1;
  }
  do {
    __nanosleep(10000);
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  } while (t - t0 < ns);
}
"""
HOLD_S = 5.0  # how long the occupying CTAs spin: longer than any line's timing


def occupy(k: int, stream: torch.cuda.Stream) -> torch.Tensor:
    """Launch k spinning CTAs of all-of-an-SM shared memory on ``stream``; their SM ids."""
    import cupy

    dev = torch.cuda.current_device()
    smem = cupy.cuda.runtime.deviceGetAttribute(
        cupy.cuda.runtime.cudaDevAttrMaxSharedMemoryPerBlockOptin, dev)
    kern = cupy.RawKernel(OCCUPY_SRC, "occupy")
    kern.max_dynamic_shared_size_bytes = smem
    sm = torch.full((k,), -1, dtype=torch.int32, device="cuda")
    with cupy.cuda.ExternalStream(stream.cuda_stream):
        kern((k,), (32,), (cupy.uint64(int(HOLD_S * 1e9)), sm.data_ptr()), shared_mem=smem)
    return sm


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_race_arguments(ap, rounds=11)
    ap.add_argument("--occupy", type=int, action="append", required=True, metavar="K",
                    help="SMs to hold while timing (repeatable; 0: none)")
    a = ap.parse_args()
    try:  # a bad --cfg, --shape or --occupy fails before any GPU work
        specs = [(text, *parse_cfg(text)) for text in a.cfg]
        shapes = [parse_shape(text) for text in a.shape]
        if any(k < 0 for k in a.occupy):
            raise ValueError(f"--occupy takes SM counts >= 0, not {a.occupy}")
    except ValueError as e:
        ap.error(str(e))
    if not torch.cuda.is_available():
        raise SystemExit("occupy_sms.py: no CUDA GPU here")
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    if max(a.occupy) >= sms:
        ap.error(f"--occupy {max(a.occupy)}: this GPU has {sms} SMs")
    side = torch.cuda.Stream()
    for dname, dtype, n in shapes:
        x = torch.randn(max(1, (1 << a.total_log2) // n), n, device="cuda", dtype=dtype)
        y = torch.empty_like(x)
        calls = {name: call for name, (call, _, _) in checked_calls(specs, x, y).items()}
        for k in a.occupy:
            sm = occupy(k, side) if k else None
            time.sleep(0.05)  # the occupying CTAs are resident before the first timed call
            t0 = time.perf_counter()
            line = time_case(f"softmax {dname} {x.shape[0]}x{n}, {k} SMs held", x, y, None,
                             calls, list(calls), a.rounds)
            took = time.perf_counter() - t0
            side.synchronize()
            held = f" on SMs {sorted(sm.tolist())}" if k else ""
            late = " (TIMING OUTLASTED THE HOLD)" if took > HOLD_S - 0.5 else ""
            print(f"{line}{late}\n  {k} SMs held{held}; timed in {took:.2f} s", flush=True)


if __name__ == "__main__":
    main()
