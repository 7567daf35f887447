#!/usr/bin/env bash
# sanitize.sh — one device call: compute-sanitizer memcheck and racecheck over a small set of
# every CUDA kernel (forward, split-KV + combine, decode, backward). Logs under $OUT.
#   bash tools/dev/profile/sanitize.sh build/carry-lead
# FILTER (a gtest filter) narrows the set; the exit status is non-zero when a tool reports.
set -uo pipefail
bin=${1:-build/carry-lead}
out=${OUT:-/tmp/fastattn_out}
mkdir -p "$out"
filter=${FILTER:-'CudaBackend.ChosenForwardCasesMatchFloat64:CudaBackend.ForcedSplitKvChosenCasesMatchFloat64:CudaBackward.ChosenCasesMatchFloat64:CudaBackward.DeterministicIsBitwiseRepeatable'}
status=0
for tool in memcheck racecheck; do
  timeout 170 compute-sanitizer --tool $tool --error-exitcode 9 "$bin/fastattn_gpu_tests" \
    --gtest_filter="$filter" > "$out/$tool.log" 2>&1
  rc=$?
  [[ $rc == 0 ]] || status=1
  echo "$tool rc=$rc"; grep -E "OK \]|FAILED|ERROR SUMMARY|RACECHECK SUMMARY|PASSED" "$out/$tool.log" | head -12
done
exit $status
