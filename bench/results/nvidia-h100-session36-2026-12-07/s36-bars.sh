#!/usr/bin/env bash
# Prepared in session 36, not run: on an H200 only (another card: says which and stops), issue
# 16's backward bars, issue 17's CPU decode on the host and issue 15's forward sweep over
# binaries built here with d 64 / 128 / 256 (so the sweep's d = 256 rows run), the sweep with the
# wave sections, the L2-half sections (the d = 256 rule's A/B) and the persistent scheduler
# forced beside the defaults. ../nvidia-h100-session32-2026-12-07/s32-c6.sh with FWD_HEAD_DIMS
# and the l2 variant. Binaries: HEAD_DIMS="64;128;256" bash tools/dev/build-carry.sh 2, then
# tar -cJf build/carry-wave/bins.tar.xz -C build/carry fastattn fastattn_cuda_bench fastattn_gpu_tests.
# carry ["build/calls", "build/carry-wave", "build/probe"] with this script in build/calls. About 300 s.
set -u
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "$gpu"
[ -x build/probe/dram ] && build/probe/dram  # the memory clock and bus width the wave rule reads
grep -q H200 <<< "$gpu" || exit 0
OUT=$OUT JOBS=${JOBS:-'bwd:200 host:130 fwd:100'} BWD_STAGES="bench det mem" DET_ORDERS=longest_first DET_AB=0 DET_PAIRS=1 \
  PLAN_BULK=0 FWD_HEAD_DIMS="64;128;256" \
  VARIANTS="base: wave:FASTATTN_CUDA_SM90_SECTIONS=wave l2:FASTATTN_CUDA_SM90_SECTIONS=l2 pers:FASTATTN_CUDA_SM90_SCHEDULER=persistent" \
  bash tools/dev/gpu-carried.sh build/carry-wave
