#!/usr/bin/env bash
# The twenty-ninth run's last call: the config tests on the final tree (first wave in phases for
# block / block_slots; kernel 3b for fp32 up to 131072 and 2-byte ~213K-262144), then the full
# three-dtype sweep with the peers (.ci/gpu-bench forward) and #5's goals checked on it.
#   bash bench/run29/call5.sh   (carry .klc)
# Prediction: 2-byte 128256-151936 >= 95.5 % (call 3: 96.0-97.3 with phases), fp32 128256 /
# 131072 ~95.5-96 (tune: 95.7 / 96.2), 2-byte 262144 ~94.5-95 (tune 94.7 / 95.0), fp32 100000
# and 2-byte 196608 unchanged (93-94 / 90-91: no rule there).
. "$(dirname "$0")/../run27/preamble.sh"
timeout 200 python3 -m pytest tests/test_fast_configs.py -q -ra -p no:cacheprovider -n 16 \
  >"$OUT/tests.log" 2>&1
echo "tests rc=$?"
bash .ci/gpu-bench forward >"$OUT/sweep.log" 2>&1
echo "sweep rc=$?"
rm -f "$OUT"/*.csv "$OUT/summary.log"
echo "== tests"
grep -E "^(FAILED|ERROR)" "$OUT/tests.log" | cut -c1-250 | head -30
tail -n 1 "$OUT/tests.log"
echo "== goals"
python3 bench/goal_check.py "$OUT"/forward.json 2>&1 | tail -40
