#!/usr/bin/env bash
# run_device.sh — one device call: CUDA correctness (GoogleTest, label gpu), fastattn's CUDA
# forward timed beside PyTorch SDPA's backends in the same job, then the CPU suite on the
# host's AVX-512 CPU. Binaries are built on the development machine and carried in $1.
#   bash bench/cuda/run_device.sh build/carry
set -uo pipefail
bin=${1:-build/carry}
out=${OUT:-/tmp/fastattn_out}
mkdir -p "$out"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > "$out/env.txt" 2>&1
echo "== gpu tests"
timeout 70 "$bin/fastattn_gpu_tests" --gtest_brief=1 > "$out/gpu_tests.log" 2>&1
echo "gpu tests rc=$?"; grep -E "PASSED|FAILED|SKIPPED" "$out/gpu_tests.log" | head -20
echo "== fastattn cuda forward"
timeout 30 "$bin/fastattn_cuda_bench" "${SWEEP:-short}" > "$out/cuda_fastattn.jsonl" 2> "$out/cuda_fastattn.err"
echo "rc=$?"
echo "== sdpa anchors"
timeout 80 python3 bench/cuda/sdpa_anchor.py "${SWEEP:-short}" > "$out/cuda_sdpa.jsonl" 2> "$out/cuda_sdpa.err"
echo "rc=$?"
python3 bench/cuda/compare.py "$out/cuda_fastattn.jsonl" "$out/cuda_sdpa.jsonl" | tee "$out/compare.md"
echo "== cpu tests on this host"
timeout 40 "$bin/fastattn_tests" --gtest_brief=1 > "$out/cpu_tests.log" 2>&1
echo "cpu tests rc=$?"; tail -3 "$out/cpu_tests.log"
