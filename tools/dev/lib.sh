# lib.sh — the pieces every GPU-job script in tools/dev/ shares; sourced after the script has set
# `root` (the checkout), `stages`, `budget`, `t0=$SECONDS` and `status=()`:
#   has STAGE            whether STAGE is in $stages
#   note TEXT            TEXT stamped with the seconds since t0
#   run NAME LIMIT CMD…  CMD under `timeout`, LIMIT capped by what is left of $budget minus
#                        RUN_RESERVE_S (default 5); skipped below RUN_MIN_S (default 10) seconds;
#                        its rc and time appended to $status
#   load_deps_env        sources the dependency environments setup.sh writes (offline machine)
#   device_tools         the build's tools on a bare device machine: setup.sh from the carried
#                        build/debs, load_deps_env, then the GPU's name, driver and clocks
#   build_variant NAME FLAGS DIMS
#                        one more sm90 build (gpu-sm90.sh's configuration, head dims DIMS) with
#                        CMAKE_CUDA_FLAGS FLAGS (comma-separated; its -D flags also in
#                        CMAKE_CXX_FLAGS) in build/sm90-NAME, targets
#                        fastattn_gpu_tests and fastattn_cuda_bench, log $out/build-NAME.log;
#                        prints ptxas warnings, C75xx lines and non-zero spills (BUILD_VARIANTS of
#                        gpu-sm90-ab.sh and gpu-sm90-bwd.sh); with CARRIED_BUILDS=1 a build whose
#                        binaries are already in build/sm90-NAME is skipped
# shellcheck shell=bash

has() { [[ " $stages " == *" $1 "* ]]; }
note() { echo "[$((SECONDS - t0))s] $*"; }
run() {
  local name=$1 limit=$2; shift 2
  local left=$((budget - (SECONDS - t0) - ${RUN_RESERVE_S:-5}))
  ((limit > left)) && limit=$left
  if ((limit < ${RUN_MIN_S:-10})); then status+=("$name: skipped (budget)"); note "== $name skipped"; return; fi
  note "== $name (limit ${limit}s)"
  local t=$SECONDS rc
  timeout -k 5 "$limit" "$@"
  rc=$?
  status+=("$name: rc=$rc ($((SECONDS - t))s)")
  note "-- $name rc=$rc"
}
load_deps_env() {
  local env
  for env in /opt/fastattn-deps/env.sh "$root/build/deps/env.sh"; do
    # shellcheck disable=SC1090
    [ -f "$env" ] && . "$env"
  done
}
build_variant() {
  local bname=$1 bflags bdir=$root/build/sm90-$1
  # CARRIED_BUILDS=1: the binaries were built on the dev machine and unpacked into $bdir by the
  # call (tools/dev/carry-sm90-builds.sh unpack); building again would cost the call a minute each.
  if [ "${CARRIED_BUILDS:-0}" = 1 ] && [ -x "$bdir/bench/cuda/fastattn_cuda_bench" ]; then
    note "build_$bname: carried binaries"; return 0
  fi
  bflags=$(tr ',' ' ' <<< "$2")
  # The -D flags go to the C++ units too: some knobs are read by host code (the plan headers),
  # and a C++ unit that saw the default would plan for kernels the build does not have.
  local bdefs
  bdefs=$(tr ' ' '\n' <<< "$bflags" | grep -E '^-D' | tr '\n' ' ')
  run "build_$bname" 240 bash -c "cmake -S . -B '$bdir' -G Ninja -DCMAKE_BUILD_TYPE=Release -DFASTATTN_WERROR=ON \
      -DFASTATTN_CUDA=ON -DFASTATTN_CUDA_ARCHS=90 '-DFASTATTN_CUDA_HEAD_DIMS=$3' \
      '-DCMAKE_CUDA_FLAGS=$bflags' '-DCMAKE_CXX_FLAGS=$bdefs' > '$out/build-$bname.log' 2>&1 && \
      cmake --build '$bdir' -j 16 --target fastattn_gpu_tests fastattn_cuda_bench >> '$out/build-$bname.log' 2>&1"
  tail -1 "$out/build-$bname.log"
  grep -E "ptxas (warning|error)|C75(08|10|12|17|19)|spill" "$out/build-$bname.log" | grep -v " 0 bytes spill" | head -5
}
device_tools() {
  FASTATTN_OFFLINE_DEBS=$root/build/debs bash "$root/tools/scripts/setup.sh" >/dev/null 2>&1
  load_deps_env
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
}
