#!/usr/bin/env bash
# The thirty-second run's first call: kernel 7b with its last step shared out (split_tail) -
# its GPU tests (the tail on capped grids, every chunk instantiation, the flagged words), then
# races in one process (bench/ab_configs.py): the pick, chunks_reg with the tail split and with
# its last step whole (tail=0).
#   KERNEL_LAB_CACHE_DIR=.klc python -m kernel_lab compile
#   bash bench/run32/call1.sh        (carry .klc)
# Prediction (step-paced model: ceil(items / 132) steps, the last a whole step for 8 CTAs):
# 2-byte 262144 x 1024 (8192 chunks, 62.06 steps) chunks_reg +1.0-1.5 over tail=0 (~94.4 ->
# ~95.5) and ahead of kernel 3b (94.5); 2-byte 2^20 x 256 (8192 chunks) the same +1.0-1.5; fp32
# 262144 / 2^20 (16384 chunks, 124.1 steps) +0.5-0.8; bf16 196608 (chunks_reg 384 x 8, 8
# chunks, 8192) +1.
# Runs on the tree at 53c9779 (the split tail and `tail=0`; reverted in 55c6b4e): git checkout 53c9779.
. "$(dirname "$0")/../run27/preamble.sh"
timeout 200 python3 -m pytest -q -n 16 -p no:cacheprovider tests/test_fast_configs.py \
  tests/test_flag_words.py -k "tail or chunk or flag" >"$OUT/tests.txt" 2>&1
echo "tests rc=$?: $(tail -n 1 "$OUT/tests.txt")"
R="--rounds 11"
for s in bfloat16:262144 float16:262144; do
  timeout 70 python3 bench/ab_configs.py $R --shape $s --cfg pick --cfg chunks_reg,512,8,1,0 \
    --cfg chunks_reg,512,8,1,0,tail=0 2>&1 | tail -n 7
done | tee "$OUT/race.log"
for s in float32:262144 bfloat16:1048576 float32:1048576 bfloat16:196608; do
  C=$(python3 -c "
import torch; from kernel_lab.ops.softmax import fast_config as fc
d, n = '$s'.split(':'); c = fc.fast_softmax_config(int(n), getattr(torch, d))
print(f'{c.kind},{c.threads},{c.vpt},{c.cluster},{c.slots}')")
  timeout 60 python3 bench/ab_configs.py $R --shape $s --cfg pick --cfg $C,tail=0 2>&1 | tail -n 3
done | tee -a "$OUT/race.log"
grep -E "passed|failed|Error" "$OUT/tests.txt" | tail -n 5
