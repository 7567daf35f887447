#!/usr/bin/env bash
# Session 25, call 2: deterministic backward with three dQ writers (the tree's default) against
# two (variant build twowriters), beside non-deterministic bulk dQ; the deterministic tests on
# the default build run while the variant builds.
set -u
root=$OUT
OUT=$root/c2 STAGES="build" HEAD_DIMS="64;128" TARGETS="fastattn_gpu_tests fastattn_cuda_bench" BUDGET_S=200 \
  bash tools/dev/gpu-sm90-bwd.sh > "$root/build-default.txt" 2>&1
tail -4 "$root/build-default.txt"
gpu_tests=build/sm90/tests/fastattn_gpu_tests
(FASTATTN_CUDA_BWD_SM90=1 timeout 330 "$gpu_tests" \
  --gtest_filter='CudaSm90Backward.Determin*:CudaSm90Backward.UncoveredPathsDeterministic:CudaSm90Backward.VarlenDeterministic*:CudaSm90Backward.SmallShapes*:CudaSm90Backward.FullyMasked*' \
  > "$root/tests.log" 2>&1; echo "tests rc=$?" >> "$root/tests.log") &
tests_pid=$!
OUT=$root/c2 STAGES="" BUILD_VARIANTS="twowriters:-DFASTATTN_SM90_BWD_DQ_WRITERS=2" HEAD_DIMS="64;128" BUDGET_S=240 \
  bash -c '. tools/dev/lib.sh; root=$PWD; out=$OUT; t0=$SECONDS; budget=240; status=(); load_deps_env; build_variant twowriters -DFASTATTN_SM90_BWD_DQ_WRITERS=2 "64;128"' \
  > "$root/build-variant.txt" 2>&1
tail -3 "$root/build-variant.txt"
wait $tests_pid
grep -E "OK \]|FAILED|PASSED|Failure|tests rc" "$root/tests.log" | head -20
new=build/sm90/bench/cuda/fastattn_cuda_bench
old=build/sm90-twowriters/bench/cuda/fastattn_cuda_bench
for r in 1 2; do
  for x in three:$new two:$old; do
    [ -x "${x#*:}" ] || continue
    FASTATTN_CUDA_BWD_SM90=1 timeout 40 "${x#*:}" determinism --runs 10 --warmup 3 \
      --repeats 20 --max-seconds 1 > "$root/det-default-${x%%:*}-r$r.jsonl" 2>> "$root/extra.err"
    FASTATTN_CUDA_BWD_SM90=1 FASTATTN_CUDA_SM90_BWD_DQ=bulk timeout 40 "${x#*:}" determinism --runs 10 --warmup 3 \
      --repeats 20 --max-seconds 1 > "$root/det-bulkref-${x%%:*}-r$r.jsonl" 2>> "$root/extra.err"
  done
done
export PATH=$PATH:/usr/local/cuda/bin
FASTATTN_CUDA_BWD_SM90=1 timeout 60 compute-sanitizer --tool racecheck --error-exitcode 9 "$gpu_tests" \
  --gtest_filter='CudaSm90Backward.SmallShapesMatchFloat64' > "$root/sanitize-racecheck.log" 2>&1
echo "racecheck rc=$?"; grep -E "RACECHECK SUMMARY|PASSED|FAILED" "$root/sanitize-racecheck.log" | tail -2
python3 - "$root" <<'PY'
import json, glob, sys, os
root = sys.argv[1]
for f in sorted(glob.glob(root + "/det-*.jsonl")):
    for line in open(f):
        r = json.loads(line)
        if "slowdown" not in r: continue
        print(os.path.basename(f), f"b{r['b']} h{r['h']}/{r['hkv']} d{r['d']} causal={r['causal']}",
              f"det {r['deterministic_ms']:.3f} default {r['default_ms']:.3f} speed {1/r['slowdown']:.3f}x eq={r['equal']}")
PY
cd "$root" && tar czf c2.tgz c2 *.txt *.log *.err *.jsonl 2>/dev/null && mkdir keep && mv c2.tgz keep/ && rm -rf c2 *.txt *.log *.err *.jsonl && mv keep/c2.tgz . && rmdir keep
