#!/usr/bin/env bash
# The thirty-first run's first call: the 262144 picks raced in one process against the other
# configs that hold the row (bench/ab_configs.py), the chunk kernel on capped grids included,
# then the whole suite and the short benchmark (.ci/gpu) on the tree the thirtieth run left
# untested on the GPU (its lock launcher, _phased, bench scripts).
#   KERNEL_LAB_CACHE_DIR=.klc python -m kernel_lab compile
#   bash bench/run31/call1.sh        (carry .klc)
# Prediction: 2-byte 262144 kernel 3b (4 x 512 x 8 + 8) and chunks_reg level within 0.5 (94-95);
# chunks_reg on a grid that divides the chunks into whole steps (256 CTAs: 8192 / 256 = 32)
# +0.3-0.5 over the resident grid (264: 31.03 steps, a last step of 8 CTAs); 2 x 1024 x 8 + 8
# (one CTA an SM) 1-3 points under 3b.
. "$(dirname "$0")/../run27/preamble.sh"
CR=chunks_reg,512,8,1,0
for d in bfloat16 float16; do
  timeout 100 python3 bench/ab_configs.py --rounds 11 --shape $d:262144 --cfg pick \
    --cfg block_slots,1024,8,2,8 --cfg $CR --cfg $CR,groups=256 --cfg $CR,groups=132 \
    --cfg $CR,ahead=2 --cfg chunks_reg,256,8,1,0 --cfg chunks_reg,256,8,1,0,groups=512 \
    2>&1 | tail -n 12
done | tee "$OUT/race.log"
timeout 60 python3 bench/ab_configs.py --rounds 11 --shape float32:262144 --cfg pick \
  --cfg $CR,groups=256 --cfg $CR,groups=132 --cfg $CR,ahead=2 --cfg chunks_reg,256,8,1,0 \
  --cfg chunks_reg,256,8,1,0,groups=512 2>&1 | tail -n 10 | tee -a "$OUT/race.log"
KLAB_XDIST=16 KLAB_TEST_TIMEOUT=330 bash .ci/gpu >"$OUT/gpu.log" 2>&1
echo "ci/gpu rc=$?"
tail -n 45 "$OUT/gpu.log" | cut -c1-250
echo "== race"; cat "$OUT/race.log"
