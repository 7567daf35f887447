#!/usr/bin/env bash
# Session 25, call 4: the deterministic backward's cost against the (batch, KV head) pairs of a
# call (cuda_bench determinism --det-shapes pairs: the same work over 32..256 pairs at d 64, 16..128
# at d 128, s 4096, no mask), against the plan's default and against non-deterministic bulk dQ.
set -u
root=$OUT
OUT=$root/c4 STAGES="build" HEAD_DIMS="64;128" TARGETS="fastattn_cuda_bench" BUDGET_S=200 \
  bash tools/dev/gpu-sm90-bwd.sh > "$root/build.txt" 2>&1
tail -2 "$root/build.txt"
bench=build/sm90/bench/cuda/fastattn_cuda_bench
for r in 1 2; do
  FASTATTN_CUDA_BWD_SM90=1 timeout 60 "$bench" determinism --det-shapes pairs --runs 3 --warmup 3 --repeats 20 \
    --max-seconds 1 > "$root/pairs-default-r$r.jsonl" 2>> "$root/err.txt"
  FASTATTN_CUDA_BWD_SM90=1 FASTATTN_CUDA_SM90_BWD_DQ=bulk timeout 60 "$bench" determinism --det-shapes pairs --runs 3 \
    --warmup 3 --repeats 20 --max-seconds 1 > "$root/pairs-bulkref-r$r.jsonl" 2>> "$root/err.txt"
done
tail -3 "$root/err.txt"
python3 - "$root" <<'PY'
import json, glob, sys, os
for f in sorted(glob.glob(sys.argv[1] + "/pairs-*.jsonl")):
    for line in open(f):
        r = json.loads(line)
        if "slowdown" not in r: continue
        print(os.path.basename(f), f"b{r['b']} h{r['h']} d{r['d']} pairs={r['b']*r['hkv']}",
              f"det {r['deterministic_ms']:.3f} default {r['default_ms']:.3f} speed {1/r['slowdown']:.3f}x eq={r['equal']}")
PY
rm -rf "$root/c4"
