#!/usr/bin/env bash
# gpu-carried.sh — one device call over binaries built here (tools/dev/build-carry.sh) and carried
# xz-packed, running our GPU-job scripts' stages one after another, each capped by its own
# budget and by what is left of the call.
#
#   tar -cJf build/carry-wave/bins.tar.xz -C build/carry fastattn fastattn_cuda_bench fastattn_gpu_tests
#   device call: carry ["build/carry-wave"],
#     command "JOBS='bwd:240 coop:200' bash tools/dev/gpu-carried.sh build/carry-wave"
#
# JOBS: space-separated NAME:SECONDS, run in that order. Names:
#   suite   the GPU GoogleTest binary (whole suite; GTEST_FILTER narrows it)
#   bwd     tools/dev/gpu-sm90-bwd.sh, STAGES from BWD_STAGES (default "newtests bench det mem")
#   coop    tools/dev/gpu-coop.sh, STAGES from COOP_STAGES (default: the script's)
#   kv      tools/dev/gpu-kvcache.sh on carried binaries, STAGES from KV_STAGES
#   sm90    tools/dev/gpu-sm90.sh on carried binaries, STAGES from SM90_STAGES
#   host    tools/dev/gpu-host-decode.sh on the carried CLI (issue 17's CPU decode on the host),
#           STAGES from HOST_STAGES (default "bar splits past_llc")
#   fwd     tools/dev/gpu-sm90-ab.sh's forward sweep beside cuDNN, ROUNDS (default 2), on the
#           carried fastattn_cuda_bench (copied to where its build would put it; no build);
#           FWD_HEAD_DIMS (default "64;128") the head dims the binaries hold: "64;128;256" when
#           built with HEAD_DIMS="64;128;256" (build-carry.sh), so the sweep's d = 256 rows run
# gpu-h200-bars.sh's three stages over carried binaries (about 70 s less than building there):
#   JOBS='bwd:300 host:150 fwd:120' BWD_STAGES="bench det mem" DET_ORDERS=longest_first DET_AB=0 DET_PAIRS=1 PLAN_BULK=0
# $OUT/summary.txt gets the call's log and $OUT/<name>.tar.gz each job's files (a device call
# brings back at most 8 files, so each job's folder travels as one archive).
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root" || exit 2
out=${OUT:-/tmp/fastattn_out}
mkdir -p "$out"
exec > >(tee -a "$out/summary.txt") 2>&1
carry=$(cd "${1:-build/carry-wave}" && pwd)
bin=/tmp/fastattn-bins
mkdir -p "$bin"
tar -xJf "$carry/bins.tar.xz" -C "$bin" || { echo "gpu-carried: cannot unpack $carry/bins.tar.xz"; exit 2; }
export LD_LIBRARY_PATH=/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}  # libnccl, libcublasLt
t0=$SECONDS
note() { echo "[$((SECONDS - t0))s] $*"; }
nvidia-smi --query-gpu=name,clocks.sm,memory.used --format=csv,noheader
ls "$bin"

for job in ${JOBS:-suite:120}; do
  name=${job%%:*} limit=${job##*:}
  mkdir -p "$out/$name"
  note "== $name (limit ${limit}s)"
  case $name in
    suite) timeout -k 5 "$limit" "$bin/fastattn_gpu_tests" --gtest_brief=1 "--gtest_filter=${GTEST_FILTER:-*}" \
             > "$out/suite/gpu_suite.log" 2>&1
           note "-- suite rc=$?"
           grep -E "^\[  (PASSED|FAILED|SKIPPED) |tests? ran|FAILED" "$out/suite/gpu_suite.log" | head -30 ;;
    bwd) OUT=$out/bwd BIN_DIR=$bin STAGES=${BWD_STAGES:-"newtests bench det mem"} BUDGET_S=$limit \
           timeout -k 5 $((limit + 10)) bash tools/dev/gpu-sm90-bwd.sh > /dev/null 2>&1
         note "-- bwd rc=$?"; tail -25 "$out/bwd/summary.txt" 2>/dev/null ;;
    coop) OUT=$out/coop FASTATTN_BIN=$bin/fastattn ${COOP_STAGES:+STAGES="$COOP_STAGES"} \
            timeout -k 5 "$limit" bash tools/dev/gpu-coop.sh > /dev/null 2>&1
          note "-- coop rc=$?"; tail -30 "$out/coop/coop.log" 2>/dev/null ;;
    kv) OUT=$out/kv BIN_DIR=$bin ${KV_STAGES:+STAGES="$KV_STAGES"} BUDGET_S=$limit \
          timeout -k 5 $((limit + 10)) bash tools/dev/gpu-kvcache.sh > /dev/null 2>&1
        note "-- kv rc=$?"; tail -25 "$out/kv/summary.txt" 2>/dev/null ;;
    sm90) OUT=$out/sm90 BIN_DIR=$bin ${SM90_STAGES:+STAGES="$SM90_STAGES"} BUDGET_S=$limit \
            timeout -k 5 $((limit + 10)) bash tools/dev/gpu-sm90.sh > /dev/null 2>&1
          note "-- sm90 rc=$?"; tail -25 "$out/sm90/summary.txt" 2>/dev/null ;;
    host) OUT=$out/host FASTATTN_BIN=$bin/fastattn STAGES=${HOST_STAGES:-"bar splits past_llc"} BUDGET_S=$limit \
            timeout -k 5 $((limit + 10)) bash tools/dev/gpu-host-decode.sh > /dev/null 2>&1
          note "-- host rc=$?"; grep -E "^(splits|past_llc)|^\| decode" "$out/host/summary.txt" 2>/dev/null ;;
    fwd) mkdir -p build/sm90/bench/cuda build/sm90/tests
         cp "$bin/fastattn_cuda_bench" build/sm90/bench/cuda/ && cp "$bin/fastattn_gpu_tests" build/sm90/tests/
         OUT=$out/fwd BUILD_STAGES=none HEAD_DIMS="${FWD_HEAD_DIMS:-64;128}" ROUNDS=${ROUNDS:-2} TEST_S=1 SANITIZE_FILTER='' PROBE=0 \
           BUDGET_S=$limit timeout -k 5 $((limit + 10)) bash tools/dev/gpu-sm90-ab.sh > /dev/null 2>&1
         note "-- fwd rc=$?"; tail -8 "$out/fwd/summary.txt" 2>/dev/null ;;
    *) note "unknown job $name" ;;
  esac
done
for job in ${JOBS:-suite:120}; do
  name=${job%%:*}
  [ -d "$out/$name" ] && tar -czf "$out/$name.tar.gz" -C "$out" "$name" && rm -rf "${out:?}/$name"
done
note "== done"
