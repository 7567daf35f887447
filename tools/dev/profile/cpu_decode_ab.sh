#!/usr/bin/env bash
# cpu_decode_ab.sh — CPU one-token decode (issue 17's bar shape) of two `fastattn` binaries, in
# alternating rounds on a shared machine: each round runs one `fastattn bench` per binary
# (forward() and the contiguous KV-cache call; the bench measures its own read bandwidth before
# and after its rows), then per binary and row the median and range over the rounds of the time,
# K+V GB/s and % of that invocation's read bandwidth. The load average is printed per round.
#
#   tools/dev/profile/cpu_decode_ab.sh OLD_BIN NEW_BIN [ROUNDS] [extra fastattn bench args...]
# e.g. tools/dev/profile/cpu_decode_ab.sh build/ab/fastattn-base build/cpu/tools/cli/fastattn 5 --threads 2
# Environment: OUT (default /tmp/cpu-decode-ab) for the JSON files; SEQLEN_Q (default 1).
set -euo pipefail
old=${1:?old fastattn binary}
new=${2:?new fastattn binary}
rounds=${3:-5}
shift $(( $# >= 3 ? 3 : 2 ))
out=${OUT:-/tmp/cpu-decode-ab}
mkdir -p "$out"
for r in $(seq 1 "$rounds"); do
  for side in old new; do
    bin=$old; [[ $side == new ]] && bin=$new
    echo "round $r $side: load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
    "$bin" bench --page-size -1,0 --batch 1 --heads 32 --kv-heads 8 --head-dim 128 --seqlen-q "${SEQLEN_Q:-1}" \
      --seqlen-k 32768 --dtype bf16 --causal --min-time 1 "$@" --json "$out/$side-$r.json" >/dev/null 2>&1
  done
done
python3 - "$out" "$rounds" <<'PY'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
rows = {}
for side in ("old", "new"):
    for r in range(1, rounds + 1):
        data = json.load(open(f"{out}/{side}-{r}.json"))
        for res in data["results"]:
            key = (side, res["shape"]["label"], res["threads"])
            rows.setdefault(key, []).append((res["median_s"] * 1e3, res["kv_read_gbs"],
                                             res.get("kv_read_percent_of_mem_read", float("nan")),
                                             res["kernel"]["kernel"]))
def mr(v, f):
    return f"{f.format(statistics.median(v))} ({f.format(min(v))}-{f.format(max(v))})"
print(f"{'binary':6} {'row':40} {'thr':>3} {'ms median (range)':22} {'K+V GB/s':22} {'% read':22} kernel")
for (side, label, thr), vals in rows.items():
    print(f"{side:6} {label:40} {thr:3} {mr([v[0] for v in vals], '{:.2f}'):22} "
          f"{mr([v[1] for v in vals], '{:.1f}'):22} {mr([v[2] for v in vals], '{:.1f}'):22} {vals[0][3]}")
PY
