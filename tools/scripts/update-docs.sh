#!/usr/bin/env bash
# update-docs.sh — the maintainer command: regenerate the results blocks of docs/performance.md
# and the README's performance table from the JSON in bench/results/, both from the same files,
# so they cannot disagree. Users never need it (run-main.sh writes only untracked files).
#
#   bash tools/scripts/update-docs.sh                       # re-render from bench/results/
#   bash tools/scripts/update-docs.sh RESULT.json [...]     # first copy new results in, e.g. a
#                                                           # GPU job's <gpu>-cuda-<date>.json or
#                                                           # bench_cpu's JSON
#   bash tools/scripts/update-docs.sh --check               # exit 1 if the docs are not what the
#                                                           # JSON gives (nothing written)
#
# Which JSON: of the top-level bench/results/*.json, the newest (context timestamp) of each kind
# (bench_cpu, server_cpu, server_cpu_issue19, cuda_bench, cuda_decode, cuda_sm90_forward, cuda_sm90_sweep, cuda_sm90_backward,
# cuda_kv_decode) and machine. Quick runs are refused. Then review and commit bench/results/,
# docs/performance.md and README.md together.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
check=0
for arg in "$@"; do
  case $arg in
    --check) check=1 ;;
    -h | --help) sed -n '2,18p' "$0"; exit 0 ;;
    *)
      [ -f "$arg" ] || { echo "update-docs.sh: no file $arg" >&2; exit 2; }
      if ! python3 -c 'import json, sys; r = json.load(open(sys.argv[1])); sys.exit(1 if r.get("quick") else 0)' "$arg"; then
        echo "update-docs.sh: $arg is a quick run; not a record" >&2; exit 2
      fi
      # Kept under a name that says machine and kind (server_cpu.json alone would be overwritten).
      name=$(python3 -c 'import json, os, sys
r = json.load(open(sys.argv[1])); b = os.path.basename(sys.argv[1]); m = r.get("machine", "unknown")
d = r.get("context", {}).get("timestamp_utc", "")[:10]; k = r.get("kind", "result")
print(b if b.startswith(m) else f"{m}-{k}-{d}.json")' "$arg")
      [ "$(cd "$(dirname "$arg")" && pwd)" = "$root/bench/results" ] || cp -v "$arg" "bench/results/$name" ;;
  esac
done

# The newest result per (kind, machine): one rendered block each.
mapfile -t results < <(python3 - <<'PY'
import glob, json
KINDS = ("bench_cpu", "server_cpu", "server_cpu_issue19", "cuda_bench", "cuda_decode", "cuda_sm90_forward",
         "cuda_kv_decode", "cuda_sm90_sweep", "cuda_sm90_backward")
newest = {}
for path in sorted(glob.glob("bench/results/*.json")):
    try:
        r = json.load(open(path))
    except (OSError, ValueError):
        continue
    if not isinstance(r, dict) or r.get("kind") not in KINDS or r.get("quick"):
        continue
    key = (r["kind"], r.get("machine"))
    stamp = r.get("context", {}).get("timestamp_utc", "")
    if key not in newest or stamp > newest[key][0]:
        newest[key] = (stamp, path)
for _, path in sorted(newest.values(), key=lambda v: v[1]):
    print(path)
PY
)
echo "update-docs.sh: rendering ${results[*]}"

if [ "$check" = 1 ]; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  cp docs/performance.md README.md "$tmp/"
  python3 bench/render_performance.py "${results[@]}" --doc "$tmp/performance.md" --readme "$tmp/README.md" >/dev/null
  if cmp -s "$tmp/performance.md" docs/performance.md && cmp -s "$tmp/README.md" README.md; then
    echo "update-docs.sh: docs/performance.md and README.md match bench/results/"
  else
    diff -u docs/performance.md "$tmp/performance.md" | head -40 || true
    diff -u README.md "$tmp/README.md" | head -40 || true
    echo "update-docs.sh: the docs differ from what bench/results/ gives; run tools/scripts/update-docs.sh" >&2
    exit 1
  fi
else
  python3 bench/render_performance.py "${results[@]}" --doc docs/performance.md --readme README.md
  git --no-pager diff --stat -- docs/performance.md README.md bench/results || true
fi
