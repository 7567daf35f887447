#!/usr/bin/env bash
# Session 33, A/B on any card (~300 s): two Q buffers (the next tile's Q loaded while the
# current tile runs; plan.hpp sm90_q_buffers) against the 32-bit
# decode alone (call 3's new build). Builds carried (build/carry-s33d: build/sm90 = the tree with
# two Q buffers, d 64 / 128; build/sm90-dec = call 3's new binaries). Defaults, three rounds
# beside cuDNN; then CudaSm90.* on the new build and compute-sanitizer over its small shapes.
# carry ["build/calls", "build/carry-s33d"].
set -u
root=$OUT
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $root/gpu.txt
bash tools/dev/carry-sm90-builds.sh unpack build/carry-s33d > $root/unpack.log 2>&1 || { cat $root/unpack.log; exit 3; }
OUT=$root/fwd HEAD_DIMS="64;128" VARIANT_HEAD_DIMS="64;128" \
  BUILD_VARIANTS="dec:" VARIANTS="def:" TEST_ENV= \
  BUILD_STAGES=none CARRIED_BUILDS=1 TEST_BUILD=base \
  TEST_FILTER='CudaSm90.*' \
  TEST_S=200 ROUNDS=${ROUNDS:-3} SANITIZE_FILTER='CudaSm90.SmallShapesMatchFloat64' PROBE=0 \
  BUDGET_S=${BUDGET_S:-380} bash tools/dev/gpu-sm90-ab.sh > /dev/null 2>&1
echo "[$SECONDS s] fwd done"
grep -E "rc=|PASSED|FAILED|SUMMARY|^\[sm90" $root/fwd/summary.txt | cut -c1-400 | head -40
