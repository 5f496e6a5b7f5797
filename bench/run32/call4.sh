#!/usr/bin/env bash
# The thirty-second run's fourth call: is kernel 3b paced by the SMs (CTA slots) it gets?
# bench/occupy_sms.py times the pick while a spinning kernel on another stream holds K whole SMs.
# Kernel 3b on 4-CTA clusters (2-byte 262144) has 62 clusters resident: 248 of the 264 slots that
# its shape fills on 2-CTA clusters (131072, 132 clusters), and runs a steady 94.9 % against
# 97.7 (twenty-ninth run's fixed_cost fits). Prediction, if the missing 16 slots are the cause:
# 131072's pick with 8 SMs held (16 slots) loses ~2-3 points, with 16 SMs ~5; if the 4-way
# exchange is the cause: under 1 point with 8 SMs held.
#   bash bench/run32/call4.sh        (carry .klc)
. "$(dirname "$0")/../run27/preamble.sh"
cd bench
timeout 200 python3 occupy_sms.py --rounds 11 --shape bfloat16:131072 --shape float16:131072 \
  --cfg pick --occupy 0 --occupy 8 --occupy 16 2>&1 | tee "$OUT/occupy.log"
timeout 150 python3 occupy_sms.py --rounds 11 --shape bfloat16:262144 --cfg pick \
  --cfg chunks_reg,512,8,1,0 --occupy 0 --occupy 8 2>&1 | tee -a "$OUT/occupy.log"
