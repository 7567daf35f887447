#!/usr/bin/env bash
# Session 32: the bars on an H200 only (tools/dev/gpu-carried.sh build/carry-wave); on another
# card it says which and stops. carry ["build/carry-wave"].
set -u
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "$gpu"
grep -q H200 <<< "$gpu" || exit 0
OUT=$OUT JOBS=${JOBS:-'bwd:290 host:140 fwd:125'} BWD_STAGES="bench det mem" DET_ORDERS=longest_first DET_AB=0 \
  DET_PAIRS=1 PLAN_BULK=0 bash tools/dev/gpu-carried.sh build/carry-wave
