#!/usr/bin/env bash
# Session 29, the smallest call (about 200 s of device time left): one build with both knobs
# (-DFASTATTN_SM90_KV_MULTICAST=1 -DFASTATTN_SM90_ELECTED_RELEASE=1, d128), the cluster test and
# the odd shapes on it, then issue 15's sweep with FASTATTN_CUDA_SM90_CLUSTER=0 and =1 (the same
# build: the clusters' A/B alone, both with one release per consumer warpgroup) beside cuDNN.
set -u
root=$(pwd); out=$OUT; cap=${CAP:-200}; t0=$SECONDS; budget=$cap; status=()
. tools/dev/lib.sh
device_tools | tee $out/gpu.txt
bdir=build/sm90-clel
run build $((cap - 110)) bash -c "cmake -S . -B $bdir -G Ninja -DCMAKE_BUILD_TYPE=Release -DFASTATTN_CUDA=ON \
    -DFASTATTN_CUDA_ARCHS=90 '-DFASTATTN_CUDA_HEAD_DIMS=128' \
    '-DCMAKE_CUDA_FLAGS=-DFASTATTN_SM90_KV_MULTICAST=1 -DFASTATTN_SM90_ELECTED_RELEASE=1' \
    '-DCMAKE_CXX_FLAGS=-DFASTATTN_SM90_KV_MULTICAST=1 -DFASTATTN_SM90_ELECTED_RELEASE=1' > $out/build.log 2>&1 && \
    cmake --build $bdir -j 16 --target fastattn_gpu_tests fastattn_cuda_bench >> $out/build.log 2>&1"
tail -2 $out/build.log
python=/opt/torch/.venv/bin/python3; [ -x $python ] || python=python3
bench=$bdir/bench/cuda/fastattn_cuda_bench
run sdpa 25 bash -c "$python bench/cuda/sdpa_anchor.py sweep90 --backends cudnn --no-gemm --repeats 10 --max-seconds 1 > $out/sweep.jsonl 2> $out/bench.err"
for r in 1 2; do for c in 0 1; do
  run "sweep_c${c}_r$r" 15 bash -c "FASTATTN_CUDA_SM90_CLUSTER=$c $bench sweep90 --repeats 10 --max-seconds 1 |
      sed 's/\"source\":\"fastattn\"/\"source\":\"fastattn\",\"variant\":\"sm90-cluster$c-r$r\"/' >> $out/sweep.jsonl 2>> $out/bench.err"
done; done
$python bench/cuda/sweep_sm90.py $out/sweep.jsonl --out $out/sweep.json > $out/sweep.txt 2>&1; grep -E "d128|geomean" $out/sweep.txt | head -30
run tests 60 bash -c "$bdir/tests/fastattn_gpu_tests --gtest_brief=1 \
    --gtest_filter='CudaSm90.ClustersGiveTheSameBits:CudaSm90.OddShapesMatchFloat64' > $out/tests.log 2>&1"
tail -4 $out/tests.log
printf '%s\n' "${status[@]}"
cd $out && tar czf all.tgz build.log sweep.* bench.err tests.log 2>/dev/null && rm -f build.log sweep.* bench.err tests.log
