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
device_tools() {
  FASTATTN_OFFLINE_DEBS=$root/build/debs bash "$root/tools/scripts/setup.sh" >/dev/null 2>&1
  load_deps_env
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
}
