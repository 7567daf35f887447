#!/usr/bin/env bash
# gpu-host-decode.sh — issue 17's CPU decode bar on the GPU machine's 16-core Xeon host, in
# about 90 s: bf16, b1, 32 query / 8 KV heads, d128, one query token over 32768 cached keys,
# causal (bottom-right), 16 threads.
#   bar    bench/server_cpu.py --suite issue19 --rows 0: ROUNDS rounds of `fastattn bench`
#          (which measures `fastattn info`'s read bandwidth before and after its row) then
#          PyTorch CPU SDPA (enable_gqa) in the same process; ratio and % of read as the bar
#          reads them (the best read bandwidth over the run).
#   splits `fastattn bench --page-size -1,0` (forward() and the contiguous KV-cache call, each
#          with its own read peaks) with the automatic split count, then with
#          FASTATTN_CPU_DECODE_SPLITS = each of SPLITS, in SPLIT_ROUNDS alternating rounds.
#   ab     only with OLD_BIN set (a CLI of the previous tree): the same row from OLD_BIN and
#          FASTATTN_BIN in ROUNDS alternating rounds.
#   past_llc  the row at PAST_LLC_KEYS keys (default 131072: 512 MiB of K+V, past the L3 of a
#          one-socket host, where 32768 keys' 128 MiB may fit one), `--page-size -1,0`, ROUNDS
#          runs (~10 s each: give BUDGET_S room beyond the default 90).
# Before the stages: the host's caches (lscpu) into caches.txt, since a row whose K+V
# fit the last-level cache reads from it, not from memory (`fastattn bench` marks it with *).
# Every step runs under `timeout`; the whole job stops starting steps after BUDGET_S.
#
# Device call, after the merge (the CLI built on the device from /work/main):
#   bash tools/dev/gpu-host-decode.sh
# Environment: FASTATTN_BIN (default build/sm90/tools/cli/fastattn), STAGES (default
# "bar splits"), ROUNDS (3), SPLITS ("32"), SPLIT_ROUNDS (2), MIN_TIME (0.3), BUDGET_S (90),
# OLD_BIN. Expected time with the defaults: ~60-80 s (info ~5 s, bar ~35 s, splits ~25 s).
# $OUT gets: summary.txt, info.txt, caches.txt, decode-bar/issue19.json + bar.log, splits-*.json,
# ab-*.json, past_llc-*.json.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root" || exit 2
out=${OUT:-/tmp/fastattn_out}
mkdir -p "$out"
exec > >(tee -a "$out/summary.txt") 2>&1
bin=${FASTATTN_BIN:-build/sm90/tools/cli/fastattn}
python=/opt/torch/.venv/bin/python3
[ -x "$python" ] || python=python3
stages=${STAGES:-"bar splits"}
rounds=${ROUNDS:-3}
min_time=${MIN_TIME:-0.3}
budget=${BUDGET_S:-90}
t0=$SECONDS
status=()
RUN_MIN_S=${RUN_MIN_S:-8}
RUN_RESERVE_S=${RUN_RESERVE_S:-2}
# shellcheck source=tools/dev/lib.sh
. "$root/tools/dev/lib.sh"
export OMP_NUM_THREADS=16

# decode_shape KEYS: the bar row's arguments over KEYS cached keys, into the array `shape`.
decode_shape() {
  shape=(--batch 1 --heads 32 --kv-heads 8 --head-dim 128 --seqlen-q 1 --seqlen-k "$1" --dtype bf16 --causal
         --threads 16 --min-time "$min_time")
}
decode_shape 32768
if [ ! -x "$bin" ]; then echo "no CLI at $bin (FASTATTN_BIN)"; exit 2; fi
note "host: $(getconf _NPROCESSORS_ONLN) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg); CLI $bin"
timeout 20 "$bin" info --threads 16 > "$out/info.txt" 2>&1
grep -iE "memory read|cpu|isa|cache" "$out/info.txt" | head -7
# info.txt has the last-level cache the CLI reads (cpu0's, sysfs); lscpu adds every level's total.
lscpu | grep -E "Model name|cache" > "$out/caches.txt" 2>&1
cat "$out/caches.txt"

if has bar; then
  run bar 45 "$python" bench/server_cpu.py --fastattn "$bin" --threads 16 --suite issue19 --rows 0 \
    --rounds "$rounds" --min-time "$min_time" --out "$out/decode-bar" > "$out/bar.log" 2>&1
  grep -E "^\| decode|memory read" "$out/bar.log"
fi
# bench_row NAME BIN [ENV…]: one `fastattn bench` of the shape (forward() and contiguous cache).
bench_row() {
  local name=$1 b=$2; shift 2
  run "$name" 15 env "$@" "$b" bench --page-size -1,0 "${shape[@]}" --json "$out/$name.json" > "$out/$name.log" 2>&1
  grep -E "^b1|peaks" "$out/$name.log" | sed "s/^/  $name: /"
}
if has splits; then
  for r in $(seq 1 "${SPLIT_ROUNDS:-2}"); do
    bench_row "splits-auto-r$r" "$bin"
    for s in ${SPLITS:-32}; do bench_row "splits-$s-r$r" "$bin" FASTATTN_CPU_DECODE_SPLITS="$s"; done
  done
fi
if has ab && [ -n "${OLD_BIN:-}" ]; then
  for r in $(seq 1 "$rounds"); do
    bench_row "ab-old-r$r" "$OLD_BIN"
    bench_row "ab-new-r$r" "$bin"
  done
fi
if has past_llc; then
  decode_shape "${PAST_LLC_KEYS:-131072}"
  for r in $(seq 1 "$rounds"); do
    run "past_llc-r$r" 40 "$bin" bench --page-size -1,0 "${shape[@]}" --json "$out/past_llc-r$r.json" \
      > "$out/past_llc-r$r.log" 2>&1
    grep -E "^b1|peaks" "$out/past_llc-r$r.log" | sed "s/^/  past_llc-r$r: /"
  done
fi
# Per row and setting: median and range over the rounds of the time and % of read.
python3 - "$out" <<'PY'
import glob, json, os, re, statistics, sys
out = sys.argv[1]
rows = {}
for path in sorted(glob.glob(f"{out}/splits-*.json") + glob.glob(f"{out}/ab-*.json") + glob.glob(f"{out}/past_llc-*.json")):
    name = re.sub(r"-r\d+$", "", os.path.basename(path)[:-5])
    for res in json.load(open(path))["results"]:
        rows.setdefault((name, res["shape"]["label"]), []).append(
            (res["median_s"] * 1e3, res.get("kv_read_percent_of_mem_read") or float("nan"), res["kernel"]["kernel"]))
for (name, label), v in rows.items():
    ms = [x[0] for x in v]; pct = [x[1] for x in v]
    print(f"{name:14} {label:42} {statistics.median(ms):7.3f} ms ({min(ms):.3f}-{max(ms):.3f})  "
          f"{statistics.median(pct):5.1f}% of read ({min(pct):.1f}-{max(pct):.1f})  {v[0][2]}")
PY
note "== done"
printf '%s\n' "${status[@]}"
