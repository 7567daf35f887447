#!/usr/bin/env bash
# Session 25, call 1: deterministic backward, two dQ writers (default) against one (variant
# build onewriter), tests of deterministic mode, racecheck/synccheck of the small shapes.
set -u
root=$OUT
export OUT=$root/c1
OUT=$OUT STAGES="build det newtests" HEAD_DIMS="64;128" TARGETS="fastattn_gpu_tests fastattn_cuda_bench" \
  BUILD_VARIANTS="onewriter:-DFASTATTN_SM90_BWD_DQ_WRITERS=1" DET_ORDERS="" \
  NEWTESTS_FILTER='CudaSm90Backward.Determin*:CudaSm90Backward.UncoveredPathsDeterministic:CudaSm90Backward.VarlenDeterministic*:CudaSm90Backward.SmallShapes*' \
  NEWTESTS_LIMIT_S=170 BUDGET_S=400 bash tools/dev/gpu-sm90-bwd.sh
new=build/sm90/bench/cuda/fastattn_cuda_bench
old=build/sm90-onewriter/bench/cuda/fastattn_cuda_bench
# Against non-deterministic bulk dQ (the deterministic kernels' mode) and a second round of each
# build's plan default, alternating builds.
for r in 1 2; do
  for x in new:$new old:$old; do
    [ -x "${x#*:}" ] || continue
    FASTATTN_CUDA_BWD_SM90=1 FASTATTN_CUDA_SM90_BWD_DQ=bulk timeout 40 "${x#*:}" determinism --runs 10 --warmup 3 \
      --repeats 20 --max-seconds 1 > "$root/det-bulkref-${x%%:*}-r$r.jsonl" 2>> "$root/extra.err"
    FASTATTN_CUDA_BWD_SM90=1 timeout 40 "${x#*:}" determinism --runs 10 --warmup 3 \
      --repeats 20 --max-seconds 1 > "$root/det-default-${x%%:*}-r$r.jsonl" 2>> "$root/extra.err"
  done
done
export PATH=$PATH:/usr/local/cuda/bin
for tool in racecheck synccheck; do
  FASTATTN_CUDA_BWD_SM90=1 timeout 90 compute-sanitizer --tool $tool --error-exitcode 9 build/sm90/tests/fastattn_gpu_tests \
    --gtest_filter='CudaSm90Backward.SmallShapesMatchFloat64' > "$root/sanitize-$tool.log" 2>&1
  echo "$tool rc=$?"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED" "$root/sanitize-$tool.log" | tail -3
done
python3 - "$root" <<'PY'
import json, glob, sys, os
root = sys.argv[1]
for f in sorted(glob.glob(root + "/det-*.jsonl")) + sorted(glob.glob(root + "/c1/det*.jsonl")):
    for line in open(f):
        r = json.loads(line)
        if "slowdown" not in r: continue
        print(os.path.relpath(f, root), f"b{r['b']} h{r['h']}/{r['hkv']} d{r['d']} causal={r['causal']}",
              f"det {r['deterministic_ms']:.3f} ms default {r['default_ms']:.3f} ms speed {1/r['slowdown']:.3f}x equal={r['equal']}")
PY
cd "$root" && tar czf c1.tgz c1 && rm -rf c1
