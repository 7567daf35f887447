#!/usr/bin/env bash
# run-tests.sh — set up, build with warnings as errors, run every test: the docs' links and
# rendered results, the GoogleTest suite (Release and ASan+UBSan), `fastattn check`, the
# install + find_package consumer, and the Python package's tests.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)
bash tools/scripts/setup.sh
jobs=$(nproc)

echo "== docs: every relative link resolves; the results blocks are what bench/results/ gives"
python3 tools/scripts/check-doc-links.py
bash tools/scripts/update-docs.sh --check > /dev/null

echo "== Release build (warnings are errors) and tests"
cmake --preset ci >/dev/null
cmake --build --preset ci -j "$jobs"
ctest --preset ci -j "$jobs"
./build/ci/tools/cli/fastattn check --quick

echo "== install + find_package(fastattn) consumer"
rm -rf build/install build/consumer
cmake --install build/ci --prefix build/install >/dev/null
cmake -S examples/consumer -B build/consumer -G Ninja -DCMAKE_PREFIX_PATH="$root/build/install" >/dev/null
cmake --build build/consumer
./build/consumer/consumer

echo "== ASan + UBSan build and tests"
cmake --preset asan >/dev/null
cmake --build --preset asan -j "$jobs"
ASAN_OPTIONS=detect_leaks=1 ctest --preset asan -j "$jobs"

if [ -f tests/python/run.sh ]; then
  echo "== Python package"
  # The same small CUDA set as the ci preset (sm_80; head dims 64, 128), so a 2-core machine
  # builds it in minutes; the package's own default is every head dim (pyproject.toml).
  # FASTATTN_PIP_ARGS set by the caller replaces it.
  export FASTATTN_PIP_ARGS="${FASTATTN_PIP_ARGS--Ccmake.define.FASTATTN_CUDA_ARCHS=80 -Ccmake.define.FASTATTN_CUDA_HEAD_DIMS=64;128}"
  bash tests/python/run.sh
fi
