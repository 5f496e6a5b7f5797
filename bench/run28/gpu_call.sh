#!/usr/bin/env bash
# The twenty-eighth run's A/B call (one device call, summary last): kernel 3b keeping its fp32
# softmax exps in the values' registers (one exp an element, exact in fp32: keep32) against head
# (two exps), beside the picks (kernel 5); first the slots kernels' tests on this tree; last the
# sweep's long rows again through the default pick (run-to-run spread next to sweep23).
#   rm -rf bench/ab_variants/head && git archive 30f6d20 cuda_src | tar -x -C /tmp/h
#   cp -r /tmp/h/cuda_src bench/ab_variants/head; cp -r cuda_src bench/ab_variants/keep32
#   bash bench/run28/gpu_call.sh     (carry bench/ab_variants and .klc)
. "$(dirname "$0")/../run27/preamble.sh"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout 240 python3 -m pytest tests/test_fast_configs.py -q -p no:cacheprovider -n 16 -k slots \
  >"$OUT/tests.log" 2>&1
echo "slots tests rc=$?"; tail -n 1 "$OUT/tests.log"
V=bench/ab_variants
AB=(--variant head=$V/head --variant keep32=$V/keep32)
for op in softmax log_softmax; do
  echo "== $op: kernel 3b fp32, 2 x 512 x 8 + 8 (65536)"
  ab "${AB[@]}" --op $op --kind block_slots --threads 512 --cluster 2 --shape float32:65536
  echo "== $op: kernel 3b fp32, 2 x 1024 x 8 + 8 / 4 x 512 x 8 + 8 (131072)"
  ab "${AB[@]}" --op $op --kind block_slots --threads 1024 --cluster 2 --shape float32:131072
  ab "${AB[@]}" --op $op --kind block_slots --threads 512 --cluster 4 --shape float32:131072
  echo "== $op: the picks (kernel 5)"
  ab --variant head=$V/head --op $op --shape float32:65536 --shape float32:131072
done
echo "== the sweep's long rows again (default pick)"
timeout 200 python3 -m kernel_lab bench --op softmax --dtype float32,bfloat16,float16 \
  --variants fast_softmax --shape 50257,65536,128256,131072,151936,262144 --out "$OUT/rows" \
  >"$OUT/rows.log" 2>&1
echo "rc=$?"; grep -E "device copy|│" "$OUT/rows.log"
mv "$OUT"/rows/*.json "$OUT/rows.json" 2>/dev/null; rm -rf "$OUT/rows"
