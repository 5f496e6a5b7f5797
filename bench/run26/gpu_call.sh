#!/usr/bin/env bash
# The twenty-sixth run's checking call (one device call, <= 8 files back): the whole test suite,
# then kernel 2b's rows in a tune (the rule's 2-byte rows of 65K-106K and the odd rows of 22K-26K
# at 256 threads), softmax and log_softmax. Summary last.
#   bash bench/run26/gpu_call.sh   (carry .klc: KERNEL_LAB_CACHE_DIR=.klc python -m kernel_lab compile)
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:-/tmp/kernel_lab_gpu}"; mkdir -p "$OUT"
[ -d .klc ] && export KERNEL_LAB_CACHE_DIR="$PWD/.klc"
export PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
# KLAB_TESTS / KLAB_TEST_K: fewer tests (e.g. tests/test_fast_configs.py and -k block_slots)
timeout "${KLAB_TEST_TIMEOUT:-360}" python3 -m pytest ${KLAB_TESTS:-tests} ${KLAB_TEST_K:+-k "$KLAB_TEST_K"} \
  -q -ra -p no:cacheprovider -n 16 >"$OUT/tests.log" 2>&1
echo "tests rc=$?"
(cd bench && timeout "${KLAB_TUNE_TIMEOUT:-150}" python3 tune_long_rows.py --out "$OUT/tune" \
  --ns "${KLAB_TUNE_NS:-22001,24001,80000,100000,106496}" \
  --dtypes "${KLAB_TUNE_DTYPES:-bfloat16,float16}" \
  --ops softmax,log_softmax --only '^block') >"$OUT/tune.log" 2>&1
echo "tune rc=$?"
echo "== tests"
grep -E "^(FAILED|ERROR)" "$OUT/tests.log" | cut -c1-250 | head -30
tail -n 2 "$OUT/tests.log"
echo "== tune"; grep -A30 '^SUMMARY' "$OUT/tune.log" | cut -c1-160
