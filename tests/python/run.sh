#!/usr/bin/env bash
# tests/python/run.sh — build and install fastattn's Python package from this checkout (pip ->
# scikit-build-core -> CMake, Release, library + extension only), then run the Python tests.
#
#   tests/python/run.sh [pytest args...]
#
# Environment:
#   PYTHON                     interpreter to install into and test with (default: python3)
#   FASTATTN_PIP_ARGS          extra pip arguments, e.g. "--no-build-isolation" on a machine
#                              without a package index (needs scikit-build-core and nanobind)
#   FASTATTN_BUILD_DIR         keep the CMake build there, for incremental rebuilds
#   CMAKE_BUILD_PARALLEL_LEVEL build jobs (default: 2)
# The torch tests run when torch is installed and skip otherwise; with torch, transformers is
# installed too for the transformers integration's tests. pytest's exit status 5 ("no
# tests collected": a wrong path or -k/-m selection, or a collection that found nothing) fails
# the script with a message: a run that tested nothing is not a success.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
PYTHON="${PYTHON:-python3}"
export CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-2}"

pip_args=(--quiet --disable-pip-version-check)
# shellcheck disable=SC2206  # word splitting of FASTATTN_PIP_ARGS is intended
pip_args+=(${FASTATTN_PIP_ARGS:-})
if [[ -n "${FASTATTN_BUILD_DIR:-}" ]]; then
  pip_args+=("--config-settings=build-dir=${FASTATTN_BUILD_DIR}")
fi

echo "== pip install ${ROOT}[test]"
"$PYTHON" -m pip install "${pip_args[@]}" "${ROOT}[test]"
"$PYTHON" -c "import fastattn; print('fastattn', fastattn.__version__, fastattn.build_info())"
# tests/python/test_transformers.py needs torch and transformers. Where torch is installed, add
# transformers (pure-Python wheels, seconds) so that test runs instead of skipping; a machine
# without a package index skips it with a note rather than failing.
if "$PYTHON" -c "import torch" >/dev/null 2>&1 && ! "$PYTHON" -c "import transformers" >/dev/null 2>&1; then
  echo "== pip install transformers (torch is installed)"
  "$PYTHON" -m pip install --quiet --disable-pip-version-check "transformers>=5" ||
    echo "note: could not install transformers; tests/python/test_transformers.py will skip" >&2
fi

echo "== pytest tests/python"
cd "$ROOT"
set +e
"$PYTHON" -m pytest tests/python -ra "$@"
status=$?
set -e
if [[ $status -eq 5 ]]; then
  echo "FAILED: pytest collected no tests (exit 5) from tests/python $*: nothing was tested" >&2
  exit 1
fi
exit $status
