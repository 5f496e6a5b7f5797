#!/usr/bin/env bash
# The twenty-seventh run's second A/B: do the persistent kernels' groups run phase-locked? Each
# group (CTA or cluster) of kernels 2c / 3c and 5 waits (q % 8) / 8 of a row period before its
# first row (bench/variants/stagger.patch) against head; kernel 2b beside. Softmax, then
# log_softmax on two shapes.
#   bash bench/variants/apply.sh bench/ab_variants stagger   (head: apply.sh makes it)
#   bash bench/run27/stagger_call.sh     (carry bench/ab_variants and .klc)
. "$(dirname "$0")/preamble.sh"
V=bench/ab_variants
AB=(--variant head=$V/head --variant stagger=$V/stagger)
echo "== kernel 2c (persist_slots 1024 x 8 + slots)"
ab "${AB[@]}" --kind persist_slots --threads 1024 --shape bfloat16:131072 --shape float32:65536
echo "== kernel 3c (persist_slots 2 x 512 x 8 + 8)"
ab "${AB[@]}" --kind persist_slots --threads 512 --cluster 2 --shape bfloat16:131072
echo "== the picks (kernel 5 at these rows)"
ab "${AB[@]}" --shape bfloat16:131072 --shape float16:128256 --shape bfloat16:151936 \
  --shape float32:131072 --shape float32:65536
ab "${AB[@]}" --op log_softmax --shape bfloat16:131072 --shape float32:131072
