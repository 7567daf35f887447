#!/usr/bin/env bash
# Session 37, call 2 (any card, ~200 s): the d = 128 short tile (64 x 64, one consumer
# warpgroup, two CTAs per SM; plan.hpp sm90_d128_short_block_m) from a build with
# FASTATTN_SM90_D128_SHORT_TILE=1 (build/carry-short/bins.tar.xz: fastattn_gpu_tests,
# fastattn_cuda_bench and fastattn of build/sm90-short, head dims 64 / 128):
#   1. its float64 test (CudaSm90.D128ShortTileMatchesFloat64) and the sm90 shape tests on that
#      build (SmallShapes, OddShapes, PlainLoop);
#   2. compute-sanitizer memcheck and racecheck over two short-tile cases (`fastattn check`);
#   3. issue 15's sweep (sweep90, d 64 / 128 rows) three rounds in alternation, beside SDPA's
#      cuDNN: the short tile by its rule (causal d = 128 up to 1024 keys), the 128-row tile forced
#      (FASTATTN_CUDA_SM90_D128_TILE=128: the tree's defaults), and on the 128-row tile the
#      thirty-sixth session's two leads, without the ordered issue (FASTATTN_CUDA_SM90_WG_ORDER=0)
#      and with the dynamic scheduler.
# carry ["build/calls", "build/carry-short"]; about 400 s on an H100 (ROUNDS=2
# SWEEP_VARIANTS="short rows128": about 300 s).
set -u
out=${OUT:-/tmp/fastattn_out}; mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$out/gpu.txt"
bin=/tmp/short-bins; mkdir -p $bin
tar -xJf build/carry-short/bins.tar.xz -C $bin || exit 3
export LD_LIBRARY_PATH=/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
timeout 170 $bin/fastattn_gpu_tests --gtest_brief=1 \
  --gtest_filter='CudaSm90.D128ShortTileMatchesFloat64:CudaSm90.SmallShapesMatchFloat64:CudaSm90.OddShapesMatchFloat64:CudaSm90.PlainLoopMatchesFloat64' \
  > "$out/tests.log" 2>&1; echo "tests rc=$?" | tee -a "$out/tests.log"
grep -E "^\[  (PASSED|FAILED|SKIPPED) |FAILED|tests? ran" "$out/tests.log" | head -20
san=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
for tool in memcheck racecheck; do
  FASTATTN_CUDA_SM90_D128_TILE=64 timeout 60 "$san" --tool $tool --error-exitcode 9 $bin/fastattn check --backend cuda \
    --forward-only --case "b=2 sq=1000 sk=1000 h=4 hkv=4 d=128 dtype=bf16 mask=causal" \
    --case "b=1 sq=300 sk=65 h=2 hkv=1 d=128 dtype=f16 mask=causal align=top_left" > "$out/san-$tool.log" 2>&1
  echo "$tool rc=$? $(grep -c 'ERROR SUMMARY: 0' "$out/san-$tool.log") clean summaries" | tee -a "$out/san.txt"
done
py=/opt/torch/.venv/bin/python3; [ -x "$py" ] || py=python3
"$py" bench/cuda/sdpa_anchor.py sweep90 --backends cudnn --repeats 10 --max-seconds 2 --no-gemm > "$out/sdpa.jsonl" 2> "$out/bench.err"
for r in $(seq 1 ${ROUNDS:-3}); do
  for v in ${SWEEP_VARIANTS:-short rows128 wgo0 dyn}; do
    case $v in
      short) env_v=() ;;
      rows128) env_v=(FASTATTN_CUDA_SM90_D128_TILE=128) ;;
      wgo0) env_v=(FASTATTN_CUDA_SM90_D128_TILE=128 FASTATTN_CUDA_SM90_WG_ORDER=0) ;;
      dyn) env_v=(FASTATTN_CUDA_SM90_D128_TILE=128 FASTATTN_CUDA_SM90_SCHEDULER=dynamic) ;;
    esac
    env "${env_v[@]}" $bin/fastattn_cuda_bench sweep90 --repeats 10 --max-seconds 2 > "$out/$v-r$r.jsonl" 2>> "$out/bench.err"
  done
done
python3 - "$out" <<'PY' | tee "$out/ratios.txt"
import json, sys, glob, os, statistics
out = sys.argv[1]
key = lambda r: (r['b'], r['h'], r.get('hkv', r['h']), r['sq'], r['d'], r['causal'])
cud = {key(r): r['tflops'] for r in map(json.loads, open(os.path.join(out, 'sdpa.jsonl'))) if r.get('backend') == 'cudnn' and 'tflops' in r}
rows = {}
for f in sorted(glob.glob(os.path.join(out, '*-r*.jsonl'))):
    v = os.path.basename(f).split('-r')[0]
    for r in map(json.loads, open(f)):
        if 'tflops' in r: rows.setdefault(key(r), {}).setdefault(v, []).append(r['tflops'])
names = ['short', 'rows128', 'wgo0', 'dyn']
print('row | TFLOP/s per round: ' + ' | '.join(names) + ' | cuDNN | medians over cuDNN: ' + ' '.join(names))
fmt = lambda xs: '/'.join('%.0f' % x for x in xs)
for k in sorted(rows):
    c = cud.get(k)
    ratios = ' '.join('%.3f' % (statistics.median(rows[k][n]) / c) if c and rows[k].get(n) else '-' for n in names)
    print('b%d h%d/%d s%d d%d %s' % (k[0], k[1], k[2], k[3], k[4], 'causal' if k[5] else ''), '|',
          ' | '.join(fmt(rows[k].get(n, [])) for n in names), '|', '%.0f' % c if c else '-', '|', ratios)
PY
cd "$out" && tar -czf raw.tar.gz *.jsonl *.log && rm -f *.jsonl *.log
