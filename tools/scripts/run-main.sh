#!/usr/bin/env bash
# run-main.sh — the main job: set up, build, then self-check and benchmark on the best device
# present (the CPU when there is no GPU). Results land in bench/results/ and docs/performance.md.
set -euo pipefail
cd "$(dirname "$0")/../.."
bash tools/scripts/setup.sh
cmake --preset release >/dev/null
cmake --build --preset release
./build/release/tools/cli/fastattn info
./build/release/tools/cli/fastattn check --quick
bash bench/run_cpu.sh build/release
