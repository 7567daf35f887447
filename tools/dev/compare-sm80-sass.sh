#!/usr/bin/env bash
# compare-sm80-sass.sh — check that the sm80 forward (or backward) kernels compile to the same
# SASS as on another git ref (a refactor of shared kernel code must not change the tuned sm80
# path).
#
# Compiles each unit on the ref (a temporary `git worktree`) and in this tree with the same
# nvcc line, disassembles with cuobjdump -sass, normalises the mangled names (ForwardTraits
# gained the policy argument Sm80Forward) and diffs. Exit status 1 on any difference.
#
# Usage: tools/dev/compare-sm80-sass.sh [ref] [unit-suffix ...]
#   ref          default main
#   unit-suffix  default: f16_hdim64 bf16_hdim128 (src/cuda/generated/flash_<dir>_sm80_<suffix>.cu)
# Environment: DIRECTION (fwd or bwd, default fwd), ARCH (default 90), NVCC (default nvcc), CUOBJDUMP (default cuobjdump on PATH, else
# the one bundled with triton)
set -euo pipefail
cd "$(dirname "$0")/../.."
ref=${1:-main}
shift || true
units=("$@")
[ ${#units[@]} -gt 0 ] || units=(f16_hdim64 bf16_hdim128)
arch=${ARCH:-90}
dir=${DIRECTION:-fwd}
nvcc=${NVCC:-nvcc}
cuobjdump=${CUOBJDUMP:-$(command -v cuobjdump || true)}
if [ -z "$cuobjdump" ]; then
  cuobjdump=$(python3 -c 'import triton, os; print(os.path.join(os.path.dirname(triton.__file__), "backends/nvidia/bin/cuobjdump"))' 2>/dev/null || true)
fi
[ -x "$cuobjdump" ] || { echo "no cuobjdump (set CUOBJDUMP)"; exit 2; }

work=$(mktemp -d)
trap 'git worktree remove --force "$work/ref" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
git worktree add --detach "$work/ref" "$ref" >/dev/null

status=0
for u in "${units[@]}"; do
  d=${u##*hdim}
  for side in ref new; do
    tree=$([ "$side" = ref ] && echo "$work/ref" || pwd)
    (cd "$tree" && nice "$nvcc" -O3 -std=c++17 --expt-relaxed-constexpr -cubin "-DFASTATTN_CUDA_HDIM_$d=1" \
      -Iinclude -Isrc -arch="sm_$arch" "src/cuda/generated/flash_${dir}_sm80_$u.cu" -o "$work/$side.$u.cubin")
    "$cuobjdump" -sass "$work/$side.$u.cubin" | sed -e 's/NS0_11Sm80ForwardE//g' > "$work/$side.$u.sass"
  done
  n=$(grep -cE '^\s+/\*[0-9a-f]{4}\*/' "$work/new.$u.sass" || true)
  if diff -q "$work/ref.$u.sass" "$work/new.$u.sass" >/dev/null; then
    echo "flash_${dir}_sm80_$u (sm_$arch): identical SASS ($n instruction lines) to $ref"
  else
    echo "flash_${dir}_sm80_$u (sm_$arch): SASS DIFFERS from $ref:"
    diff "$work/ref.$u.sass" "$work/new.$u.sass" | head -20
    status=1
  fi
done
exit $status
