#!/usr/bin/env bash
# Session 32: on an H200 the bars (s32-c2.sh); on another card the forward's runtime choices on
# today's kernels (the base build, carried in build/carry-s32b): schedulers, sections, ordered
# issue and the TMA-store epilogue each forced, two rounds beside cuDNN (~100 s).
# carry ["build/calls", "build/carry-wave", "build/carry-s32b"].
set -u
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
if grep -q H200 <<< "$gpu"; then exec bash build/calls/s32-c2.sh; fi
root=$OUT
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $root/gpu.txt
bash tools/dev/carry-sm90-builds.sh unpack build/carry-s32b > $root/unpack.log 2>&1 || { cat $root/unpack.log; exit 3; }
OUT=$root/fwd HEAD_DIMS="64;128" BUILD_STAGES=none CARRIED_BUILDS=1 TEST_S=1 SANITIZE_FILTER= PROBE=0 \
  VARIANTS="base: grid:FASTATTN_CUDA_SM90_SCHEDULER=grid pers:FASTATTN_CUDA_SM90_SCHEDULER=persistent dyn:FASTATTN_CUDA_SM90_SCHEDULER=dynamic l2:FASTATTN_CUDA_SM90_SECTIONS=l2 pair:FASTATTN_CUDA_SM90_SECTIONS=pair wave:FASTATTN_CUDA_SM90_SECTIONS=wave noorder:FASTATTN_CUDA_SM90_WG_ORDER=0 order:FASTATTN_CUDA_SM90_WG_ORDER=1 regs:FASTATTN_CUDA_SM90_TMA_STORE=0" \
  ROUNDS=${ROUNDS:-2} BUDGET_S=${BUDGET_S:-200} bash tools/dev/gpu-sm90-ab.sh > /dev/null 2>&1
echo "[$SECONDS s] fwd done"
grep -E "rc=[1-9]|^\[sm90" $root/fwd/summary.txt | cut -c1-200 | head -40
