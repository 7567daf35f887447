#!/usr/bin/env bash
# gpu-sm90-defaults.sh — one device call that checks the sm90 defaults after they change
# (issues 15 and 16): one build of every sm90 head dim (64, 96, 128, 256), then, in this order
# (a short budget cuts the last first):
#   1. the d = 256 forward, the overlap loop against the plain one (FASTATTN_CUDA_SM90_OVERLAP=1 / 0),
#      beside SDPA's cuDNN and flash (cuda_bench / sdpa_anchor.py mode d256);
#   2. correctness, in parallel (not timed): the backward's d = 96 / 256 and varlen tests
#      (gpu-sm90-bwd.sh stage newdims), its other tests (BWD_TESTS: gtest filters, one process each; default the
#      Deterministic* tests and the other CudaSm90Backward.* tests less newdims' Varlen* and UnservedCalls*;
#      DET_TESTS=0 skips them) and the forward's d = 256 overlap, odd-shape and wide-tile tests,
#      each under its own timeout;
#   3. the backward beside cuDNN and flash (gpu-sm90-bwd.sh stages bench det: the default dQ
#      mode as sm90-default, the forced modes, the deterministic run and its head-major A/B),
#      judged by sm90_bwd_summary.py.
#   carry ["build/debs"]; command: OUT=$OUT bash tools/dev/gpu-sm90-defaults.sh
# BUDGET_S (default 400): the call's seconds; TEST_S (default 150): the tests' share (0: no tests);
# DIMS (default "64;96;128;256"): the build's head dims; NEWDIMS=0 skips the d = 96 / 256 backward
# tests; BWD_STAGES (default "bench det"): gpu-sm90-bwd.sh's stages in step 3 ("det": the
# deterministic run alone); ONLY_VARIANTS: gpu-sm90-bwd.sh's (e.g. "sm90-default": the other dQ modes not timed); everything lands in $OUT/defaults.tar.gz (one file:
# the device call brings back few) plus summary.txt.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root" || exit 2
out=${OUT:-/tmp/fastattn_out}
mkdir -p "$out"
work=/tmp/sm90_defaults
rm -rf "$work" && mkdir -p "$work"
budget=${BUDGET_S:-400}
t0=$SECONDS
python=/opt/torch/.venv/bin/python3
[ -x "$python" ] || python=python3
export LD_LIBRARY_PATH=/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
# Seconds left for a step (at least 1: `timeout 0` would mean no limit).
left() { local l=$((budget - (SECONDS - t0) - 15)); echo $((l > 0 ? l : 1)); }
pack() { tar -czf "$out/defaults.tar.gz" -C /tmp sm90_defaults; }
trap pack EXIT
exec > >(tee -a "$out/summary.txt") 2>&1

dims=${DIMS:-"64;96;128;256"}
# The CLI too: tools/dev/profile/ncu_sm90_backward.sh then reuses this build on a warm machine.
OUT=$work/build STAGES=build HEAD_DIMS="$dims" TARGETS="fastattn_gpu_tests fastattn_cuda_bench fastattn_cli" \
  BUDGET_S=220 bash tools/dev/gpu-sm90.sh > /dev/null 2>&1
tail -2 "$work/build/build.log"
build=$root/build/sm90
# A build cut short would leave an older build's binaries in place: stop instead.
grep -q "build: rc=0" "$work/build/summary.txt" || { echo "the build failed or ran out of time"; exit 3; }
echo "[$((SECONDS - t0))s] built"

timeout "$(($(left) < 30 ? $(left) : 30))" "$build/bench/cuda/fastattn_cuda_bench" d256 --repeats 10 --max-seconds 2 \
  --variants "overlap:FASTATTN_CUDA_SM90_OVERLAP=1,plain:FASTATTN_CUDA_SM90_OVERLAP=0" > "$work/d256.jsonl" 2>&1
PYTHONUNBUFFERED=1 timeout "$(($(left) < 40 ? $(left) : 40))" "$python" bench/cuda/sdpa_anchor.py d256 --backends cudnn,flash --no-gemm --repeats 10 \
  --max-seconds 2 >> "$work/d256.jsonl" 2>> "$work/d256.err"
"$python" - "$work/d256.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
table = {}
for r in rows:
    if "ms" not in r or r.get("kind") == "device":
        continue
    who = r.get("variant", "fastattn") if r.get("source") == "fastattn" else r.get("backend")
    key = f"b{r['b']} h{r['h']} s{r['sq']} d{r['d']}" + (" causal" if r["causal"] else "")
    table.setdefault(key, {})[who] = r["ms"]
for key, t in table.items():
    c = t.get("cudnn")
    print(key, " ".join(f"{w} {ms:.3f} ms" + (f" ({c / ms:.3f}x cuDNN)" if c else "") for w, ms in t.items()))
PY
echo "[$((SECONDS - t0))s] d256 timed"

export FASTATTN_CUDA_BWD_SM90=1
if [ "${TEST_S:-150}" != 0 ]; then
  # The tests' share: TEST_S (default 150) or what is left, whichever is less.
  test_s=${TEST_S:-150}
  tests_end=$((SECONDS + ($(left) < test_s ? $(left) : test_s)))
  until_tests_end() { local l=$((tests_end - SECONDS)); echo $((l > 0 ? l : 1)); }
  if [ "${NEWDIMS:-1}" = 1 ]; then
    OUT=$work/newdims STAGES=newdims HEAD_DIMS="$dims" BUDGET_S="$(until_tests_end)" \
      bash tools/dev/gpu-sm90-bwd.sh > /dev/null 2>&1 &
  fi
  # The backward's tests (BWD_TESTS: space-separated gtest filters, each its own process, so a
  # hang in one loses only its own results; default the Deterministic* tests, whose semaphore
  # waits have no limit, and the other CudaSm90Backward.* tests — less the Varlen* and
  # UnservedCalls* tests when the newdims stage runs them. Some of the others run deterministic
  # cases too (SmallShapes*, UncoveredPathsDeterministic). DET_TESTS=0 skips them) beside the others.
  if [ "${DET_TESTS:-1}" = 1 ]; then
    others='CudaSm90Backward.*-CudaSm90Backward.Deterministic*'
    [ "${NEWDIMS:-1}" = 1 ] && others+=':CudaSm90Backward.Varlen*:CudaSm90Backward.UnservedCalls*'
    bwd_filters=${BWD_TESTS:-"CudaSm90Backward.Deterministic* $others"}
    read -ra bwd_filter_list <<< "$bwd_filters"  # split on spaces, no pathname expansion of the '*'
    i=0
    for f in "${bwd_filter_list[@]}"; do
      i=$((i + 1))
      (timeout "$(until_tests_end)" "$build/tests/fastattn_gpu_tests" --gtest_filter="$f" \
         > "$work/bwd_tests_$i.log" 2>&1
       echo "$f rc=$? $(grep -cE 'Failure' "$work/bwd_tests_$i.log") failures"
       grep -E "OK \]|FAILED \]" "$work/bwd_tests_$i.log" | sed "s/^/[$i] /") &
    done
  fi
  # The wide-tile test alone takes ~100 s (its float64 references): beside the others.
  t=WideKeyTileMatchesFloat64
  (timeout "$(until_tests_end)" "$build/tests/fastattn_gpu_tests" --gtest_filter="CudaSm90.$t" > "$work/fwd_$t.log" 2>&1
   echo "CudaSm90.$t rc=$? $(grep -cE 'Failure' "$work/fwd_$t.log") failures") &
  for t in OverlapLoopAtHeadDim256MatchesFloat64 OddShapesMatchFloat64 RandomCasesMatchFloat64; do
    timeout "$(until_tests_end)" "$build/tests/fastattn_gpu_tests" --gtest_filter="CudaSm90.$t" > "$work/fwd_$t.log" 2>&1
    echo "CudaSm90.$t rc=$? $(grep -cE 'Failure' "$work/fwd_$t.log") failures"
  done
  wait
  [ -f "$work/newdims/newdims.log" ] && grep -E "OK \]|FAILED \]|SKIPPED \]" "$work/newdims/newdims.log"
  grep -h -B2 -A10 "Failure" "$work"/*.log "$work"/newdims/*.log 2>/dev/null | head -40
fi
OUT=$work/bwd STAGES="${BWD_STAGES:-bench det}" HEAD_DIMS="$dims" BUDGET_S=$(left) ONLY_VARIANTS=${ONLY_VARIANTS:-} \
  bash tools/dev/gpu-sm90-bwd.sh > /dev/null 2>&1
grep -E "vs cuDNN|A/B|determinism" "$work/bwd/bars.txt"
echo "[$((SECONDS - t0))s] backward timed"

echo "[$((SECONDS - t0))s] done"
