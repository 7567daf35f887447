#!/usr/bin/env bash
# fastattn vs PyTorch CPU flash attention on the GPU host's CPU (see server_cpu.py).
#
#   bench/server_cpu.sh [path/to/fastattn] [server_cpu.py options...]
#   THREADS=16 OUT=/some/dir bench/server_cpu.sh build/release/tools/cli/fastattn
#
# Needs only python3 with torch and numpy on the host; the fastattn binary is carried there
# (it links libstdc++ statically). Results: $OUT/server_cpu.json (default ./server_cpu_out).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
FASTATTN=${1:-${FASTATTN:-$HERE/../build/release/tools/cli/fastattn}}
[[ $# -gt 0 ]] && shift
THREADS=${THREADS:-16}
PYTHON=${PYTHON:-python3}

if [[ ! -x "$FASTATTN" ]]; then
  echo "server_cpu.sh: no fastattn binary at $FASTATTN (pass its path first)" >&2
  exit 2
fi
if (( $(nproc) < THREADS )); then
  echo "server_cpu.sh: warning: $THREADS threads requested on $(nproc) CPUs" >&2
fi
"$FASTATTN" info --threads "$THREADS" --no-peaks >&2
exec "$PYTHON" "$HERE/server_cpu.py" --fastattn "$FASTATTN" --threads "$THREADS" \
  --out "${OUT:-$PWD/server_cpu_out}" "$@"
