#!/usr/bin/env bash
# Session 33, A/B on any card (~220 s): the consumer works out its next tile while the tensor
# cores run the current tile's last P V (consume's prefetch, kernel.cuh) against the 32-bit
# decode alone (call 3's new build). Builds carried (build/carry-s33c: build/sm90 = the tree with
# the prefetch, d 64 / 128; build/sm90-dec = call 3's new binaries). Defaults, three rounds
# beside cuDNN; then the sm90 tests that cover tiles without keys, the schedulers, sections,
# varlen and odd shapes on the new build, and compute-sanitizer over its small shapes.
# carry ["build/calls", "build/carry-s33c"].
set -u
root=$OUT
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $root/gpu.txt
bash tools/dev/carry-sm90-builds.sh unpack build/carry-s33c > $root/unpack.log 2>&1 || { cat $root/unpack.log; exit 3; }
OUT=$root/fwd HEAD_DIMS="64;128" VARIANT_HEAD_DIMS="64;128" \
  BUILD_VARIANTS="dec:" VARIANTS="def:" TEST_ENV= \
  BUILD_STAGES=none CARRIED_BUILDS=1 TEST_BUILD=base \
  TEST_FILTER='CudaSm90.SchedulersGiveTheSameBits:CudaSm90.D64NarrowTileMatchesFloat64:CudaSm90.SmallShapesMatchFloat64:CudaSm90.VarlenMatchesFloat64:CudaSm90.SectionsGiveTheSameBits:CudaSm90.OddShapesMatchFloat64:CudaSm90.TmaStoreGivesTheSameBits' \
  TEST_S=150 ROUNDS=${ROUNDS:-3} SANITIZE_FILTER='CudaSm90.SmallShapesMatchFloat64' PROBE=0 \
  BUDGET_S=${BUDGET_S:-330} bash tools/dev/gpu-sm90-ab.sh > /dev/null 2>&1
echo "[$SECONDS s] fwd done"
grep -E "rc=|PASSED|FAILED|SUMMARY|^\[sm90" $root/fwd/summary.txt | cut -c1-400 | head -40
