#!/usr/bin/env bash
# The thirtieth run's second call: the chunk kernels' flagged words kept per stream, each launch
# on the next epoch (kernel_lab/ops/softmax/flag_words.py; no zeroing fill kernel before every
# launch), A/B in one process against a zeroed buffer a call (REUSE = False), forward picks,
# 2-byte 262144 on chunks_reg beside its pick (kernel 3b 4 x 512 x 8 + 8), and the softmax
# backward's chunks; then the whole suite and the short benchmark (.ci/gpu) on this tree.
#   KERNEL_LAB_CACHE_DIR=.klc python -m kernel_lab compile
#   bash bench/run30/call2.sh        (carry .klc)
# Prediction: the fill and its launch gap are 2-4 us of the chunk kernels' 11-13 us fixed cost a
# call: kept +1.5-3 % at 2-byte 262144-524288 (calls of ~130 us), +1-1.5 % at fp32 262144, +0.5
# at 2^20; the 2-byte 262144 chunks_reg then level with or past kernel 3b (93.5 vs 94.5 before).
. "$(dirname "$0")/../run27/preamble.sh"
timeout 200 python3 bench/ab_flag_words.py --rounds 7 >"$OUT/ab.log" 2>&1
echo "ab rc=$?"
KLAB_XDIST=16 KLAB_TEST_TIMEOUT=330 bash .ci/gpu >"$OUT/gpu.log" 2>&1
echo "ci/gpu rc=$?"
tail -n 45 "$OUT/gpu.log" | cut -c1-250
echo "== flagged words kept against zeroed"
cat "$OUT/ab.log"
