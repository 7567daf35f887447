#!/usr/bin/env bash
# build-sm70.sh — compile the Volta (sm70) forward and backward units to sm_70 SASS and compute_70 PTX, with
# ptxas -v, on a machine whose CUDA (13) no longer targets sm_70. Compile-only: runs no GPU.
#
# Toolchain. CUDA 13 dropped sm_70, and PyPI has no CUDA 12 nvcc driver: the wheel
# nvidia-cuda-nvcc-cu12 (12.9.86, also 12.4) ships ptxas, libnvvm and libdevice only (no nvcc,
# cicc or cudafe++). So:
#   1. the system nvcc (CUDA 13) compiles the unit to PTX for compute_75, its oldest target;
#   2. the PTX header is retargeted to `.target sm_70` and `.version 8.8` (the newest PTX ISA
#      ptxas 12.9 reads) and kept as <unit>.compute_70.ptx. ptxas rejects any instruction or
#      PTX feature sm_70 / ISA 8.8 lacks, so a clean assembly shows the PTX is valid for
#      compute_70. (The front end saw __CUDA_ARCH__ = 750; the sm70 path has no arch #if, the
#      CUDA headers' sm_75 branches use only sm_70 instructions, which step 3 checks.)
#   3. ptxas 12.9 from the wheel (pip --target, no root) assembles sm_70 SASS with -v.
#   4. Disassembly (HMMA.884): cuobjdump / nvdisasm from CUDA <= 13.0 (13.1+ refuse sm_70).
#      Set NVDISASM to one; else the script tries the CUDA 12 nvdisasm bundled in a triton 3.1
#      wheel (pip download, unpacked under TOOLKIT_DIR), and skips the step if that fails.
# A real CUDA 12.x toolkit (NVCC12=/usr/local/cuda-12.x/bin/nvcc) replaces steps 1-3 with one
# `nvcc -gencode arch=compute_70,code=[sm_70,compute_70]`.
#
# Usage: tools/dev/build-sm70.sh [out_dir]         (default build/sm70)
# Environment:
#   TOOLKIT_DIR   where the wheels go (default build/cuda12-wheels; reused when present)
#   HEAD_DIMS     head dims to compile (default "64 128"; the sm70 path has 64, 96, 128)
#   NVCC          the front-end nvcc (default: nvcc on PATH, CUDA 13)
#   NVCC12        a CUDA 12.x nvcc: compile directly with it instead
#   NVDISASM      an nvdisasm that still knows sm_70
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-build/sm70}
tk=${TOOLKIT_DIR:-build/cuda12-wheels}
head_dims=${HEAD_DIMS:-64 128}
nvcc=${NVCC:-nvcc}
mkdir -p "$out"
flags=(-O3 -std=c++17 --expt-relaxed-constexpr -Iinclude -Isrc)

ptxas="$tk/nvidia/cuda_nvcc/bin/ptxas"
if [ -z "${NVCC12:-}" ] && [ ! -x "$ptxas" ]; then
  echo "== installing the nvidia-cuda-nvcc-cu12 12.9 wheel (ptxas 12.9) into $tk"
  python3 -m pip install --quiet --disable-pip-version-check --target "$tk" "nvidia-cuda-nvcc-cu12==12.9.*"
fi

nvdisasm=${NVDISASM:-}
if [ -z "$nvdisasm" ]; then
  nvdisasm="$tk/triton-cuda12/nvdisasm"
  if [ ! -x "$nvdisasm" ]; then
    echo "== fetching a CUDA 12 nvdisasm (bundled in the triton 3.1.0 wheel) into $tk/triton-cuda12"
    mkdir -p "$tk/triton-cuda12"
    if python3 -m pip download --quiet --disable-pip-version-check --no-deps -d "$tk/triton-cuda12" "triton==3.1.0"; then
      python3 - "$tk/triton-cuda12" <<'PY' || true
import glob, os, sys, zipfile
d = sys.argv[1]
for whl in glob.glob(os.path.join(d, "triton-*.whl")):
    with zipfile.ZipFile(whl) as z:
        for n in z.namelist():
            if n.endswith("/bin/nvdisasm"):
                with open(os.path.join(d, "nvdisasm"), "wb") as f:
                    f.write(z.read(n))
                os.chmod(os.path.join(d, "nvdisasm"), 0o755)
    os.remove(whl)
PY
    fi
  fi
  [ -x "$nvdisasm" ] || nvdisasm=""
fi

for dir in fwd bwd; do
kernel=$([ $dir = fwd ] && echo "flash_forward_kernel.*Sm70ForwardEEELb0ELb0EEEv" || echo "flash_backward_kernel.*Sm70BackwardEEELb0ELb0EEEv")
for d in $head_dims; do
  unit=src/cuda/generated/flash_${dir}_sm70_f16_hdim$d.cu
  [ -f "$unit" ] || { echo "no unit $unit (the sm70 path has head dims 64, 96, 128)"; exit 1; }
  base="$out/flash_${dir}_sm70_f16_hdim$d"
  echo "== $unit -> sm_70 SASS + compute_70 PTX"
  if [ -n "${NVCC12:-}" ]; then
    nice "$NVCC12" "${flags[@]}" -Xptxas=-v "-DFASTATTN_CUDA_HDIM_$d=1" -arch=sm_70 -cubin "$unit" \
      -o "$base.sm_70.cubin" 2> "$base.ptxas.txt"
    nice "$NVCC12" "${flags[@]}" "-DFASTATTN_CUDA_HDIM_$d=1" -arch=compute_70 -ptx "$unit" -o "$base.compute_70.ptx"
  else
    nice "$nvcc" "${flags[@]}" "-DFASTATTN_CUDA_HDIM_$d=1" -arch=compute_75 -ptx "$unit" -o "$base.compute_75.ptx"
    sed -e 's/^\.version [0-9.]*$/.version 8.8/' -e 's/^\.target sm_75$/.target sm_70/' \
      "$base.compute_75.ptx" > "$base.compute_70.ptx"
    nice "$ptxas" -v -O3 -arch=sm_70 "$base.compute_70.ptx" -o "$base.sm_70.cubin" 2> "$base.ptxas.txt"
  fi
  echo "   ptxas -v, main kernel (d$d, no soft-cap, no split / tile grid):"
  grep -A3 "Compiling entry function '_ZN8fastattn4cuda[0-9]*${kernel}" \
    "$base.ptxas.txt" | grep -E "registers|spill" | sed 's/^/   /'
  echo "   spills in any kernel of the unit: $(grep -cE '[1-9][0-9]* bytes spill' "$base.ptxas.txt" || true)"
  if [ -n "$nvdisasm" ]; then
    "$nvdisasm" -c "$base.sm_70.cubin" > "$base.sm_70.sass"
    echo "   HMMA.884 instructions in the sm_70 disassembly: $(grep -c 'HMMA.884' "$base.sm_70.sass")"
    grep -m 4 'HMMA.884' "$base.sm_70.sass" | sed 's/^ */   /'
  else
    echo "   (no nvdisasm for sm_70: disassembly skipped)"
  fi
done
done
