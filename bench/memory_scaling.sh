#!/usr/bin/env bash
# Peak resident memory of fastattn (forward, then backward) at seqlen 4k, 16k and 64k, each in
# its own process, and of the standard-attention baseline at 4k and 16k for contrast. Passes
# when memory grows linearly with the sequence length (bar `memory_linear`).
#
#   bench/memory_scaling.sh [bench_cpu options...]     e.g. --threads 2, --no-baseline
# Writes bench/results/<machine>-<date>-memory.json; BUILD_DIR as for run_cpu.sh.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build/release}
JOBS=${JOBS:-2}
GENERATOR=()
command -v ninja >/dev/null 2>&1 && GENERATOR=(-G Ninja)

if [[ ! -f "$BUILD_DIR/CMakeCache.txt" ]]; then
  cmake -S "$ROOT" -B "$BUILD_DIR" "${GENERATOR[@]}" -DCMAKE_BUILD_TYPE=Release \
    -DFASTATTN_BUILD_BENCH=ON
fi
cmake --build "$BUILD_DIR" --target bench_cpu -j "$JOBS"
exec "$BUILD_DIR/bench/bench_cpu" --memory-only "$@"
