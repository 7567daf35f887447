#!/usr/bin/env bash
# The next call (written in the twenty-fifth session, not yet run): two build knobs aimed at the
# deterministic d = 64 row, beside the default build, on a cold machine. carry ["build/debs"];
# command `OUT=$OUT bash bench/results/nvidia-h100-session25-2026-12-06/next-dq-buffers.sh`
# (about 7-8 minutes: three builds of ~95 s each, then timing).
#   dqbuf2    -DFASTATTN_SM90_BWD_DQ_BUFFERS=2    a second sdQ buffer per warpgroup at d = 64
#   nofences  -DFASTATTN_SM90_BWD_WRITER_FENCES=0  no fence.acq_rel.gpu beside the writers'
#                                                acquire and release
# Stage det times each build's deterministic backward against its own default (det.jsonl,
# det-NAME.jsonl); then two rounds per build of the bar shapes against non-deterministic bulk
# dQ, and one of --det-shapes pairs. Compare absolute deterministic_ms across builds, and the
# default_ms too: dqbuf2 reserves the second buffer in every d = 64 kernel, the plan's
# atomic_tiles default included. Tests of a build that wins go in a second call:
# VARIANT_TEST_FILTER as below with STAGES=tests BASE_TESTS=0 on the warm machine.
set -u
root=$OUT
OUT=$root/c STAGES="build det" HEAD_DIMS="64;128" TARGETS="fastattn_gpu_tests fastattn_cuda_bench" \
  BUILD_VARIANTS="dqbuf2:-DFASTATTN_SM90_BWD_DQ_BUFFERS=2 nofences:-DFASTATTN_SM90_BWD_WRITER_FENCES=0" \
  DET_ORDERS="" BUDGET_S=400 bash tools/dev/gpu-sm90-bwd.sh
# Tests for a second call, e.g.:
#   STAGES=tests BASE_TESTS=0 BUILD_VARIANTS="dqbuf2:..." VARIANT_TEST_FILTER='CudaSm90Backward.Determin*:CudaSm90Backward.UncoveredPathsDeterministic:CudaSm90Backward.VarlenDeterministic*:CudaSm90Backward.SmallShapes*:CudaSm90Backward.BulkReduce*'
for r in 1 2; do
  for x in default:build/sm90 dqbuf2:build/sm90-dqbuf2 nofences:build/sm90-nofences; do
    b=${x#*:}/bench/cuda/fastattn_cuda_bench
    [ -x "$b" ] || continue
    FASTATTN_CUDA_BWD_SM90=1 FASTATTN_CUDA_SM90_BWD_DQ=bulk timeout 40 "$b" determinism --runs 3 --warmup 3 \
      --repeats 20 --max-seconds 1 > "$root/bulkref-${x%%:*}-r$r.jsonl" 2>> "$root/err.txt"
    [ "$r" = 1 ] && FASTATTN_CUDA_BWD_SM90=1 timeout 60 "$b" determinism --det-shapes pairs --runs 3 --warmup 3 \
      --repeats 20 --max-seconds 1 > "$root/pairs-${x%%:*}.jsonl" 2>> "$root/err.txt"
  done
done
cd "$root" && tar czf c.tgz c *.jsonl err.txt 2>/dev/null && rm -rf c *.jsonl err.txt
