#!/usr/bin/env bash
# run-main.sh — the main job: install what is missing, build the benchmarked configuration,
# then `fastattn info`, a quick `fastattn check` of every backend present, and a short benchmark
# on every device present, fastattn beside its anchors measured in the same run:
#   CPU: bench_cpu, fastattn beside standard attention on OpenBLAS;
#   GPU (when nvidia-smi lists one): cuda_bench's short sweep (bf16, b8 s2k / b2 s8k, d64 and
#        d128, causal and not, forward and forward+backward) beside PyTorch SDPA's flash, cuDNN
#        and efficient backends (bench/cuda/sdpa_anchor.py), when `$PYTHON -c "import torch"` works.
#
#   bash tools/scripts/run-main.sh            # full: the CPU bars' shapes, all four CUDA head dims
#   bash tools/scripts/run-main.sh --quick    # or FASTATTN_MAIN_QUICK=1: small shapes, few
#                                             # repeats, CUDA head dims 64;128 (a few minutes)
#
# Prints the table (fastattn, anchors, ratios = anchor time / fastattn time) and writes it with
# every raw result into build/main-results/<machine>-<date>/ (main.json, main.png, raw JSON,
# logs), an untracked folder: tracked files are never written (docs are updated by the
# maintainer command tools/scripts/update-docs.sh). The LAST line of output names the folder.
# Exit status: non-zero when the build or a check fails; a missed bar is printed, not a failure.
#
# Environment (all optional):
#   FASTATTN_MAIN_QUICK=1     as --quick
#   FASTATTN_OFFLINE_DEBS     a folder of .debs for a machine without network (see setup.sh)
#   FASTATTN_MAIN_CUDA        auto (default: CUDA when nvidia-smi lists a GPU), on, off
#   FASTATTN_MAIN_CUDA_ARCHS  CUDA architectures (default: the GPUs' compute capabilities, 9.0 -> 90)
#   FASTATTN_MAIN_HEAD_DIMS   CUDA head dims (default 64;96;128;256, quick 64;128)
#   FASTATTN_MAIN_BUILD_DIR   default build/main;  FASTATTN_MAIN_OUT: the results folder
#   PYTHON                    the interpreter with torch / matplotlib (default python3)
#   JOBS                      build jobs (default: nproc)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"

quick=${FASTATTN_MAIN_QUICK:-0}
for arg in "$@"; do
  case $arg in
    --quick) quick=1 ;;
    -h | --help) sed -n '2,30p' "$0"; exit 0 ;;
    *) echo "run-main.sh: unknown argument '$arg' (expected --quick)" >&2; exit 2 ;;
  esac
done
[ "$quick" = 0 ] || quick=1
python=${PYTHON:-python3}
export PYTHON=$python
jobs=${JOBS:-$(nproc)}
build=${FASTATTN_MAIN_BUILD_DIR:-$root/build/main}
t0=$SECONDS
step() { echo; echo "== [$((SECONDS - t0))s] $*"; }
slug() { tr '[:upper:]' '[:lower:]' | sed -e 's/([^)]*)//g' -e 's/ cpu @.*//' -e 's/[^a-z0-9]\+/-/g' -e 's/^-//' -e 's/-$//'; }

# ---- the devices present ---------------------------------------------------------------------
cuda_mode=${FASTATTN_MAIN_CUDA:-auto}
gpu_name="" archs=""
if [ "$cuda_mode" != off ] && command -v nvidia-smi >/dev/null 2>&1; then
  if caps=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null) && [ -n "$caps" ]; then
    # As CMake's default (cmake/detect_cuda_archs.cmake): an 8.x GPU runs sm_80 SASS natively.
    archs=$(tr -d ' .' <<<"$caps" | sed 's/^8[1-9]$/80/' | sort -u | paste -sd';')
    gpu_name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
  fi
fi
if [ "$cuda_mode" = on ] && [ -z "$gpu_name" ]; then
  echo "run-main.sh: FASTATTN_MAIN_CUDA=on but nvidia-smi lists no GPU" >&2
  exit 2
fi
with_cuda=0
[ -n "$gpu_name" ] && with_cuda=1
archs=${FASTATTN_MAIN_CUDA_ARCHS:-$archs}
if [ "$quick" = 1 ]; then head_dims=${FASTATTN_MAIN_HEAD_DIMS:-64;128}
else head_dims=${FASTATTN_MAIN_HEAD_DIMS:-64;96;128;256}; fi

if [ "$with_cuda" = 1 ]; then machine=$(slug <<<"$gpu_name")
else machine="$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | slug)-$(nproc)t"; fi
[ -n "$machine" ] || machine=$(hostname | slug)
suffix=""
[ "$quick" = 1 ] && suffix=-quick
out=${FASTATTN_MAIN_OUT:-$root/build/main-results/$machine-$(date -u +%Y-%m-%d-%H%M%S)$suffix}
mkdir -p "$out/logs"
out=$(cd "$out" && pwd)
failures=()
# The folder is named last, whatever happened before (set -e exits included).
trap 'status=$?; echo; echo "== [$((SECONDS - t0))s] done: ${#failures[@]} failure(s)${failures[*]:+: ${failures[*]}}";
      echo "results: $out"; exit $status' EXIT

echo "fastattn main job: $([ "$quick" = 1 ] && echo quick || echo full), machine $machine," \
     "$([ "$with_cuda" = 1 ] && echo "GPU $gpu_name (sm $archs), CUDA head dims $head_dims" || echo "no GPU: CPU only")"

# ---- install, build ----------------------------------------------------------------------------
step "setup (tools/scripts/setup.sh --main)"
if [ -z "${FASTATTN_DEPS_PREFIX:-}" ]; then
  if mkdir -p /opt/fastattn-deps 2>/dev/null && [ -w /opt/fastattn-deps ]; then
    export FASTATTN_DEPS_PREFIX=/opt/fastattn-deps
  else export FASTATTN_DEPS_PREFIX=$root/build/deps; fi
fi
bash tools/scripts/setup.sh --main
if [ -n "${FASTATTN_OFFLINE_DEBS:-}" ] && [ -f "$FASTATTN_DEPS_PREFIX/env.sh" ]; then
  # shellcheck disable=SC1091  # written by setup.sh
  . "$FASTATTN_DEPS_PREFIX/env.sh"
fi

step "configure and build in $build"
cmake_args=(-S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DFASTATTN_BUILD_CLI=ON
            -DFASTATTN_BUILD_BENCH=ON -DFASTATTN_BUILD_TESTS=OFF)
command -v ninja >/dev/null 2>&1 && [ ! -f "$build/Makefile" ] && cmake_args+=(-G Ninja)
targets=(fastattn_cli bench_cpu)
if [ "$with_cuda" = 1 ]; then
  if [ -z "${CUDACXX:-}" ] && ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
    export CUDACXX=/usr/local/cuda/bin/nvcc
  fi
  cmake_args+=(-DFASTATTN_CUDA=ON "-DFASTATTN_CUDA_ARCHS=$archs" "-DFASTATTN_CUDA_HEAD_DIMS=$head_dims")
  targets+=(fastattn_cuda_bench)
else
  # No GPU: nothing of CUDA would be benchmarked, and CI's quick run must stay short.
  cmake_args+=(-DFASTATTN_CUDA=OFF)
fi
cmake "${cmake_args[@]}" > "$out/logs/configure.log" 2>&1 || { tail -30 "$out/logs/configure.log"; exit 1; }
[ "${FASTATTN_MAIN_CONFIGURE_ONLY:-0}" = 1 ] && { echo "configure only (FASTATTN_MAIN_CONFIGURE_ONLY=1)"; exit 0; }
# bench_cpu is skipped by CMake without OpenBLAS; build only the targets that exist.
available=$(cmake --build "$build" --target help 2>/dev/null || true)
build_targets=()
for t in "${targets[@]}"; do
  grep -q "\b$t\b" <<<"$available" && build_targets+=("$t")
done
cmake --build "$build" -j "$jobs" --target "${build_targets[@]}"
cli=$build/tools/cli/fastattn

# ---- info, check ---------------------------------------------------------------------------------
step "fastattn info"
info_args=(--json "$out/info.json")
[ "$quick" = 1 ] && info_args+=(--no-peaks)
"$cli" info "${info_args[@]}" | tee "$out/info.txt" || failures+=("info")

backends=(cpu reference)
[ "$with_cuda" = 1 ] && backends+=(cuda)
for b in "${backends[@]}"; do
  step "fastattn check --quick --backend $b"
  if ! "$cli" check --quick --backend "$b" --json "$out/check-$b.json" > "$out/logs/check-$b.log" 2>&1; then
    failures+=("check-$b")
  fi
  tail -3 "$out/logs/check-$b.log"
done

# ---- benchmarks ------------------------------------------------------------------------------------
render_args=("$out" --machine "$machine")
[ "$quick" = 1 ] && render_args+=(--quick)

step "CPU benchmark: bench_cpu (fastattn beside standard attention on OpenBLAS, same run)"
if [ -x "$build/bench/bench_cpu" ]; then
  cpu_args=(--json "$out/cpu.json")
  # Quick: small shapes, short timings, no memory child processes (a smoke run, not a record).
  [ "$quick" = 1 ] && cpu_args+=(--quick --min-time 0.2 --repeats 2 --no-memory)
  set +e
  "$build/bench/bench_cpu" "${cpu_args[@]}" > "$out/logs/bench_cpu.md" 2> "$out/logs/bench_cpu.err"
  rc=$?
  set -e
  # bench_cpu: 1 = a bar missed (reported below), other = an error (e.g. the baseline disagrees).
  if [ "$rc" -ne 0 ] && [ "$rc" -ne 1 ]; then failures+=("bench_cpu(rc=$rc)"); tail -5 "$out/logs/bench_cpu.err"; fi
  [ -f "$out/cpu.json" ] && render_args+=(--cpu "$out/cpu.json")
else
  echo "no bench_cpu (CMake found no OpenBLAS; see $out/logs/configure.log): CPU benchmark skipped"
fi

if [ "$with_cuda" = 1 ]; then
  step "GPU benchmark: cuda_bench short beside PyTorch SDPA (same job)"
  bench_args=(--passes fwd,fwdbwd)
  sdpa_args=(--backends flash,cudnn,efficient)
  [ "$quick" = 1 ] && { bench_args+=(--repeats 5 --max-seconds 2); sdpa_args+=(--repeats 5 --max-seconds 2); }
  set +e
  "$build/bench/cuda/fastattn_cuda_bench" short "${bench_args[@]}" > "$out/fastattn_cuda.jsonl" \
    2> "$out/logs/cuda_bench.err"
  rc=$?
  set -e
  [ "$rc" -ne 0 ] && { failures+=("cuda_bench(rc=$rc)"); tail -5 "$out/logs/cuda_bench.err"; }
  : > "$out/sdpa.jsonl"
  if "$python" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
    "$python" bench/cuda/sdpa_anchor.py short "${sdpa_args[@]}" > "$out/sdpa.jsonl" 2> "$out/logs/sdpa.err" ||
      echo "sdpa_anchor.py failed (see logs/sdpa.err): fastattn is shown without anchors"
  else
    echo "$python has no torch with CUDA: fastattn is shown without the SDPA anchors (set PYTHON)"
  fi
  # compare.py: exit 1 only for a missed bar; it writes <gpu>-cuda-short-<date>.json into $out.
  "$python" bench/cuda/compare.py "$out/fastattn_cuda.jsonl" "$out/sdpa.jsonl" --results-dir "$out" \
    > "$out/logs/compare.md" 2>&1 || true
  cuda_json=$(sed -n 's/^wrote //p' "$out/logs/compare.md" | tail -1)
  if [ -n "$cuda_json" ] && [ -f "$cuda_json" ]; then render_args+=(--cuda "$cuda_json")
  else failures+=("compare"); tail -5 "$out/logs/compare.md"; fi
fi

step "summary"
"$python" bench/render_main.py "${render_args[@]}" | tee "$out/summary.md" || failures+=("summary")
[ "${#failures[@]}" -eq 0 ]
