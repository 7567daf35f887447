#!/usr/bin/env bash
# gpu-sm90-bwd.sh — the Hopper backward's device job (issue 16). Either builds on the device
# (stage build: FASTATTN_CUDA_ARCHS=90, sm80 units for sm_90 + the sm_90a units) or runs
# binaries built here and carried (BIN_DIR: nothing is built there, stages build and sass skip).
#
# Carried binaries (the lead's final call; ~4 min):
#   here:   bash tools/dev/build-carry.sh 2      # build/carry: fastattn, fastattn_cuda_bench,
#                                                #   fastattn_gpu_tests, fastattn_tests (sm_90, d 64;128)
#           these stages need only fastattn_cuda_bench and fastattn_gpu_tests (fastattn: its
#           `info` line if present; fastattn_tests: stage tests only)
#   device: carry ["build/carry", ...]; command
#           BIN_DIR=build/carry STAGES="newtests bench det mem" BUDGET_S=240 bash tools/dev/gpu-sm90-bwd.sh
#   Expected: newtests ~60 s, bench ~60 s (fastattn) + ~45 s (SDPA), det ~15 s, mem ~25 s; a
#   step that would pass BUDGET_S is cut or skipped, in this order of priority.
# Built on the device (two calls, the build directory stays on the warm machine):
#   carry ["build/carry-bwd90", "build/debs"]; command
#   cd build/carry-bwd90 && mkdir -p build && ln -sfn ../../debs build/debs && STAGES="..." bash tools/dev/gpu-sm90-bwd.sh
#
# STAGES (default "build sass tests"; run in the order build sass tests newdims newtests bench
# det mem suite sanitize; HEAD_DIMS, default "64;128", the stage build's FASTATTN_CUDA_HEAD_DIMS):
#   tests     CudaSm90Backward.* (gradients vs float64 on the odd shapes, every dQ reduction,
#             deterministic 10-run bitwise repeatability, routing) and the CPU plan/layout tests
#   newdims   CudaSm90BackwardHeadDim96.* and ...256.* (odd shapes, causal sq != sk, GQA,
#             soft-cap, windows, deterministic 10-run bitwise, bulk dQ), CudaSm90Backward.Varlen*
#             (every built dim) and the routing test; d 96/256 need the dims in the build
#             (HEAD_DIMS="64;96;128;256"), varlen runs with any
#   newtests  only the tests added after the first GPU run (6/6 on 2026-12-01): Uncovered*,
#             FullyMasked*, Seqlen4097* (~60 s); NEWTESTS_FILTER replaces that gtest filter
#             (e.g. 'CudaSm90Backward.GroupedOrder*' for a test not yet run), NEWTESTS_LIMIT_S
#             its time limit (default 75)
#   bench     backward alone and forward+backward, bf16, on issue 16's shapes: the FA2 paper
#             sweep (16k tokens, hidden 2048: d 64 x 32 heads, d 128 x 16 heads, seqlen 512..16k,
#             causal and not) and GQA 32/8 d 128 causal s4k/8k/16k; fastattn's sm90 backward
#             with the dQ mode and tile order its plan picks (sm90-default), the same with
#             longest first for every call (sm90-longest: FASTATTN_CUDA_SM90_BWD_ORDER=
#             longest_first: one group of all pairs, the order before the causal calls' groups
#             of 4), the groups for windows too (sm90-grouped: =grouped), the default order in
#             groups of N pairs (sm90-grouped-gN: FASTATTN_CUDA_SM90_BWD_GROUP_PAIRS=N, for
#             each N in GROUP_SIZES, e.g. "2 4 8"), with atomic dQ, with bulk dQ
#             (FASTATTN_CUDA_SM90_BWD_DQ=bulk), with atomic-tiles dQ
#             (=atomic_tiles), head-major with atomic dQ
#             (FASTATTN_CUDA_SM90_BWD_ORDER=head_major) and the sm80 backward
#             (FASTATTN_CUDA_BWD_SM90=0), with PLAN_BULK=1 also bulk dQ in the plan's order
#             (sm90-plan-bulkdq), PyTorch SDPA's cuDNN and flash in the same job; rows in
#             bench.jsonl
#   det       deterministic backward (sm90): dq/dk/dv bitwise equal over 10 runs, its speed
#             against the default backward (det.jsonl); then (DET_AB=1, the default) the same
#             with FASTATTN_CUDA_SM90_BWD_ORDER=head_major (det-headmajor.jsonl) and
#             =shortest_first (det-shortestfirst.jsonl), and with each variant build
#             (det-NAME.jsonl, e.g. "early:-DFASTATTN_SM90_BWD_LATE_RELEASE=0");
#             sm90_bwd_summary.py prints their A/B; with DET_PAIRS=1 also --det-shapes pairs
#             (b1-b8 at s4k, 3 runs) with the default order (pairs.jsonl) and each of DET_ORDERS
#             (pairs-ORDER.jsonl, e.g. DET_ORDERS=longest_first: one group of all pairs), and
#             the same for --det-shapes pairs_varlen (pairs-varlen.jsonl, pairs-varlen-ORDER.jsonl:
#             the same tensors as one varlen batch of equal sequences)
#   mem       b1 h16 d128 causal backward at seqlen 32k/64k/128k: tensors + scratch bytes per
#             token (mem.jsonl); after bench/det/mem, tools/dev/sm90_bwd_summary.py judges the
#             bars (geomeans and minimums vs cuDNN) into sm90_bwd_summary.json
#   suite     ctest -L gpu with FASTATTN_CUDA_BWD_SM90=1 (every backward suite on the sm90 path
#             where it serves), then CudaBackward.* with FASTATTN_CUDA_PATH=sm80
#   sanitize  compute-sanitizer memcheck and racecheck of CudaSm90Backward.SmallShapesMatchFloat64
# TARGETS (stage build; default fastattn_gpu_tests fastattn_tests fastattn_cuda_bench fastattn_cli;
#   the CPU plan tests of stage tests run only when fastattn_tests is built). VARIANT_HEAD_DIMS
#   (default HEAD_DIMS): the variant builds' head dims. VARIANT_TESTS=0: stage tests skips them;
#   VARIANT_TEST_FILTER (default CudaSm90Backward.*): their gtest filter; BASE_TESTS=0: stage tests
#   runs only theirs (the default build's tested by an earlier call). DET_ORDERS (default
#   "head_major shortest_first"): the orders stage det times beside the default; BENCH_ANCHORS=0:
#   stage bench times no SDPA anchor. VARIANT_DQ (default
#   "atomic atomic-tiles bulk"): the dQ modes stage bench times for them.
# BUILD_VARIANTS (built by stage build, else used as an earlier call left them; default none): more builds, "name:flag,flag ..." each (e.g.
#   "oldorder:-DFASTATTN_SM90_BWD_DK_LAST=0"), the same configuration plus CMAKE_CUDA_FLAGS, into
#   build/sm90-NAME; stage tests runs their CudaSm90Backward.* too (tests-NAME.log), stage bench
#   times their sm90 dQ modes as variants NAME-atomic, NAME-atomic-tiles, NAME-bulk in the same
#   job (sm90_bwd_summary.py's A/B "NAME build vs default build", per dQ mode).
# Every step runs under timeout, capped by what is left of BUDGET_S (default 540).
# $OUT: summary.txt, build.log, sass.txt, tests.log, newtests.log, bench.jsonl, bench.err,
# det.jsonl, mem.jsonl, sm90_bwd_summary.json, ctest-gpu.log, suite-sm80.log, sanitize.log.
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
bin_dir=${BIN_DIR:-}
if [ -n "$bin_dir" ]; then
  bin_dir=$(cd "$bin_dir" && pwd)
  stages=$(sed -E 's/\b(build|sass)\b//g' <<<"$stages")  # carried binaries: nothing to build
fi
# The binaries: carried, or the build tree's.
gpu_tests=${bin_dir:+$bin_dir/fastattn_gpu_tests}
gpu_tests=${gpu_tests:-$build/tests/fastattn_gpu_tests}
cpu_tests=${bin_dir:+$bin_dir/fastattn_tests}
cpu_tests=${cpu_tests:-$build/tests/fastattn_tests}
bench=${bin_dir:+$bin_dir/fastattn_cuda_bench}
bench=${bench:-$build/bench/cuda/fastattn_cuda_bench}
cli=${bin_dir:+$bin_dir/fastattn}
cli=${cli:-$build/tools/cli/fastattn}
export LD_LIBRARY_PATH=/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}  # libnccl, libcublasLt
t0=$SECONDS
status=()
. "$root/tools/dev/lib.sh"  # has, note, run, load_deps_env

# The build's dependencies (and compute-sanitizer's) only when something is built or sanitised.
if has build || has sanitize || has suite; then
  FASTATTN_OFFLINE_DEBS=$root/build/debs bash tools/scripts/setup.sh >/dev/null 2>&1
fi
load_deps_env
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader

if has build; then
  run build 200 bash -c "cmake -S . -B '$build' -G Ninja -DCMAKE_BUILD_TYPE=Release -DFASTATTN_WERROR=ON \
      -DFASTATTN_CUDA=ON -DFASTATTN_CUDA_ARCHS=90 '-DFASTATTN_CUDA_HEAD_DIMS=${HEAD_DIMS:-64;128}' > '$out/build.log' 2>&1 &&
    cmake --build '$build' -j 16 --target ${TARGETS:-fastattn_gpu_tests fastattn_tests fastattn_cuda_bench fastattn_cli} >> '$out/build.log' 2>&1"
  tail -3 "$out/build.log"
  grep -E "ptxas (warning|error)|C75(08|10|12|17|19)" "$out/build.log" | head -5
fi
variant_builds=""
for bv in ${BUILD_VARIANTS:-}; do
  bname=${bv%%:*} bdir=$root/build/sm90-${bv%%:*}
  # Without stage build, a variant build left by an earlier call on the warm machine is used.
  has build && build_variant "$bname" "${bv#*:}" "${VARIANT_HEAD_DIMS:-${HEAD_DIMS:-64;128}}"
  [ -x "$bdir/bench/cuda/fastattn_cuda_bench" ] && variant_builds+=" $bname:$bdir"
done
if has sass; then
  {
    for o in "$build"/CMakeFiles/fastattn_cuda_sm90.dir/src/cuda/generated/flash_bwd_sm90_*.o; do
      cuobjdump --dump-sass "$o" > /tmp/sass_one.txt 2>&1
      echo "$(basename "$o"): HGMMA $(grep -c HGMMA /tmp/sass_one.txt), UTMALDG $(grep -c UTMALDG /tmp/sass_one.txt)," \
        "UBLKRED $(grep -c UBLKRED /tmp/sass_one.txt), REDG $(grep -c REDG /tmp/sass_one.txt)," \
        "SETMAXREG $(grep -c SETMAXREG /tmp/sass_one.txt), LDL/STL $(grep -cE 'LDL|STL' /tmp/sass_one.txt)"
    done
    # ptxas prints C7510/C7512/C7517/C7519 (wgmma serialised; C7512: for lack of registers) and
    # C7508 (setmaxnreg ignored) as info lines under -v, which -Werror lets through: each
    # backward unit compiled again with -v, they must be absent.
    for u in src/cuda/generated/flash_bwd_sm90_*.cu; do
      echo "== $u"
      nvcc -std=c++17 -O3 --expt-relaxed-constexpr -gencode=arch=compute_90a,code=sm_90a -Xptxas=-v -Iinclude -Isrc \
        -DFASTATTN_HAVE_CUDA=1 -c "$u" -o /tmp/ptxas_check.o 2>&1 | grep -E "C75(08|10|12|17|19)|spill" | sort | uniq -c
    done
  } > "$out/sass.txt" 2>&1
  head -30 "$out/sass.txt"
fi
[ -x "$cli" ] && "$cli" info --no-peaks 2>&1 | grep -iE "path|device|arch" | head -8
export FASTATTN_CUDA_BWD_SM90=1
# The stages' reference is the plan's own choice: no order, dQ mode or group size from the caller.
unset FASTATTN_CUDA_SM90_BWD_ORDER FASTATTN_CUDA_SM90_BWD_DQ FASTATTN_CUDA_SM90_BWD_GROUP_PAIRS
if has tests; then
  if [ "${BASE_TESTS:-1}" = 1 ]; then
    run tests 200 bash -c "'$gpu_tests' --gtest_filter='CudaSm90Backward.*' > '$out/tests.log' 2>&1"
    grep -E "^\[  (PASSED|FAILED) |OK \]|FAILED \]" "$out/tests.log" | head -20
    grep -B2 -A12 "Failure" "$out/tests.log" | head -80
  fi
  for vb in $variant_builds; do
    [ "${VARIANT_TESTS:-1}" = 1 ] || break
    run "tests_${vb%%:*}" 200 bash -c "'${vb#*:}/tests/fastattn_gpu_tests' --gtest_filter='${VARIANT_TEST_FILTER:-CudaSm90Backward.*}' \
        > '$out/tests-${vb%%:*}.log' 2>&1"
    grep -E "^\[  (PASSED|FAILED) |FAILED \]" "$out/tests-${vb%%:*}.log" | head -10
  done
  [ -x "$cpu_tests" ] && run cpu_plan 30 bash -c "'$cpu_tests' --gtest_brief=1 \
      --gtest_filter='CudaSm90Backward*:CudaForwardPath.*:CudaBackwardPlan.*:Environment.*' >> '$out/tests.log' 2>&1"
  tail -3 "$out/tests.log"
fi
if has newdims; then
  # d = 96 and 256 (need a build with them in FASTATTN_CUDA_HEAD_DIMS: HEAD_DIMS="64;96;128;256"
  # here or in build-carry.sh; the tests skip themselves otherwise) and varlen (expected ~2 min
  # with all four dims, not measured).
  run newdims 200 bash -c "'$gpu_tests' --gtest_filter='CudaSm90BackwardHeadDim*:CudaSm90Backward.Varlen*:CudaSm90Backward.UnservedCalls*' \
      > '$out/newdims.log' 2>&1"
  grep -E "^\[  (PASSED|FAILED|SKIPPED) |OK \]|FAILED \]|SKIPPED \]" "$out/newdims.log" | head -20
  grep -B2 -A12 "Failure" "$out/newdims.log" | head -60
fi
if has newtests; then
  newtests=${NEWTESTS_FILTER:-CudaSm90Backward.Uncovered*:CudaSm90Backward.FullyMasked*:CudaSm90Backward.Seqlen4097*}
  run newtests "${NEWTESTS_LIMIT_S:-75}" bash -c "'$gpu_tests' --gtest_filter='$newtests' > '$out/newtests.log' 2>&1"
  grep -E "^\[  (PASSED|FAILED) |OK \]|FAILED \]" "$out/newtests.log" | head -20
  grep -B2 -A12 "Failure" "$out/newtests.log" | head -60
fi
# Timing (cuda_bench and sdpa_anchor.py alike): 3 warm-up calls, >= 20 timed calls between CUDA
# events (fewer, >= 5, where 20 would take over 1 s), the median.
timing="--warmup 3 --repeats 20 --max-seconds 1"
# Every variant sets every switch: cuda_bench leaves a variant's variables set for the next one
# in the process, so each sm90 variant names its group size (empty: the plan's), dQ mode and order.
sm90="FASTATTN_CUDA_BWD_SM90=1+FASTATTN_CUDA_SM90_BWD_GROUP_PAIRS="
# sm90-default: the plan's dQ mode and tile order (FASTATTN_CUDA_SM90_BWD_DQ= and
# FASTATTN_CUDA_SM90_BWD_ORDER= unset them);
# sm90-longest: the same in one group of all (batch, KV head) pairs (the order before the
# twenty-fourth session's groups of 4 for causal calls, bar its head-major rule for 128+ pairs).
variants="sm90-default:$sm90+FASTATTN_CUDA_SM90_BWD_DQ=+FASTATTN_CUDA_SM90_BWD_ORDER="
variants+=",sm90-longest:$sm90+FASTATTN_CUDA_SM90_BWD_DQ=+FASTATTN_CUDA_SM90_BWD_ORDER=longest_first"
# sm90-grouped: the plan's dQ modes, the groups of pairs for windows too (plan.hpp: grouped).
variants+=",sm90-grouped:$sm90+FASTATTN_CUDA_SM90_BWD_DQ=+FASTATTN_CUDA_SM90_BWD_ORDER=grouped"
for n in ${GROUP_SIZES:-}; do
  variants+=",sm90-grouped-g$n:FASTATTN_CUDA_BWD_SM90=1+FASTATTN_CUDA_SM90_BWD_DQ=+FASTATTN_CUDA_SM90_BWD_ORDER="
  variants+="+FASTATTN_CUDA_SM90_BWD_GROUP_PAIRS=$n"
done
variants+=",sm90-atomic:$sm90+FASTATTN_CUDA_SM90_BWD_DQ=atomic+FASTATTN_CUDA_SM90_BWD_ORDER=longest_first"
variants+=",sm90-bulk:$sm90+FASTATTN_CUDA_SM90_BWD_DQ=bulk+FASTATTN_CUDA_SM90_BWD_ORDER=longest_first"
variants+=",sm90-atomic-tiles:$sm90+FASTATTN_CUDA_SM90_BWD_DQ=atomic_tiles+FASTATTN_CUDA_SM90_BWD_ORDER=longest_first"
variants+=",sm90-headmajor:$sm90+FASTATTN_CUDA_SM90_BWD_DQ=atomic+FASTATTN_CUDA_SM90_BWD_ORDER=head_major"
variants+=",sm80-bwd:FASTATTN_CUDA_BWD_SM90=0+FASTATTN_CUDA_SM90_BWD_DQ=atomic+FASTATTN_CUDA_SM90_BWD_ORDER=longest_first"
# PLAN_BULK=1: bulk dQ in the plan's own order and groups (sm90-bulk above runs longest_first), the
# A/B of the dQ rule: in the twenty-fourth session's call 5 (H100, longest_first, one run) bulk
# ran 1.046-1.160x the speed of atomic_tiles on the d = 128 causal rows at s >= 8k and the GQA rows.
[ "${PLAN_BULK:-0}" = 1 ] && variants+=",sm90-plan-bulkdq:$sm90+FASTATTN_CUDA_SM90_BWD_DQ=bulk+FASTATTN_CUDA_SM90_BWD_ORDER="
# ONLY_VARIANTS (space-separated names, e.g. "sm90-default"): time those alone (a short call).
if [ -n "${ONLY_VARIANTS:-}" ]; then
  kept=""
  for v in ${variants//,/ }; do [[ " $ONLY_VARIANTS " == *" ${v%%:*} "* ]] && kept+="${kept:+,}$v"; done
  [ -n "$kept" ] || { echo "ONLY_VARIANTS='$ONLY_VARIANTS' names none of the variants"; exit 2; }
  variants=$kept
fi
if has bench; then
  # One process per mode: each shape's tensors filled once, its three backward variants timed
  # one after the other on them (cuda_bench --variants); then the anchors.
  run bench_fastattn 135 bash -c "for m in gqa paper; do '$bench' \$m --passes bwd,fwdbwd $timing --variants '$variants'; done \
      >> '$out/bench.jsonl' 2>> '$out/bench.err'"
  # The anchors next: the bars need them (BENCH_ANCHORS=0 skips them: a build A/B alone).
  [ "${BENCH_ANCHORS:-1}" = 1 ] && run bench_sdpa 90 bash -c "PYTHONUNBUFFERED=1 '$python' bench/cuda/sdpa_anchor.py paper gqa --passes bwd,fwdbwd \
      --backends cudnn,flash --no-gemm --repeats 20 --max-seconds 1 >> '$out/bench.jsonl' 2>> '$out/bench.err'"
fi
if has det; then
  run det_sm90 40 bash -c "'$bench' determinism --runs 10 $timing > '$out/det.jsonl' 2>> '$out/bench.err'"
  # DET_PAIRS=1: the speed over the batch too (--det-shapes pairs, b1-b8 at s4k; 3 runs), the
  # default (pairs.jsonl) and each order of DET_ORDERS (pairs-ORDER.jsonl), even with DET_AB=0.
  if [ "${DET_PAIRS:-0}" = 1 ]; then
    # pairs_varlen: the same tensors as one varlen batch of equal sequences.
    for shapes in pairs pairs_varlen; do
      for order in default ${DET_ORDERS-head_major shortest_first}; do
        env=""; name=${shapes//_/-}
        [ "$order" = default ] || { env="FASTATTN_CUDA_SM90_BWD_ORDER=$order"; name="$name-${order//_/}"; }
        run "det_$name" 40 bash -c "$env '$bench' determinism --det-shapes $shapes --runs 3 $timing \
            > '$out/$name.jsonl' 2>> '$out/bench.err'"
      done
    done
  fi
  # The deterministic orders' A/B (tile_scheduler.hpp): head-major (the order of calls without
  # a mask before the fifteenth session) and shortest first (DET_AB=0 skips them and the variant
  # builds' runs).
  if [ "${DET_AB:-1}" = 1 ]; then
    for order in ${DET_ORDERS-head_major shortest_first}; do
      run "det_$order" 40 bash -c "FASTATTN_CUDA_SM90_BWD_ORDER=$order '$bench' determinism --runs 10 $timing \
          > '$out/det-${order//_/}.jsonl' 2>> '$out/bench.err'"
    done
    for vb in $variant_builds; do
      run "det_${vb%%:*}" 40 bash -c "'${vb#*:}/bench/cuda/fastattn_cuda_bench' determinism --runs 10 $timing \
          > '$out/det-${vb%%:*}.jsonl' 2>> '$out/bench.err'"
    done
  fi
fi
# The variant builds' A/B after the deterministic run: what a short budget cuts first.
if has bench; then
  for vb in $variant_builds; do
    vname=${vb%%:*} vbench=${vb#*:}/bench/cuda/fastattn_cuda_bench
    vvariants=""
    for mode in ${VARIANT_DQ:-atomic atomic-tiles bulk}; do
      vvariants+="${vvariants:+,}$vname-$mode:$sm90+FASTATTN_CUDA_SM90_BWD_DQ=${mode//-/_}+FASTATTN_CUDA_SM90_BWD_ORDER=longest_first"
    done
    run "bench_$vname" 100 bash -c "for m in gqa paper; do '$vbench' \$m --passes bwd,fwdbwd $timing --variants '$vvariants'; done \
        >> '$out/bench.jsonl' 2>> '$out/bench.err'"
  done
fi
if has mem; then
  run mem_sm90 45 bash -c "'$bench' long --passes bwd --warmup 1 --repeats 5 --max-seconds 1 \
      > '$out/mem.jsonl' 2>> '$out/bench.err'"
fi
if has bench || has det || has mem; then
  "$python" tools/dev/sm90_bwd_summary.py "$out" | tee "$out/bars.txt" | tail -16
  tail -3 "$out/bench.err" 2>/dev/null
fi
if has suite; then
  run suite 150 bash -c "if [ -n '$bin_dir' ]; then '$gpu_tests' --gtest_brief=1; else cd '$build' && ctest -L gpu -j 1 --output-on-failure; fi > '$out/ctest-gpu.log' 2>&1"
  tail -6 "$out/ctest-gpu.log"
  run suite_sm80 110 bash -c "FASTATTN_CUDA_PATH=sm80 '$gpu_tests' --gtest_brief=1 \
      --gtest_filter='CudaBackward.*:CudaSm90Backward.*' > '$out/suite-sm80.log' 2>&1"
  tail -4 "$out/suite-sm80.log"
fi
if has sanitize; then
  for tool in memcheck racecheck; do
    run "$tool" 90 bash -c "compute-sanitizer --tool $tool --error-exitcode 9 '$gpu_tests' \
        --gtest_filter='CudaSm90Backward.SmallShapesMatchFloat64' >> '$out/sanitize.log' 2>&1"
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED" "$out/sanitize.log" | tail -3
  done
fi
echo "== stages"
printf '%s\n' "${status[@]}"
