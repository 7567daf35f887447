#!/usr/bin/env bash
# run_device.sh — the whole GPU job in one device call (10 minutes at most): CUDA correctness,
# fastattn's CUDA timings beside PyTorch SDPA's backends in the same job, the bars judged, the
# Python package built for CUDA and tested, its benchmark plotted, the CPU suite on the host.
#
#   bash tools/dev/run_device.sh build/carry          # binaries built by tools/dev/build-carry.sh
#
# Environment (all optional):
#   OUT        where results go (default /tmp/fastattn_out); the device call brings back <= 8
#              files, so everything ends as: summary.txt, fastattn_cuda.jsonl, sdpa.jsonl,
#              <gpu>-cuda[-short]-<date>.json (compare.py), pybench.json, pybench.png, logs.tar.gz
#   STAGES     default "info gputests bench sdpa compare pybuild pytests pybench cli cputests"
#              (pybuild starts first, in the background, on the CPU cores the GPU stages leave)
#   SWEEP      paper (default) or short: the sweep of the bench and sdpa stages
#   MODES      cuda_bench modes (default "$SWEEP seqpar splitkv long determinism")
#   BUDGET_S   seconds for all stages together (default 560, under the 600 s call limit);
#              a stage gets min(its own limit, what is left), and is skipped when too little is left
#   PYTHON     the interpreter with torch (default python3); PYBUILD_JOBS (default 12)
# Every stage runs under `timeout`; its exit status and time are recorded and the job goes on.
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BIN=${1:-$ROOT/build/carry}
[[ -d "$BIN" ]] && BIN=$(cd "$BIN" && pwd)
OUT=${OUT:-/tmp/fastattn_out}
STAGES=${STAGES:-"info gputests bench sdpa compare pybuild pytests pybench cli cputests"}
SWEEP=${SWEEP:-paper}
MODES=${MODES:-"$SWEEP seqpar splitkv long determinism"}
BUDGET_S=${BUDGET_S:-560}
PYTHON=${PYTHON:-python3}
PYBUILD_JOBS=${PYBUILD_JOBS:-12}
PYBUILD_DIR=${PYBUILD_DIR:-/tmp/fastattn-pybuild}
LOGS="$OUT/logs"
mkdir -p "$OUT" "$LOGS"
SUMMARY="$OUT/summary.txt"
exec > >(tee -a "$SUMMARY") 2>&1
TEE_PID=$!
cd "$ROOT" || exit 2
export ROOT BIN OUT LOGS SWEEP PYTHON PYBUILD_JOBS PYBUILD_DIR

T0=$SECONDS
STATUS=()  # "stage: result" lines for the final table
has_stage() { [[ " $STAGES " == *" $1 "* ]]; }
elapsed() { echo $((SECONDS - T0)); }
note() { echo "[$(elapsed)s/${BUDGET_S}s] $*"; }

# run_stage NAME LIMIT_S MIN_S FUNCTION: FUNCTION (exported) under timeout; skipped when the
# budget left cannot give it MIN_S seconds.
run_stage() {
  local name=$1 limit=$2 min=$3 fn=$4
  local left=$((BUDGET_S - $(elapsed) - 5))
  ((limit > left)) && limit=$left
  if ((limit < min)); then
    note "== $name: SKIPPED (budget: ${left}s left, needs ${min}s)"
    STATUS+=("$name: skipped, budget")
    return
  fi
  note "== $name (limit ${limit}s)"
  local t=$SECONDS rc
  timeout -k 10 "$limit" bash -c "$fn"
  rc=$?
  local took=$((SECONDS - t)) result="rc=$rc"
  ((rc == 124 || rc == 137)) && result="TIMEOUT"
  note "-- $name: $result in ${took}s"
  STATUS+=("$name: $result (${took}s)")
}

stage_info() {
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,clocks.mem \
    --format=csv || echo "nvidia-smi failed"
  nproc; "$PYTHON" --version
  command -v nvcc && nvcc --version | tail -2
  for b in fastattn fastattn_cuda_bench fastattn_gpu_tests fastattn_tests; do
    if [[ -x "$BIN/$b" ]]; then echo "$b: $(ldd "$BIN/$b" | awk '{print $1}' | tr '\n' ' ')"
    else echo "$b: MISSING in $BIN"; fi
  done
  [[ -x "$BIN/fastattn" ]] && "$BIN/fastattn" info --no-peaks
  "$PYTHON" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, \
'devices', torch.cuda.device_count(), 'cudnn', torch.backends.cudnn.version())"
}

stage_gputests() {
  "$BIN/fastattn_gpu_tests" --gtest_brief=1 > "$LOGS/gpu_tests.log" 2>&1
  local rc=$?
  grep -E "^\[  (PASSED|FAILED|SKIPPED) |tests? ran|FAILED TEST" "$LOGS/gpu_tests.log" | head -30
  return $rc
}

# One process per mode: a crash or hang in one mode keeps the rows of the others.
stage_bench() {
  local rc=0 mode limit
  : > "$OUT/fastattn_cuda.jsonl"
  for mode in $MODES; do
    case $mode in paper|long) limit=150 ;; determinism) limit=90 ;; *) limit=60 ;; esac
    echo "-- cuda_bench $mode"
    timeout -k 5 "$limit" "$BIN/fastattn_cuda_bench" "$mode" >> "$OUT/fastattn_cuda.jsonl" \
      2>> "$LOGS/cuda_bench.err"
    local r=$?
    echo "   rc=$r, $(grep -c "\"mode\": *\"$mode\"" "$OUT/fastattn_cuda.jsonl") rows"
    ((r != 0)) && rc=$r
  done
  if [[ "$MODES" == *splitkv* ]]; then
    echo "-- cuda_bench splitkv with FASTATTN_CUDA_NUM_SPLITS=1 (no split, for comparison)"
    FASTATTN_CUDA_NUM_SPLITS=1 timeout -k 5 60 "$BIN/fastattn_cuda_bench" splitkv \
      2>> "$LOGS/cuda_bench.err" \
      | sed 's/"tag":"splitkv"/"tag":"splitkv_nosplit"/' >> "$OUT/fastattn_cuda.jsonl"
  fi
  grep -h '"error"' "$OUT/fastattn_cuda.jsonl" | cut -c1-300 | sort | uniq -c | sort -rn | head -5
  return $rc
}

stage_sdpa() {
  local modes
  modes=$(echo "$MODES" | tr ' ' '\n' | grep -vx determinism | tr '\n' ' ')
  # shellcheck disable=SC2086  # word splitting of the mode list is intended
  "$PYTHON" bench/cuda/sdpa_anchor.py $modes > "$OUT/sdpa.jsonl" 2> "$LOGS/sdpa.err"
  local rc=$?
  echo "$(grep -c '"ms"' "$OUT/sdpa.jsonl") timed rows, $(grep -c '"error"' "$OUT/sdpa.jsonl") errors, \
$(grep -c '"skipped"' "$OUT/sdpa.jsonl") skipped"; tail -3 "$LOGS/sdpa.err"
  return $rc
}

stage_compare() {
  "$PYTHON" bench/cuda/compare.py "$OUT/fastattn_cuda.jsonl" "$OUT/sdpa.jsonl" --results-dir "$OUT" \
    > "$LOGS/compare.md" 2>&1
  local rc=$?
  grep -E "^(PASS|FAIL|MISSING|INFO) |^wrote|^compare:" "$LOGS/compare.md"
  return $rc
}

# The wheel is built here (the device's Python is 3.12, the development machine's 3.11), with
# the CUDA kernels for sm_90 and head dims 64 and 128, offline (build requirements preinstalled).
stage_pybuild() {
  export CMAKE_BUILD_PARALLEL_LEVEL=$PYBUILD_JOBS
  [[ -z "${CUDACXX:-}" && -x /usr/local/cuda/bin/nvcc ]] && ! command -v nvcc >/dev/null \
    && export CUDACXX=/usr/local/cuda/bin/nvcc
  nice -n 10 "$PYTHON" -m pip install --no-build-isolation --no-deps --no-index \
    --disable-pip-version-check -v \
    --config-settings=cmake.define.FASTATTN_CUDA=ON \
    --config-settings=cmake.define.FASTATTN_CUDA_ARCHS=90 \
    "--config-settings=cmake.define.FASTATTN_CUDA_HEAD_DIMS=64;128" \
    --config-settings=build-dir="$PYBUILD_DIR" \
    "$ROOT"
}

stage_pytests() {
  "$PYTHON" -c "import fastattn; print(fastattn.__file__, fastattn.build_info())" || return 1
  "$PYTHON" -m pytest tests/python -ra -q -p no:cacheprovider > "$LOGS/pytest.log" 2>&1
  local rc=$?
  grep -E "^(SKIPPED|FAILED|ERROR)" "$LOGS/pytest.log" | cut -c1-200 | sort | uniq -c | head -25
  tail -3 "$LOGS/pytest.log"
  return $rc
}

stage_pybench() {
  MPLBACKEND=Agg "$PYTHON" -m fastattn.bench --device cuda --dtype bfloat16 --pass fwd,fwdbwd \
    --heads 16 --head-dim 128 --tokens 16384 --seqlens 512,1024,2048,4096,8192,16384 \
    --output "$OUT/pybench" > "$LOGS/pybench.log" 2>&1
  local rc=$?
  tail -25 "$LOGS/pybench.log"
  return $rc
}

stage_cli() {
  "$BIN/fastattn" bench --device cuda --batch 4 --heads 16 --head-dim 128 --seqlen 2048,8192 \
    --pass fwd,bwd,fwdbwd --causal --json "$LOGS/cli_bench.json"
}

stage_cputests() {
  "$BIN/fastattn_tests" --gtest_brief=1 > "$LOGS/cpu_tests.log" 2>&1
  local rc=$?
  tail -3 "$LOGS/cpu_tests.log"
  return $rc
}

export -f stage_info stage_gputests stage_bench stage_sdpa stage_compare stage_pybuild \
  stage_pytests stage_pybench stage_cli stage_cputests
export MODES

note "fastattn device job: stages [$STAGES], modes [$MODES], binaries $BIN, out $OUT"

# The Python build needs only CPU cores, so it runs beside the GPU stages (CUDA-event timings
# are GPU time; the timed calls are enqueued ahead of the GPU, so host load does not enter them).
PYBUILD_PID=""
if has_stage pybuild; then
  note "== pybuild started in the background (log: logs/pip_install.log)"
  ( timeout -k 10 $((BUDGET_S - 120)) bash -c stage_pybuild > "$LOGS/pip_install.log" 2>&1
    echo $? > "$LOGS/pybuild.rc" ) &
  PYBUILD_PID=$!
fi

for stage in $STAGES; do
  case $stage in
    info) run_stage info 40 5 stage_info ;;
    gputests) run_stage gputests 150 20 stage_gputests ;;
    bench) run_stage bench 330 30 stage_bench ;;
    sdpa) run_stage sdpa 240 30 stage_sdpa ;;
    compare) run_stage compare 40 5 stage_compare ;;
    pybuild)
      if [[ -n "$PYBUILD_PID" ]]; then
        note "== pybuild: waiting for the background build"
        wait "$PYBUILD_PID"
        rc=$(cat "$LOGS/pybuild.rc" 2>/dev/null || echo "?")
        ((rc == 124 || rc == 137)) 2>/dev/null && rc="TIMEOUT"
        note "-- pybuild: rc=$rc"; tail -3 "$LOGS/pip_install.log"
        STATUS+=("pybuild: rc=$rc")
      fi ;;
    pytests)
      if [[ -f "$LOGS/pybuild.rc" && "$(cat "$LOGS/pybuild.rc")" != 0 ]]; then
        note "== pytests: SKIPPED (the package did not build)"; STATUS+=("pytests: skipped, no build")
      else run_stage pytests 150 30 stage_pytests; fi ;;
    pybench)
      if [[ -f "$LOGS/pybuild.rc" && "$(cat "$LOGS/pybuild.rc")" != 0 ]]; then
        note "== pybench: SKIPPED (the package did not build)"; STATUS+=("pybench: skipped, no build")
      else run_stage pybench 120 30 stage_pybench; fi ;;
    cli) run_stage cli 60 15 stage_cli ;;
    cputests) run_stage cputests 90 20 stage_cputests ;;
    *) note "unknown stage $stage"; STATUS+=("$stage: unknown") ;;
  esac
done

note "== summary (budget ${BUDGET_S}s, used $(elapsed)s)"
printf '  %s\n' "${STATUS[@]}"
# At most 8 files come back, no deeper than 2 folders: the logs travel as one archive.
tar -czf "$OUT/logs.tar.gz" -C "$OUT" logs && rm -rf "$LOGS"
ls -la "$OUT"
exec >&- 2>&-
wait "$TEE_PID" 2>/dev/null  # summary.txt complete before the call collects $OUT
