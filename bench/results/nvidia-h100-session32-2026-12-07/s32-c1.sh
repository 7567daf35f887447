#!/usr/bin/env bash
# Session 32, first call. On an H200: issue 15-17's bars over binaries built on the dev machine
# (tools/dev/gpu-carried.sh build/carry-wave). On an H100: why the two-CTA cluster kernel ran at
# 0.69-0.76x the base kernel (ncu on the first d = 128 launch of the cluster build's sweep90,
# b32 h16 s512, with FASTATTN_CUDA_SM90_CLUSTER=1 and =0) and the cluster test under
# compute-sanitizer. carry ["build/calls", "build/carry-s32", "build/carry-wave"].
set -u
root=$OUT
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "$gpu"
if grep -q H200 <<< "$gpu"; then
  OUT=$root JOBS=${JOBS:-'bwd:290 host:140 fwd:125'} BWD_STAGES="bench det mem" DET_ORDERS=longest_first DET_AB=0 \
    DET_PAIRS=1 PLAN_BULK=0 bash tools/dev/gpu-carried.sh build/carry-wave
  exit
fi
bash tools/dev/carry-sm90-builds.sh unpack build/carry-s32 > /dev/null
b=build/sm90-cluster/bench/cuda/fastattn_cuda_bench
t=build/sm90-cluster/tests/fastattn_gpu_tests
for c in 1 0; do
  FASTATTN_CUDA_SM90_CLUSTER=$c timeout 120 ncu -k regex:flash_forward_sm90 -c 1 --section LaunchStats \
    --section Occupancy --section SpeedOfLight --section WarpStateStats --section SchedulerStats \
    $b sweep90 --warmup 1 --repeats 1 --max-seconds 0.05 > $root/ncu-cluster$c.txt 2>&1
  echo "cluster=$c rc=$?"
done
grep -E "flash_forward|Grid Size|Cluster|Duration|Waves|Achieved Occ|Theoretical Occ|Compute \(SM\) Th|Memory Th|Warp Cycles Per Issued|No Eligible|Registers|Shared Memory Config" \
  $root/ncu-*.txt | cut -c1-170
for tool in memcheck racecheck synccheck; do
  timeout 90 compute-sanitizer --tool $tool --error-exitcode 9 $t --gtest_filter='CudaSm90.ClustersGiveTheSameBits' \
    >> $root/sanitize.log 2>&1
  echo "$tool rc=$?"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY" $root/sanitize.log | tail -1
done
