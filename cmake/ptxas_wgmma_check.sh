#!/usr/bin/env bash
# ptxas_wgmma_check.sh — the compiler launcher of the sm90 kernel units (CMakeLists.txt,
# FASTATTN_CUDA_PTXAS_WGMMA_CHECK): runs the compile command it is given and fails it when ptxas
# printed a C75xx message: wgmma serialised (e.g. C7510, C7511 for lack of registers, C7515,
# C7520 in a divergent path), a warpgroup.arrive or wait the compiler injected (C7519, C7517),
# or setmaxnreg ignored (C7508). ptxas prints these as "info", which -Xptxas=-Werror does not
# turn into an error (nvcc 13.0: a unit whose wgmma were serialised built with exit status 0),
# yet each means a slower kernel than the code describes; issue 15 asks for them to be errors.
# On failure the object file is removed, so that the next build compiles the unit again.
#   usage (CMake does this): ptxas_wgmma_check.sh <nvcc or a launcher> <arguments...>
set -u
log=$(mktemp "${TMPDIR:-/tmp}/fastattn_ptxas.XXXXXX") || exit 1
trap 'rm -f -- "$log"' EXIT
trap 'rm -f -- "$log"; trap - INT; kill -INT $$' INT
trap 'rm -f -- "$log"; trap - TERM; kill -TERM $$' TERM
"$@" 2>"$log"
status=$?
cat "$log" >&2
if [ "$status" -eq 0 ] && grep -Eq '\(C75[0-9][0-9]\)' "$log"; then
  echo "ptxas_wgmma_check.sh: ptxas reported wgmma serialised, an injected warpgroup arrive/wait or an" \
       "ignored setmaxnreg (the C75xx lines above): the kernel would run slower than its code says, so" \
       "this is an error. Configure with -DFASTATTN_CUDA_PTXAS_WGMMA_CHECK=OFF to build anyway (another" \
       "CUDA toolkit than the tested 13.0, a device-debug build)." >&2
  object=""
  previous=""
  for arg in "$@"; do
    [ "$previous" = "-o" ] && object=$arg
    previous=$arg
  done
  [ -n "$object" ] && rm -f -- "$object"
  status=1
fi
exit "$status"
