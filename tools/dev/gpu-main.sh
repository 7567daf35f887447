#!/usr/bin/env bash
# gpu-main.sh — our GPU job: the README's main command (tools/scripts/run-main.sh) on the
# offline GPU machine, its results folder brought back through $OUT.
#
# Here, once: download the Debian 12 debs the machine lacks into build/debs (ignored by git):
#   mkdir -p build/debs && (cd build/debs && apt-get download libcli11-dev libfmt-dev libfmt9 \
#     nlohmann-json3-dev libopenblas-dev libopenblas0-pthread libopenblas-pthread-dev)
# Device call: carry ["build/debs"], command
#   bash tools/dev/gpu-main.sh --quick      # CUDA head dims 64;128, few repeats
#   bash tools/dev/gpu-main.sh              # the full main job (all four head dims: a longer build)
# A call that runs out of time mid-build can simply be repeated while the machine is warm:
# build/main stays there between calls and the build resumes.
#
# Environment: DEBS (default build/debs), PYTHON (default /opt/torch/.venv/bin/python3 when it
# exists: the interpreter with torch), JOBS (default nproc), LIMIT_S (default 570: the main
# command's time limit, under the call's 600 s so that the results still get copied).
# $OUT receives at most 8 files (the device tool's limit): main.json, main.png, summary.md,
# run-main.log, the CUDA JSON (compare.py), cpu.json, and everything else as rest.tar.gz.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root" || exit 2
out=${OUT:-/tmp/fastattn_out}
mkdir -p "$out"
debs=${DEBS:-$root/build/debs}
if [ -d "$debs" ]; then
  export FASTATTN_OFFLINE_DEBS=$debs
else
  echo "gpu-main.sh: no $debs: the main command can only use libraries already installed"
fi
if [ -z "${PYTHON:-}" ] && [ -x /opt/torch/.venv/bin/python3 ]; then
  export PYTHON=/opt/torch/.venv/bin/python3
fi
# cmake and ninja may come only with the torch environment (pip); append, so python3 stays.
command -v cmake >/dev/null || PATH=$PATH:$(dirname "${PYTHON:-/opt/torch/.venv/bin/python3}")
export PATH

log=$out/run-main.log
timeout -k 10 "${LIMIT_S:-570}" bash tools/scripts/run-main.sh "$@" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
folder=$(sed -n 's/^results: //p' "$log" | tail -1)
if [ -n "$folder" ] && [ -d "$folder" ]; then
  for f in main.json main.png summary.md cpu.json "$folder"/*-cuda-*.json; do
    f=${f#"$folder"/}
    [ -f "$folder/$f" ] && cp "$folder/$f" "$out/"
  done
  tar -czf "$out/rest.tar.gz" -C "$(dirname "$folder")" "$(basename "$folder")"
else
  echo "gpu-main.sh: run-main.sh named no results folder (rc=$rc)"
  tar -czf "$out/rest.tar.gz" -C "$root/build" main-results 2>/dev/null || true
fi
echo "gpu-main.sh: run-main.sh exit status $rc; in \$OUT: $(ls "$out" | tr '\n' ' ')"
exit "$rc"
