#!/usr/bin/env bash
# Session 33, A/B on any card (~220 s): the sm90 forward's tile numbers decoded in 32 bits with
# divisors prepared at launch (tile_numbering.hpp) against the 64-bit divisions. Builds carried
# (build/carry-s33b: build/sm90 = the tree with the 32-bit decode, d 64 / 128; build/sm90-old =
# the binaries of the tree before it, d 64 / 128). Variants: the defaults and the dynamic
# scheduler forced; three rounds beside cuDNN; then CudaSm90.* on the new build and
# memcheck / racecheck / synccheck over its small shapes and its schedulers' bits test.
# carry ["build/calls", "build/carry-s33b"].
set -u
root=$OUT
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $root/gpu.txt
bash tools/dev/carry-sm90-builds.sh unpack build/carry-s33b > $root/unpack.log 2>&1 || { cat $root/unpack.log; exit 3; }
OUT=$root/fwd HEAD_DIMS="64;128" VARIANT_HEAD_DIMS="64;128" \
  BUILD_VARIANTS="old:" \
  VARIANTS="def: dyn:FASTATTN_CUDA_SM90_SCHEDULER=dynamic" TEST_ENV= \
  BUILD_STAGES=none CARRIED_BUILDS=1 TEST_BUILD=base TEST_FILTER='CudaSm90.*' \
  TEST_S=200 ROUNDS=${ROUNDS:-3} SANITIZE_FILTER='CudaSm90.SmallShapesMatchFloat64:CudaSm90.SchedulersGiveTheSameBits' PROBE=0 \
  BUDGET_S=${BUDGET_S:-450} bash tools/dev/gpu-sm90-ab.sh > /dev/null 2>&1
echo "[$SECONDS s] fwd done"
grep -E "rc=|PASSED|FAILED|SUMMARY|^\[sm90" $root/fwd/summary.txt | cut -c1-400 | head -60
