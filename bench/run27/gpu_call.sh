#!/usr/bin/env bash
# The twenty-seventh run's checking call (one device call, <= 8 files back): tests (default: the
# whole suite), then kernel 2c (persist_slots) against the picks and kernel 2b in a tune of the
# 2-byte 100K-152K rows and fp32 65536, softmax and log_softmax. Summary last.
#   bash bench/run27/gpu_call.sh   (carry .klc: KERNEL_LAB_CACHE_DIR=.klc python -m kernel_lab compile)
#   KLAB_TESTS=tests/test_fast_configs.py KLAB_TEST_K=slots bash bench/run27/gpu_call.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:-/tmp/kernel_lab_gpu}"; mkdir -p "$OUT"
[ -d .klc ] && export KERNEL_LAB_CACHE_DIR="$PWD/.klc"
export PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout "${KLAB_TEST_TIMEOUT:-360}" python3 -m pytest ${KLAB_TESTS:-tests} ${KLAB_TEST_K:+-k "$KLAB_TEST_K"} \
  -q -ra -p no:cacheprovider -n "${KLAB_XDIST:-16}" >"$OUT/tests.log" 2>&1
echo "tests rc=$?"
(cd bench && timeout "${KLAB_TUNE_TIMEOUT:-200}" python3 tune_long_rows.py --out "$OUT/tune" \
  --ns "${KLAB_TUNE_NS:-100000,128256,131072,151936}" \
  --dtypes "${KLAB_TUNE_DTYPES:-bfloat16,float16}" \
  --ops softmax,log_softmax --only "${KLAB_TUNE_ONLY:-_slots}") >"$OUT/tune.log" 2>&1
echo "tune rc=$?"
echo "== tests"
grep -E "^(FAILED|ERROR)" "$OUT/tests.log" | cut -c1-250 | head -30
tail -n 2 "$OUT/tests.log"
echo "== tune"; grep -A40 '^SUMMARY' "$OUT/tune.log" | cut -c1-160
