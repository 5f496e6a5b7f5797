#!/usr/bin/env bash
# Copies of cuda_src/ with one experiment's patch each, for bench/ab_kernels.py:
#
#   bash bench/variants/apply.sh bench/ab_variants            # every patch here, plus head
#   bash bench/variants/apply.sh bench/ab_variants slab copy  # only these
#   python bench/ab_kernels.py --variant head=bench/ab_variants/head \
#       --variant slab=bench/ab_variants/slab --variant copy=bench/ab_variants/copy \
#       --unchecked copy --shape bfloat16:32768
#
# OUT/head is cuda_src/ as it is; OUT/NAME is cuda_src/ with NAME.patch applied. The patches
# (kernel 5, persistent_rows in row_softmax_kernels.cuh, bench/NOTES.md, twenty-third run; but
# blocklines: kernels 2 / 3):
#   slab     each CTA of a cluster owns one contiguous slab of the row, not every CL-th piece
#   noxchg   no (max, sum) exchange between the cluster's CTAs (wrong output: a diagnostic)
#   copy     the pipeline alone: x copied to y through the prefetch slots (wrong output)
#   nostore  the pipeline's reads alone: nothing stored (GB/s counts 2x the bytes it moves)
#   tma      the next row prefetched by cp.async.bulk (one thread, an mbarrier per stage)
#   tmacopy  copy, over the tma pipeline (wrong output)
#   blocklines  kernels 2 / 3 (row_on_chip) count windows from the row's 128-byte line, as
#            kernel 5 does, not from its 16-byte block (twenty-fourth run, "Left": odd 2-byte rows
#            at 352-416 and 896-928 threads; A/B with --kind block, shapes with >= 7 windows of
#            slack: bash .ci/gpu-bench blockx8)
#   slotsregsfirst  kernel 2b (row_on_chip_slots) issues its register loads before its slots'
#            copies (twenty-sixth run: +2-5 points at 8-11 slots a thread on 1024 x 8, -2 to -9
#            at 2-5; bash .ci/gpu-bench slotorder)
#   reloadlag2 / reloadlag4 / reloadlag8 / reloadlast  kernels 2c / 3c (rolling_rows) reload a
#            register window 2, 4 or 8 windows after storing it, or all of them after the slots
#            (twenty-seventh run: within 1.5 points of head; bash bench/run27/ab_call.sh)
#   stagger  the persistent kernels' groups (2c / 3c, 5) wait (q % 8) / 8 of a row period before
#            their first row (twenty-seventh run: +3.4 % for 2c at one CTA an SM, level or -1
#            elsewhere; bash bench/run27/stagger_call.sh)
#   chunkwave  kernel 7b (chunk_rows_reg): CTA q's first chunk requests wait (q * 8 / Q) / 8 of
#            the first wave's load time, as kernels 2 / 2b / 3b's first wave in phases (twenty-
#            ninth run, `stagger_first_wave`: their fixed cost a call 12-15 -> 6-8 us; kernel 7b
#            pays 11-13 us at bf16 262144 against the copy's 3). Staged, not yet timed:
#            bash bench/run29/next_call.sh
#   chunks2cta  kernel 7b (chunk_rows_reg) at VPT <= 4 on two CTAs an SM: __launch_bounds__(512,
#            2), exps rounded to T (2-byte) or raw values (fp32) (thirty-first run: 512 x 4 77 ->
#            85.5 % at bf16 262144, under 512 x 8's 94.4; bash bench/run31/call4.sh)
#   polyexp  half of the 2-byte kept exps (kernels 3b, 7b) by exp_poly, a degree-4 polynomial
#            exp2 on the FMA pipe (thirty-first run: kernel 3b -2.5 to -4.3, 7b -12.6 to -13.7 points;
#            bash bench/run31/call5.sh)
#   wholewarps  kernels 2b / 3b (row_on_chip_slots): warps whose windows are all whole load,
#            copy, read and store with no per-window checks (all_windows_whole; both paths in
#            one kernel) (thirty-first run: -4.3 to -6.8 points at most picks, fp32 131072 +1.1;
#            correct: 1158 tests passed; bash bench/run31/call6.sh)
#   rowpairs1 / nextcursor / fewerregs  kernel 7b (chunk_rows_reg) with fewer live registers: warp
#            0's early pairs for 32 chunks, not 64 / the cursor of the item `ahead` steps on derived
#            when used / both (thirty-second run: 2-byte -0.2 to -4.8 points; fp32 level, but rows
#            of 64 chunks -5.1 / -6.7 with rowpairs1 / fewerregs; bash bench/run32/call3.sh)
# (firstwave, firstwave4: the twenty-ninth run's first A/B of kernels 2b / 3b; now the kernels'
# own code, retired: in git at 8cff2ee.)
# A patch that no longer applies fails loudly; bench/ab_variants/ is git-ignored (carry it to
# the GPU machine).
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:?usage: apply.sh OUT_DIR [NAME...]}; shift
names=("$@")
if [ ${#names[@]} -eq 0 ]; then
  for p in bench/variants/*.patch; do names+=("$(basename "$p" .patch)"); done
fi
mkdir -p "$out"
fresh() { rm -rf "${out:?}/$1"; cp -r cuda_src "$out/$1"; rm -rf "$out/$1/__pycache__" "$out/$1/__init__.py"; }
fresh head
for name in "${names[@]}"; do
  fresh "$name"
  patch -s -d "$out/$name" -p1 < "bench/variants/$name.patch"
  echo "$out/$name: cuda_src + $name.patch"
done
