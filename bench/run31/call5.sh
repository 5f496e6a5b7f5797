#!/usr/bin/env bash
# The thirty-first run's fifth call: half of the 2-byte softmax's kept exps on the FMA pipe
# (bench/variants/polyexp.patch: exp_poly, a degree-4 polynomial of 2^f times 2^j from j's bits,
# for the odd elements of each vector in exp_maxsum_in_t - kernels 3b's registers, 7b's chunks -
# and kernel 3b's slots). An SM's MUFU does 16 ex2 a clock; kernel 3b's CTA spends ~2 us of a
# ~16 us life on 64K exps with nothing of its own in flight.
#   bash bench/variants/apply.sh bench/ab_variants polyexp
#   KERNEL_LAB_CACHE_DIR=.klc python bench/ab_kernels.py --compile-only ... (the shapes below)
#   bash bench/run31/call5.sh        (carry .klc, bench/ab_variants)
# Prediction: +0.5-2 points on the 2-byte picks of kernels 3b (128256-262144) and 7b (524288,
# 2^20), where the exps bunch after a row (chunk) lands.
. "$(dirname "$0")/../run27/preamble.sh"
timeout 400 python3 bench/ab_kernels.py --variant head=bench/ab_variants/head \
  --variant poly=bench/ab_variants/polyexp --rounds 7 --shape bfloat16:262144 \
  --shape float16:262144 --shape bfloat16:131072 --shape float16:131072 \
  --shape bfloat16:151936 --shape float16:128256 --shape bfloat16:524288 \
  --shape bfloat16:1048576 --shape float16:1048576 2>&1 | grep -v "^check" | tee "$OUT/ab.log"
