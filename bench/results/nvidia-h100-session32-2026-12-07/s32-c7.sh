#!/usr/bin/env bash
# Session 32: on an H200 the bars and the wave / persistent A/B (s32-c6.sh). On another card the
# two leads of call 3 looked at more closely (~120 s): ncu (speed of light, memory workload) of
# b32 h16 s512 d128 causal with the default sections and with FASTATTN_CUDA_SM90_SECTIONS=wave;
# then `fastattn bench` (the carried CLI, CUDA events) on more causal shapes, default against
# wave (d = 128) and against FASTATTN_CUDA_SM90_SCHEDULER=persistent (d = 64), interleaved, two
# rounds. carry ["build/calls", "build/carry-wave"].
set -u
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
if grep -q H200 <<< "$gpu"; then exec bash build/calls/s32-c6.sh; fi
root=$OUT
echo "$gpu"
bin=/tmp/fastattn-bins; mkdir -p $bin; tar -xJf build/carry-wave/bins.tar.xz -C $bin
cli=$bin/fastattn
for v in default wave; do
  env $([ $v = wave ] && echo FASTATTN_CUDA_SM90_SECTIONS=wave) timeout 90 ncu -k regex:flash_forward_sm90 -c 1 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section LaunchStats \
    $cli bench --device cuda --dtype bf16 --pass fwd --causal --batch 32 --seqlen 512 --heads 16 --head-dim 128 \
    --warmup 0 --repeats 1 --min-time 0 --no-peaks > $root/ncu-$v.txt 2>&1
  echo "ncu $v rc=$?"
done
grep -E "Duration|DRAM Through|Memory Through|L2 Hit|L1/TEX Hit|Mem Busy|Max Bandwidth|Grid Size" $root/ncu-*.txt | sed 's/  */ /g'
bench() {  # name env... -- args
  local name=$1; shift
  env "$@" timeout 60 $cli bench --device cuda --dtype bf16 --pass fwd --causal --no-peaks \
    --warmup 5 --repeats 30 --min-time 0.3 $ARGS --json $root/$name.json > $root/$name.txt 2>&1
  echo "$name rc=$?"
}
for r in 1 2; do
  ARGS="--batch 8,32,64 --seqlen 512,1024 --heads 16,32 --head-dim 128"
  bench d128-default-r$r FASTATTN_CUDA_SM90_SECTIONS=
  bench d128-wave-r$r FASTATTN_CUDA_SM90_SECTIONS=wave
  ARGS="--batch 2,4,8 --seqlen 3072,4096,6144 --heads 32 --head-dim 64"
  bench d64-default-r$r FASTATTN_CUDA_SM90_SCHEDULER=
  bench d64-pers-r$r FASTATTN_CUDA_SM90_SCHEDULER=persistent
done
cd $root && tar czf bench.tgz *.json *.txt && ls
