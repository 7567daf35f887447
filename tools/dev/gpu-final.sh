#!/usr/bin/env bash
# gpu-final.sh — a session's last device call when little device time is left: binaries built
# here by tools/dev/build-carry.sh, nothing built there. In order, each stage capped by what is
# left of BUDGET_S:
#   1. issue 19's open bar (suite row 5, bf16 forward b1 h8 s2048) beside PyTorch CPU SDPA,
#      ROUNDS rounds, on the host's 16 cores with nothing else running;
#   2. the GPU GoogleTest suite without the sm90 backward;
#   3. the sm90 backward's tests (opt-in path, their first GPU run);
#   4. the whole issue-19 suite, with what is left;
#   5. (stage cpu_tests) the CPU GoogleTest binary, fastattn_tests, on the host's real AMX.
# STAGES picks and orders them (default "bar suite sm90_backward issue19"; names: bar, suite,
# sm90_backward, issue19, cpu_tests). A folder holding bins.tar.xz instead of binaries is
# unpacked to /tmp first (xz keeps a carry of three binaries under the 64 MiB limit).
#
# Device call: carry ["build/carry-final"] (fastattn + fastattn_gpu_tests from build/carry),
#   command "bash tools/dev/gpu-final.sh build/carry-final"
# Environment: ROUNDS (3), MIN_TIME (0.4), BUDGET_S (520).
# $OUT gets: summary.txt, issue19-bar.json/.log, gpu_suite.log, gpu_sm90_backward.log,
# issue19.json/.log.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root" || exit 2
bin=$(cd "${1:-build/carry}" && pwd)
if [ -f "$bin/bins.tar.xz" ]; then
  mkdir -p /tmp/fastattn-bins && tar -xJf "$bin/bins.tar.xz" -C /tmp/fastattn-bins && bin=/tmp/fastattn-bins
fi
out=${OUT:-/tmp/fastattn_out}
mkdir -p "$out"
exec > >(tee -a "$out/summary.txt") 2>&1
python=/opt/torch/.venv/bin/python3
[ -x "$python" ] || python=python3
budget=${BUDGET_S:-520}
t0=$SECONDS
note() { echo "[$((SECONDS - t0))s] $*"; }
left() { echo $((budget - (SECONDS - t0) - 10)); }
export LD_LIBRARY_PATH=/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}  # libnccl, libcublasLt

# issue19 NAME ROWS: the suite (ROWS: indices, empty = all) into $OUT/NAME.json / NAME.log.
issue19() {
  local limit; limit=$(left)
  if ((limit < 40)); then note "== $1 skipped (${limit}s left)"; return; fi
  note "== $1: issue-19 suite rows '${2:-all}', 16 threads, ${ROUNDS:-3} rounds (limit ${limit}s)"
  "$bin/fastattn" info --threads 16 --no-peaks > "$out/$1.log" 2>&1
  timeout -k 5 "$limit" "$python" bench/server_cpu.py --fastattn "$bin/fastattn" --threads 16 \
    --suite issue19 ${2:+--rows "$2"} --rounds "${ROUNDS:-3}" --min-time "${MIN_TIME:-0.4}" --out "/tmp/$1" \
    >> "$out/$1.log" 2>&1
  note "-- $1 rc=$?"
  cp "/tmp/$1/issue19.json" "$out/$1.json" 2>/dev/null
  grep -E "ratio|bar|torch .* round" "$out/$1.log" | tail -12
}
# gpu_tests NAME FILTER: the GPU GoogleTest binary on FILTER.
gpu_tests() {
  local limit; limit=$(left)
  if ((limit < 30)); then note "== GPU $1 skipped (${limit}s left)"; return; fi
  note "== GPU $1 (limit ${limit}s)"
  timeout -k 5 "$limit" "$bin/fastattn_gpu_tests" --gtest_brief=1 "--gtest_filter=$2" > "$out/gpu_$1.log" 2>&1
  note "-- GPU $1 rc=$?"
  grep -E "^\[  (PASSED|FAILED|SKIPPED) |tests? ran|FAILED" "$out/gpu_$1.log" | head -30
}

cpu_tests() {
  local limit; limit=$(left)
  if ((limit < 30)); then note "== CPU tests skipped (${limit}s left)"; return; fi
  note "== CPU tests, native AMX (limit ${limit}s)"
  grep -o -m1 -E 'amx_tile|amx_bf16' /proc/cpuinfo | head -1
  timeout -k 5 "$limit" "$bin/fastattn_tests" --gtest_brief=1 > "$out/cpu_tests.log" 2>&1
  note "-- CPU tests rc=$?"
  grep -E "^\[  (PASSED|FAILED|SKIPPED) |tests? ran|FAILED" "$out/cpu_tests.log" | head -30
}

nvidia-smi --query-gpu=name,clocks.sm --format=csv,noheader
for stage in ${STAGES:-bar suite sm90_backward issue19}; do
  case $stage in
    bar) issue19 issue19-bar 5 ;;
    suite) gpu_tests suite "-CudaSm90Backward.*" ;;
    sm90_backward) gpu_tests sm90_backward "CudaSm90Backward.*" ;;
    issue19) issue19 issue19 "" ;;
    cpu_tests) cpu_tests ;;
    *) note "unknown stage $stage" ;;
  esac
done
note "== done"
