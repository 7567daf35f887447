#!/usr/bin/env bash
# Session 32: on an H200 the bars (s32-c6.sh, from build/carry-wave: the tree before the change).
# On another card: the tree with the bandwidth rule for the wave sections (build/carry-s32c: the
# base build, d 64 / 128), its sweep beside cuDNN with the rule's default and with
# FASTATTN_CUDA_SM90_SECTIONS=l2 (the rows' old sections), two rounds; the sections and small
# shapes tests. carry ["build/calls", "build/carry-wave", "build/carry-s32c"].
set -u
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
if grep -q H200 <<< "$gpu"; then exec bash build/calls/s32-c6.sh; fi
root=$OUT
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.memory --format=csv,noheader | tee $root/gpu.txt
bash tools/dev/carry-sm90-builds.sh unpack build/carry-s32c > $root/unpack.log 2>&1 || { cat $root/unpack.log; exit 3; }
OUT=$root/fwd HEAD_DIMS="64;128" BUILD_STAGES=none CARRIED_BUILDS=1 TEST_ENV= \
  TEST_FILTER='CudaSm90.SectionsGiveTheSameBits:CudaSm90.SmallShapesMatchFloat64:CudaSm90.D64NarrowTileMatchesFloat64' \
  TEST_S=100 SANITIZE_FILTER= PROBE=0 VARIANTS="base: l2:FASTATTN_CUDA_SM90_SECTIONS=l2" \
  ROUNDS=2 BUDGET_S=200 bash tools/dev/gpu-sm90-ab.sh > /dev/null 2>&1
echo "[$SECONDS s] fwd done"
grep -E "rc=|PASSED|FAILED|^\[sm90" $root/fwd/summary.txt | cut -c1-400 | head -20
