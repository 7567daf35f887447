#!/usr/bin/env bash
# ab_then_bench.sh — one device call: A/B of two carried builds' backward (CLI `fastattn` in
# each), the candidate's GPU suite and a compute-sanitizer pass over its backward, then — only
# when the candidate is faster on every A/B shape — the benchmark job on the candidate (stages
# gputests bench sdpa compare, so it fits the same call).
#   bash tools/profile/ab_then_bench.sh build/carry build/carry-tma
set -uo pipefail
base=${1:?baseline carry dir}; cand=${2:?candidate carry dir}
out=${OUT:-/tmp/fastattn_out}
mkdir -p "$out" /tmp/abv /tmp/san
cp "$base/fastattn" /tmp/abv/fastattn_a_base; cp "$cand/fastattn" /tmp/abv/fastattn_b_cand
OUT=/tmp/about GPU_TESTS="$cand/fastattn_gpu_tests" bash tools/profile/ab_variants.sh /tmp/abv > /dev/null 2>&1
cat /tmp/about/checks.txt; cp /tmp/about/ab.txt "$out/ab.txt"
verdict=$(python3 - /tmp/about/ab.txt <<'PY'
import sys
rows = {}
for line in open(sys.argv[1]):
    if line.startswith("=="): cur = line.split()[-1]; continue
    f = [x.strip() for x in line.split("|")]
    rows.setdefault(f"{f[1]} {f[2]} {f[3]}", {}).setdefault(cur, []).append(float(f[5]))
wins = True
for k, v in rows.items():
    a, b = max(v["fastattn_a_base"]), max(v["fastattn_b_cand"])
    print(f"{k}: base {a:.1f} candidate {b:.1f} ({b / a - 1:+.1%})", file=sys.stderr)
    wins &= b > a * 1.005
print("candidate" if wins else "base")
PY
)
echo "verdict: $verdict"
[[ $verdict == candidate ]] || exit 0
timeout 120 compute-sanitizer --tool racecheck --error-exitcode 9 "$cand/fastattn_gpu_tests" \
  --gtest_filter='CudaBackward.ChosenCasesMatchFloat64' 2>&1 | grep -E "OK \]|FAILED|RACECHECK SUMMARY" | head -4
timeout 60 compute-sanitizer --tool memcheck --error-exitcode 9 "$cand/fastattn_gpu_tests" \
  --gtest_filter='CudaBackward.ChosenCasesMatchFloat64' 2>&1 | grep -E "OK \]|FAILED|ERROR SUMMARY" | head -4
STAGES="info gputests bench sdpa compare" BUDGET_S=${BUDGET_S:-330} bash bench/cuda/run_device.sh "$cand" 2>&1 |
  grep -E "^(PASS|FAIL|INFO) |rc=|PASSED|FAILED"
