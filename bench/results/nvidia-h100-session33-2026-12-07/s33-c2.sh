#!/usr/bin/env bash
# Session 33, A/B on any card (~200 s): the d = 64 overlap loop on the 192-row tile (three
# consumer warpgroups at 160 registers), now without spills (the mask's relative bounds),
# against the base build's plain loop. Builds carried (build/carry-s33: build/sm90 base d 64/128,
# build/sm90-ov with -DFASTATTN_SM90_D64_OVERLAP=1, d 64). Variants: the defaults, persistent
# and grid forced; three rounds beside cuDNN; then CudaSm90.* on the ov build and memcheck /
# racecheck / synccheck over its small shapes. carry ["build/calls", "build/carry-s33"].
set -u
root=$OUT
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $root/gpu.txt
bash tools/dev/carry-sm90-builds.sh unpack build/carry-s33 > $root/unpack.log 2>&1 || { cat $root/unpack.log; exit 3; }
OUT=$root/fwd HEAD_DIMS="64;128" VARIANT_HEAD_DIMS="64" \
  BUILD_VARIANTS="ov:-DFASTATTN_SM90_D64_OVERLAP=1" \
  VARIANTS="def: pers:FASTATTN_CUDA_SM90_SCHEDULER=persistent grid:FASTATTN_CUDA_SM90_SCHEDULER=grid" TEST_ENV= \
  BUILD_STAGES=none CARRIED_BUILDS=1 TEST_BUILD=ov TEST_FILTER='CudaSm90.*' \
  TEST_S=150 ROUNDS=${ROUNDS:-3} SANITIZE_FILTER='CudaSm90.SmallShapesMatchFloat64' PROBE=0 \
  BUDGET_S=${BUDGET_S:-420} bash tools/dev/gpu-sm90-ab.sh > /dev/null 2>&1
echo "[$SECONDS s] fwd done"
grep -E "rc=|PASSED|FAILED|SUMMARY|^\[sm90" $root/fwd/summary.txt | cut -c1-400 | head -60
