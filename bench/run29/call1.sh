#!/usr/bin/env bash
# The twenty-ninth run's first call: the slots tests with the shapes added after the twenty-eighth
# run's last call (2 x 1024 x 8 + 3, N = 90000), then bench/fixed_cost.py: each long row's pick
# (and controls that already reach >= 95 %) timed at many row counts beside the copy, to split
# #5's misses into a fixed cost per call (fill, drain, last wave) and a steady speed. Summary last.
#   KERNEL_LAB_CACHE_DIR=.klc python -m kernel_lab compile; bash bench/run29/call1.sh (carry .klc)
# Prediction: the misses (2-byte 128256-262144, 92-94.4 % at M0) are mostly fixed cost: steady
# speed >= 96 % of copy, a fixed cost of 5-10 us a call (one row's residency, ~2-4 % of a
# 250 us call); the controls (bf16 16384 / 65536, fp32 65536) pay < 2 us. Steps of whole waves
# (period 132 rows at 2 CTAs of a 2-CTA cluster an SM) of <= 1 point in the fine grid.
. "$(dirname "$0")/../run27/preamble.sh"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout 240 python3 -m pytest tests/test_fast_configs.py -k slots -q -ra -p no:cacheprovider \
  -n 16 >"$OUT/tests.log" 2>&1
echo "tests rc=$?"
(cd bench && timeout 300 python3 fixed_cost.py --out "$OUT/fixed") >"$OUT/fixed.log" 2>&1
echo "fixed_cost rc=$?"
echo "== tests"
grep -E "^(FAILED|ERROR)" "$OUT/tests.log" | cut -c1-250 | head -30
tail -n 1 "$OUT/tests.log"
echo "== fixed cost"; cat "$OUT/fixed.log" | cut -c1-600
