#!/usr/bin/env bash
# Session 37, call 1. On an H200: the bars call (s36-bars.sh, ../nvidia-h100-session36-2026-12-07).
# On another card (an H100 so far, every time), what that card can still answer, over the same
# binaries (build/carry-wave: the tree's code, d 64 / 128 / 256):
#   1. cuda_bench d256 (b8 h8 s2k causal, 13 key tiles a query tile, and four rows without a
#      mask) with the default sections and with the wave sections forced, two rounds, beside
#      SDPA's cuDNN: should causal d = 256 below 16 key tiles take the wave sections too?
#   2. the forward sweep (d 64 / 128 / 256) three rounds with the defaults, without the ordered
#      issue (FASTATTN_CUDA_SM90_WG_ORDER=0) and with the dynamic scheduler, beside cuDNN: the
#      thirty-sixth session's two leads with more rounds.
# carry ["build/calls", "build/carry-wave", "build/probe"]; about 250 s on an H100.
set -u
out=${OUT:-/tmp/fastattn_out}; mkdir -p "$out"
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "$gpu" | tee "$out/gpu.txt"
[ -x build/probe/dram ] && build/probe/dram | tee -a "$out/gpu.txt"
if grep -q H200 <<< "$gpu"; then OUT=$out bash build/calls/s36-bars.sh; exit; fi
bin=/tmp/fastattn-bins; mkdir -p $bin "$out/d256"
tar -xJf build/carry-wave/bins.tar.xz -C $bin || exit 3
py=/opt/torch/.venv/bin/python3; [ -x "$py" ] || py=python3
for r in 1 2; do
  for v in def wave; do
    env_v=(); [ $v = wave ] && env_v=(FASTATTN_CUDA_SM90_SECTIONS=wave)
    env "${env_v[@]}" $bin/fastattn_cuda_bench d256 --repeats 20 --max-seconds 2 > "$out/d256/$v-r$r.jsonl" 2>> "$out/d256/bench.err"
  done
done
"$py" bench/cuda/sdpa_anchor.py d256 --backends cudnn --repeats 20 --max-seconds 2 --no-gemm > "$out/d256/sdpa.jsonl" 2>> "$out/d256/bench.err"
python3 - "$out/d256" <<'PY' | tee "$out/d256/ratios.txt"
import json, sys, glob, os
d = sys.argv[1]
key = lambda r: (r['b'], r['h'], r['sq'], r['d'], r['causal'])
cud = {key(r): r['tflops'] for r in map(json.loads, open(os.path.join(d, 'sdpa.jsonl'))) if r.get('backend') == 'cudnn' and 'tflops' in r}
for f in sorted(glob.glob(os.path.join(d, '*-r*.jsonl'))):
    for r in map(json.loads, open(f)):
        if 'tflops' not in r: continue
        c = cud.get(key(r))
        print(os.path.basename(f), 'b%d h%d s%d d%d %s' % (r['b'], r['h'], r['sq'], r['d'], 'causal' if r['causal'] else ''),
              '%.0f' % r['tflops'], 'cudnn %.0f %.3f' % (c, r['tflops'] / c) if c else '')
PY
tar -czf "$out/d256.tar.gz" -C "$out" d256 && rm -rf "$out/d256"
OUT=$out JOBS='fwd:200' ROUNDS=3 FWD_HEAD_DIMS="64;128;256" \
  VARIANTS="base: wgo0:FASTATTN_CUDA_SM90_WG_ORDER=0 dyn:FASTATTN_CUDA_SM90_SCHEDULER=dynamic" \
  bash tools/dev/gpu-carried.sh build/carry-wave
