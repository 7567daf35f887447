#!/usr/bin/env bash
# Session 34, on any card (~230 s): (1) ncu of three short causal rows on the carried CLI
# (build/carry-wave: the tree with the 32-bit positions, the SFU finalize and the d = 64 narrow
# tile forceable on calls without a mask): SpeedOfLight, WarpStateStats, SourceCounters as CSV;
# (2) D64NarrowTileMatchesFloat64 (the narrow tile forced, also on calls without a mask);
# (3) the forward sweep beside cuDNN, defaults against FASTATTN_CUDA_SM90_D64_TILE=128 (the
# narrow tile at d = 64 wherever it serves: causal of any length, and no mask), two rounds.
# carry ["build/calls", "build/carry-wave"].
set -u
root=$OUT
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $root/gpu.txt
bin=/tmp/s34bin; mkdir -p $bin && tar -xJf build/carry-wave/bins.tar.xz -C $bin || exit 3
export LD_LIBRARY_PATH=/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
n=/tmp/ncu34; mkdir -p $n
metrics=sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active,smsp__issue_active.avg.pct_of_peak_sustained_active
for r in 32,16,512,128,1 32,32,512,64,1 4,32,4096,64,1; do
  IFS=, read -r b h s d c <<< "$r"
  name=b${b}_h${h}_s${s}_d${d}_c${c}
  timeout 90 ncu --clock-control none -k regex:flash_forward_sm90 --launch-skip 1 --launch-count 1 \
    --section SpeedOfLight --section WarpStateStats --section SourceCounters --metrics $metrics -o $n/$name -f \
    $bin/fastattn bench --device cuda --batch $b --heads $h --seqlen $s --head-dim $d --dtype bf16 --pass fwd \
    $([ $c = 1 ] && echo --causal) --warmup 1 --repeats 1 --min-time 0 --no-peaks > $n/$name.log 2>&1
  echo "$name rc=$? [$SECONDS s]"
  ncu --import $n/$name.ncu-rep --page details > $n/${name}_details.txt 2>&1
  grep -E "Duration|Issue Slots Busy|pct_of_peak" $n/${name}_details.txt | head -6
  ncu --import $n/$name.ncu-rep --page source --csv --print-source sass > $n/${name}_source.csv 2>&1
  gzip -f $n/${name}_source.csv
done
rm -f $n/*.ncu-rep
tar -czf $root/ncu.tar.gz -C /tmp ncu34
timeout 120 $bin/fastattn_gpu_tests --gtest_brief=1 --gtest_filter='CudaSm90.D64NarrowTileMatchesFloat64' > $root/narrow_test.log 2>&1
echo "narrow test rc=$? [$SECONDS s]"; tail -3 $root/narrow_test.log
OUT=$root JOBS='fwd:150' VARIANTS='def: n128:FASTATTN_CUDA_SM90_D64_TILE=128' ROUNDS=2 bash tools/dev/gpu-carried.sh build/carry-wave
