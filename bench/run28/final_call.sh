#!/usr/bin/env bash
# The twenty-eighth run's last call: the whole GPU suite on the tree with kernel 3b's fp32 rule,
# then the rule's rows through the registered ops (fast_softmax / log_softmax, the default
# launch) beside torch.softmax / torch.log_softmax. Summary last.
#   KERNEL_LAB_CACHE_DIR=.klc python -m kernel_lab compile; bash bench/run28/final_call.sh  (carry .klc)
. "$(dirname "$0")/../run27/preamble.sh"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout "${KLAB_TEST_TIMEOUT:-420}" python3 -m pytest tests -q -ra -p no:cacheprovider -n 16 \
  >"$OUT/tests.log" 2>&1
echo "tests rc=$?"
timeout 150 python3 -m kernel_lab bench --op softmax,log_softmax --dtype float32 \
  --variants fast_softmax,log_softmax,torch_eager,torch_log_softmax \
  --shape 53249,58000,65536,75000,81920,90000,100000,131072 --out "$OUT/rule" >"$OUT/rule.log" 2>&1
echo "bench rc=$?"
mv "$OUT"/rule/*.json "$OUT/rule.json" 2>/dev/null; rm -rf "$OUT/rule"
echo "== tests"
grep -E "^(FAILED|ERROR)" "$OUT/tests.log" | cut -c1-250 | head -30
tail -n 1 "$OUT/tests.log"
echo "== bench"; grep -E "device copy|│|┃" "$OUT/rule.log"
