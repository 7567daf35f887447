#!/usr/bin/env bash
# ab_then_bench.sh — one device call: A/B of two carried builds' backward (CLI `fastattn` in
# each) and the candidate's GPU suite; only when the candidate is more than 0.5% faster on every
# A/B shape, compute-sanitizer racecheck and memcheck over its backward and, if both are clean,
# the benchmark job on the candidate (stages info bench sdpa compare, so it fits the same call).
#   bash tools/dev/profile/ab_then_bench.sh build/carry build/carry-tma
set -uo pipefail
base=${1:?baseline carry dir}; cand=${2:?candidate carry dir}
out=${OUT:-/tmp/fastattn_out}
mkdir -p "$out" /tmp/abv
cp "$base/fastattn" /tmp/abv/fastattn_a_base; cp "$cand/fastattn" /tmp/abv/fastattn_b_cand
OUT=/tmp/about GPU_TESTS="$cand/fastattn_gpu_tests" bash tools/dev/profile/ab_variants.sh /tmp/abv > /dev/null 2>&1
cat /tmp/about/checks.txt; cp /tmp/about/ab.txt "$out/ab.txt"
verdict=$(python3 - /tmp/about/ab.txt <<'PY'
import sys
rows = {}
for line in open(sys.argv[1]):
    if line.startswith("=="): cur = line.split()[-1]; continue
    f = [x.strip() for x in line.split("|")]
    rows.setdefault(f"{f[1]} {f[2]} {f[3]}", {}).setdefault(cur, []).append(float(f[5]))
wins = bool(rows)
for k, v in rows.items():
    if "fastattn_a_base" not in v or "fastattn_b_cand" not in v:  # a run timed out
        print(f"{k}: missing a build's timing", file=sys.stderr)
        wins = False
        continue
    a, b = max(v["fastattn_a_base"]), max(v["fastattn_b_cand"])
    print(f"{k}: base {a:.1f} candidate {b:.1f} ({b / a - 1:+.1%})", file=sys.stderr)
    wins &= b > a * 1.005
print("candidate" if wins else "base")
PY
)
echo "verdict: $verdict"
[[ $verdict == candidate ]] || exit 0
FILTER='CudaBackward.ChosenCasesMatchFloat64:CudaBackward.DeterministicIsBitwiseRepeatable' OUT=/tmp/san \
  bash tools/dev/profile/sanitize.sh "$cand" || { echo "sanitizer failed: no benchmark"; exit 1; }
STAGES="info bench sdpa compare" BUDGET_S=${BUDGET_S:-330} bash tools/dev/run_device.sh "$cand" 2>&1 |
  grep -E "^(PASS|FAIL|INFO) |rc=|PASSED|FAILED"
