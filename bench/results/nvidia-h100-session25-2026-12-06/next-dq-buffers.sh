#!/usr/bin/env bash
# The next call (written in the twenty-fifth session, not yet run): the second sdQ buffer at
# d = 64 (build knob FASTATTN_SM90_BWD_DQ_BUFFERS=2) beside the default build, cold machine,
# carry ["build/debs"]; copy this script into an ignored folder that the call carries (e.g.
# build/calls) and run `bash build/calls/next-dq-buffers.sh`.
set -u
root=$OUT
OUT=$root/c STAGES="build tests det" HEAD_DIMS="64;128" TARGETS="fastattn_gpu_tests fastattn_cuda_bench" \
  BUILD_VARIANTS="dqbuf2:-DFASTATTN_SM90_BWD_DQ_BUFFERS=2" VARIANT_HEAD_DIMS="64;128" BASE_TESTS=0 \
  VARIANT_TEST_FILTER='CudaSm90Backward.Determin*:CudaSm90Backward.UncoveredPathsDeterministic:CudaSm90Backward.VarlenDeterministic*:CudaSm90Backward.SmallShapes*:CudaSm90Backward.BulkReduce*' \
  DET_ORDERS="" BUDGET_S=420 bash tools/dev/gpu-sm90-bwd.sh
for r in 1 2; do
  for x in default:build/sm90 dqbuf2:build/sm90-dqbuf2; do
    b=${x#*:}/bench/cuda/fastattn_cuda_bench
    [ -x "$b" ] || continue
    FASTATTN_CUDA_BWD_SM90=1 timeout 60 "$b" determinism --det-shapes pairs --runs 3 --warmup 3 --repeats 20 \
      --max-seconds 1 > "$root/pairs-${x%%:*}-r$r.jsonl" 2>> "$root/err.txt"
    FASTATTN_CUDA_BWD_SM90=1 FASTATTN_CUDA_SM90_BWD_DQ=bulk timeout 40 "$b" determinism --runs 3 --warmup 3 \
      --repeats 20 --max-seconds 1 > "$root/bulkref-${x%%:*}-r$r.jsonl" 2>> "$root/err.txt"
  done
done
cd "$root" && tar czf c.tgz c *.jsonl err.txt 2>/dev/null && rm -rf c *.jsonl err.txt
