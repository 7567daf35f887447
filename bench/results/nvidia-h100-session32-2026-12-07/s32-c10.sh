#!/usr/bin/env bash
# Session 32: on an H200 the bars (s32-c6.sh). On another card (~40 s): the wave sections on
# sliding windows (left W, right 0) of 128-2048 keys, d128 h16, s1k-4k, default then
# FASTATTN_CUDA_SM90_SECTIONS=wave, two rounds (the carried CLI of build/carry-wave).
# carry ["build/calls", "build/carry-wave", "build/probe"].
set -u
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
if grep -q H200 <<< "$gpu"; then exec bash build/calls/s32-c6.sh; fi
root=$OUT
echo "$gpu"
bin=/tmp/fastattn-bins; mkdir -p $bin; tar -xJf build/carry-wave/bins.tar.xz -C $bin fastattn
for r in 1 2; do
  for w in 128 512 1024 2048; do
    for v in default wave; do
      s=$([ $v = wave ] && echo wave)
      FASTATTN_CUDA_SM90_SECTIONS=$s timeout 60 $bin/fastattn bench --device cuda --dtype bf16 --pass fwd --causal \
        --no-peaks --warmup 5 --repeats 30 --min-time 0.2 --batch 4,16 --seqlen 1024,4096 --heads 16 --head-dim 128 \
        --window $w,0 --json $root/w$w-$v-r$r.json > $root/w$w-$v-r$r.txt 2>&1
      echo "w$w $v r$r rc=$?"
    done
  done
done
cd $root && tar czf bench.tgz *.json *.txt && rm -f *.json *.txt && ls
