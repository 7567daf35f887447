#!/usr/bin/env bash
# ncu_sm90_backward.sh — one device call: where the sm90 backward (issue 16; 0.79x cuDNN with the thirteenth session's defaults) spends
# its time, beside cuDNN's backward kernel on the same shape. Builds (gpu-sm90.sh's build stage,
# head dims HEAD_DIMS, default 64;128: the warm build's, lest it be configured afresh; the CLI)
# unless build/sm90 has a CLI already (a warm machine), then
# Nsight Compute on one backward launch of each dQ mode (FASTATTN_CUDA_SM90_BWD_DQ = atomic,
# atomic_tiles, bulk) and of cuDNN's (PyTorch SDPA, sdpa_flash_once.py --backend cudnn), with
# --clock-control none (device/METHOD.md). Sections: SpeedOfLight, ComputeWorkloadAnalysis
# (tensor pipe utilisation), WarpStateStats (stall reasons), MemoryWorkloadAnalysis_Tables
# (L2 reductions), LaunchStats, Occupancy; the modes of SOURCE_MODES (default "atomic") also
# SourceCounters (warp-state samples per SASS instruction, as CSV).
#   carry ["build/debs"]; command: OUT=$OUT bash tools/dev/profile/ncu_sm90_backward.sh
# ROWS (default "2,16,8192,128,0 2,16,8192,128,1 4,32,8192,64,0"): b,h,s,d,causal each.
# MODES (default "atomic atomic_tiles bulk"). SOURCE_MODES (default "atomic"; "" for none): the
# modes whose source counters are taken. BUDGET_S (default 540) caps the whole call.
# $OUT: summary.txt, build.log, ncu.tar.gz (details per row and mode, the source CSV).
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
cd "$root" || exit 2
out=${OUT:-/tmp/fastattn_out}
mkdir -p "$out"
budget=${BUDGET_S:-540}
t0=$SECONDS
status=()
stages="ncu"
. "$root/tools/dev/lib.sh"  # has, note, run, device_tools

build=$root/build/sm90
cli=$(find "$build" -name fastattn -type f -perm -u+x 2>/dev/null | head -1)
if [ ! -x "$cli" ]; then
  OUT=$out STAGES=build HEAD_DIMS="${HEAD_DIMS:-64;128}" TARGETS="fastattn_cli" BUDGET_S=260 bash tools/dev/gpu-sm90.sh > /dev/null 2>&1
  cli=$(find "$build" -name fastattn -type f -perm -u+x | head -1)
fi
exec > >(tee -a "$out/summary.txt") 2>&1
python=/opt/torch/.venv/bin/python3
[ -x "$python" ] || python=python3
load_deps_env
[ -x "$cli" ] || { echo "no CLI binary: see build.log"; tail -20 "$out/build.log"; exit 3; }
rows=${ROWS:-"2,16,8192,128,0 2,16,8192,128,1 4,32,8192,64,0"}
modes=${MODES:-"atomic atomic_tiles bulk"}
nout=/tmp/ncu_bwd
rm -rf "$nout" && mkdir -p "$nout"
sections=(--section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats
          --section MemoryWorkloadAnalysis_Tables --section LaunchStats --section Occupancy)
summary_lines="Duration|Compute \(SM\) Throughput|Memory Throughput|Issue Slots Busy|Executed Ipc Active|No Eligible|Tensor|L2 Hit|Registers Per|Grid Size|Stall"
for r in $rows; do
  IFS=, read -r b h s d causal <<< "$r"
  name="b${b}_h${h}_s${s}_d${d}_c${causal}"
  flag=$([ "$causal" = 1 ] && echo --causal)
  for mode in $modes; do
    extra=()
    [[ " ${SOURCE_MODES-atomic} " == *" $mode "* ]] && extra=(--section SourceCounters)
    # Our backward: one warm-up launch, then the profiled one (the sm90 main kernel only).
    run "ncu_${mode}_$name" 100 env FASTATTN_CUDA_BWD_SM90=1 FASTATTN_CUDA_SM90_BWD_DQ="$mode" \
        ncu --clock-control none -k regex:flash_backward_sm90 --launch-skip 1 --launch-count 1 \
        "${sections[@]}" "${extra[@]}" -o "$nout/${mode}_$name" -f \
        "$cli" bench --device cuda --batch "$b" --heads "$h" --seqlen "$s" --head-dim "$d" --dtype bf16 --pass bwd \
        $flag --warmup 1 --repeats 1 --min-time 0 --no-peaks > "$nout/${mode}_$name.log" 2>&1
  done
  # cuDNN's: its kernel names vary by version, so every kernel of two calls (forward, backward
  # and the elementwise ones around them) goes into the report; the summary prints its backward
  # kernel's (below), every kernel's details stay in the tarball.
  run "ncu_cudnn_$name" 150 ncu --clock-control none --launch-count 24 "${sections[@]}" -o "$nout/cudnn_$name" -f \
      "$python" tools/dev/profile/sdpa_flash_once.py --backend cudnn --pass bwd --batch "$b" --heads "$h" \
      --seqlen "$s" --head-dim "$d" $flag --calls 2 > "$nout/cudnn_$name.log" 2>&1
  for who in $modes cudnn; do
    [ -f "$nout/${who}_$name.ncu-rep" ] || continue
    ncu --import "$nout/${who}_$name.ncu-rep" --page details > "$nout/${who}_${name}_details.txt" 2>&1
    # cuDNN's report holds every kernel of its two calls: print its backward kernel's sections
    # (the 40 lines would end before them), or every kernel's if none is named "bprop".
    pick=cudnn
    grep -q "^  .*bprop" "$nout/${who}_${name}_details.txt" || pick=none
    awk -v who="$who" -v pick="$pick" '/^  [a-zA-Z_]/ { keep = who != pick || /bprop/ } keep' \
        "$nout/${who}_${name}_details.txt" | grep -E "^  [a-zA-Z_]|$summary_lines" | head -40 | sed "s/^/$who $name: /"
  done
  for mode in ${SOURCE_MODES-atomic}; do
    [ -f "$nout/${mode}_$name.ncu-rep" ] &&
      ncu --import "$nout/${mode}_$name.ncu-rep" --page source --csv --print-source sass > "$nout/${mode}_${name}_source.csv" 2>&1
  done
done
rm -f "$nout"/*.ncu-rep
tar -czf "$out/ncu.tar.gz" -C /tmp ncu_bwd
echo "== stages"
printf '%s\n' "${status[@]}"
