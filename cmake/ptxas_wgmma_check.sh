#!/usr/bin/env bash
# ptxas_wgmma_check.sh — the compiler launcher of the sm90 kernel units (CMakeLists.txt,
# FASTATTN_CUDA_PTXAS_WGMMA_CHECK): runs the compile command it is given and fails it when ptxas
# reported a C75xx message, i.e. wgmma serialised (C7509-C7520: "Potential Performance Loss",
# or a warpgroup.arrive the compiler injected) or setmaxnreg ignored (C7508). ptxas prints these
# as "info", which -Xptxas=-Werror does not turn into an error (nvcc 13.0: a unit whose wgmma
# were serialised built with exit status 0), yet each means a slower kernel than the one the
# code describes; issue 15 asks for them to be errors. On failure the object file is removed,
# so that the next build compiles the unit again.
#   usage (CMake does this): ptxas_wgmma_check.sh <nvcc> <arguments...>
set -u
log=$(mktemp "${TMPDIR:-/tmp}/fastattn_ptxas.XXXXXX") || exit 1
"$@" 2>"$log"
status=$?
cat "$log" >&2
if [ "$status" -eq 0 ] && grep -Eq '\(C75[0-9][0-9]\)' "$log"; then
  echo "ptxas_wgmma_check.sh: ptxas reported wgmma serialisation or an ignored setmaxnreg (the C75xx" \
       "lines above); treated as an error (CMake option FASTATTN_CUDA_PTXAS_WGMMA_CHECK)" >&2
  object=""
  previous=""
  for arg in "$@"; do
    [ "$previous" = "-o" ] && object=$arg
    previous=$arg
  done
  [ -n "$object" ] && rm -f -- "$object"
  status=1
fi
rm -f -- "$log"
exit "$status"
