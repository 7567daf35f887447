#!/usr/bin/env bash
# run_cpu.sh — build bench_cpu and run the CPU benchmark (bars, baseline, peaks, memory).
#
#   bench/run_cpu.sh [bench_cpu options...]             e.g. --threads 2, --no-memory, --quick
#   bench/run_cpu.sh --record [bench_cpu options...]    maintainers: keep the JSON in
#                                                       bench/results/ and regenerate the docs
#   BUILD_DIR=build/release JOBS=2 bench/run_cpu.sh
#
# Without --record the JSON goes to build/bench-results/ (untracked), so a run never changes
# tracked files; with it, into bench/results/ and then tools/scripts/update-docs.sh renders
# docs/performance.md and the README's table from it (quick runs are not rendered).
# Exit status: bench_cpu's (1 when a bar fails).
set -euo pipefail

record=0
if [[ "${1:-}" == --record ]]; then
  record=1
  shift
fi
source "$(dirname "${BASH_SOURCE[0]}")/build_bench_cpu.sh"  # ROOT, BUILD_DIR; builds bench_cpu

args=("$@")
if [[ "$record" == 0 && " ${args[*]} " != *" --json "* ]]; then
  mkdir -p "$ROOT/build/bench-results"
  machine_date=$(date -u +%Y-%m-%d-%H%M%S)
  args+=(--json "$ROOT/build/bench-results/bench_cpu-$machine_date.json")
fi
log=$(mktemp)
trap 'rm -f "$log"' EXIT
set +e
"$BUILD_DIR/bench/bench_cpu" "${args[@]}" | tee "$log"
status=${PIPESTATUS[0]}
set -e

json=$(sed -n 's/^wrote //p' "$log" | tail -n 1)
if [[ -z "$json" || ! -f "$json" ]]; then
  echo "run_cpu.sh: bench_cpu wrote no JSON (exit status $status)" >&2
  exit "${status:-1}"
fi
if [[ "$record" == 1 ]]; then
  bash "$ROOT/tools/scripts/update-docs.sh" "$json"
fi
exit "$status"
