#!/usr/bin/env bash
# gpu-merged.sh — a session's last device call on the merged tree: one build on the device
# (sm_90, HEAD_DIMS), then the other job scripts' stages over that build, each capped, in the
# order of JOBS. Carry ["build/debs"] only (the tree travels by itself); command:
#   mkdir -p build && JOBS="build:130 suite:150 sweep:100 kv:90 coop:60" bash tools/dev/gpu-merged.sh
# Jobs: build  gpu-sm90.sh STAGES=build (build/sm90: gpu tests, CPU tests, cuda bench, KV-cache
#              bench, CLI)
#       suite  gpu-sm90.sh STAGES=suite: ctest -L gpu (the whole GPU suite on the default paths:
#              sm90 forward and backward), then the forward suites with FASTATTN_CUDA_PATH=sm80
#       sweep  gpu-sm90.sh STAGES=sweep, the default scheduler rule only (SWEEP_FORCED="", or e.g. "dynamic" from the caller)
#       kv     gpu-kvcache.sh over build/sm90 (its STAGES minus build: KV_STAGES)
#       coop   gpu-coop.sh with build/sm90's CLI (COOP_STAGES)
#       hostdecode gpu-host-decode.sh: issue 17's CPU decode bar on the 16-core host (the GPU idle)
#       hf     gpu-transformers.sh with a carried wheel (WHEEL; HF_STAGES, default "install tests
#              overhead"): the transformers integration and the per-call overhead bars
# CTEST_JOBS (default 8) runs the suite's test processes side by side (their float64 references
# are CPU-bound; the GPU is shared).
# $OUT gets summary.txt and one <job>.tar.gz per job (a call brings back at most 8 files).
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root" || exit 2
out=${OUT:-/tmp/fastattn_out}
mkdir -p "$out"
exec > >(tee -a "$out/summary.txt") 2>&1
t0=$SECONDS
note() { echo "[$((SECONDS - t0))s] $*"; }
export HEAD_DIMS=${HEAD_DIMS:-"64;96;128;256"}
export CTEST_JOBS=${CTEST_JOBS:-8}
export TARGETS=${TARGETS:-"fastattn_gpu_tests fastattn_tests fastattn_cuda_bench fastattn_kv_cache_bench fastattn_cli"}
export LD_LIBRARY_PATH=/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

for job in ${JOBS:-"build:130 suite:150"}; do
  name=${job%%:*} limit=${job##*:}
  mkdir -p "$out/$name"
  note "== $name (limit ${limit}s)"
  case $name in
    build|suite) OUT=$out/$name STAGES=$([ "$name" = suite ] && echo "suite suite80" || echo build) BUDGET_S=$limit timeout -k 5 $((limit + 15)) bash tools/dev/gpu-sm90.sh > /dev/null 2>&1 ;;
    sweep) OUT=$out/sweep STAGES=sweep SWEEP_FORCED="${SWEEP_FORCED-}" BUDGET_S=$limit timeout -k 5 $((limit + 15)) bash tools/dev/gpu-sm90.sh > /dev/null 2>&1 ;;
    kv) ln -sfn sm90 build/gpu-kv
        OUT=$out/kv STAGES=${KV_STAGES:-"test bench"} BUDGET_S=$limit timeout -k 5 $((limit + 15)) bash tools/dev/gpu-kvcache.sh > /dev/null 2>&1 ;;
    hf) OUT=$out/hf STAGES=${HF_STAGES:-"install tests overhead"} BUDGET_S=$limit \
          timeout -k 5 $((limit + 15)) bash tools/dev/gpu-transformers.sh > /dev/null 2>&1 ;;
    coop) OUT=$out/coop FASTATTN_BIN=$root/build/sm90/tools/cli/fastattn STAGES=${COOP_STAGES:-"decode1m check64k prefill mha256k"} \
            timeout -k 5 "$limit" bash tools/dev/gpu-coop.sh > /dev/null 2>&1 ;;
    hostdecode) OUT=$out/hostdecode BUDGET_S=$limit FASTATTN_BIN=$root/build/sm90/tools/cli/fastattn \
            timeout -k 5 $((limit + 15)) bash tools/dev/gpu-host-decode.sh > /dev/null 2>&1 ;;
    *) note "unknown job $name"; continue ;;
  esac
  note "-- $name rc=$?"
  for f in summary.txt coop.log; do [ -f "$out/$name/$f" ] && tail -28 "$out/$name/$f"; done
  [ -f "$out/$name/coop_summary.json" ] && cat "$out/$name/coop_summary.json"
  tar -czf "$out/$name.tar.gz" -C "$out" "$name" && rm -rf "${out:?}/$name"
done
note "== done"
