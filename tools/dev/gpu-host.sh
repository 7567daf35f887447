#!/usr/bin/env bash
# gpu-host.sh — our last GPU-machine job of a session, in one device call: the README's main
# command in quick mode on the GPU machine (the final tree), then the CPU suite on its 16-core
# Sapphire Rapids host (AMX kernels native), then the issue-19 CPU suite beside PyTorch's CPU
# SDPA in one process (bench/server_cpu.py --suite issue19).
#
# Device call (debs as in gpu-main.sh): carry ["build/debs"], command "bash tools/dev/gpu-host.sh"
# Environment: STAGES (default "main cputests issue19"), THREADS (default 16), ROUNDS (default
# 3: rounds per issue-19 row), MIN_TIME (default 0.5: seconds of timed calls per measurement).
# $OUT gets: summary.txt, run-main.log, main.json, main-summary.md, ctest-cpu.log,
# server_cpu.json, issue19.log.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root" || exit 2
out=${OUT:-/tmp/fastattn_out}
mkdir -p "$out"
exec > >(tee -a "$out/summary.txt") 2>&1
stages=${STAGES:-"main cputests issue19"}
threads=${THREADS:-16}
if [ -z "${PYTHON:-}" ] && [ -x /opt/torch/.venv/bin/python3 ]; then PYTHON=/opt/torch/.venv/bin/python3; fi
python=${PYTHON:-python3}
command -v cmake >/dev/null || PATH=$PATH:$(dirname "$python")
export PATH PYTHON=$python
has() { [[ " $stages " == *" $1 "* ]]; }
t0=$SECONDS
note() { echo "[$((SECONDS - t0))s] $*"; }
status=()

if has main; then
  note "== main command, quick"
  OUT=/tmp/gpu-host-main LIMIT_S=300 bash tools/dev/gpu-main.sh --quick > /tmp/gpu-host-main.log 2>&1
  status+=("main: rc=$?")
  cp /tmp/gpu-host-main/run-main.log /tmp/gpu-host-main/main.json "$out/" 2>/dev/null
  cp /tmp/gpu-host-main/summary.md "$out/main-summary.md" 2>/dev/null
  tail -4 /tmp/gpu-host-main.log
fi
FASTATTN_OFFLINE_DEBS=$root/build/debs bash tools/scripts/setup.sh >/dev/null
for env in /opt/fastattn-deps/env.sh "$root/build/deps/env.sh"; do
  # shellcheck disable=SC1090
  [ -f "$env" ] && . "$env"
done
if has cputests; then
  note "== CPU suite on the host (CPU-only build with tests)"
  timeout 240 bash -c "cmake -S . -B build/host-cpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DFASTATTN_CUDA=OFF \
      -DFASTATTN_BUILD_BENCH=OFF > '$out/ctest-cpu.log' 2>&1 &&
    cmake --build build/host-cpu -j 16 --target fastattn_tests >> '$out/ctest-cpu.log' 2>&1 &&
    cd build/host-cpu && ctest -L cpu -j 16 >> '$out/ctest-cpu.log' 2>&1"
  status+=("cputests: rc=$?")
  grep -E "tests passed|tests failed|Failed|\*\*\*" "$out/ctest-cpu.log" | tail -8
fi
if has issue19; then
  note "== issue-19 suite beside PyTorch CPU SDPA, $threads threads"
  cli=build/main/tools/cli/fastattn
  [ -x "$cli" ] || cli=build/host-cpu/tools/cli/fastattn
  if [ ! -x "$cli" ]; then  # a fresh machine with STAGES=issue19: build the CLI alone
    cmake -S . -B build/host-cpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DFASTATTN_CUDA=OFF \
      -DFASTATTN_BUILD_BENCH=OFF -DFASTATTN_BUILD_TESTS=OFF > /tmp/host-cli-build.log 2>&1 &&
      cmake --build build/host-cpu -j 16 --target fastattn_cli >> /tmp/host-cli-build.log 2>&1 ||
      tail -20 /tmp/host-cli-build.log
  fi
  "$cli" info --threads "$threads" > "$out/issue19.log" 2>&1
  timeout 400 "$python" bench/server_cpu.py --fastattn "$cli" --threads "$threads" --suite issue19 \
    --rounds "${ROUNDS:-3}" --min-time "${MIN_TIME:-0.5}" --out /tmp/gpu-host-issue19 >> "$out/issue19.log" 2>&1
  status+=("issue19: rc=$?")
  cp /tmp/gpu-host-issue19/*.json "$out/" 2>/dev/null
  tail -30 "$out/issue19.log"
fi
echo
echo "== stages ($((SECONDS - t0))s)"
printf '%s\n' "${status[@]}"
