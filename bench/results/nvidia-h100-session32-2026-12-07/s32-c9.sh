#!/usr/bin/env bash
# Session 32: on an H200 the bars (s32-c6.sh). On another card (~60 s): do the wave sections also
# pay on the short causal rows the rule leaves out (GQA 32/8 d128; a sliding window of 256)? `fastattn bench`
# (carried CLI of build/carry-wave), default then FASTATTN_CUDA_SM90_SECTIONS=wave, two rounds.
# carry ["build/calls", "build/carry-wave", "build/probe"].
set -u
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
if grep -q H200 <<< "$gpu"; then exec bash build/calls/s32-c6.sh; fi
root=$OUT
echo "$gpu"
bin=/tmp/fastattn-bins; mkdir -p $bin; tar -xJf build/carry-wave/bins.tar.xz -C $bin fastattn
bench() {  # name sections args...
  local name=$1 sections=$2; shift 2
  FASTATTN_CUDA_SM90_SECTIONS=$sections timeout 60 $bin/fastattn bench --device cuda --dtype bf16 --pass fwd --causal \
    --no-peaks --warmup 5 --repeats 30 --min-time 0.3 "$@" --json $root/$name.json > $root/$name.txt 2>&1
  echo "$name rc=$?"
}
for r in 1 2; do
  for v in default wave; do
    s=$([ $v = wave ] && echo wave)
    bench gqa-$v-r$r "$s" --batch 8,32 --seqlen 512,1024,2048 --heads 32 --kv-heads 8 --head-dim 128
    bench win-$v-r$r "$s" --batch 8,32 --seqlen 1024,2048 --heads 16 --head-dim 128 --window 256,0
  done
done
cd $root && tar czf bench.tgz *.json *.txt && rm -f *.json *.txt && ls
