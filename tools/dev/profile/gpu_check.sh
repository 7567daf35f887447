#!/usr/bin/env bash
# gpu_check.sh — one device call: the GPU test suite, then compute-sanitizer memcheck and
# racecheck on the backward's chosen cases. Logs under $OUT.
#   bash tools/dev/profile/gpu_check.sh build/carry-lead
set -uo pipefail
bin=${1:-build/carry-lead}
out=${OUT:-/tmp/fastattn_out}
mkdir -p "$out"
timeout 240 "$bin/fastattn_gpu_tests" > "$out/gpu_tests.log" 2>&1
echo "gpu tests rc=$?"
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|tests ran" "$out/gpu_tests.log" | head -30
for tool in memcheck racecheck; do
  timeout 120 compute-sanitizer --tool $tool --error-exitcode 9 "$bin/fastattn_gpu_tests" \
    --gtest_filter='CudaBackward.DeterministicIsBitwiseRepeatable' > "$out/$tool.log" 2>&1
  echo "$tool rc=$?"; tail -3 "$out/$tool.log"
done
