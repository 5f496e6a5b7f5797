#!/usr/bin/env bash
# The thirty-second run's third call. Calls 1-2 showed kernel 7b's 2-byte x 8 binary, at its
# 128-register cap, moving by points with small code changes (24 B of spills: -6 to -7). So:
# fewer live registers in its step, same work - A/B in one process of head against
#   rowpairs1   warp 0's early pairs of phase 2: 32 chunks, not 64 (4 registers fewer, in
#               every thread's allocation; rows of up to 64 chunks load the rest in the loop)
#   nextcursor  the cursor of the item `ahead` steps on derived from `now` when used, not
#               carried through the step (3 registers)
#   fewerregs   both
#   bash bench/variants/apply.sh bench/ab_variants rowpairs1 nextcursor fewerregs
#   KERNEL_LAB_CACHE_DIR=.klc python bench/ab_kernels.py --compile-only ...; bash bench/run32/call3.sh
# (carry .klc and bench/ab_variants). Prediction: 2-byte level to +1.5 points, fp32 level.
. "$(dirname "$0")/../run27/preamble.sh"
V="--variant head=bench/ab_variants/head --variant rowpairs1=bench/ab_variants/rowpairs1"
V="$V --variant nextcursor=bench/ab_variants/nextcursor --variant fewerregs=bench/ab_variants/fewerregs"
AB_TIMEOUT=120 ab $V --rounds 11 --shape bfloat16:262144 --shape float16:262144 --kind chunks_reg \
  --threads 512 --vpt 8 | tee "$OUT/ab.log"
AB_TIMEOUT=200 ab $V --rounds 9 --shape bfloat16:524288 --shape bfloat16:1048576 \
  --shape float16:1048576 --shape float32:262144 --shape float32:1048576 | tee -a "$OUT/ab.log"
timeout 60 python3 bench/ab_configs.py --rounds 11 --shape bfloat16:262144 --shape float16:262144 \
  --cfg pick --cfg chunks_reg,512,8,1,0 2>&1 | grep softmax | tee -a "$OUT/ab.log"
