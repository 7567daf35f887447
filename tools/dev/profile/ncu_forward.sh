#!/usr/bin/env bash
# ncu_forward.sh — one device call: Nsight Compute profiles of fastattn's CUDA forward and of
# PyTorch SDPA's flash forward on the same shape (b2 h16 s8192 d128 bf16, non-causal), plus the
# SASS of fastattn's kernels. Counters with --clock-control none (device/METHOD.md).
#   bash tools/dev/profile/ncu_forward.sh build/carry
set -uo pipefail
bin=${1:-build/carry}
out=${OUT:-/tmp/fastattn_out}
mkdir -p "$out"
sections=(--section SpeedOfLight --section WarpStateStats --section SchedulerStats
          --section ComputeWorkloadAnalysis --section Occupancy --section LaunchStats
          --section MemoryWorkloadAnalysis_Tables --section InstructionStats --section SourceCounters)
# The 'short' sweep: 23 launches per shape; the 6th shape is d128 s8192 non-causal.
timeout 200 ncu --clock-control none -k regex:flash_forward --launch-skip 115 --launch-count 1 \
  "${sections[@]}" -o "$out/ours" -f "$bin/fastattn_cuda_bench" short > "$out/ncu_ours.log" 2>&1
echo "ours rc=$?"
timeout 200 ncu --clock-control none -k regex:flash_fwd --launch-skip 2 --launch-count 1 \
  "${sections[@]}" -o "$out/flash" -f python3 tools/dev/profile/sdpa_flash_once.py --pass fwd --calls 4 > "$out/ncu_flash.log" 2>&1
echo "flash rc=$?"
for r in ours flash; do
  [ -f "$out/$r.ncu-rep" ] || continue
  ncu --import "$out/$r.ncu-rep" --page details > "$out/${r}_details.txt" 2>&1
  ncu --import "$out/$r.ncu-rep" --page source --csv --print-source sass > "$out/${r}_source.csv" 2>&1
  gzip -f "$out/${r}_source.csv"
done
cuobjdump -sass "$bin/fastattn_cuda_bench" 2>/dev/null | gzip > "$out/ours_sass.txt.gz"
ls -la "$out"
