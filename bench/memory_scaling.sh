#!/usr/bin/env bash
# Peak resident memory of fastattn (forward, then backward) at seqlen 4k, 16k and 64k, each in
# its own process, and of the standard-attention baseline at 4k and 16k for contrast. Passes
# when memory grows linearly with the sequence length (bar `memory_linear`).
#
#   bench/memory_scaling.sh [bench_cpu options...]     e.g. --threads 2, --no-baseline
# Writes bench/results/<machine>-<date>-memory.json; BUILD_DIR as for run_cpu.sh.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/build_bench_cpu.sh"  # ROOT, BUILD_DIR; builds bench_cpu
exec "$BUILD_DIR/bench/bench_cpu" --memory-only "$@"
