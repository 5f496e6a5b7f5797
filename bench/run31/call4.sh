#!/usr/bin/env bash
# The thirty-first run's fourth call: kernel 7b on two CTAs an SM. Call 3 fitted its step as
# ~1.0 us + bytes at ~38 GB/s an SM (512 x 8 and 512 x 4 both one CTA an SM: 128 registers), so
# one CTA's serial step, not DRAM, paces it. chunks2cta.patch: __launch_bounds__(512, 2) for
# VPT <= 4, and 512 x 4 keeps its exps rounded to T (2-byte) or its raw values (fp32) instead of
# fp32 exps (64 registers, 24-32 B of spills), so two CTAs an SM overlap their steps.
#   bash bench/variants/apply.sh bench/ab_variants chunks2cta
#   KERNEL_LAB_CACHE_DIR=.klc python bench/ab_kernels.py --compile-only ... (below's shapes)
#   bash bench/run31/call4.sh        (carry .klc, bench/ab_variants)
# Prediction: 512 x 4 at two CTAs an SM 77 -> 90-97 % at 2-byte 262144 (each SM two steps in
# flight: 2 x 64 KB every ~2.7 us = 47 GB/s an SM, past DRAM's 32); fp32 84 -> 92-96.
. "$(dirname "$0")/../run27/preamble.sh"
V="--variant head=bench/ab_variants/head --variant lb2=bench/ab_variants/chunks2cta"
for a in 1 2; do
  timeout 150 python3 bench/ab_kernels.py $V --kind chunks_reg --threads 512 --vpt 4 --ahead $a \
    --rounds 9 --peer fast_softmax --shape bfloat16:262144 --shape float16:262144 \
    --shape float32:262144 2>&1 | grep -v "^check"
done | tee "$OUT/ab.log"
