#!/usr/bin/env bash
# The twenty-seventh run's last A/B: kernels 2b / 3b keeping every exp rounded to fp16 / bf16 in
# softmax (one exp an element; the slots' exps written back into the slots:
# bench/variants/slotsexpsint.patch, merged in 77d798d) against head, beside the picks (kernel 5).
# Softmax only (the patch leaves fp32 and log_softmax byte-identical). To repeat it: head is
# e62a6c6's cuda_src, slotsexpsint this tree's:
#   git archive e62a6c6 cuda_src | tar -x -C /tmp/h && rm -rf bench/ab_variants/{head,slotsexpsint}
#   cp -r /tmp/h/cuda_src bench/ab_variants/head && cp -r cuda_src bench/ab_variants/slotsexpsint
#   bash bench/run27/expsint_call.sh     (carry bench/ab_variants and .klc)
. "$(dirname "$0")/preamble.sh"
V=bench/ab_variants
AB=(--variant head=$V/head --variant expsint=$V/slotsexpsint)
AB_TIMEOUT=120
LONG=(--shape bfloat16:128256 --shape bfloat16:131072 --shape float16:131072 --shape bfloat16:151936)
echo "== kernel 3b, 2 x 512 x 8 + slots"
ab "${AB[@]}" --kind block_slots --threads 512 --cluster 2 "${LONG[@]}"
echo "== the picks (kernel 5), head only"
ab --variant head=$V/head "${LONG[@]}"
echo "== kernel 2b, 1024 x 8 + slots"
ab "${AB[@]}" --kind block_slots --threads 1024 --shape bfloat16:131072 --shape bfloat16:100000 \
  --shape float16:80000
echo "== kernel 2b, 512 x 8 + slots (the rule's 2-byte 32769-57344)"
ab "${AB[@]}" --kind block_slots --threads 512 --shape bfloat16:50257 --shape float16:50257 \
  --shape bfloat16:36000
