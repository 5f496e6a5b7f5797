#!/usr/bin/env bash
# The thirty-second run's last call: the whole suite and the short benchmark on the final tree
# (.ci/gpu), then the two race tools after the review mend (ab_configs' argument set and checked
# calls shared with occupy_sms.py; med_ms syncing its own stream).
#   KERNEL_LAB_CACHE_DIR=.klc python -m kernel_lab compile; bash bench/run32/call6.sh (carry .klc)
. "$(dirname "$0")/../run27/preamble.sh"
KLAB_XDIST=16 KLAB_TEST_TIMEOUT=330 bash .ci/gpu >"$OUT/gpu.log" 2>&1
echo "ci/gpu rc=$?"
cd bench
timeout 60 python3 ab_configs.py --rounds 5 --shape bfloat16:262144 --cfg pick \
  --cfg chunks_reg,512,8,1,0 2>&1 | tail -n 3 | tee "$OUT/tools.log"
timeout 60 python3 occupy_sms.py --rounds 5 --shape bfloat16:131072 --cfg pick --occupy 0 \
  --occupy 8 2>&1 | tail -n 4 | tee -a "$OUT/tools.log"
cd ..
tail -n 40 "$OUT/gpu.log" | cut -c1-220
