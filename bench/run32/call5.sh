#!/usr/bin/env bash
# The thirty-second run's fifth call: where does kernel 3c (persist_slots on 4-CTA clusters:
# kernel 3b persistent, each window refilled with the next row's once stored, so one row's
# exchange overlaps the next row's loads) stand at 2-byte 262144 now? It still keeps raw values
# (two exps an element); kernel 3b gained 2.6-3.8 points from keeping its exps in T (twenty-
# seventh run). Call 4 put kernel 3b's loss at 262144 on the 4-way split of the row; 3c is the
# form that hides that wait behind the next row's traffic.
#   bash bench/run32/call5.sh
# Prediction: 3c 3-6 points under the pick (94.5), so that kept exps would bring it level at most.
. "$(dirname "$0")/../run27/preamble.sh"
for d in bfloat16 float16; do
  timeout 200 python3 bench/ab_configs.py --rounds 11 --shape $d:262144 --cfg pick \
    --cfg persist_slots,512,8,4,8 2>&1 | tail -n 3
done | tee "$OUT/race.log"
timeout 120 python3 bench/ab_configs.py --rounds 11 --shape bfloat16:131072 --cfg pick \
  --cfg persist_slots,512,8,2,8 2>&1 | tail -n 3 | tee -a "$OUT/race.log"
