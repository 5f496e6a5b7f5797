#!/usr/bin/env bash
# The thirty-second run's second call: windows_inside without its signed division (a5b0...:
# the thread's windows tested against the row's partial last window instead of its last window
# by (nwin - 1 - base) / step, ~25 instructions and a MUFU round trip, twice a step in kernel 7b).
# Tests of every kernel that calls it (persistent 5, chunks 7 / 7b, the persistent and chunk
# backwards), then an A/B in one process, old (the tree before: bench/ab_variants/old, from
# `git archive 55c6b4e cuda_src`) against new (cuda_src).
#   KERNEL_LAB_CACHE_DIR=.klc python -m kernel_lab compile; ab_kernels.py --compile-only ...
#   bash bench/run32/call2.sh        (carry .klc and bench/ab_variants)
# Prediction: kernel 7b (chunks_reg) +1 to +3 points at 2-byte 262144-2^20 (50 of ~700
# instructions a step, and the MUFU latency in front of each phase's warp vote), fp32 +0.5-1.5;
# kernel 5 (fp32 151936, one division a row) level within 0.5.
# Runs on the tree at 3a8c770 (the division-free check; reverted in 9ff17e8): git checkout 3a8c770.
. "$(dirname "$0")/../run27/preamble.sh"
timeout 280 python3 -m pytest -q -n 16 -p no:cacheprovider tests/test_fast_configs.py \
  tests/test_backward_configs.py tests/test_flag_words.py >"$OUT/tests.txt" 2>&1
echo "tests rc=$?: $(tail -n 1 "$OUT/tests.txt")"
V="--variant old=bench/ab_variants/old/cuda_src --variant new=cuda_src --rounds 9"
AB_TIMEOUT=200 ab $V --shape float32:151936 --shape float32:262144 --shape bfloat16:524288 \
  --shape bfloat16:1048576 --shape float16:1048576 --shape float32:1048576 | tee "$OUT/ab.log"
AB_TIMEOUT=100 ab $V --shape bfloat16:262144 --shape float16:262144 --kind chunks_reg \
  --threads 512 --vpt 8 | tee -a "$OUT/ab.log"
grep -E "passed|failed" "$OUT/tests.txt" | tail -n 3
