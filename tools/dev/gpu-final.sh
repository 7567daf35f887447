#!/usr/bin/env bash
# gpu-final.sh — a session's last device call when little device time is left: binaries built
# here by tools/dev/build-carry.sh, nothing built there. First the issue-19 suite on the host's
# 16 cores beside PyTorch CPU SDPA (nothing else running), then the GPU GoogleTest suite with
# whatever time is left, the sm90 backward's tests (opt-in, first GPU run) last.
#
# Device call: carry ["build/carry"], command "bash tools/dev/gpu-final.sh build/carry"
# Environment: ROUNDS (3), MIN_TIME (0.4), SUITE_S (330: the suite's limit), BUDGET_S (540).
# $OUT gets: summary.txt, issue19.log, the suite's JSON, gpu_suite.log, gpu_sm90_backward.log.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root" || exit 2
bin=$(cd "${1:-build/carry}" && pwd)
out=${OUT:-/tmp/fastattn_out}
mkdir -p "$out"
exec > >(tee -a "$out/summary.txt") 2>&1
python=/opt/torch/.venv/bin/python3
[ -x "$python" ] || python=python3
budget=${BUDGET_S:-540}
t0=$SECONDS
note() { echo "[$((SECONDS - t0))s] $*"; }

note "== issue-19 suite, 16 threads, rounds ${ROUNDS:-3}"
"$bin/fastattn" info --threads 16 > "$out/issue19.log" 2>&1
timeout -k 5 "${SUITE_S:-330}" "$python" bench/server_cpu.py --fastattn "$bin/fastattn" --threads 16 \
  --suite issue19 --rounds "${ROUNDS:-3}" --min-time "${MIN_TIME:-0.4}" --out /tmp/final-issue19 \
  >> "$out/issue19.log" 2>&1
note "-- issue19 rc=$?"
rm -f /tmp/final-issue19/issue19_fastattn_*.json
cp /tmp/final-issue19/*.json "$out/" 2>/dev/null
tail -25 "$out/issue19.log"

export LD_LIBRARY_PATH=/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}  # libnccl, libcublasLt
# gpu_tests STAGE FILTER: the GPU GoogleTest binary on FILTER with what is left of the budget.
gpu_tests() {
  local left=$((budget - (SECONDS - t0) - 10))
  if ((left < 30)); then note "== GPU $1 skipped (${left}s left)"; return; fi
  note "== GPU $1 (limit ${left}s)"
  timeout -k 5 "$left" "$bin/fastattn_gpu_tests" --gtest_brief=1 "--gtest_filter=$2" > "$out/gpu_$1.log" 2>&1
  note "-- GPU $1 rc=$?"
  grep -E "^\[  (PASSED|FAILED|SKIPPED) |tests? ran|FAILED" "$out/gpu_$1.log" | head -30
}
nvidia-smi --query-gpu=name,clocks.sm --format=csv,noheader
gpu_tests suite "-CudaSm90Backward.*"
# The sm90 backward (opt-in, FASTATTN_CUDA_BWD_SM90=1) last: its first run on a GPU.
gpu_tests sm90_backward "CudaSm90Backward.*"
