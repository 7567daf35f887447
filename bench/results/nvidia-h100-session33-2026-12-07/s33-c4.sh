#!/usr/bin/env bash
# Session 33, ncu on any card (~100 s): where the sm90 forward's short causal rows spend their
# time now (after the 32-bit tile decode): one launch per row of the carried CLI (build/carry-wave,
# the tree at 3354f47) under Nsight Compute (SpeedOfLight, WarpStateStats, SourceCounters as CSV,
# the tensor / MUFU pipes and issue activity), clocks not locked. carry ["build/calls", "build/carry-wave"].
set -u
root=$OUT
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $root/gpu.txt
bin=/tmp/s33bin; mkdir -p $bin && tar -xJf build/carry-wave/bins.tar.xz -C $bin || exit 3
n=/tmp/ncu33; mkdir -p $n
metrics=sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active,smsp__issue_active.avg.pct_of_peak_sustained_active
for r in 32,32,512,64,1 32,16,512,128,1 8,32,2048,64,1; do
  IFS=, read -r b h s d c <<< "$r"
  name=b${b}_h${h}_s${s}_d${d}_c${c}
  timeout 90 ncu --clock-control none -k regex:flash_forward_sm90 --launch-skip 1 --launch-count 1 \
    --section SpeedOfLight --section WarpStateStats --section SourceCounters --metrics $metrics -o $n/$name -f \
    $bin/fastattn bench --device cuda --batch $b --heads $h --seqlen $s --head-dim $d --dtype bf16 --pass fwd \
    $([ $c = 1 ] && echo --causal) --warmup 1 --repeats 1 --min-time 0 --no-peaks > $n/$name.log 2>&1
  echo "$name rc=$? [$SECONDS s]"
  ncu --import $n/$name.ncu-rep --page details > $n/${name}_details.txt 2>&1
  grep -E "Duration|Compute \(SM\) Throughput|Issue Slots Busy|pct_of_peak" $n/${name}_details.txt | head -8
  ncu --import $n/$name.ncu-rep --page source --csv --print-source sass > $n/${name}_source.csv 2>&1
  gzip -f $n/${name}_source.csv
done
rm -f $n/*.ncu-rep
tar -czf $root/ncu.tar.gz -C /tmp ncu33
