#!/usr/bin/env bash
# The twenty-seventh run's checking call (one device call, <= 8 files back): tests (default: the
# whole suite), then kernels 2c / 3c (persist_slots) against the picks and kernels 2b / 3b in
# tunes of the rows #5 still misses, softmax and log_softmax. Summary last.
#   bash bench/run27/gpu_call.sh   (carry .klc: KERNEL_LAB_CACHE_DIR=.klc python -m kernel_lab compile)
#   KLAB_TESTS=tests/test_fast_configs.py KLAB_TEST_K=slots bash bench/run27/gpu_call.sh
#   KLAB_TUNES="float32:131072 bfloat16:262144" KLAB_TUNE_ONLY='persist' bash bench/run27/gpu_call.sh
. "$(dirname "$0")/preamble.sh"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout "${KLAB_TEST_TIMEOUT:-360}" python3 -m pytest ${KLAB_TESTS:-tests} ${KLAB_TEST_K:+-k "$KLAB_TEST_K"} \
  -q -ra -p no:cacheprovider -n "${KLAB_XDIST:-16}" >"$OUT/tests.log" 2>&1
echo "tests rc=$?"
# KLAB_TUNES: space-separated DTYPES:NS (comma-separated each); one tune_long_rows.py run each
i=0
for spec in ${KLAB_TUNES:-"bfloat16,float16:100000,128256,131072,151936,262144" "float32:65536,131072"}; do
  i=$((i + 1))
  (cd bench && timeout "${KLAB_TUNE_TIMEOUT:-200}" python3 tune_long_rows.py --out "$OUT/tune$i" \
    --dtypes "${spec%%:*}" --ns "${spec#*:}" --ops softmax,log_softmax \
    --only "${KLAB_TUNE_ONLY:-_slots}") >"$OUT/tune$i.log" 2>&1
  echo "tune $spec rc=$?"
  rm -f "$OUT/tune$i/attrs.json"  # registers: python -m kernel_lab resources (no GPU needed)
done
echo "== tests"
grep -E "^(FAILED|ERROR)" "$OUT/tests.log" | cut -c1-250 | head -30
tail -n 2 "$OUT/tests.log"
for f in "$OUT"/tune*.log; do echo "== $(basename "$f")"; grep -E '^ERR' "$f" | cut -c1-200; done
# every timing, a line per (dtype, N, op): % of copy per shape, the default pick marked *
python3 bench/tune_summary.py "$OUT"
