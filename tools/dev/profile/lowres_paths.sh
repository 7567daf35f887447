#!/usr/bin/env bash
# lowres_paths.sh — one device call: the Volta (sm70) and Turing (sm75) paths forced on a newer
# GPU (FASTATTN_CUDA_PATH, src/cuda/forward_path.hpp). Logs and JSON under $OUT.
#   bash tools/dev/profile/lowres_paths.sh build/carry-lowres
# Stages (STAGES, default "tests bench ncu"):
#   tests  the GPU suite's forward tests with each path forced (the ctest entries gpu_forward_sm7x)
#   bench  forward d = 128, s = 4k, f16 (the issue's sanity bar) and d = 64, sm80 / sm75 / sm70
#          paths in turn, two rounds, CUDA events (fastattn bench)
#   ncu    shared-memory bank conflicts of the forced paths' main forward kernel (one launch,
#          --clock-control none): l1tex data bank conflicts over shared-memory wavefronts
#   ncusrc the sm70 path's forward kernel per SASS instruction (source counters, CSV): which
#          instructions the shared-memory wavefronts and bank conflicts come from (on sm90 the
#          m8n8k4 MMA is emulated in a subroutine of shuffles, which Volta does not run)
#   bwd    the backward of each path in PATHS: the backward suite forced, and its speed against
#          the sm80 backward (d = 128 s = 4k, causal too; d = 64), two rounds, JSON per run
set -uo pipefail
bin=${1:-build/carry-lowres}
out=${OUT:-/tmp/fastattn_out}
mkdir -p "$out"
# A device call brings back at most 8 files: logs go to $log, tarred into $OUT/lowres.tar.gz.
log=/tmp/lowres_logs
rm -rf "$log" && mkdir -p "$log"
trap 'tar czf "$out/lowres.tar.gz" -C "$log" .' EXIT
stages=" ${STAGES:-tests bench ncu} "
paths=${PATHS:-sm75 sm70}

# bench_paths PASS NAME: PASS (fwd / bwd) at d = 128 s = 4k (causal too) and d = 64, f16, the
# sm80 path and then each of $paths, two rounds; $log/NAME.txt, JSON $log/NAME_<round>_<path>_<shape>.json.
bench_paths() {
  local pass=$1 name=$2
  local common=(--device cuda --dtype f16 --warmup 3 --min-time 0.4 --repeats 20 --markdown --pass "$pass")
  for round in 1 2; do
    for path in sm80 $paths; do
      for shape in "--batch 4 --heads 16 --seqlen 4096 --head-dim 128" \
                   "--batch 4 --heads 16 --seqlen 4096 --head-dim 128 --causal" \
                   "--batch 4 --heads 32 --seqlen 4096 --head-dim 64"; do
        echo "## round $round path $path $shape"
        # shellcheck disable=SC2086
        FASTATTN_CUDA_PATH=$path timeout 60 "$bin/fastattn" bench "${common[@]}" $shape \
          --json "$log/${name}_${round}_${path}_$(tr -d ' -' <<<"$shape").json"
      done
    done
  done > "$log/$name.txt" 2>&1
  grep -E "^## |cuda\." "$log/$name.txt" | tee "$out/$name.txt" | head -60
}

if [[ $stages == *" tests "* ]]; then
  for path in $paths; do
    FASTATTN_CUDA_PATH=$path timeout ${TEST_TIMEOUT:-150} "$bin/fastattn_gpu_tests" --gtest_brief=1 \
      "--gtest_filter=${TEST_FILTER:-CudaBackend.RandomForwardCasesMatchFloat64:CudaBackend.ForcedSplitKvRandomCasesMatchFloat64:Paths/CudaForwardPath.*/$path}" \
      > "$log/tests_$path.log" 2>&1
    echo "tests $path rc=$?: $(grep -cE '^\[       OK' "$log/tests_$path.log") OK; $(grep -E '^\[  (FAILED|PASSED|SKIPPED)' "$log/tests_$path.log" | tr '\n' ' ')"
  done | tee "$out/tests.txt"
fi

if [[ $stages == *" bench "* ]]; then
  bench_paths fwd bench
fi

if [[ $stages == *" ncusrc "* ]]; then
  ncu_bin=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null)
  FASTATTN_CUDA_PATH=sm70 timeout 150 "$ncu_bin" --clock-control none --section SourceCounters \
    -k regex:flash_forward_kernel --launch-skip 1 --launch-count 1 -o /tmp/sm70_src -f \
    "$bin/fastattn" bench --device cuda --dtype f16 --warmup 1 --repeats 1 --min-time 0 --no-peaks \
    --pass fwd --batch 1 --heads 16 --seqlen 4096 --head-dim 128 > "$log/ncusrc.log" 2>&1
  echo "ncusrc rc=$?" | tee -a "$out/ncu.txt"
  "$ncu_bin" --import /tmp/sm70_src.ncu-rep --page source --csv --print-source sass 2>&1 | gzip > "$out/sm70_sass.csv.gz"
fi

if [[ $stages == *" bwd "* ]]; then
  for path in $paths; do
    [[ ${BWD_TESTS:-1} == 1 ]] || break  # BWD_TESTS=0: the call runs the whole suite itself
    FASTATTN_CUDA_PATH=$path timeout ${TEST_TIMEOUT:-200} "$bin/fastattn_gpu_tests" --gtest_brief=1 \
      "--gtest_filter=CudaBackward.*" > "$log/tests_bwd_$path.log" 2>&1
    echo "bwd tests $path rc=$?: $(grep -E '^\[  (FAILED|PASSED|SKIPPED)' "$log/tests_bwd_$path.log" | tr '\n' ' ')" \
      | tee -a "$out/tests.txt"
    grep -B2 -A12 "Failure" "$log/tests_bwd_$path.log" | head -60
  done
  bench_paths bwd bench_bwd
fi

if [[ $stages == *" ncu "* ]]; then
  ncu_bin=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null)
  metrics=l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,smsp__inst_executed_op_shared_ld.sum,smsp__inst_executed_op_shared_st.sum,gpu__time_duration.sum
  for path in $paths sm80; do
    for d in 128 64; do
      FASTATTN_CUDA_PATH=$path timeout 120 "$ncu_bin" --clock-control none --metrics "$metrics" \
        -k regex:flash_forward_kernel --launch-skip 1 --launch-count 1 --csv \
        "$bin/fastattn" bench --device cuda --dtype f16 --warmup 1 --repeats 1 --min-time 0 --no-peaks \
        --pass fwd --batch 1 --heads 16 --seqlen 4096 --head-dim $d > "$log/ncu_${path}_d$d.csv" 2>&1
      echo "ncu $path d$d rc=$?"
      grep -E '"(l1tex|smsp|gpu)__' "$log/ncu_${path}_d$d.csv" | awk -F'","' '{print "  " $(NF-2) " = " $NF}' | tr -d '"'
    done
  done | tee "$out/ncu.txt"
  # Shared-memory table per instruction kind (ld / st / ldsm / atom: wavefronts, bank conflicts).
  for path in $paths; do
    FASTATTN_CUDA_PATH=$path timeout 120 "$ncu_bin" --clock-control none --section MemoryWorkloadAnalysis_Tables \
      --print-details all -k regex:flash_forward_kernel --launch-skip 1 --launch-count 1 \
      "$bin/fastattn" bench --device cuda --dtype f16 --warmup 1 --repeats 1 --min-time 0 --no-peaks \
      --pass fwd --batch 1 --heads 16 --seqlen 4096 --head-dim 128 > "$log/ncu_tables_${path}_d128.txt" 2>&1
    echo "ncu tables $path rc=$?"
    grep -iE "shared|bank" "$log/ncu_tables_${path}_d128.txt" | head -30
  done | tee -a "$out/ncu.txt"
fi
