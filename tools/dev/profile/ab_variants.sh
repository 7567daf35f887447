#!/usr/bin/env bash
# ab_variants.sh — one device call: every CLI build `fastattn_*` in DIR (variants of one kernel
# change) is checked against the float64 oracle, then all are timed in turn on the same shapes,
# two rounds (v0, v1, ..., v0, v1, ...), so each variant is compared with the others in one job.
#   bash tools/dev/profile/ab_variants.sh build/var
# Environment: PASSES (default "bwd"), SHAPES (one or more sets; default "backward": the shapes where the backward
# trails SDPA flash; "forward": forward s 2k-4k causal, FORWARD_NONCAUSAL=1 adds three
# non-causal shapes; "mixed": s 2k-8k and a decode shape; "d64": d = 64 s 4k-16k), CHECK=0 skips the checks, NCU=1 also
# profiles the first variant's (or NCU_BIN's: a name in DIR) and SDPA flash's backward (NCU_FLASH=0
# skips flash's), FWD_NCU=1 the forward at b8 h16 s2k d128 causal: stall reasons per issued
# instruction, and per SASS instruction (warp-state samples) as CSV, all in $OUT/ncu.tar.gz
# (a device call brings back at most 8 files). GPU_TESTS=path runs that GPU suite first.
# DTYPE (default bf16): the timed element type; with FASTATTN_CUDA_PATH=sm75 / sm70 (f16 only),
# DTYPE=f16 SHAPES=lowres CHECK=0 times the Volta / Turing paths (d = 64, 128 at s = 4k).
set -uo pipefail
dir=${1:-build/var}
out=${OUT:-/tmp/fastattn_out}
mkdir -p "$out"
# The CLI builds only: a carry folder's test and benchmark binaries are not variants.
bins=$(cd "$dir" && ls fastattn_* | grep -vE '^fastattn_(gpu_tests|tests|cuda_bench)$' | sort -V)
nout=/tmp/ncu_out
rm -rf "$nout" && mkdir -p "$nout"
if [[ -n ${GPU_TESTS:-} ]]; then  # a fastattn_gpu_tests binary to run first (its summary goes to checks.txt)
  timeout 200 "$GPU_TESTS" > /tmp/gpu_tests.log 2>&1
  echo "gpu tests rc=$?: $(grep -cE '^\[       OK' /tmp/gpu_tests.log) OK, $(grep -E '^\[  FAILED' /tmp/gpu_tests.log | tr '\n' ' ')" \
    | tee "$out/checks.txt"
fi
if [[ ${CHECK:-1} == 1 ]]; then
  for b in $bins; do
    timeout 60 "$dir/$b" check --backend cuda --cases 40 --seed 7 > /tmp/check_$b.log 2>&1
    echo "check $b rc=$? $(tail -1 /tmp/check_$b.log)"
  done | tee -a "$out/checks.txt"
fi
common=(--device cuda --dtype ${DTYPE:-bf16} --warmup 3 --min-time 0.4 --repeats 20 --no-peaks --markdown --pass ${PASSES:-bwd})
backward_shapes() {
  timeout 60 "$1" bench "${common[@]}" --batch 2 --heads 16 --seqlen 8192 --head-dim 128
  timeout 60 "$1" bench "${common[@]}" --batch 2 --heads 16 --seqlen 8192 --head-dim 128 --causal
  timeout 60 "$1" bench "${common[@]}" --batch 2 --heads 32 --seqlen 8192 --head-dim 64
}
# Forward and backward together at s 2k-8k, and a decode shape (set PASSES="fwd bwd").
mixed_shapes() {
  timeout 60 "$1" bench "${common[@]}" --batch 2 --heads 16 --seqlen 8192 --head-dim 128
  timeout 60 "$1" bench "${common[@]}" --batch 8 --heads 16 --seqlen 2048 --head-dim 128
  timeout 60 "$1" bench "${common[@]}" --batch 2 --heads 32 --seqlen 8192 --head-dim 64
  timeout 60 "$1" bench "${common[@]}" --batch 1 --heads 32 --seqlen 16 --seqlen-k 65536 --head-dim 128
}
# The d = 64 non-causal paper shapes (s 4k-16k) and one causal one (set PASSES="fwd bwd").
d64_shapes() {
  timeout 60 "$1" bench "${common[@]}" --batch 4 --heads 32 --seqlen 4096 --head-dim 64
  timeout 60 "$1" bench "${common[@]}" --batch 2 --heads 32 --seqlen 8192 --head-dim 64
  timeout 60 "$1" bench "${common[@]}" --batch 1 --heads 32 --seqlen 16384 --head-dim 64
  timeout 60 "$1" bench "${common[@]}" --batch 2 --heads 32 --seqlen 8192 --head-dim 64 --causal
}
# The low-resource paths' sanity shapes (docs/low-resource-gpus.md), f16.
lowres_shapes() {
  timeout 60 "$1" bench "${common[@]}" --batch 4 --heads 16 --seqlen 4096 --head-dim 128
  timeout 60 "$1" bench "${common[@]}" --batch 4 --heads 16 --seqlen 4096 --head-dim 128 --causal
  timeout 60 "$1" bench "${common[@]}" --batch 4 --heads 32 --seqlen 4096 --head-dim 64
  timeout 60 "$1" bench "${common[@]}" --batch 4 --heads 32 --seqlen 4096 --head-dim 64 --causal
}
forward_shapes() {
  timeout 60 "$1" bench "${common[@]}" --batch 8 --heads 16 --seqlen 2048 --head-dim 128 --causal
  timeout 60 "$1" bench "${common[@]}" --batch 4 --heads 16 --seqlen 4096 --head-dim 128 --causal
  timeout 60 "$1" bench "${common[@]}" --batch 8 --heads 32 --seqlen 2048 --head-dim 64 --causal
  [[ ${FORWARD_NONCAUSAL:-0} == 1 ]] && {
    timeout 60 "$1" bench "${common[@]}" --batch 8 --heads 16 --seqlen 2048 --head-dim 128
    timeout 60 "$1" bench "${common[@]}" --batch 2 --heads 16 --seqlen 8192 --head-dim 128
    timeout 60 "$1" bench "${common[@]}" --batch 4 --heads 32 --seqlen 4096 --head-dim 64
  }
}
for round in 1 2; do
  for b in $bins; do
    echo "== round $round: $b"
    for set in ${SHAPES:-backward}; do "${set}_shapes" "$dir/$b"; done
  done
done 2>&1 | grep -E "==|\| *(fwd|bwd)" | tee "$out/ab.txt"
stalls=(--metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,smsp__inst_executed.sum,sm__cycles_elapsed.avg,smsp__issue_active.avg.pct_of_peak_sustained_active,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum,smsp__inst_executed_op_ldsm.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active")
if [[ ${NCU:-0} == 1 ]]; then
  # NCU_SHAPE: the profiled shape, for both fastattn and SDPA flash (default b2 h16 s8k d128).
  read -r -a nshape <<< "${NCU_SHAPE:---batch 2 --heads 16 --seqlen 8192 --head-dim 128}"
  shape=(--device cuda --dtype bf16 "${nshape[@]}" --warmup 1 --repeats 1 --min-time 0 --no-peaks --pass bwd)
  first=${NCU_BIN:-$(echo $bins | awk '{print $1}')}
  # Every kernel of one backward call, with its duration (memset, D pre-pass, main, dQ convert).
  timeout 100 ncu --clock-control none --metrics gpu__time_duration.sum "$dir/$first" bench "${shape[@]}" \
    > "$nout/ncu_ours_all_kernels.txt" 2>&1
  [[ ${NCU_FLASH:-1} == 1 ]] && timeout 100 ncu --clock-control none --metrics gpu__time_duration.sum \
    python3 tools/dev/profile/sdpa_flash_once.py --pass bwd --calls 1 "${nshape[@]}" > "$nout/ncu_flash_all_kernels.txt" 2>&1
  timeout 150 ncu --clock-control none -k regex:flash_backward_kernel --launch-skip 1 --launch-count 1 \
    "${stalls[@]}" "$dir/$first" bench "${shape[@]}" > "$nout/ncu_ours_bwd.txt" 2>&1
  echo "ncu ours rc=$?"
  timeout 150 ncu --clock-control none -k regex:flash_backward_kernel --launch-skip 1 --launch-count 1 \
    --section SourceCounters --section WarpStateStats -o /tmp/ours_src -f "$dir/$first" bench "${shape[@]}" > /dev/null 2>&1
  ncu --import /tmp/ours_src.ncu-rep --page source --csv --print-source sass 2>&1 | gzip > "$nout/ours_sass.csv.gz"
  if [[ ${NCU_FLASH:-1} == 1 ]]; then
    timeout 200 ncu --clock-control none -k regex:flash_bwd_dq_dk_dv --launch-skip 1 --launch-count 1 \
      "${stalls[@]}" python3 tools/dev/profile/sdpa_flash_once.py --pass bwd "${nshape[@]}" > "$nout/ncu_flash_bwd.txt" 2>&1
    echo "ncu flash rc=$?"
  fi
  [[ ${NCU_FLASH:-1} == 1 ]] && timeout 200 ncu --clock-control none -k regex:flash_bwd_dq_dk_dv --launch-skip 1 --launch-count 1 \
    --section SourceCounters --section WarpStateStats -o /tmp/flash_src -f python3 tools/dev/profile/sdpa_flash_once.py --pass bwd "${nshape[@]}" > /dev/null 2>&1
  [[ ${NCU_FLASH:-1} == 1 ]] && ncu --import /tmp/flash_src.ncu-rep --page source --csv --print-source sass 2>&1 | gzip > "$nout/flash_sass.csv.gz"
fi
if [[ ${FWD_NCU:-0} == 1 ]]; then
  # Forward, b8 h16 s2048 d128 causal (the paper shape where fastattn trails SDPA flash most).
  fshape=(--device cuda --dtype bf16 --batch 8 --heads 16 --seqlen 2048 --head-dim 128 --causal --warmup 1
          --repeats 1 --min-time 0 --no-peaks --pass fwd)
  first=${NCU_BIN:-$(echo $bins | awk '{print $1}')}
  timeout 100 ncu --clock-control none -k regex:flash_forward_kernel --launch-skip 1 --launch-count 1 \
    "${stalls[@]}" --section LaunchStats --section Occupancy "$dir/$first" bench "${fshape[@]}" > "$nout/ncu_ours_fwd.txt" 2>&1
  echo "ncu ours fwd rc=$?"
  timeout 100 ncu --clock-control none -k regex:flash_forward_kernel --launch-skip 1 --launch-count 1 \
    --section SourceCounters --section WarpStateStats -o /tmp/ours_fwd_src -f "$dir/$first" bench "${fshape[@]}" > /dev/null 2>&1
  ncu --import /tmp/ours_fwd_src.ncu-rep --page source --csv --print-source sass 2>&1 | gzip > "$nout/ours_fwd_sass.csv.gz"
  timeout 150 ncu --clock-control none -k regex:flash_fwd_kernel --launch-skip 1 --launch-count 1 \
    "${stalls[@]}" --section LaunchStats --section Occupancy python3 tools/dev/profile/sdpa_flash_once.py --pass fwd --batch 8 --seqlen 2048 --causal > "$nout/ncu_flash_fwd.txt" 2>&1
  echo "ncu flash fwd rc=$?"
  timeout 150 ncu --clock-control none -k regex:flash_fwd_kernel --launch-skip 1 --launch-count 1 \
    --section SourceCounters --section WarpStateStats -o /tmp/flash_fwd_src -f python3 tools/dev/profile/sdpa_flash_once.py --pass fwd --batch 8 --seqlen 2048 --causal > /dev/null 2>&1
  ncu --import /tmp/flash_fwd_src.ncu-rep --page source --csv --print-source sass 2>&1 | gzip > "$nout/flash_fwd_sass.csv.gz"
fi
if [[ -n $(ls -A "$nout") ]]; then tar czf "$out/ncu.tar.gz" -C "$nout" .; fi
