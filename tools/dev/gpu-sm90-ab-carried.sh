#!/usr/bin/env bash
# gpu-sm90-ab-carried.sh — one device call: the sm90 forward's A/B over builds made on the dev
# machine and carried (tools/dev/carry-sm90-builds.sh pack DEST base NAME...). The frame that
# every A/B call of the thirty-second and thirty-third sessions wrote again: the card's name
# into $OUT/gpu.txt, the builds unpacked at their build paths, gpu-sm90-ab.sh without building
# (BUILD_STAGES=none CARRIED_BUILDS=1, no cuDNN launch probe), then its summary lines.
#
#   bash tools/dev/carry-sm90-builds.sh pack build/carry-ab base NAME      # on the dev machine
#   device call: carry ["build/carry-ab"], command
#     "OUT=$OUT BUILD_VARIANTS='NAME:' VARIANTS='def:' bash tools/dev/gpu-sm90-ab-carried.sh build/carry-ab"
#
# gpu-sm90-ab.sh's other settings come from the environment (BUILD_VARIANTS, VARIANTS,
# TEST_BUILD, TEST_FILTER, TEST_S, SANITIZE_FILTER, ...); here HEAD_DIMS defaults to "64;128"
# (VARIANT_HEAD_DIMS to HEAD_DIMS), TEST_ENV to "" (the tests on the defaults), ROUNDS to 3 and
# BUDGET_S to 380. $OUT/fwd: gpu-sm90-ab.sh's outputs.
set -u
root_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root_dir" || exit 2
carry=${1:?usage: gpu-sm90-ab-carried.sh DEST (a folder of tools/dev/carry-sm90-builds.sh pack)}
out=${OUT:-/tmp/fastattn_out}
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$out/gpu.txt"
bash tools/dev/carry-sm90-builds.sh unpack "$carry" > "$out/unpack.log" 2>&1 || { cat "$out/unpack.log"; exit 3; }
head_dims=${HEAD_DIMS:-"64;128"}
OUT=$out/fwd HEAD_DIMS=$head_dims VARIANT_HEAD_DIMS=${VARIANT_HEAD_DIMS:-$head_dims} TEST_ENV=${TEST_ENV-} \
  BUILD_STAGES=none CARRIED_BUILDS=1 PROBE=0 ROUNDS=${ROUNDS:-3} BUDGET_S=${BUDGET_S:-380} \
  bash tools/dev/gpu-sm90-ab.sh > /dev/null 2>&1
echo "[$SECONDS s] fwd done"
grep -E "rc=|PASSED|FAILED|SUMMARY|^\[sm90" "$out/fwd/summary.txt" | cut -c1-400 | head -60
