set -u
export GROUP_SIZES="1 2 4 8 16"
ONLY="sm90-default sm90-longest sm90-grouped sm90-grouped-g1 sm90-grouped-g2 sm90-grouped-g4 sm90-grouped-g8 sm90-grouped-g16"
mkdir -p $OUT/r1 $OUT/r2
OUT=$OUT/r1 STAGES="build newtests bench" NEWTESTS_FILTER='CudaSm90Backward.GroupedOrder*' HEAD_DIMS="64;128" \
  TARGETS="fastattn_gpu_tests fastattn_cuda_bench" ONLY_VARIANTS="$ONLY" BUDGET_S=300 bash tools/dev/gpu-sm90-bwd.sh > $OUT/r1.log 2>&1
OUT=$OUT/r2 STAGES="bench" HEAD_DIMS="64;128" ONLY_VARIANTS="$ONLY" BUDGET_S=200 bash tools/dev/gpu-sm90-bwd.sh > $OUT/r2.log 2>&1
cd $OUT && tar czf /tmp/c.tgz . && mv /tmp/c.tgz call3.tgz
grep -E "OK \]|FAILED|PASSED|A/B grouped|stages|rc=" $OUT/r1.log $OUT/r2.log | head -40
