#!/usr/bin/env bash
# ncu_sm90_short.sh — one device call: where the sm90 forward spends its time on issue 15's short
# rows (s 512 to 2k, where it trails cuDNN most), beside cuDNN's kernel on the same rows. Builds
# (gpu-sm90.sh's build stage, head dims 64 and 128, the CLI), then Nsight Compute on one forward
# launch per row of each (SpeedOfLight, ComputeWorkloadAnalysis, WarpStateStats, LaunchStats,
# Occupancy; ours also SourceCounters: warp-state samples per SASS instruction, as CSV), counters
# with --clock-control none (device/METHOD.md). Optionally KV=1: the issue-17 anchors on both
# memory orders (sdpa_anchor.py kv_decode kv_decode_tm) and fastattn_kv_cache_bench decode decode_hm.
#   carry ["build/debs"]; command: OUT=$OUT bash tools/dev/profile/ncu_sm90_short.sh
# Over binaries built here instead (no build there): CARRY=build/carry-wave (a folder of
# tools/dev/build-carry.sh's bins.tar.xz), carry ["build/carry-wave"]; the thirty-third and
# thirty-fourth sessions' calls s33-c4.sh / s34-c2.sh ran this loop so, with CUDNN=0 PIPES=0.
# CUDNN (default 1): 0 profiles ours only. KV=1 needs the build (not CARRY).
# ROWS (default "32,16,512,128,0 32,32,512,64,1 8,32,2048,64,1"): b,h,s,d,causal each.
# PIPES (default 1): also each pipe's share of its peak (tensor, MUFU = xu, FMA, ALU, uniform)
# and issue activity, as ncu metrics: those of the candidates below that `ncu --query-metrics`
# lists on the device (at d = 64 the softmax's MUFU work equals the GEMMs' tensor work;
# docs/cuda-sm90-forward-measurements.md "The key loop's per-tile work").
# $OUT: summary.txt, build.log, ncu.tar.gz (details per row, source CSVs), kv.tar.gz.
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

if [ -n "${CARRY:-}" ]; then
  build=/tmp/ncu_short_bins
  mkdir -p "$build" && tar -xJf "$CARRY/bins.tar.xz" -C "$build" || { echo "cannot unpack $CARRY/bins.tar.xz"; exit 3; }
  export LD_LIBRARY_PATH=/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
else
  OUT=$out STAGES=build HEAD_DIMS="64;128" TARGETS="fastattn_cli fastattn_kv_cache_bench" BUDGET_S=260 \
    bash tools/dev/gpu-sm90.sh > /dev/null 2>&1
  build=$root/build/sm90
fi
exec > >(tee -a "$out/summary.txt") 2>&1
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
python=/opt/torch/.venv/bin/python3
[ -x "$python" ] || python=python3
load_deps_env
cli=$(find "$build" -name fastattn -type f -perm -u+x | head -1)
[ -x "$cli" ] || { echo "no CLI binary: see build.log"; tail -20 "$out/build.log"; exit 3; }
rows=${ROWS:-"32,16,512,128,0 32,32,512,64,1 8,32,2048,64,1"}
nout=/tmp/ncu_short
rm -rf "$nout" && mkdir -p "$nout"
sections=(--section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats
          --section LaunchStats --section Occupancy)
pipe_metrics=()
if [ "${PIPES:-1}" = 1 ]; then
  ncu --query-metrics > "$nout/query-metrics.txt" 2>&1
  for m in sm__pipe_tensor_op_gmma_cycles_active sm__pipe_tensor_op_hmma_cycles_active sm__inst_executed_pipe_xu \
           sm__pipe_xu_cycles_active sm__pipe_fma_cycles_active sm__inst_executed_pipe_fma sm__pipe_alu_cycles_active \
           sm__inst_executed_pipe_alu sm__inst_executed_pipe_uniform smsp__issue_active; do
    grep -q "^$m " "$nout/query-metrics.txt" && pipe_metrics+=("$m.avg.pct_of_peak_sustained_active")
  done
  echo "pipe metrics: ${pipe_metrics[*]:-none of the candidates listed}"
fi
((${#pipe_metrics[@]})) && sections+=(--metrics "$(IFS=,; echo "${pipe_metrics[*]}")")
for r in $rows; do
  IFS=, read -r b h s d causal <<< "$r"
  name="b${b}_h${h}_s${s}_d${d}_c${causal}"
  flag=$([ "$causal" = 1 ] && echo --causal)
  # Our forward: one warm-up launch, then the profiled one.
  run "ncu_ours_$name" 90 ncu --clock-control none -k regex:flash_forward_sm90 --launch-skip 1 --launch-count 1 \
      "${sections[@]}" --section SourceCounters -o "$nout/ours_$name" -f \
      "$cli" bench --device cuda --batch "$b" --heads "$h" --seqlen "$s" --head-dim "$d" --dtype bf16 --pass fwd \
      $flag --warmup 1 --repeats 1 --min-time 0 --no-peaks > "$nout/ours_$name.log" 2>&1
  [ "${CUDNN:-1}" = 1 ] && run "ncu_cudnn_$name" 90 ncu --clock-control none -k regex:'sdpa|fmha|flash|attn|cudnn' --launch-count 1 \
      "${sections[@]}" -o "$nout/cudnn_$name" -f "$python" tools/dev/profile/sdpa_launch_probe.py --rows "$r" \
      > "$nout/cudnn_$name.log" 2>&1
  for who in ours cudnn; do
    [ -f "$nout/${who}_$name.ncu-rep" ] || continue
    ncu --import "$nout/${who}_$name.ncu-rep" --page details > "$nout/${who}_${name}_details.txt" 2>&1
    grep -E "Duration|Compute \(SM\) Throughput|Memory Throughput|Issue Slots Busy|Executed Ipc Active|No Eligible|Registers Per|Block Size|Grid Size" \
      "$nout/${who}_${name}_details.txt" | head -12 | sed "s/^/$who $name: /"
    grep -E "pct_of_peak_sustained_active" "$nout/${who}_${name}_details.txt" | sed "s/^/$who $name: /"
  done
  [ -f "$nout/ours_$name.ncu-rep" ] &&
    ncu --import "$nout/ours_$name.ncu-rep" --page source --csv --print-source sass > "$nout/ours_${name}_source.csv" 2>&1
done
rm -f "$nout"/*.ncu-rep
tar -czf "$out/ncu.tar.gz" -C /tmp ncu_short
if [ "${KV:-0}" = 1 ] && [ -z "${CARRY:-}" ]; then  # the carried binaries have no KV-cache bench
  mkdir -p /tmp/kv
  run kv_anchor 130 bash -c "PYTHONUNBUFFERED=1 '$python' bench/cuda/sdpa_anchor.py kv_decode kv_decode_tm --backends cudnn \
      --no-gemm --max-seconds 0.2 --warm-ms 30 > /tmp/kv/anchor.jsonl 2> /tmp/kv/anchor.err"
  run kv_bench 110 bash -c "'$build/bench/cuda/fastattn_kv_cache_bench' decode decode_hm --max-seconds 0.2 > /tmp/kv/bench.jsonl 2> /tmp/kv/bench.err"
  tar -czf "$out/kv.tar.gz" -C /tmp kv
fi
echo "== stages"
printf '%s\n' "${status[@]}"
