#!/usr/bin/env bash
# The thirty-first run's sixth call: kernels 2b / 3b (row_on_chip_slots) with an unchecked path
# for warps whose windows are all whole (all_windows_whole: every warp but the row's first and
# last) - plain 16-byte loads, copies, slot reads and stores with no bounds or masks - against
# the tree before it (call 5 found these kernels issue-bound: ~6 more instructions an element
# cost 2.5-4.4 points). Then the slots tests and both ops' correctness cases.
#   mkdir -p bench/ab_variants; git archive <before> cuda_src | tar -x -C /tmp/h
#   cp -r /tmp/h/cuda_src bench/ab_variants/head; cp -r cuda_src bench/ab_variants/whole
#   KERNEL_LAB_CACHE_DIR=.klc python -m kernel_lab compile (+ ab_kernels --compile-only)
#   bash bench/run31/call6.sh        (carry .klc, bench/ab_variants)
# Prediction: +0.5-1.5 points on the 3b / 2b picks (2-byte 128256-262144, fp32 65536-131072,
# 50257-80000), the most where slots are many (+8-11).
. "$(dirname "$0")/../run27/preamble.sh"
V="--variant head=bench/ab_variants/head --variant whole=bench/ab_variants/whole"
timeout 200 python3 bench/ab_kernels.py $V --rounds 9 --shape bfloat16:262144 \
  --shape float16:262144 --shape bfloat16:131072 --shape float16:128256 \
  --shape bfloat16:151936 --shape float32:65536 --shape float32:131072 \
  --shape bfloat16:50257 --shape bfloat16:80000 --shape float32:50257 2>&1 \
  | grep -v "^check" | grep -v "^  " | tee "$OUT/ab.log"
timeout 100 python3 bench/ab_kernels.py $V --op log_softmax --rounds 9 \
  --shape bfloat16:262144 --shape bfloat16:131072 2>&1 | grep -v "^check" | grep -v "^  " \
  | tee -a "$OUT/ab.log"
timeout 150 python3 -m pytest tests/test_fast_configs.py tests/test_correctness.py \
  -k "slots or first_wave or fast_softmax or log_softmax" -q -ra \
  -p no:cacheprovider -n 16 >"$OUT/tests.log" 2>&1
echo "tests rc=$?"; grep -E "^(FAILED|ERROR)" "$OUT/tests.log" | cut -c1-250 | head; tail -n 1 "$OUT/tests.log"
