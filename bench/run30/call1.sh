#!/usr/bin/env bash
# The thirtieth run's first call: (1) kernel 3b on clusters of 8 CTAs (SLOTS_CL gains 8) checked
# by the slots / first-wave tests; (2) tunes of the rows #5 still misses - fp32 151936-262144,
# 2-byte 196608-262144 - with kernel 3b on 8 CTAs (512 x 8 + 0-8 slots), kernel 3 on 8 / 16 CTAs
# (first wave in phases too), against the picks (kernel 5, chunks_reg, 3b on 4 CTAs); (3) kernel
# 7b (chunks_reg) with its first wave in phases (bench/variants/chunkwave.patch) against head.
#   bash bench/variants/apply.sh bench/ab_variants chunkwave
#   KERNEL_LAB_CACHE_DIR=.klc python -m kernel_lab compile
#   bash bench/run30/call1.sh        (carry .klc and bench/ab_variants)
# Predictions: 3b on 8 x 512 x 8 + 0 at 2-byte 262144 ~96 % (the registers alone, no slot reads,
# two CTAs an SM; 4 x 512 x 8 + 8 read 93.3-95.0); fp32 262144 on 8 x 512 x 8 + 8 like 2-byte
# 262144 on 4 x 512 x 8 + 8 (94-95); fp32 151936 8 x 512 x 8 + 2 ~95.5 (kernel 5 94.3-94.8);
# kernel 3 on 16 CTAs 1-3 points under 3b (its cluster barrier spans twice the CTAs); chunkwave
# +0.5-1.5 at 2-byte 262145-524288 and fp32 262144-524288, less at 2^20.
. "$(dirname "$0")/../run27/preamble.sh"
timeout 150 python3 -m pytest tests/test_fast_configs.py -k "first_wave or slots" -q -ra \
  -p no:cacheprovider -n 16 >"$OUT/tests.log" 2>&1
echo "tests rc=$?"
ONLY='^cluster (8|16)x|block_slots (4|8)x512x8|block_slots 8x|chunks_reg 512x8 ahead 1$|persist 8x320x16'
i=0
for spec in "float32:151936,196608,262144" "bfloat16,float16:196608,262144"; do
  i=$((i + 1))
  (cd bench && timeout 150 python3 tune_long_rows.py --out "$OUT/tune$i" --dtypes "${spec%%:*}" \
    --ns "${spec#*:}" --ops softmax,log_softmax --only "$ONLY") >"$OUT/tune$i.log" 2>&1
  echo "tune $spec rc=$?"
  rm -f "$OUT/tune$i/attrs.json"
done
V=bench/ab_variants
echo "== softmax: chunks_reg, first wave in phases (chunkwave) against head"
AB_TIMEOUT=120 ab --variant head=$V/head --variant chunkwave=$V/chunkwave --op softmax --rounds 7 \
  --shape bfloat16:262145 --shape bfloat16:524288 --shape float16:524288 \
  --shape bfloat16:1048576 --shape float32:262144 --shape float32:524288 --shape float32:1048576
echo "== tests"
grep -E "^(FAILED|ERROR)" "$OUT/tests.log" | cut -c1-250 | head -30
tail -n 1 "$OUT/tests.log"
for f in "$OUT"/tune*.log; do echo "== $(basename "$f")"; grep -E '^ERR' "$f" | cut -c1-200; done
python3 bench/tune_summary.py "$OUT"  # every timing: % of copy per shape, the pick marked *
