#!/usr/bin/env bash
# gpu-host-amx-ab.sh — a host job for AMX forward work, in one device call: the CPU topology;
# this tree's CLI and BASE_SRC's (the tree before a change) built first, side by side; the bf16
# forward b1 h8 s2048 d128 at 16 threads, new against base, alternating (the host's speed drifts
# between jobs, so only a same-job comparison says what a change did); this tree at 1, 4 and 16
# threads; then the issue-19 suite beside PyTorch (gpu-host.sh STAGES=issue19).
#
# Device call (give it the full 600 s: the 3-round suite alone runs 27 fastattn processes, each
# measuring the peaks twice, and 27 torch rows, ~5-8 min): carry ["build/carry-amx",
# "build/debs"] with BASE_SRC inside the carried folder, command
#   cd build/carry-amx && mkdir -p build && ln -sfn ../../debs build/debs &&
#   BASE_SRC=base-src bash tools/dev/gpu-host-amx-ab.sh
# Environment: ROUNDS (3), MIN_TIME (0.5), AB_ROUNDS (2), SUITE (1; 0 skips the suite).
# $OUT gets ab.log (topology, A/B, threads), the build logs and gpu-host.sh's summary.txt,
# issue19.log and the suite's JSON; the suite's per-process JSON are removed, since a call
# brings back only a few files.
#
# Lessons of the first run (2026-12-01): building BASE_SRC while the suite ran, and an outer
# `timeout` on gpu-host.sh (which killed the shell but left its python running, so the A/B after
# it ran beside the orphaned suite), made every number of that job meaningless. Here nothing
# runs beside a measurement and nothing is timed out from outside.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root" || exit 2
out=${OUT:-/tmp/fastattn_out}
mkdir -p "$out"
{ lscpu; echo; echo "siblings of cpu0: $(cat /sys/devices/system/cpu/cpu0/topology/thread_siblings_list 2>/dev/null)"; } > "$out/ab.log" 2>&1
FASTATTN_OFFLINE_DEBS=$root/build/debs bash tools/scripts/setup.sh > /dev/null 2>&1
for env in /opt/fastattn-deps/env.sh "$root/build/deps/env.sh"; do
  # shellcheck disable=SC1090
  [ -f "$env" ] && . "$env"
done
command -v cmake > /dev/null || PATH=$PATH:/opt/torch/.venv/bin
build_cli() {  # $1 source tree
  cmake -S "$1" -B "$1/build/host-cpu" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFASTATTN_CUDA=OFF \
    -DFASTATTN_BUILD_BENCH=OFF -DFASTATTN_BUILD_TESTS=OFF && cmake --build "$1/build/host-cpu" -j 8 --target fastattn_cli
}
build_cli . > "$out/new-build.log" 2>&1 &
new_pid=$!
base_cli=""
if [ -n "${BASE_SRC:-}" ] && [ -d "$BASE_SRC" ]; then
  base_cli=$BASE_SRC/build/host-cpu/tools/cli/fastattn
  build_cli "$BASE_SRC" > "$out/base-build.log" 2>&1
fi
wait "$new_pid"
cli=build/host-cpu/tools/cli/fastattn
row=(--batch 1 --heads 8 --seqlen 2048 --head-dim 128 --dtype bf16 --pass fwd --no-peaks --repeats 5)
{
  echo "== A/B, bf16 fwd b1 h8 s2048 d128, 16 threads: this tree (new) vs BASE_SRC (base)"
  for r in $(seq "${AB_ROUNDS:-2}"); do
    for which in new base; do
      c=$cli; [ "$which" = base ] && c=$base_cli
      [ -x "$c" ] || continue
      echo -n "round $r $which: "
      "$c" bench "${row[@]}" --threads 16 --min-time 0.5 | grep "cpu\.forward"
    done
  done
  echo "== this tree over threads"
  for t in 1 4 16; do
    "$cli" bench "${row[@]}" --threads "$t" --min-time 0.2 | grep "cpu\.forward"
  done
} 2>&1 | tee -a "$out/ab.log"
if [ "${SUITE:-1}" = 1 ]; then
  STAGES=issue19 ROUNDS=${ROUNDS:-3} MIN_TIME=${MIN_TIME:-0.5} OUT=$out bash tools/dev/gpu-host.sh
  rm -f "$out"/issue19_fastattn_*.json
fi
