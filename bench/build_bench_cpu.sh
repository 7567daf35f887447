# build_bench_cpu.sh — sourced by the CPU bench scripts: configure (once) and build bench_cpu.
# Sets ROOT and BUILD_DIR (default build/release; JOBS default 2). Not meant to run on its own.
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
