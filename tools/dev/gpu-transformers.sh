#!/usr/bin/env bash
# gpu-transformers.sh — one device call (~6 minutes): build the Python package for CUDA (sm_90,
# head dims 64;128), then
#   1. overhead: issue 17's per-call bar (fastattn.torch.attention eager vs SDPA, b1 s128 h8 d64
#      bf16, 2000-call host-bound loop) and the cost of each step of the eager path
#      (tools/dev/profile/py_overhead_cuda.py), on an idle GPU;
#   2. tests: tests/python/test_transformers.py (tiny models, fp32, CPU) with this machine's
#      transformers, test_torch.py and test_torch_eager.py (the eager path and the custom op, CUDA
#      cases);
#   3. bench: bench/cuda/transformers_llama.py, the Llama-2-7B-shaped model with "fastattn" and
#      "sdpa" in one process (prefill 2k/8k/16k, CUDA-graph decode at 4k/32k); bench_gqa: the
#      same with 8 KV heads (prefill 8k, decode 4k/32k).
#
# Device call (from /work/main, this tree copied to build/carry-hf):
#   carry ["build/carry-hf", "build/debs"], command
#   "cd build/carry-hf && mkdir -p build && ln -sfn ../../debs build/debs && bash tools/dev/gpu-transformers.sh"
# Final merged call (at most 100 s): a carried wheel instead of the package build (pybuild; its
# device time is not measured; the same wheel build took 759 s here, 2 shared cores at nice 19,
# 26 CUDA units for sm_90), the tests only:
#   WHEEL=<abs path of fastattn-*-cp312-*.whl> STAGES="install tests" BUDGET_S=100 bash tools/dev/gpu-transformers.sh
# (the wheel: python3.12 -m pip wheel --no-build-isolation --no-deps -w DIR
#  -Ccmake.define.FASTATTN_CUDA=ON -Ccmake.define.FASTATTN_CUDA_ARCHS=90
#  '-Ccmake.define.FASTATTN_CUDA_HEAD_DIMS=64;128' . ; the GPU machine's python is 3.12).
#
# Environment: STAGES (default "pybuild overhead tests bench bench_gqa"; "install" installs WHEEL
# instead of pybuild; leave both out where the package is installed already), WHEEL, PYTHON
# (default /opt/torch/.venv/bin/python3 when it exists), BUDGET_S (default 560), BENCH_ARGS
# (extra arguments for the bench stage's transformers_llama.py).
# $OUT gets: summary.txt (the stages' status last), pip.log, overhead.json, overhead.log,
# pytest.log, transformers_llama[_gqa8].json and .log.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root" || exit 2
out=${OUT:-/tmp/fastattn_out}
mkdir -p "$out"
exec > >(tee -a "$out/summary.txt") 2>&1
stages=${STAGES:-"pybuild overhead tests bench bench_gqa"}
budget=${BUDGET_S:-560}
if [ -z "${PYTHON:-}" ] && [ -x /opt/torch/.venv/bin/python3 ]; then PYTHON=/opt/torch/.venv/bin/python3; fi
python=${PYTHON:-python3}
command -v cmake >/dev/null || PATH=$PATH:$(dirname "$python")
export PATH PYTHONUNBUFFERED=1
t0=$SECONDS
status=()
RUN_RESERVE_S=10 RUN_MIN_S=20  # run(): keep 10 s in hand, skip a step under 20 s
. "$root/tools/dev/lib.sh"  # has, note, run, load_deps_env

if [ -d "$root/build/debs" ] && has pybuild; then  # cmake / ninja for the package build
  FASTATTN_OFFLINE_DEBS=$root/build/debs bash tools/scripts/setup.sh >/dev/null
fi
load_deps_env
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
"$python" -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"

has pybuild && run pybuild 240 bash -c "CMAKE_BUILD_PARALLEL_LEVEL=16 '$python' -m pip install \
  --no-build-isolation --no-deps --no-index --disable-pip-version-check \
  -Ccmake.define.FASTATTN_CUDA=ON -Ccmake.define.FASTATTN_CUDA_ARCHS=90 \
  '-Ccmake.define.FASTATTN_CUDA_HEAD_DIMS=64;128' -Cbuild-dir=build/gpu-python . > '$out/pip.log' 2>&1"
has pybuild && tail -3 "$out/pip.log"
has install && run install 60 bash -c "'$python' -m pip install --no-deps --no-index --force-reinstall \
  --disable-pip-version-check '${WHEEL:-missing WHEEL}' > '$out/pip.log' 2>&1"
has install && tail -3 "$out/pip.log"
# The tree's Python sources over the wheel's (a change in python/fastattn needs no wheel rebuild;
# the extension module stays the wheel's).
has install && (cd /tmp && pkg=$("$python" -c "import fastattn, os; print(os.path.dirname(fastattn.__file__))") \
  && cp -r "$root/python/fastattn/." "$pkg/" && echo "python sources from the tree -> $pkg")
# Run from /tmp so that `import fastattn` is the installed package.
(cd /tmp && "$python" -c "import fastattn; print('fastattn', fastattn.__version__, fastattn.build_info()['cuda_devices'])")

if has overhead; then
  run overhead 90 bash -c "cd /tmp && '$python' '$root/tools/dev/profile/py_overhead_cuda.py' \
      '$out/overhead.json' > '$out/overhead.log' 2>&1"
  cat "$out/overhead.log"
fi
if has tests; then
  # From tests/python (its conftest and reference helpers); rootdir the tree, not the package.
  run tests 120 bash -c "cd tests/python && '$python' -m pytest -q -ra -p no:cacheprovider -m 'not slow' \
      test_transformers.py test_torch_eager.py test_kv_cache.py test_torch.py \
      > '$out/pytest.log' 2>&1"
  tail -8 "$out/pytest.log"
fi
if has bench; then
  # shellcheck disable=SC2086  # BENCH_ARGS is a list of arguments
  run bench 330 bash -c "cd /tmp && '$python' '$root/bench/cuda/transformers_llama.py' \
      '$out/transformers_llama.json' ${BENCH_ARGS:-} > '$out/transformers_llama.log' 2>&1"
  grep -E "^(model|prefill|decode|attention|wrote)" "$out/transformers_llama.log"
  grep -E "Error|error" "$out/transformers_llama.log" | head -5
fi
if has bench_gqa; then  # the same model with 8 KV heads (Llama-3/Mistral-style GQA 32/8)
  run bench_gqa 150 bash -c "cd /tmp && '$python' '$root/bench/cuda/transformers_llama.py' \
      '$out/transformers_llama_gqa8.json' --kv-heads 8 --prefill 8192 \
      > '$out/transformers_llama_gqa8.log' 2>&1"
  grep -E "^(prefill|decode|attention|wrote)" "$out/transformers_llama_gqa8.log"
fi
echo
echo "== stages"
printf '%s\n' "${status[@]}"
