#!/usr/bin/env bash
# carry-sm90-builds.sh — carry sm90 builds made on the dev machine into a device call, so that
# the call spends its minutes on measurements rather than on ninja (a build of two head dims
# takes 60-75 s there, once per variant).
#
#   bash tools/dev/carry-sm90-builds.sh pack DEST NAME...    # on the dev machine
#   bash tools/dev/carry-sm90-builds.sh unpack DEST          # first thing in the device call
#
# NAME is "base" (build/sm90) or a variant (build/sm90-NAME), each already built with the
# targets fastattn_gpu_tests and fastattn_cuda_bench (lib.sh's build_variant configuration).
# pack writes DEST/sm90-builds.tar.xz with those two binaries of each build (cudart is linked
# statically); unpack puts them back at the same paths, where gpu-sm90-ab.sh finds them with
# BUILD_STAGES=none and CARRIED_BUILDS=1. (tools/dev/build-carry.sh carries one build's
# binaries into a folder for the scripts that take BIN_DIR; this one keeps several builds at
# their build paths, for gpu-sm90-ab.sh's BUILD_VARIANTS; gpu-sm90-ab-carried.sh is the device
# call that unpacks them and runs it.)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
binaries=(tests/fastattn_gpu_tests bench/cuda/fastattn_cuda_bench)
case ${1:-} in
  pack)
    dest=$2; shift 2
    files=()
    for name in "$@"; do
      dir=build/sm90; [ "$name" = base ] || dir=build/sm90-$name
      for b in "${binaries[@]}"; do
        [ -x "$dir/$b" ] || { echo "carry-sm90-builds: $dir/$b is not built" >&2; exit 1; }
        files+=("$dir/$b")
      done
    done
    mkdir -p "$dest"
    tar -cJf "$dest/sm90-builds.tar.xz" "${files[@]}"
    du -h "$dest/sm90-builds.tar.xz"
    ;;
  unpack)
    tar -xJf "$2/sm90-builds.tar.xz"
    tar -tJf "$2/sm90-builds.tar.xz"
    ;;
  *) echo "usage: $0 pack DEST NAME... | unpack DEST" >&2; exit 2 ;;
esac
