#!/usr/bin/env bash
# gpu-sm90-ab.sh — A/B of the sm90 forward's runtime choices in one device call (issue 15): one
# build (gpu-sm90.sh's build and sass stages), then issue 15's bar sweep (cuda_bench sweep90)
# once per variant and round beside PyTorch SDPA's cuDNN and flash rows of the same job, the
# sm90 tests under the variants' settings, and compute-sanitizer on the small set.
#   carry ["build/debs"]; command: OUT=$OUT VARIANTS="..." bash tools/dev/gpu-sm90-ab.sh
# VARIANTS: space-separated "name:ENV=value,ENV=value" ("name:" for the defaults), e.g.
#   "base: order:FASTATTN_CUDA_SM90_WG_ORDER=1 wide:FASTATTN_CUDA_SM90_BLOCK_N=176"
# ROUNDS (default 2): each round runs every variant once, in order (rows tagged sm90-NAME-rK).
# TEST_ENV (default: every variant's settings at once) and TEST_FILTER (default CudaSm90.*):
# the tests' run; SANITIZE_FILTER (default CudaSm90.SmallShapesMatchFloat64; "" skips) runs
# under memcheck, racecheck and synccheck with TEST_ENV. PROBE (default 1): ncu's launch
# statistics of SDPA's cuDNN kernels on three short rows (tools/dev/profile/sdpa_launch_probe.py).
# BUILD_STAGES (default "build sass": gpu-sm90.sh's stages first; "none": the binaries are already in build/sm90), SWEEP (default 1; 0 skips the sweeps), TEST_S (default 150: the tests' time limit),
# HEAD_DIMS (default "64;128;256"), BUDGET_S (default 540). BUILD_VARIANTS (default none): more
# builds beside build/sm90 ("base"), space-separated "name:FLAG,FLAG" of CMAKE_CUDA_FLAGS (e.g.
# "d64wg2:-DFASTATTN_SM90_D64_BLOCK_M=128"), each in build/sm90-<name> with the same targets;
# VARIANT_HEAD_DIMS (default HEAD_DIMS) their head dims (a sweep row of a dim a build lacks is an
# error row); every build then runs every variant (rows tagged sm90-<build>.<variant>-rK), and the tests and
# sanitizers run on TEST_BUILD (default: the last build; "base": build/sm90). $OUT: summary.txt, build.log,
# sass.txt, tests.log, sanitize.log, sweep.jsonl, sweep.json, sweep.txt, probe.txt, build-NAME.log;
# with PACK=1 (the default: a device call brings back at most 8 files) what it wrote there, but
# summary.txt, goes into $OUT/ab.tar.gz when the script exits (what $OUT held before is left alone).
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root" || exit 2
out=${OUT:-/tmp/fastattn_out}
mkdir -p "$out"
budget=${BUDGET_S:-540}
t0=$SECONDS
status=()
stages="ab"
# PACK: the entries this script created in $out (not summary.txt, and nothing that was there
# before it ran) go into $out/ab.tar.gz and are then removed.
preexisting=$(cd "$out" && ls -A)
pack() {
  [ "${PACK:-1}" = 1 ] || return 0
  local entries=() e tmp
  while IFS= read -r e; do
    if [ -z "$e" ] || [ "$e" = summary.txt ] || [ "$e" = ab.tar.gz ]; then continue; fi
    grep -qxF -- "$e" <<< "$preexisting" && continue
    entries+=("$e")
  done < <(cd "$out" && ls -A)
  ((${#entries[@]})) || return 0
  tmp=$(mktemp /tmp/sm90_ab.XXXXXX) || return 0
  tar -czf "$tmp" -C "$out" -- "${entries[@]}" && mv "$tmp" "$out/ab.tar.gz" && (cd "$out" && rm -rf -- "${entries[@]}")
}
trap pack EXIT
. "$root/tools/dev/lib.sh"  # has, note, run, device_tools

OUT=$out STAGES=${BUILD_STAGES:-"build sass"} HEAD_DIMS=${HEAD_DIMS:-"64;128;256"} TARGETS="fastattn_gpu_tests fastattn_cuda_bench" \
  BUDGET_S=$((budget - 120)) bash tools/dev/gpu-sm90.sh > /dev/null 2>&1
exec > >(tee -a "$out/summary.txt") 2>&1
python=/opt/torch/.venv/bin/python3
[ -x "$python" ] || python=python3
load_deps_env
build=$root/build/sm90
bench=$build/bench/cuda/fastattn_cuda_bench
[ -x "$bench" ] || { echo "no bench binary: see build.log"; tail -20 "$out/build.log"; exit 3; }
variants=${VARIANTS:-"base:"}
# Extra builds (BUILD_VARIANTS): the same configuration as gpu-sm90.sh's, plus the flags.
builds="base:$build"
for bv in ${BUILD_VARIANTS:-}; do
  bname=${bv%%:*} bdir=$root/build/sm90-${bv%%:*}
  build_variant "$bname" "${bv#*:}" "${VARIANT_HEAD_DIMS:-${HEAD_DIMS:-64;128;256}}"
  [ -x "$bdir/bench/cuda/fastattn_cuda_bench" ] && builds+=" $bname:$bdir"
done
case ${TEST_BUILD:-} in
  "") build=${builds##*:} ;;
  base) build=$root/build/sm90 ;;
  *) build=$root/build/sm90-$TEST_BUILD ;;
esac

# The settings of one variant as `env` arguments.
settings() { local spec=${1#*:}; [ -n "$spec" ] && tr ',' ' ' <<< "$spec"; }

all_settings=""
for v in $variants; do all_settings+=" $(settings "$v")"; done
test_env=${TEST_ENV-$all_settings}
run tests "${TEST_S:-150}" bash -c "env $test_env '$build/tests/fastattn_gpu_tests' --gtest_brief=1 \
    --gtest_filter='${TEST_FILTER:-CudaSm90.*}' > '$out/tests.log' 2>&1"
tail -3 "$out/tests.log"
grep -B2 -A10 "Failure" "$out/tests.log" | head -30

if [ "${SWEEP:-1}" = 1 ]; then
run sweep_sdpa 60 bash -c "PYTHONUNBUFFERED=1 '$python' bench/cuda/sdpa_anchor.py sweep90 --backends cudnn,flash --no-gemm --repeats 10 --max-seconds 2 > '$out/sweep.jsonl' 2>> '$out/bench.err'"
for round in $(seq 1 "${ROUNDS:-2}"); do
  for b in $builds; do
    bname=${b%%:*} bbench=${b#*:}/bench/cuda/fastattn_cuda_bench
    for v in $variants; do
      name=${v%%:*}
      [ "$builds" != "base:$root/build/sm90" ] && name="$bname.$name"
      run "sweep_${name}_r$round" 40 bash -c "env $(settings "$v") '$bbench' sweep90 --repeats 10 --max-seconds 2 |
          sed 's/\"source\":\"fastattn\"/\"source\":\"fastattn\",\"variant\":\"sm90-$name-r$round\"/' >> '$out/sweep.jsonl' 2>> '$out/bench.err'"
    done
  done
done
"$python" bench/cuda/sweep_sm90.py "$out/sweep.jsonl" --out "$out/sweep.json" > "$out/sweep.txt" 2>&1
tail -n 40 "$out/sweep.txt"
fi

if [ -n "${SANITIZE_FILTER-CudaSm90.SmallShapesMatchFloat64}" ]; then
  for tool in memcheck racecheck synccheck; do
    run "$tool" 60 bash -c "env $test_env compute-sanitizer --tool $tool --error-exitcode 9 '$build/tests/fastattn_gpu_tests' \
        --gtest_filter='${SANITIZE_FILTER-CudaSm90.SmallShapesMatchFloat64}' >> '$out/sanitize.log' 2>&1"
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY|SYNCCHECK SUMMARY" "$out/sanitize.log" | tail -1
  done
fi
if [ "${PROBE:-1}" = 1 ]; then
  run probe 60 bash -c "ncu --section LaunchStats --section Occupancy --section SpeedOfLight -k regex:'sdpa|fmha|flash|attn' \
      '$python' tools/dev/profile/sdpa_launch_probe.py > '$out/probe.txt' 2>&1"
  grep -E "^  [a-z_].*\(|Grid Size|Block Size|Registers Per|Dynamic Shared|Duration|Waves Per" "$out/probe.txt" | head -60
fi
echo "== stages"
printf '%s\n' "${status[@]}"
