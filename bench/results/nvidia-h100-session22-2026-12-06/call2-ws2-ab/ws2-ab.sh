
set -u; root=$PWD; out=$OUT; stages=""; t0=$SECONDS; . tools/dev/lib.sh; device_tools > $OUT/env.txt 2>&1
command -v cmake >/dev/null || export PATH=$PATH:/opt/torch/.venv/bin
for n in base ws2; do f=""; [ $n = ws2 ] && f="-DFASTATTN_SM90_BWD_WORK_IN_SMEM=2"
  cmake -S . -B build/$n -G Ninja -DCMAKE_BUILD_TYPE=Release -DFASTATTN_WERROR=ON -DFASTATTN_CUDA=ON \
    -DFASTATTN_CUDA_ARCHS=90 "-DFASTATTN_CUDA_HEAD_DIMS=96;256" "-DCMAKE_CUDA_FLAGS=$f" "-DCMAKE_CXX_FLAGS=$f" \
    > $OUT/build-$n.log 2>&1 && timeout 150 cmake --build build/$n -j 16 --target fastattn_cli >> $OUT/build-$n.log 2>&1
  echo "$n rc=$? $((SECONDS-t0))s"; done
export FASTATTN_CUDA_BWD_SM90=1
mkdir -p $OUT/ab; for r in 1 2; do for n in base ws2; do for c in "" --causal; do
  timeout 60 build/$n/tools/cli/fastattn bench --device cuda --dtype bf16 --pass bwd --batch 2 --heads 16 \
    --seqlen 2048,8192 --head-dim 96,256 $c --min-time 0.3 --no-peaks --json $OUT/ab/$n-r$r$c.json > $OUT/ab/$n-r$r$c.txt 2>&1
  echo "== $n r$r $c"; grep -E "bf16" $OUT/ab/$n-r$r$c.txt | cut -c1-200; done; done; done
tar czf $OUT/ab.tar.gz -C $OUT ab && rm -r $OUT/ab   # a call brings back at most 8 files
