#!/usr/bin/env bash
# cpu_bf16_dot.sh — one device call on the GPU host's CPU (AVX-512 BF16): the CPU test suite,
# then the bf16 forward with the default kernel choice, with the vdpbf16ps pair kernel forced
# (FASTATTN_CPU_BF16_DOT=native) and with the f32 kernel (=off), each beside PyTorch's CPU flash
# attention in the same run (bench/server_cpu.sh), at 16 and 2 threads. Logs under $OUT.
#   bash tools/dev/profile/cpu_bf16_dot.sh build/carry
set -uo pipefail
bin=${1:-build/carry}
out=${OUT:-/tmp/fastattn_out}
mkdir -p "$out"
timeout 150 "$bin/fastattn_tests" --gtest_brief=1 > "$out/cpu_tests.log" 2>&1
echo "cpu tests rc=$?"; tail -3 "$out/cpu_tests.log"; grep -E "FAILED" "$out/cpu_tests.log" | head
"$bin/fastattn" info --threads 16 2>&1 | grep -E "selected isa|fp32 FMA|bf16 dot|memory read"
for variant in default native off; do
  env_args=()
  [[ $variant != default ]] && env_args=(FASTATTN_CPU_BF16_DOT=$variant)
  dtypes=bf16
  [[ $variant == default ]] && dtypes=f32,bf16
  env "${env_args[@]}" THREADS=16 OUT="$out/$variant" timeout 150 bash bench/server_cpu.sh "$bin/fastattn" \
    --dtypes "$dtypes" --forward-only > "$out/$variant.log" 2>&1
  echo "== $variant (16 threads): rc=$?"; grep -E "^\| b" "$out/$variant.log"
  env "${env_args[@]}" timeout 60 "$bin/fastattn" bench --dtype bf16 --batch 1 --heads 8 --seqlen 2048 \
    --head-dim 128 --pass fwd --threads 2 --warmup 2 --repeats 10 2>&1 | grep -E "cpu.forward|peaks on"
done
