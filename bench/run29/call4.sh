#!/usr/bin/env bash
# The twenty-ninth run's fourth call: the tests call 3 failed on (a test's row length: a bf16 row
# off its line head spans more windows; fixed) and the slots tests, on the tree that staggers
# block and block_slots; then tunes of kernel 3b's 4-CTA shapes (and every other block_slots
# shape) against the picks, now that the first wave starts in phases: fp32 100000-151936 (kernel
# 3b 2 x 1024 / kernel 5 picks), 2-byte 163840-262144 (chunks_reg picks). Summary last.
#   bash bench/run29/call4.sh   (carry .klc)
# Prediction (call 3: bf16 262144 on 4 x 512 x 8 + 8 95.0 % against chunks_reg's 94.2): kernel
# 3b on 4 CTAs at or above the picks by ~1 point from 2-byte ~196K and fp32 ~128K.
. "$(dirname "$0")/../run27/preamble.sh"
timeout 200 python3 -m pytest tests/test_fast_configs.py -k "first_wave or slots" -q -ra \
  -p no:cacheprovider -n 16 >"$OUT/tests.log" 2>&1
echo "tests rc=$?"
i=0
for spec in "float32:100000,128256,131072,151936" "bfloat16,float16:163840,196608,229376,262144"; do
  i=$((i + 1))
  (cd bench && timeout 150 python3 tune_long_rows.py --out "$OUT/tune$i" --dtypes "${spec%%:*}" \
    --ns "${spec#*:}" --ops softmax --only 'block_slots') >"$OUT/tune$i.log" 2>&1
  echo "tune $spec rc=$?"
  rm -f "$OUT/tune$i/attrs.json"
done
echo "== tests"
grep -E "^(FAILED|ERROR)" "$OUT/tests.log" | cut -c1-250 | head -30
tail -n 1 "$OUT/tests.log"
for f in "$OUT"/tune*.log; do echo "== $(basename "$f")"; grep -E '^ERR' "$f" | cut -c1-200; done
python3 bench/tune_summary.py "$OUT"  # every timing: % of copy per shape, the pick marked *
