#!/usr/bin/env bash
# ab_cli.sh — one device call: the GPU suite, then two builds of the CLI timed alternately on
# the same shapes (A, B, A, B) with `fastattn bench --device cuda`, to compare a kernel change.
#   bash tools/profile/ab_cli.sh build/carry-lead      # expects fastattn (A) and fastattn_b (B)
# SHAPES=mixed (default): forward and backward at s 2k-8k plus a decode shape;
# SHAPES=forward: the forward shapes of the paper sweep where fastattn trails SDPA flash
# (seqlen 2k-4k, causal).
set -uo pipefail
bin=${1:-build/carry-lead}
out=${OUT:-/tmp/fastattn_out}
shapes=${SHAPES:-mixed}
mkdir -p "$out"
timeout 150 "$bin/fastattn_gpu_tests" > "$out/gpu_tests.log" 2>&1
echo "gpu tests rc=$?"; grep -E "^\[  (PASSED|FAILED) |^\[  FAILED" "$out/gpu_tests.log" | head
common=(--device cuda --dtype bf16 --warmup 3 --min-time 0.5 --no-peaks --markdown)
mixed_shapes() {
  local v=$1
  local common=("${common[@]}" --repeats 20)
  timeout 100 "$bin/$v" bench "${common[@]}" --batch 2 --heads 16 --seqlen 8192 --head-dim 128 --pass fwd bwd
  timeout 100 "$bin/$v" bench "${common[@]}" --batch 2 --heads 16 --seqlen 8192 --head-dim 128 --pass fwd --causal
  timeout 100 "$bin/$v" bench "${common[@]}" --batch 8 --heads 16 --seqlen 2048 --head-dim 128 --pass fwd bwd
  timeout 100 "$bin/$v" bench "${common[@]}" --batch 2 --heads 32 --seqlen 8192 --head-dim 64 --pass fwd bwd
  timeout 100 "$bin/$v" bench "${common[@]}" --batch 8 --heads 16 --seqlen 2048 --head-dim 128 --pass fwd --causal
  timeout 100 "$bin/$v" bench "${common[@]}" --batch 1 --heads 32 --seqlen 16 --seqlen-k 65536 --head-dim 128 \
    --pass fwd
}
forward_shapes() {
  local v=$1 f=(--pass fwd --repeats 30)
  timeout 60 "$bin/$v" bench "${common[@]}" "${f[@]}" --batch 8 --heads 16 --seqlen 2048 --head-dim 128 --causal
  timeout 60 "$bin/$v" bench "${common[@]}" "${f[@]}" --batch 8 --heads 16 --seqlen 2048 --head-dim 128
  timeout 60 "$bin/$v" bench "${common[@]}" "${f[@]}" --batch 4 --heads 16 --seqlen 4096 --head-dim 128 --causal
  timeout 60 "$bin/$v" bench "${common[@]}" "${f[@]}" --batch 8 --heads 32 --seqlen 2048 --head-dim 64 --causal
  timeout 60 "$bin/$v" bench "${common[@]}" "${f[@]}" --batch 2 --heads 16 --seqlen 8192 --head-dim 128
}
for round in 1 2; do
  for v in fastattn fastattn_b; do
    echo "== round $round: $v"
    "${shapes}_shapes" "$v"
  done
done 2>&1 | grep -E "==|\| *(fwd|bwd)" | tee "$out/ab.txt"
