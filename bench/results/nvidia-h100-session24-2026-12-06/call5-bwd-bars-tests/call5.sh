set -u
OUT0=$OUT
OUT=$OUT0 STAGES="build newtests bench det mem" NEWTESTS_FILTER='CudaSm90Backward.*' NEWTESTS_LIMIT_S=260 \
  HEAD_DIMS="64;128" TARGETS="fastattn_gpu_tests fastattn_cuda_bench" DET_ORDERS="" DET_AB=0 BUDGET_S=560 \
  bash tools/dev/gpu-sm90-bwd.sh > $OUT0/call5.log 2>&1
cd $OUT0 && tar czf /tmp/c.tgz . && mv /tmp/c.tgz call5.tgz
grep -E "OK \]|FAILED|PASSED|vs cuDNN|A/B|determin|memory|stages|rc=" $OUT0/call5.log | head -60
