#!/usr/bin/env bash
# gpu-sm90-bwd.sh — the Hopper backward's device job (issue 16), one call: build with
# FASTATTN_CUDA_ARCHS=90 (sm80 units for sm_90 + the sm_90a units), check the ptxas log and the
# SASS of the backward units (HGMMA, no local memory, no C7508/C7510/C7517/C7519), run the sm90
# backward tests (opt-in FASTATTN_CUDA_BWD_SM90=1), then time the issue's rows (forward, backward
# alone, forward+backward) beside PyTorch SDPA's cuDNN and flash backends in the same job, with
# the sm80 backward and the bulk reduce-add dQ as A/B columns.
#   carry ["build/carry-bwd90", "build/debs"]; command:
#   cd build/carry-bwd90 && mkdir -p build && ln -sfn ../../debs build/debs && STAGES="..." bash tools/dev/gpu-sm90-bwd.sh
# Two calls fit the 600 s per-call limit (the build directory stays on the warm machine, so the
# second build is incremental): first STAGES="build sass tests sanitize", then
# STAGES="build bench det" (and "build suite" for the whole GPU suite on the sm90 backward).
# STAGES (default "build sass tests"; run in the order build sass tests bench det suite
# sanitize):
#   tests     CudaSm90Backward.* (gradients vs float64 on the odd shapes, both dQ reductions,
#             deterministic 10-run bitwise repeatability, routing) and the CPU plan/layout tests
#   bench     cuda_bench hopper --passes fwd,bwd,fwdbwd: sm90 backward (atomic dQ), sm90 (bulk
#             dQ), sm80 backward; sdpa_anchor.py hopper --passes fwd,bwd,fwdbwd --backends cudnn,flash
#   det       cuda_bench determinism (deterministic backward: bitwise check and its cost), sm90
#   suite     ctest -L gpu with FASTATTN_CUDA_BWD_SM90=1 (every backward suite on the sm90 path
#             where it serves), then CudaBackward.* with FASTATTN_CUDA_PATH=sm80
#   sanitize  compute-sanitizer memcheck and racecheck of CudaSm90Backward.SmallShapesMatchFloat64
# BUDGET_S (default 540) caps the whole job. $OUT: summary.txt, build.log, sass.txt,
# tests.log, bench.jsonl, bench.err, det.jsonl, ctest-gpu.log, suite-sm80.log, sanitize.log.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root" || exit 2
out=${OUT:-/tmp/fastattn_out}
mkdir -p "$out"
exec > >(tee -a "$out/summary.txt") 2>&1
stages=${STAGES:-"build sass tests"}
budget=${BUDGET_S:-540}
python=/opt/torch/.venv/bin/python3
[ -x "$python" ] || python=python3
command -v cmake >/dev/null || PATH=$PATH:$(dirname "$python")
export PATH
build=$root/build/sm90
t0=$SECONDS
status=()
has() { [[ " $stages " == *" $1 "* ]]; }
note() { echo "[$((SECONDS - t0))s] $*"; }
run() {
  local name=$1 limit=$2; shift 2
  local left=$((budget - (SECONDS - t0) - 5))
  ((limit > left)) && limit=$left
  if ((limit < 10)); then status+=("$name: skipped (budget)"); note "== $name skipped"; return; fi
  note "== $name (limit ${limit}s)"
  local t=$SECONDS rc
  timeout -k 5 "$limit" "$@"
  rc=$?
  status+=("$name: rc=$rc ($((SECONDS - t))s)")
  note "-- $name rc=$rc"
}

FASTATTN_OFFLINE_DEBS=$root/build/debs bash tools/scripts/setup.sh >/dev/null 2>&1
for env in /opt/fastattn-deps/env.sh "$root/build/deps/env.sh"; do
  # shellcheck disable=SC1090
  [ -f "$env" ] && . "$env"
done
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader

if has build; then
  run build 200 bash -c "cmake -S . -B '$build' -G Ninja -DCMAKE_BUILD_TYPE=Release -DFASTATTN_WERROR=ON \
      -DFASTATTN_CUDA=ON -DFASTATTN_CUDA_ARCHS=90 '-DFASTATTN_CUDA_HEAD_DIMS=64;128' > '$out/build.log' 2>&1 &&
    cmake --build '$build' -j 16 --target fastattn_gpu_tests fastattn_tests fastattn_cuda_bench fastattn_cli >> '$out/build.log' 2>&1"
  tail -3 "$out/build.log"
  grep -E "ptxas (warning|error)|C75(08|10|17|19)" "$out/build.log" | head -5
fi
if has sass; then
  {
    for o in "$build"/CMakeFiles/fastattn_cuda_sm90.dir/src/cuda/generated/flash_bwd_sm90_*.o; do
      cuobjdump --dump-sass "$o" > /tmp/sass_one.txt 2>&1
      echo "$(basename "$o"): HGMMA $(grep -c HGMMA /tmp/sass_one.txt), UTMALDG $(grep -c UTMALDG /tmp/sass_one.txt)," \
        "UBLKRED $(grep -c UBLKRED /tmp/sass_one.txt), REDG $(grep -c REDG /tmp/sass_one.txt)," \
        "SETMAXREG $(grep -c SETMAXREG /tmp/sass_one.txt), LDL/STL $(grep -cE 'LDL|STL' /tmp/sass_one.txt)"
    done
    # ptxas prints C7510/C7517/C7519 (wgmma serialised) and C7508 (setmaxnreg ignored) as info
    # lines under -v: each backward unit compiled again with -v, they must be absent.
    for u in src/cuda/generated/flash_bwd_sm90_*.cu; do
      echo "== $u"
      nvcc -std=c++17 -O3 --expt-relaxed-constexpr -gencode=arch=compute_90a,code=sm_90a -Xptxas=-v -Iinclude -Isrc \
        -DFASTATTN_HAVE_CUDA=1 -c "$u" -o /tmp/ptxas_check.o 2>&1 | grep -E "C75(08|10|17|19)|spill" | sort | uniq -c
    done
  } > "$out/sass.txt" 2>&1
  head -30 "$out/sass.txt"
fi
"$build/tools/cli/fastattn" info 2>&1 | grep -iE "path|device|arch" | head -8
export FASTATTN_CUDA_BWD_SM90=1
if has tests; then
  run tests 200 bash -c "'$build/tests/fastattn_gpu_tests' --gtest_filter='CudaSm90Backward.*' > '$out/tests.log' 2>&1"
  grep -E "^\[  (PASSED|FAILED) |OK \]|FAILED \]" "$out/tests.log" | head -20
  grep -B2 -A12 "Failure" "$out/tests.log" | head -80
  run cpu_plan 30 bash -c "'$build/tests/fastattn_tests' --gtest_brief=1 \
      --gtest_filter='CudaSm90Backward*:CudaForwardPath.*:CudaBackwardPlan.*:Environment.*' >> '$out/tests.log' 2>&1"
  tail -3 "$out/tests.log"
fi
if has bench; then
  bench="$build/bench/cuda/fastattn_cuda_bench"
  passes="--passes fwd,bwd,fwdbwd --max-seconds 2"
  tag() { echo "sed 's/\"source\":\"fastattn\"/\"source\":\"fastattn\",\"variant\":\"$1\"/'"; }
  run bench_sm90 90 bash -c "'$bench' hopper $passes | $(tag sm90-atomic) >> '$out/bench.jsonl' 2>> '$out/bench.err'"
  run bench_bulk 90 bash -c "FASTATTN_CUDA_SM90_BWD_DQ=bulk '$bench' hopper $passes | $(tag sm90-bulk) >> '$out/bench.jsonl' 2>> '$out/bench.err'"
  run bench_sm80 90 bash -c "FASTATTN_CUDA_BWD_SM90=0 '$bench' hopper $passes | $(tag sm80-bwd) >> '$out/bench.jsonl' 2>> '$out/bench.err'"
  run bench_sdpa 150 bash -c "PYTHONUNBUFFERED=1 '$python' bench/cuda/sdpa_anchor.py hopper --passes fwd,bwd,fwdbwd \
      --backends cudnn,flash --no-gemm --max-seconds 2 >> '$out/bench.jsonl' 2>> '$out/bench.err'"
  "$python" - "$out/bench.jsonl" <<'PY'
import json, math, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
key = lambda r: (r.get("b"), r.get("h"), r.get("hkv"), r.get("sq"), r.get("d"), r.get("causal"), r.get("pass"))
table = {}
for r in rows:
    if r.get("kind") == "device" or "tflops" not in r: continue
    who = r.get("variant", "fastattn") if r["source"] == "fastattn" else r.get("backend")
    table.setdefault(key(r), {})[who] = r["tflops"]
cols = ("sm90-atomic", "sm90-bulk", "sm80-bwd", "cudnn", "flash")
print("b h hkv s d causal pass | " + " | ".join(cols) + " | atomic/cudnn bulk/cudnn")
ratios = {}
for k, v in sorted(table.items(), key=lambda kv: str(kv[0])):
    c = v.get("cudnn")
    rs = [v.get(x) / c if v.get(x) and c else float("nan") for x in ("sm90-atomic", "sm90-bulk")]
    for x, r in zip(("sm90-atomic", "sm90-bulk"), rs):
        if not math.isnan(r): ratios.setdefault((k[-1], x), []).append(r)
    print(k, "|", " | ".join(f"{v.get(x, float('nan')):.0f}" for x in cols), "|", " ".join(f"{r:.2f}" for r in rs))
for (p, x), rs in sorted(ratios.items()):
    print(f"geomean {x} / cudnn, pass {p}: {math.exp(sum(map(math.log, rs)) / len(rs)):.3f} over {len(rs)} rows, min {min(rs):.2f}")
PY
fi
if has det; then
  run det_sm90 90 bash -c "'$build/bench/cuda/fastattn_cuda_bench' determinism > '$out/det.jsonl' 2>> '$out/bench.err'"
  tail -4 "$out/det.jsonl"
fi
if has suite; then
  run suite 150 bash -c "cd '$build' && ctest -L gpu -j 1 --output-on-failure > '$out/ctest-gpu.log' 2>&1"
  tail -6 "$out/ctest-gpu.log"
  run suite_sm80 110 bash -c "FASTATTN_CUDA_PATH=sm80 '$build/tests/fastattn_gpu_tests' --gtest_brief=1 \
      --gtest_filter='CudaBackward.*:CudaSm90Backward.*' > '$out/suite-sm80.log' 2>&1"
  tail -4 "$out/suite-sm80.log"
fi
if has sanitize; then
  for tool in memcheck racecheck; do
    run "$tool" 90 bash -c "compute-sanitizer --tool $tool --error-exitcode 9 '$build/tests/fastattn_gpu_tests' \
        --gtest_filter='CudaSm90Backward.SmallShapesMatchFloat64' >> '$out/sanitize.log' 2>&1"
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED" "$out/sanitize.log" | tail -3
  done
fi
echo "== stages"
printf '%s\n' "${status[@]}"
