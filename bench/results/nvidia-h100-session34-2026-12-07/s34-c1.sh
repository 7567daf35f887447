#!/usr/bin/env bash
# Session 34, A/B on any card (~300 s): the sm90 forward's per-tile position arithmetic in 32 bits
# (SequenceMask32, windows clamped at launch) and the epilogue's finalize by rcp.approx /
# lg2.approx, against the tree before them. Builds carried (build/carry-s34: build/sm90 = HEAD
# 78d70d9's binaries; build/sm90-pos = the tree with 32-bit positions, finalize IEEE
# (-DFASTATTN_SM90_APPROX_FINALIZE=0); build/sm90-fin = the tree's defaults, both changes; d 64 /
# 128). Three rounds beside cuDNN; CudaSm90.* on build fin; memcheck / racecheck / synccheck
# over its small shapes and its schedulers' bits test. carry ["build/calls", "build/carry-s34"].
set -u
OUT=$OUT BUILD_VARIANTS='pos: fin:' VARIANTS='def:' TEST_BUILD=fin TEST_FILTER='CudaSm90.*' TEST_S=200 \
  SANITIZE_FILTER='CudaSm90.SmallShapesMatchFloat64:CudaSm90.SchedulersGiveTheSameBits' BUDGET_S=${BUDGET_S:-480} \
  bash tools/dev/gpu-sm90-ab-carried.sh build/carry-s34
