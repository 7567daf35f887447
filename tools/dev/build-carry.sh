#!/usr/bin/env bash
# build-carry.sh — build, on this machine, the binaries the GPU job runs (sm_90, head dims 64
# and 128) and copy them to build/carry, the folder tools/dev/run_device.sh takes as $1 and a
# device call carries:
#
#   bash tools/dev/build-carry.sh [JOBS]        # then: run carry=["build/carry"],
#                                                   #   command "bash tools/dev/run_device.sh build/carry"
#
# Environment: BUILD_DIR (default build/carry-build), CARRY_DIR (default build/carry), JOBS,
# HEAD_DIMS (default "64;128"; "64;96;128;256" adds the sm90 backward's d = 96 and 256 and
# their tests).
# The build runs under `nice -n 19` (other work on this machine measures the CPU). Afterwards
# each binary's shared libraries are checked: cudart and libstdc++ are linked statically where
# the targets ask for it, so only glibc, libm, libgomp and GCC's runtime may remain, and no
# glibc symbol newer than the GPU machine's 2.39.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=${BUILD_DIR:-$ROOT/build/carry-build}
CARRY=${CARRY_DIR:-$ROOT/build/carry}
JOBS=${1:-${JOBS:-$(nproc)}}
GLIBC_MAX=2.39
GENERATOR=()
command -v ninja >/dev/null 2>&1 && GENERATOR=(-G Ninja)

nice -n 19 cmake -S "$ROOT" -B "$BUILD" "${GENERATOR[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DFASTATTN_CUDA=ON -DFASTATTN_CUDA_ARCHS=90 "-DFASTATTN_CUDA_HEAD_DIMS=${HEAD_DIMS:-64;128}" \
  -DFASTATTN_BUILD_CLI=ON -DFASTATTN_BUILD_TESTS=ON -DFASTATTN_BUILD_BENCH=ON
nice -n 19 cmake --build "$BUILD" -j "$JOBS" \
  --target fastattn_cli fastattn_cuda_bench fastattn_gpu_tests fastattn_tests fastattn_kv_cache_bench

binaries=("$BUILD/tools/cli/fastattn" "$BUILD/bench/cuda/fastattn_cuda_bench"
          "$BUILD/tests/fastattn_gpu_tests" "$BUILD/tests/fastattn_tests"
          "$BUILD/bench/cuda/fastattn_kv_cache_bench")  # tools/dev/gpu-kvcache.sh BIN_DIR
mkdir -p "$CARRY"
rm -f "$CARRY"/*
cp "${binaries[@]}" "$CARRY/"

status=0
allowed='^(linux-vdso\.so|/lib64/ld-linux|ld-linux|libc\.so|libm\.so|libgomp\.so|libstdc\+\+\.so|libgcc_s\.so|libdl\.so|libpthread\.so|librt\.so)'
for b in "$CARRY"/*; do
  libs=$(ldd "$b" | awk '{print $1}')
  unexpected=$(grep -Ev "$allowed" <<<"$libs" || true)
  newest=$(objdump -T "$b" | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' | sort -V | tail -1)
  printf '%-22s %6s  glibc >= %-5s  needs: %s\n' "$(basename "$b")" "$(du -h "$b" | cut -f1)" \
    "$newest" "$(tr '\n' ' ' <<<"$libs")"
  if [[ -n "$unexpected" ]]; then
    echo "build-carry: $(basename "$b") needs libraries the GPU machine may lack: $unexpected" >&2
    status=1
  fi
  if [[ -n "$newest" && "$(printf '%s\n%s\n' "$newest" "$GLIBC_MAX" | sort -V | tail -1)" != "$GLIBC_MAX" ]]; then
    echo "build-carry: $(basename "$b") needs glibc $newest > $GLIBC_MAX" >&2
    status=1
  fi
done
size_mib=$(du -sm "$CARRY" | cut -f1)
echo "build/carry: ${size_mib} MiB (a device call carries at most 64 MiB with the working tree)"
((size_mib > 48)) && echo "build-carry: warning: ${size_mib} MiB leaves little room for the tree" >&2
exit $status
