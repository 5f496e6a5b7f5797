#!/usr/bin/env bash
# The twenty-ninth run's third call: the whole GPU suite on the tree with the first wave in
# phases (kernels 2, 3, 2b, 3b take wave_rows / wave_ns; the launcher staggers block_slots), then
# bench/fixed_cost.py as an A/B of STAGGERED_KINDS - none / block_slots / block_slots + block -
# at every M of each shape, interleaved: the 2b / 3b picks, kernel 2's picks from 1024 to 65536,
# kernel 3b on 4 CTAs at 2-byte 262144 beside chunks_reg. Summary last.
#   KERNEL_LAB_CACHE_DIR=.klc python -m kernel_lab compile; bash bench/run29/call3.sh (carry .klc)
# Prediction: block_slots as the A/B of call 2 (+1.5-2.5 % at 2-byte 128K-152K, fixed cost ~12
# -> ~6 us); kernel 2 (block) at 32K-64K +0.5-1 (fixed 9 us, one CTA an SM), level at short rows;
# kernel 3b 4 x 512 x 8 + 8 at bf16 262144 ~92-94 with phases, level with chunks_reg.
. "$(dirname "$0")/../run27/preamble.sh"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout 420 python3 -m pytest tests -q -ra -p no:cacheprovider -n 16 >"$OUT/tests.log" 2>&1
echo "tests rc=$?"
(cd bench && timeout 150 python3 fixed_cost.py --out "$OUT/ab" \
  --stagger 'none;block_slots;block_slots,block' \
  --shapes bfloat16:131072,bfloat16:151936,float16:128256,float32:65536,float32:100000,bfloat16:100000,bfloat16:50257,float32:50257,bfloat16:65536,bfloat16:32768,float32:32768,float32:8192,bfloat16:4096,bfloat16:1024,bfloat16:262144,bfloat16:262144@block_slots,512,8,4,8) \
  >"$OUT/ab.log" 2>&1
echo "ab rc=$?"
echo "== tests"
grep -E "^(FAILED|ERROR)" "$OUT/tests.log" | cut -c1-250 | head -30
tail -n 1 "$OUT/tests.log"
echo "== first wave A/B"; grep -v "^bfloat16 .*\]: [0-9]\|^float.*\]: [0-9]" "$OUT/ab.log" | grep -v "== by M" | cut -c1-400
