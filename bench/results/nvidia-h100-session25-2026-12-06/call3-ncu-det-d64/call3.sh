#!/usr/bin/env bash
# Session 25, call 3: where the deterministic backward at d = 64 (b2 h32 s4k, no mask; 0.74x the
# default, 0.77x non-deterministic bulk dQ) loses its time: Nsight Compute on one launch of the
# d = 64 bf16 bulk kernel, deterministic and not (cuda_bench determinism with bulk dQ forced),
# warp-state samples per SASS instruction.
set -u
root=$OUT
OUT=$root/c3 STAGES="build" HEAD_DIMS="64;128" TARGETS="fastattn_cuda_bench" BUDGET_S=200 \
  bash tools/dev/gpu-sm90-bwd.sh > "$root/build.txt" 2>&1
tail -3 "$root/build.txt"
export PATH=$PATH:/usr/local/cuda/bin
bench=build/sm90/bench/cuda/fastattn_cuda_bench
n=$root/ncu && mkdir -p "$n"
for det in 1 0; do
  FASTATTN_CUDA_BWD_SM90=1 FASTATTN_CUDA_SM90_BWD_DQ=bulk timeout 150 ncu --clock-control none --kernel-name-base mangled \
    -k "regex:Sm90BackwardTraitsILi64E13__nv_bfloat16EELb0ELNS0_15Sm90DqReductionE1ELb${det}E" \
    --launch-skip 2 --launch-count 1 --section SpeedOfLight --section WarpStateStats --section SchedulerStats \
    --section MemoryWorkloadAnalysis_Tables --section SourceCounters -o "$n/bulk_det$det" -f \
    "$bench" determinism --runs 2 --warmup 1 --repeats 2 --max-seconds 0.1 > "$n/bulk_det$det.log" 2>&1
  echo "det=$det ncu rc=$?"
  ncu --import "$n/bulk_det$det.ncu-rep" --page details > "$n/bulk_det${det}_details.txt" 2>&1
  grep -E "Duration|Compute \(SM\) Throughput|Issue Slots Busy|No Eligible|Stall|Warp Cycles Per" "$n/bulk_det${det}_details.txt" | head -20 | sed "s/^/det$det: /"
  ncu --import "$n/bulk_det$det.ncu-rep" --page source --csv --print-source sass > "$n/bulk_det${det}_source.csv" 2>&1
done
cd "$root" && tar czf c3.tgz ncu build.txt && rm -rf ncu c3 build.txt
