#!/usr/bin/env bash
# The thirty-first run's second call: the chunk kernel's grid. chunks_reg 512 x 8 runs one CTA an
# SM (132 resident), and at M*N = 2^28 every 2-byte chunk shape is 8192 chunks (fp32 16384):
# 62.06 steps, a last step of 8 CTAs alone. Capped grids: 128 (64 whole steps on 128 SMs) and
# 131 (62.5 steps: the last one 70 CTAs wide), against the resident 132.
#   bash bench/run31/call2.sh        (carry .klc)
# Prediction: the last step of 8 CTAs costs 2-3 us (1 MB at one SM's pace); 128 removes it but
# gives up 4 SMs: +0.5-1 % if 128 SMs still fill DRAM, else level or worse.
. "$(dirname "$0")/../run27/preamble.sh"
CR=chunks_reg,512,8,1,0
for s in bfloat16:262144 float16:262144 float32:262144 bfloat16:524288 bfloat16:1048576; do
  timeout 60 python3 bench/ab_configs.py --rounds 11 --shape $s --cfg $CR \
    --cfg $CR,groups=128 --cfg $CR,groups=131 --cfg $CR,groups=124 2>&1 | tail -n 5
done | tee "$OUT/race.log"
