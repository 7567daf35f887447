#!/usr/bin/env bash
# Session 32: on an H200 only (another card: says which and stops), issue 16's backward bars and
# issue 15's forward sweep over binaries built here (gpu-carried.sh build/carry-wave), the
# forward sweep with the wave sections and the persistent scheduler forced beside the defaults
# (the H100 leads of call 3), and issue 17's CPU decode on the host. carry ["build/calls", "build/carry-wave", "build/probe"]. About 300 s.
set -u
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "$gpu"
[ -x build/probe/dram ] && build/probe/dram  # the memory clock and bus width the wave rule reads
grep -q H200 <<< "$gpu" || exit 0
OUT=$OUT JOBS=${JOBS:-'bwd:200 host:130 fwd:90'} BWD_STAGES="bench det mem" DET_ORDERS=longest_first DET_AB=0 DET_PAIRS=1 \
  PLAN_BULK=0 VARIANTS="base: wave:FASTATTN_CUDA_SM90_SECTIONS=wave pers:FASTATTN_CUDA_SM90_SCHEDULER=persistent" \
  bash tools/dev/gpu-carried.sh build/carry-wave
