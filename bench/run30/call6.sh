#!/usr/bin/env bash
# The thirtieth run's sixth call: the flagged words' final launcher (epochs under a lock, one view
# a count) under the GPU tests that use it, then the fits (bench/fixed_cost.py) of the 262144
# picks - kernel 3b 4 x 512 x 8 + 8 (bf16, fp16), chunks_reg (bf16 beside it, fp32's pick) - and
# of bf16 131072 (kernel 3b on 2 CTAs) for contrast (fp16 and fp32 262144 too, given the time:
# float16:262144,float32:262144).
#   bash bench/run30/call6.sh        (carry .klc)
# Prediction (NOTES, thirtieth run: a drain of ~half a row's time on half the SMs): kernel 3b at
# 262144 steady ~97 %, fixed ~8-10 us (against the copy's 3-5); chunks_reg steady ~96.5, fixed
# ~9-10 with the words kept.
. "$(dirname "$0")/../run27/preamble.sh"
timeout 150 python3 -m pytest tests/test_flag_words.py tests/test_fast_configs.py \
  tests/test_backward_configs.py -k "flag or chunk" -q -ra -p no:cacheprovider -n 16 \
  >"$OUT/tests.log" 2>&1
echo "tests rc=$?"; grep -E "^(FAILED|ERROR)" "$OUT/tests.log" | cut -c1-250 | head; tail -n 1 "$OUT/tests.log"
(cd bench && timeout 120 python3 fixed_cost.py --out "$OUT/fits" --shapes \
  'bfloat16:262144,bfloat16:262144@chunks_reg,512,8,1,0,bfloat16:131072') \
  >"$OUT/fits.log" 2>&1
echo "fits rc=$?"
grep -v "^== by M" "$OUT/fits.log" | grep -vE "\]: [0-9]+:" | cut -c1-300
