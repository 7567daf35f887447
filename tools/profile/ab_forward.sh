#!/usr/bin/env bash
# ab_forward.sh — one device call: the GPU suite, then two builds of the CLI (fastattn = A,
# fastattn_b = B) timed alternately (A, B, A, B) on the forward shapes of the paper sweep where
# fastattn trails SDPA flash (seqlen 2k-4k, causal), to compare a forward-kernel change.
#   bash tools/profile/ab_forward.sh build/carry-lead
set -uo pipefail
bin=${1:-build/carry-lead}
out=${OUT:-/tmp/fastattn_out}
mkdir -p "$out"
timeout 150 "$bin/fastattn_gpu_tests" > "$out/gpu_tests.log" 2>&1
echo "gpu tests rc=$?"; grep -E "^\[  (PASSED|FAILED) |^\[  FAILED" "$out/gpu_tests.log" | head
common=(--device cuda --dtype bf16 --warmup 3 --repeats 30 --min-time 0.5 --no-peaks --markdown --pass fwd)
for round in 1 2; do
  for v in fastattn fastattn_b; do
    echo "== round $round: $v"
    timeout 60 "$bin/$v" bench "${common[@]}" --batch 8 --heads 16 --seqlen 2048 --head-dim 128 --causal
    timeout 60 "$bin/$v" bench "${common[@]}" --batch 8 --heads 16 --seqlen 2048 --head-dim 128
    timeout 60 "$bin/$v" bench "${common[@]}" --batch 4 --heads 16 --seqlen 4096 --head-dim 128 --causal
    timeout 60 "$bin/$v" bench "${common[@]}" --batch 8 --heads 32 --seqlen 2048 --head-dim 64 --causal
    timeout 60 "$bin/$v" bench "${common[@]}" --batch 2 --heads 16 --seqlen 8192 --head-dim 128
  done
done 2>&1 | grep -E "==|\| *fwd" | tee "$out/ab.txt"
