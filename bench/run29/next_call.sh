#!/usr/bin/env bash
# Staged for the next device session (bench/NOTES.md, twenty-ninth run, "Left"): (1) the fits of
# the picks #5 still misses, first-wave phases on and off where they apply (kernel 5 and kernel
# 7b take none: their fixed cost against their steady speed); (2) kernel 7b (chunks_reg) with its
# first wave in phases (bench/variants/chunkwave.patch) against head, softmax and log_softmax.
# Then, in a call of its own: KLAB_XDIST=16 bash .ci/gpu (the whole suite on this tree).
#   bash bench/variants/apply.sh bench/ab_variants chunkwave
#   KERNEL_LAB_CACHE_DIR=.klc python -m kernel_lab compile
#   bash bench/run29/next_call.sh      (carry .klc and bench/ab_variants)
# Prediction: kernel 7b's fixed cost 11-13 us at 2-byte 262145-524288 and fp32 262144, its
# steady speed 96-97 %; chunkwave +0.5-1.5 points there, less at 2^20 (M = 256, one short wave);
# fp32 151936 on kernel 5: fixed ~6 us, steady ~95 % (the steady speed is its limit).
. "$(dirname "$0")/../run27/preamble.sh"
(cd bench && timeout 200 python3 fixed_cost.py --out "$OUT/fits" --stagger 'none;block_slots,block' \
  --shapes float32:151936,float32:262144,float32:524288,bfloat16:196608,bfloat16:262144,bfloat16:524288) \
  >"$OUT/fits.log" 2>&1
echo "fits rc=$?"
V=bench/ab_variants
for op in softmax log_softmax; do
  echo "== $op: chunks_reg, first wave in phases"
  ab --variant head=$V/head --variant chunkwave=$V/chunkwave --op $op --rounds 7 \
    --shape bfloat16:262145 --shape bfloat16:524288 --shape float16:524288 \
    --shape bfloat16:1048576 --shape float32:262144 --shape float32:524288 --shape float32:1048576
done
echo "== fits"; grep -v "^== by M" "$OUT/fits.log" | grep -vE "\]: [0-9]+:" | cut -c1-300
