#!/usr/bin/env bash
# Session 34, A/B on any card (~200 s): the left half of the first key tile at d = 128
# (-DFASTATTN_SM90_LEFT_HALF_FIRST_TILE=1; the default keeps it to d <= 64) on the tree with the
# 32-bit positions and the SFU finalize, against the tree's defaults. Builds carried
# (build/carry-s34e: build/sm90 = the tree at 7bbc5c9, build/sm90-lh = the same with the flag;
# d 128 only). Three rounds beside cuDNN (the d 64 / 256 rows have no binary); three CudaSm90
# float64 tests on lh. carry ["build/calls", "build/carry-s34e"].
set -u
OUT=$OUT HEAD_DIMS=128 BUILD_VARIANTS='lh:' VARIANTS='def:' TEST_BUILD=lh TEST_FILTER='CudaSm90.OddShapesMatchFloat64:CudaSm90.SmallShapesMatchFloat64:CudaSm90.RandomCasesMatchFloat64' TEST_S=90 \
  SANITIZE_FILTER='' BUDGET_S=${BUDGET_S:-200} bash tools/dev/gpu-sm90-ab-carried.sh build/carry-s34e
