#!/usr/bin/env bash
# The twenty-seventh run's A/B call: kernel 2c / 3c (persist_slots) with its register windows
# reloaded right after each store (head) against reloads 2, 4 or 8 windows later or after the slots
# (bench/variants/reload*.patch), kernel 2b beside them; softmax and log_softmax. Summary last.
#   bash bench/variants/apply.sh bench/ab_variants head reloadlag2 reloadlag4 reloadlag8 reloadlast
#   bash bench/run27/ab_call.sh        (carry bench/ab_variants and .klc)
. "$(dirname "$0")/preamble.sh"
V=bench/ab_variants
VARIANTS=()
for v in head reloadlag2 reloadlag4 reloadlag8 reloadlast; do VARIANTS+=(--variant "$v=$V/$v"); done
for op in softmax log_softmax; do
  echo "== $op: persist_slots 1024 x 8 + slots (kernel 2c)"
  ab "${VARIANTS[@]}" --op $op --kind persist_slots --threads 1024 --shape bfloat16:131072 \
    --shape float16:128256 --shape bfloat16:151936 --shape bfloat16:100000 --shape float32:65536
  echo "== $op: persist_slots on 2-CTA clusters (kernel 3c)"
  ab "${VARIANTS[@]}" --op $op --kind persist_slots --threads 512 --cluster 2 \
    --shape bfloat16:131072 --shape bfloat16:151936
  ab "${VARIANTS[@]}" --op $op --kind persist_slots --threads 1024 --cluster 2 \
    --shape float32:131072 --shape bfloat16:262144
  echo "== $op: block_slots 1024 x 8 + slots (kernel 2b, beside)"
  ab --variant head=$V/head --op $op --kind block_slots --threads 1024 --shape bfloat16:131072 \
    --shape float16:128256 --shape bfloat16:151936 --shape bfloat16:100000 --shape float32:65536
done
