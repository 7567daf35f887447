#!/usr/bin/env bash
# Build bench_cpu, run the CPU benchmark (bars, baseline, peaks, memory) and regenerate the
# results in docs/performance.md from the JSON it writes.
#
#   bench/run_cpu.sh [bench_cpu options...]      e.g. --threads 2, --no-memory, --quick
#   BUILD_DIR=build/release JOBS=2 bench/run_cpu.sh
#
# Exit status: bench_cpu's (1 when a bar fails). Quick runs are not written into the docs.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/build_bench_cpu.sh"  # ROOT, BUILD_DIR; builds bench_cpu

log=$(mktemp)
trap 'rm -f "$log"' EXIT
set +e
"$BUILD_DIR/bench/bench_cpu" "$@" | tee "$log"
status=${PIPESTATUS[0]}
set -e

json=$(sed -n 's/^wrote //p' "$log" | tail -n 1)
if [[ -z "$json" || ! -f "$json" ]]; then
  echo "run_cpu.sh: bench_cpu wrote no JSON (exit status $status)" >&2
  exit "${status:-1}"
fi
python3 "$ROOT/bench/render_performance.py" "$json"
exit "$status"
