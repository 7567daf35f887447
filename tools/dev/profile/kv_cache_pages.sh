#!/usr/bin/env bash
# kv_cache_pages.sh — CPU KV-cache decode by page size, several rounds on a shared machine:
# each round is one `fastattn bench --page-size -1,0,1,...` (forward() anchor, contiguous cache,
# paged caches; its own read-bandwidth peaks before and after), then per row the median and the
# range over the rounds of the time, K+V GB/s and % of that round's read bandwidth.
#
#   tools/dev/profile/kv_cache_pages.sh BUILD_DIR [ROUNDS] [extra fastattn bench args...]
# e.g. tools/dev/profile/kv_cache_pages.sh build/ci 5 --seqlen-q 1 --threads 2
set -euo pipefail
build=${1:?build dir}
rounds=${2:-5}
shift $(( $# >= 2 ? 2 : 1 ))
out=${build}/kv-cache-pages
mkdir -p "$out"
for r in $(seq 1 "$rounds"); do
  [[ -n "${SUMMARY_ONLY:-}" ]] && break
  "$build/tools/cli/fastattn" bench --page-size -1,0,1,16,64,256 --batch 1 --heads 32 --kv-heads 8 \
    --head-dim 128 --seqlen-k 32768 --dtype bf16 --causal --min-time 1 "$@" --json "$out/round$r.json" >/dev/null
done
python3 - "$out" "$rounds" <<'PY'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
rows, contiguous = {}, {}
for r in range(1, rounds + 1):
    data = json.load(open(f"{out}/round{r}.json"))
    for res in data["results"]:
        shape = res["shape"]
        key = shape["label"] + " q" + str(shape["seqlen_q"])
        rows.setdefault(key, []).append((r, res["median_s"] * 1e3, res["kv_read_gbs"],
                                         res.get("kv_read_percent_of_mem_read", float("nan"))))
        if shape["kv_page_size"] == 0:
            contiguous[(r, shape["seqlen_q"])] = res["median_s"]
print(f"{'row':44} {'ms median (range)':22} {'GB/s':>6} {'% read median (range)':22} {'contiguous / row, median (range)'}")
for key, vals in rows.items():
    q = int(key.rsplit(" q", 1)[1])
    ms = [v[1] for v in vals]; gbs = [v[2] for v in vals]; pct = [v[3] for v in vals]
    ratio = [contiguous[(v[0], q)] * 1e3 / v[1] for v in vals if (v[0], q) in contiguous]
    rtext = f"{statistics.median(ratio):.2f} ({min(ratio):.2f}-{max(ratio):.2f})" if ratio else "-"
    print(f"{key:44} {statistics.median(ms):6.2f} ({min(ms):.2f}-{max(ms):.2f})  {statistics.median(gbs):6.1f} "
          f"{statistics.median(pct):5.1f} ({min(pct):.1f}-{max(pct):.1f})      {rtext}")
PY
