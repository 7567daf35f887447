#!/usr/bin/env bash
# gpu-h200-bars.sh — one call on a cold H200 for the bars the development machine cannot
# measure, in order of what each issue lacks (H200 starts have been rare; each stage is capped
# by what is left of LIMIT_S, and a call brings back at most 8 files, so $OUT gets one tarball):
#   1. issue 16: gpu-sm90-bwd.sh stages build, bench, det, mem (the backward's 27 rows with
#      today's defaults beside SDPA's cuDNN and flash, the deterministic bar, memory per token;
#      DET_PAIRS: `cuda_bench determinism --det-shapes pairs`, default against one group of all
#      pairs), BWD_S seconds (default 300; build ~70 s);
#   2. issue 17: the CPU decode bar on the host's 16 cores, gpu-host-decode.sh stages bar, splits
#      and past_llc (kv 32k beside PyTorch CPU SDPA, the host's caches, three runs at kv 128k,
#      whose 512 MiB of K+V pass any L3 of that host), ~150 s (HOST_DECODE=0 skips);
#   3. issue 15: gpu-sm90-ab.sh's forward sweep beside cuDNN, two rounds, with what is left
#      (more than 90 s).
# Device call: carry ["build/debs"]; command `OUT=$OUT bash tools/dev/gpu-h200-bars.sh`.
# On an H100 the same runs are A/B and correctness figures, not the bars.
# The same three stages over binaries built here (no build there, about 70 s less): gpu-carried.sh's
# jobs bwd, host and fwd (its header has the command).
# $OUT: summary.txt, bars.tgz (bwd/, host/, fwd/).
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root" || exit 2
out=${OUT:-/tmp/fastattn_out}
mkdir -p "$out"
exec > >(tee -a "$out/summary.txt") 2>&1
limit=${LIMIT_S:-570}
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader

OUT=$out/bwd STAGES="build bench det mem" HEAD_DIMS="64;128" \
  TARGETS="fastattn_gpu_tests fastattn_cuda_bench fastattn_cli" DET_ORDERS="longest_first" DET_AB=0 DET_PAIRS=1 PLAN_BULK=0 \
  BUDGET_S=$((${BWD_S:-300} < limit ? ${BWD_S:-300} : limit)) bash tools/dev/gpu-sm90-bwd.sh > /dev/null 2>&1
echo "[$SECONDS s] backward"; grep -E "vs cuDNN|determinism|memory|rc=" "$out/bwd/summary.txt" | head -30

cli=build/sm90/tools/cli/fastattn
if [ "${HOST_DECODE:-1}" = 1 ] && [ -x "$cli" ] && [ $((limit - SECONDS)) -gt 150 ]; then
  OUT=$out/host FASTATTN_BIN=$cli STAGES="bar splits past_llc" BUDGET_S=150 bash tools/dev/gpu-host-decode.sh \
    > /dev/null 2>&1
  grep -E "L3|L2 cache" "$out/host/caches.txt"; grep -E "^(splits|past_llc)|^\| decode" "$out/host/summary.txt"
  echo "[$SECONDS s] host"
fi

left=$((limit - SECONDS))
if [ $left -gt 90 ]; then
  OUT=$out/fwd BUILD_STAGES="build" HEAD_DIMS="64;128" ROUNDS=2 TEST_S=1 SANITIZE_FILTER='' PROBE=0 \
    BUDGET_S=$left bash tools/dev/gpu-sm90-ab.sh > /dev/null 2>&1
  echo "[$SECONDS s] forward"; tail -8 "$out/fwd/summary.txt"
fi
cd "$out" || exit 2
dirs=()
for d in bwd host fwd; do [ -d "$d" ] && dirs+=("$d"); done
((${#dirs[@]})) && tar czf bars.tgz "${dirs[@]}" && rm -rf "${dirs[@]}"
