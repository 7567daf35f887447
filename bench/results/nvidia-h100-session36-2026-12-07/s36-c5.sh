#!/usr/bin/env bash
# Session 36, call 5 (~60 s, any card): d = 256 rows (cuda_bench d256: b8 h8 s2k causal and four
# non-causal rows; sweep90's d256 causal rows s4k-16k) with the default sections and with the wave
# sections forced, two rounds, beside SDPA's cuDNN. Binaries: build/sm90 of build/carry-s35e
# (ab3bde3, d 64 / 128 / 256). carry ["build/calls", "build/carry-s35e"].
set -u
out=${OUT:-/tmp/fastattn_out}; mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$out/gpu.txt"
bash tools/dev/carry-sm90-builds.sh unpack build/carry-s35e > "$out/unpack.log" 2>&1 || { cat "$out/unpack.log"; exit 3; }
B=build/sm90/bench/cuda/fastattn_cuda_bench
for r in 1 2; do
  for v in def wave; do
    env_v=(); [ $v = wave ] && env_v=(FASTATTN_CUDA_SM90_SECTIONS=wave)
    env "${env_v[@]}" $B d256 --repeats 20 --max-seconds 2 > "$out/d256-$v-r$r.jsonl" 2> "$out/d256-$v-r$r.err"
    env "${env_v[@]}" $B sweep90 --repeats 10 --max-seconds 2 | grep '"d":256' > "$out/s90-$v-r$r.jsonl" 2>> "$out/d256-$v-r$r.err"
  done
done
py=/opt/torch/.venv/bin/python3; [ -x "$py" ] || py=python3
"$py" bench/cuda/sdpa_anchor.py d256 sweep90 --backends cudnn --repeats 20 --max-seconds 2 --no-gemm > "$out/sdpa-d256.jsonl" 2> "$out/sdpa.err"
python3 - "$out" <<'PY'
import json, sys, glob, os
out = sys.argv[1]
def key(r): return (r['b'], r['h'], r['sq'], r['d'], r['causal'])
cud = {}
for l in open(os.path.join(out, 'sdpa-d256.jsonl')):
    r = json.loads(l)
    if r.get('backend') == 'cudnn' and 'tflops' in r: cud[key(r)] = r['tflops']
for f in sorted(glob.glob(os.path.join(out, 'd256-*.jsonl')) + glob.glob(os.path.join(out, 's90-*.jsonl'))):
    for l in open(f):
        r = json.loads(l)
        if 'tflops' not in r: continue
        c = cud.get(key(r))
        print(os.path.basename(f), 'b%d h%d s%d d%d %s' % (r['b'], r['h'], r['sq'], r['d'], 'causal' if r['causal'] else ''),
              '%.0f' % r['tflops'], 'cudnn %.0f %.3f' % (c, r['tflops'] / c) if c else '')
PY
