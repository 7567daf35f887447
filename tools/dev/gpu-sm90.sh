#!/usr/bin/env bash
# gpu-sm90.sh — the Hopper forward's device job (issue 15), one call: build with
# FASTATTN_CUDA_ARCHS=90 (sm80 units for sm_90 + the sm_90a units), check the SASS (HGMMA,
# setmaxnreg, no local memory) and the ptxas log, run the sm90 tests, time the issue's rows
# beside PyTorch SDPA (cuDNN, flash) in the same job, and A/B the sm90 path against
# FASTATTN_CUDA_PATH=sm80.
#   carry ["build/carry-sm90", "build/debs"]; command:
#   cd build/carry-sm90 && mkdir -p build && ln -sfn ../../debs build/debs && STAGES="..." bash tools/dev/gpu-sm90.sh
# STAGES (default "build sass sm90 bench"; run in the order build sass smoke sweep sm90 bench suite suite80 sanitize): also
# "smoke" (the quick sm90 tests: both schedulers, small shapes, strided, declines), "sweep" (issue 15's bar sweep:
# cuda_bench sweep90 with the default scheduler rule, then persistent and grid forced, beside sdpa_anchor.py sweep90 cuDNN and flash,
# judged by bench/cuda/sweep_sm90.py into sweep.json), "suite" (ctest -L gpu, then the forward suites
# with FASTATTN_CUDA_PATH=sm80; "suite80" that second part alone) and "sanitize" (memcheck/racecheck/synccheck of the small set).
# SWEEP_FORCED (default "persistent grid"): the schedulers the sweep also runs forced, any of "persistent grid dynamic"
# (each tagged variant sm90-<name>; "" for the default rule alone).
# HEAD_DIMS (default "64;96;128;256") and TARGETS (default: gpu tests, CPU tests, cuda bench, cli) shape the build.
# BUDGET_S (default 285) caps the whole job. $OUT (8 files at most): summary.txt, build.log,
# sass.txt, sm90-tests.log, ctest-gpu.log or suite-sm80.log, sanitize.log, bench.jsonl or sweep.jsonl, sweep.json.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root" || exit 2
out=${OUT:-/tmp/fastattn_out}
mkdir -p "$out"
exec > >(tee -a "$out/summary.txt") 2>&1
stages=${STAGES:-"build sass sm90 bench"}
budget=${BUDGET_S:-285}
dims=${HEAD_DIMS:-"64;96;128;256"}
targets=${TARGETS:-"fastattn_gpu_tests fastattn_tests fastattn_cuda_bench fastattn_cli"}
python=/opt/torch/.venv/bin/python3
[ -x "$python" ] || python=python3
command -v cmake >/dev/null || PATH=$PATH:$(dirname "$python")
export PATH
build=$root/build/sm90
t0=$SECONDS
status=()
. "$root/tools/dev/lib.sh"  # has, note, run, device_tools

device_tools

if has build; then
  run build 210 bash -c "cmake -S . -B '$build' -G Ninja -DCMAKE_BUILD_TYPE=Release -DFASTATTN_WERROR=ON \
      -DFASTATTN_CUDA=ON -DFASTATTN_CUDA_ARCHS=90 '-DFASTATTN_CUDA_HEAD_DIMS=$dims' > '$out/build.log' 2>&1 &&
    cmake --build '$build' -j 16 --target $targets >> '$out/build.log' 2>&1"
  tail -3 "$out/build.log"
  grep -E "ptxas (warning|error)|C75(08|10|17|19)" "$out/build.log" | head -5
fi
if has sass; then
  {
    for o in "$build"/CMakeFiles/fastattn_cuda_sm90.dir/src/cuda/generated/*.o; do
      cuobjdump --dump-sass "$o" > /tmp/sass_one.txt 2>&1
      echo "$(basename "$o"): HGMMA $(grep -c HGMMA /tmp/sass_one.txt), UTMALDG $(grep -c UTMALDG /tmp/sass_one.txt)," \
        "SETMAXREG $(grep -c SETMAXREG /tmp/sass_one.txt), LDL/STL $(grep -cE 'LDL|STL' /tmp/sass_one.txt)," \
        "WARPGROUP.DEPBAR $(grep -c 'WARPGROUP.DEPBAR' /tmp/sass_one.txt)"
    done
    cuobjdump --dump-resource-usage "$build"/CMakeFiles/fastattn_cuda_sm90.dir/src/cuda/generated/*bf16_hdim128*.o
    # ptxas reports injected waits / serialised wgmma (C7510/C7517/C7519) and ignored setmaxnreg
    # (C7508) as info lines under -v: one unit compiled again with -v, they must be absent.
    nvcc -std=c++17 -O3 --expt-relaxed-constexpr -gencode=arch=compute_90a,code=sm_90a -Xptxas=-v -Iinclude -Isrc \
      -DFASTATTN_HAVE_CUDA=1 -c src/cuda/generated/flash_fwd_sm90_bf16_hdim128.cu -o /tmp/ptxas_check.o 2>&1 |
      grep -E "C75(08|10|17|19)|registers|spill" | sort | uniq -c
  } > "$out/sass.txt" 2>&1
  cat "$out/sass.txt" | head -12
fi
"$build/tools/cli/fastattn" info 2>&1 | grep -iE "path|device|arch" | head -8
if has smoke; then
  run smoke 45 bash -c "'$build/tests/fastattn_gpu_tests' --gtest_filter='CudaSm90.SchedulersGiveTheSameBits:CudaSm90.SmallShapesMatchFloat64:CudaSm90.StridedViewsGiveTheContiguousBits:CudaSm90.UnservedCallsRunSm80WithAReason' > '$out/sm90-tests.log' 2>&1"
  grep -E "^\[  (PASSED|FAILED) |OK \]|FAILED \]" "$out/sm90-tests.log" | head -20
  grep -B2 -A12 "Failure" "$out/sm90-tests.log" | head -40
fi
if has sweep; then
  bench="$build/bench/cuda/fastattn_cuda_bench"
  run sweep_sdpa 90 bash -c "PYTHONUNBUFFERED=1 '$python' bench/cuda/sdpa_anchor.py sweep90 --backends cudnn,flash --no-gemm --repeats 10 --max-seconds 2 > '$out/sweep.jsonl' 2>> '$out/bench.err'"
  run sweep_default 50 bash -c "'$bench' sweep90 --repeats 10 --max-seconds 2 >> '$out/sweep.jsonl' 2>> '$out/bench.err'"
  if [[ " ${SWEEP_FORCED-persistent grid} " == *" persistent "* ]]; then
  run sweep_persistent 50 bash -c "FASTATTN_CUDA_SM90_SCHEDULER=persistent '$bench' sweep90 --repeats 10 --max-seconds 2 | sed 's/\"source\":\"fastattn\"/\"source\":\"fastattn\",\"variant\":\"sm90-persistent\"/' >> '$out/sweep.jsonl' 2>> '$out/bench.err'"
  fi
  [[ " ${SWEEP_FORCED-persistent grid} " == *" grid "* ]] && run sweep_grid 50 bash -c "FASTATTN_CUDA_SM90_SCHEDULER=grid '$bench' sweep90 --repeats 10 --max-seconds 2 | sed 's/\"source\":\"fastattn\"/\"source\":\"fastattn\",\"variant\":\"sm90-grid\"/' >> '$out/sweep.jsonl' 2>> '$out/bench.err'"
  [[ " ${SWEEP_FORCED-persistent grid} " == *" dynamic "* ]] && run sweep_dynamic 50 bash -c "FASTATTN_CUDA_SM90_SCHEDULER=dynamic '$bench' sweep90 --repeats 10 --max-seconds 2 | sed 's/\"source\":\"fastattn\"/\"source\":\"fastattn\",\"variant\":\"sm90-dynamic\"/' >> '$out/sweep.jsonl' 2>> '$out/bench.err'"
  "$python" bench/cuda/sweep_sm90.py "$out/sweep.jsonl" --out "$out/sweep.json"
fi
if has sm90; then
  run sm90 120 bash -c "'$build/tests/fastattn_gpu_tests' --gtest_filter='${SM90_FILTER:-CudaSm90.*:CudaBackend.BuildReportsCuda}' >> '$out/sm90-tests.log' 2>&1"
  grep -E "^\[  (PASSED|FAILED) |OK \]|FAILED \]" "$out/sm90-tests.log" | head -20
  grep -B2 -A12 "Failure" "$out/sm90-tests.log" | head -60
  run cpu_plan 30 bash -c "'$build/tests/fastattn_tests' --gtest_brief=1 \
      --gtest_filter='CudaForwardPath.*:CudaHeuristics.*:Environment.*:CudaBackwardPlan.*' >> '$out/sm90-tests.log' 2>&1"
  tail -3 "$out/sm90-tests.log"
fi
if has bench; then
  bench="$build/bench/cuda/fastattn_cuda_bench"
  run bench_sm90 60 bash -c "'$bench' hopper > '$out/bench.jsonl' 2>> '$out/bench.err'"
  run bench_plain 60 bash -c "FASTATTN_CUDA_SM90_OVERLAP=0 '$bench' hopper | sed 's/\"source\":\"fastattn\"/\"source\":\"fastattn\",\"variant\":\"sm90-no-overlap\"/' >> '$out/bench.jsonl' 2>> '$out/bench.err'"
  run bench_sm80 60 bash -c "FASTATTN_CUDA_PATH=sm80 '$bench' hopper | sed 's/\"source\":\"fastattn\"/\"source\":\"fastattn\",\"variant\":\"sm80\"/' >> '$out/bench.jsonl' 2>> '$out/bench.err'"
  run bench_sdpa 90 bash -c "PYTHONUNBUFFERED=1 '$python' bench/cuda/sdpa_anchor.py hopper --backends cudnn,flash --no-gemm >> '$out/bench.jsonl' 2>> '$out/bench.err'"
  "$python" - "$out/bench.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
key = lambda r: (r.get("b"), r.get("h"), r.get("hkv"), r.get("sq"), r.get("d"), r.get("causal"))
table = {}
for r in rows:
    if r.get("kind") == "device" or "tflops" not in r: continue
    who = r.get("variant", "fastattn") if r["source"] == "fastattn" else r.get("backend")
    table.setdefault(key(r), {})[who] = r["tflops"]
print("b h hkv s d causal | fastattn(sm90) | sm90 no overlap | sm80 forced | cudnn | flash | /cudnn")
for k, v in table.items():
    f, c = v.get("fastattn"), v.get("cudnn")
    print(k, "|", *(f"{v.get(x, float('nan')):.0f}" for x in ("fastattn", "sm90-no-overlap", "sm80", "cudnn", "flash")),
          "|", f"{f / c:.2f}" if f and c else "-")
PY
fi
if has suite; then
  run suite 150 bash -c "cd '$build' && ctest -L gpu -j ${CTEST_JOBS:-1} --output-on-failure > '$out/ctest-gpu.log' 2>&1"
  tail -6 "$out/ctest-gpu.log"
fi
if has suite80; then  # the CUDA forward suites and the sm90 ones (which then skip) with sm80 forced
  run suite_sm80 110 bash -c "FASTATTN_CUDA_PATH=sm80 '$build/tests/fastattn_gpu_tests' --gtest_brief=1 \
      --gtest_filter='CudaBackend.*:CudaSm90.*' > '$out/suite-sm80.log' 2>&1"
  tail -4 "$out/suite-sm80.log"
  grep -E "FAILED" "$out/suite-sm80.log" | head -5
fi
if has sanitize; then
  for tool in memcheck racecheck synccheck; do
    run "$tool" 45 bash -c "compute-sanitizer --tool $tool --error-exitcode 9 '$build/tests/fastattn_gpu_tests' \
        --gtest_filter='CudaSm90.SmallShapesMatchFloat64' >> '$out/sanitize.log' 2>&1"
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY|SYNCCHECK SUMMARY|PASSED|FAILED" "$out/sanitize.log" | tail -3
  done
fi
echo "== stages"
printf '%s\n' "${status[@]}"
