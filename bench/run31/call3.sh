#!/usr/bin/env bash
# The thirty-first run's third call: call 2 found kernel 7b paced by its SMs (128 or 124 CTAs of
# 512 x 8 lose 1.2-1.6 points against 132: the rate follows the SM count, not DRAM). 512 x 8
# holds two chunks a thread (>64 registers): one CTA an SM. 512 x 4 (half the registers) may
# fit two or three an SM with 8 chunks' bytes in flight per SM instead of 4 - more ahead too.
#   bash bench/run31/call3.sh        (carry .klc)
# Prediction: if 512 x 4 fits 2+ CTAs an SM, +1-2 points at 2-byte 262144-2^20 (16 chunks a
# row: more pairs, but twice the chunks in flight an SM); if 1 an SM, -2 (as 256 x 8).
. "$(dirname "$0")/../run27/preamble.sh"
for s in bfloat16:262144 float32:262144 bfloat16:524288 bfloat16:1048576; do
  timeout 60 python3 bench/ab_configs.py --rounds 11 --shape $s --cfg pick \
    --cfg chunks_reg,512,4,1,0 --cfg chunks_reg,512,4,1,0,ahead=2 \
    --cfg chunks_reg,512,4,1,0,ahead=3 --cfg chunks_reg,384,4,1,0,ahead=2 2>&1 | tail -n 6
done | tee "$OUT/race.log"
