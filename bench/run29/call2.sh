#!/usr/bin/env bash
# The twenty-ninth run's second call: kernel 3b's (and 2b's) first wave started in 2 or 4 phases
# (bench/variants/firstwave{,4}.patch) against head, at the sweep's tensor (M*N = 2^28) and at
# twice its rows (2^29: a fixed cost's gain halves there). Softmax, then log_softmax. Summary last.
#   bash bench/variants/apply.sh bench/ab_variants firstwave firstwave4
#   bash bench/run29/call2.sh        (carry bench/ab_variants and .klc)
# Prediction (call 1: kernel 3b's fixed cost 12-15 us a call against the copy's 3-6): the phased
# start takes 2-4 us of it, +1-1.5 points at 2^28, about half that at 2^29.
. "$(dirname "$0")/../run27/preamble.sh"
V=bench/ab_variants
VARS=(--variant head=$V/head --variant fw2=$V/firstwave --variant fw4=$V/firstwave4)
SHAPES=(--shape bfloat16:131072 --shape float16:131072 --shape bfloat16:128256
        --shape bfloat16:151936 --shape float32:65536 --shape float32:100000)
echo "== softmax 2^28"; ab "${VARS[@]}" "${SHAPES[@]}" --rounds 7
echo "== softmax 2^29"; ab "${VARS[@]}" --shape bfloat16:131072 --shape float32:65536 --total-log2 29
echo "== log_softmax 2^28"; ab "${VARS[@]}" --op log_softmax --shape bfloat16:131072 \
  --shape float32:65536 --shape bfloat16:151936
