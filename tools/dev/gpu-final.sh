#!/usr/bin/env bash
# gpu-final.sh — a session's last device call when little device time is left: binaries built
# here by tools/dev/build-carry.sh, nothing built there. First the issue-19 suite on the host's
# 16 cores beside PyTorch CPU SDPA (nothing else running), then the GPU GoogleTest suite with
# whatever time is left.
#
# Device call: carry ["build/carry"], command "bash tools/dev/gpu-final.sh build/carry"
# Environment: ROUNDS (3), MIN_TIME (0.4), SUITE_S (330: the suite's limit), BUDGET_S (540).
# $OUT gets: summary.txt, issue19.log, the suite's JSON, gpu_tests.log.
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

left=$((budget - (SECONDS - t0) - 10))
if ((left > 30)); then
  note "== GPU suite (limit ${left}s)"
  nvidia-smi --query-gpu=name,clocks.sm --format=csv,noheader
  timeout -k 5 "$left" "$bin/fastattn_gpu_tests" --gtest_brief=1 > "$out/gpu_tests.log" 2>&1
  note "-- gpu tests rc=$?"
  grep -E "^\[  (PASSED|FAILED|SKIPPED) |tests? ran|FAILED" "$out/gpu_tests.log" | head -40
else
  note "== GPU suite skipped (${left}s left)"
fi
