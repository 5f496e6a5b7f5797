#!/usr/bin/env bash
# Staged for the next device session (bench/NOTES.md, twenty-eighth run, "Left"): the slots
# tests with the shapes added after the last call, then the rows #5 still misses with every
# kernel 3b shape beside the picks (2-byte 262144 on 4 x 512 x 8 + 8 keeps its exps in T since
# the twenty-seventh run and was never timed so), and fp32 75000 on 4 x 256 x 8 + 11 against the
# rule's 2 x 512 x 8 + 11 once more. Summary last; then `bash .ci/gpu-bench forward` (a full
# sweep with the fp32 rule) in a call of its own.
#   KERNEL_LAB_CACHE_DIR=.klc python -m kernel_lab compile; bash bench/run28/next_call.sh (carry .klc)
# Prediction: 2-byte 262144 on kernel 3b 4 x 512 x 8 + 8 up to its log_softmax (91.7 / 89.8 in
# the twenty-seventh run), still under chunks_reg's 93.1-93.4: no rule.
KLAB_TESTS=tests/test_fast_configs.py KLAB_TEST_K=slots \
  KLAB_TUNES="bfloat16,float16:262144 float32:75000,131072" KLAB_TUNE_ONLY='block_slots' \
  bash "$(dirname "$0")/../run27/gpu_call.sh"
