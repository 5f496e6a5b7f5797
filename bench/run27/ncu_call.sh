#!/usr/bin/env bash
# The twenty-seventh run's profile call: Nsight Compute on kernel 2b (block_slots), its
# persistent form 2c (persist_slots) and the pick (kernel 5) at bf16 131072 (1024 x 8 + 8):
# why does 2c, with its next row in flight through every epilogue, read 5-6 points under 2b?
#   bash bench/run27/ncu_call.sh     (carry .klc)
. "$(dirname "$0")/preamble.sh"
for spec in "block_slots|slots|--kind block_slots" "persist_slots|slots|--kind persist_slots" \
            "pick|persist_cluster|"; do
  IFS='|' read -r name k flags <<<"$spec"
  # shellcheck disable=SC2086  # flags is a list of options
  timeout 120 ncu --clock-control none -k regex:"$k" --launch-skip 2 --launch-count 1 \
    --section SpeedOfLight --section WarpStateStats --section MemoryWorkloadAnalysis \
    --section SourceCounters --section Occupancy -o "/tmp/rep_$name" -f \
    python3 bench/profile_config.py --dtype bfloat16 --n 131072 --threads 1024 $flags \
    >"$OUT/ncu_$name.log" 2>&1
  echo "== $name rc=$?"
  ncu -i "/tmp/rep_$name.ncu-rep" --page details >"$OUT/details_$name.txt" 2>&1
  grep -E "^  [a-z_]+.*\(|Duration|DRAM Throughput|Memory Throughput|L2 Hit Rate|L1/TEX Hit|\
Achieved Occupancy|Warp Cycles Per Issued|Issue Slots Busy|Registers Per|Mem Busy|Max Bandwidth" \
    "$OUT/details_$name.txt" | head -20
  ncu -i "/tmp/rep_$name.ncu-rep" --csv --page raw >"/tmp/raw_$name.csv" 2>&1
  ncu -i "/tmp/rep_$name.ncu-rep" --csv --page source --print-source sass >"/tmp/sass_$name.csv" 2>&1
  timeout 60 python3 bench/ncu_stalls.py "/tmp/raw_$name.csv" "/tmp/sass_$name.csv" --top 12 \
    >"$OUT/stalls_$name.txt" 2>&1
  head -14 "$OUT/stalls_$name.txt"
done
