#!/usr/bin/env bash
# gpu-host-amx-ab.sh — a host job for AMX forward work, in one device call: the CPU topology,
# the issue-19 suite beside PyTorch (gpu-host.sh STAGES=issue19), then the bf16 forward
# b1 h8 s2048 d128 at 16 threads with this tree's CLI against BASE_SRC's (the tree before the
# change, built alongside), alternating in the same job so the host's drift hits both, and this
# tree's CLI at 1, 4 and 16 threads.
#
# Device call: carry ["build/carry-amx", "build/debs"] (BASE_SRC inside the carried folder),
# command: cd build/carry-amx && mkdir -p build && ln -sfn ../../debs build/debs &&
#          BASE_SRC=base-src bash tools/dev/gpu-host-amx-ab.sh
# Environment: ROUNDS (3), MIN_TIME (0.5), AB_ROUNDS (2). $OUT gets gpu-host.sh's files plus
# lscpu.txt, ab.log, ab_*.json, threads_*.json.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root" || exit 2
out=${OUT:-/tmp/fastattn_out}
mkdir -p "$out"
{ lscpu; echo; grep -m1 "model name" /proc/cpuinfo; echo "siblings of cpu0: $(cat /sys/devices/system/cpu/cpu0/topology/thread_siblings_list 2>/dev/null)"; } > "$out/lscpu.txt" 2>&1
FASTATTN_OFFLINE_DEBS=$root/build/debs bash tools/scripts/setup.sh > /dev/null 2>&1
for env in /opt/fastattn-deps/env.sh "$root/build/deps/env.sh"; do
  # shellcheck disable=SC1090
  [ -f "$env" ] && . "$env"
done
command -v cmake > /dev/null || PATH=$PATH:/opt/torch/.venv/bin
base_cli=""
if [ -n "${BASE_SRC:-}" ] && [ -d "$BASE_SRC" ]; then
  base_cli=$BASE_SRC/build/host-cpu/tools/cli/fastattn
  (cmake -S "$BASE_SRC" -B "$BASE_SRC/build/host-cpu" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFASTATTN_CUDA=OFF \
     -DFASTATTN_BUILD_BENCH=OFF -DFASTATTN_BUILD_TESTS=OFF && cmake --build "$BASE_SRC/build/host-cpu" -j 8 \
     --target fastattn_cli) > "$out/base-build.log" 2>&1 &
  base_pid=$!
fi
STAGES=issue19 ROUNDS=${ROUNDS:-3} MIN_TIME=${MIN_TIME:-0.5} OUT=$out timeout 300 bash tools/dev/gpu-host.sh
cli=build/host-cpu/tools/cli/fastattn
[ -n "$base_cli" ] && wait "$base_pid"
row=(--batch 1 --heads 8 --seqlen 2048 --head-dim 128 --dtype bf16 --pass fwd --no-peaks --repeats 5)
{
  echo "== A/B, bf16 fwd b1 h8 s2048 d128, 16 threads: this tree (new) vs BASE_SRC (base)"
  for r in $(seq "${AB_ROUNDS:-2}"); do
    for which in new base; do
      c=$cli; [ "$which" = base ] && c=$base_cli
      [ -x "$c" ] || continue
      echo -n "round $r $which: "
      timeout 60 "$c" bench "${row[@]}" --threads 16 --min-time 0.5 --json "$out/ab_${which}_$r.json" | grep "cpu\.forward"
    done
  done
  echo "== this tree over threads"
  for t in 1 4 16; do
    timeout 60 "$cli" bench "${row[@]}" --threads "$t" --min-time 0.2 --json "$out/threads_$t.json" | grep "cpu\.forward"
  done
} 2>&1 | tee "$out/ab.log"
