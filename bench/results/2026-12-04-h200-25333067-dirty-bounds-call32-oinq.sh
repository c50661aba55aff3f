#!/bin/bash
# p8192 (two Q buffers and O slots): O staged in the Q buffer its tile read, the buffer
# handed back to the producer at the next tile's first QK issue, so no epilogue waits
# for the last tile's store (checked first). Three passes.
set -u
START=$(date +%s); LIMIT=${LIMIT:-400}
left() { echo $(( LIMIT - ($(date +%s) - START) )); }
R=$OUT/r; mkdir -p $R
finish() { cp $R/steps.txt $OUT/steps.txt 2>/dev/null; tar czf $OUT/r.tgz -C $OUT r; rm -rf $R; }
trap finish EXIT
nvidia-smi -q | grep -iE "serial" | head -1 > $R/gpu.txt
BINS="base p8192"
for b in $BINS; do xz -dc .device/fa4-gen-$b.xz > .device/$b; chmod +x .device/$b; done
CELLS="64:none:m128n128w12s2_overlap1_persistent1_pingpong1_ws1:512
64:none:m128n176w12s2_overlap1_persistent1_pingpong1_ws1:1024
64:causal:m128n128w12s2_mufuturn1_overlap1_persistent1_pingpong1_ws1:512,1024
128:none:m128n128w12s2_lazy1_overlap1_persistent1_pingpong1_ws1:512,1024,2048,16384
128:causal:m128n128w12s2_mufuturn1_overlap1_persistent1_pingpong1_ws1:512
128:causal:m128n128w12s2_lazy1_mufuturn1_overlap1_persistent1_pingpong1_ws1:1024,2048"
timeout 150 .device/p8192 verify --template hopper --head-dim 64,128 --dtype bf16 --mask none,causal --config-filter persistent1_pingpong1 -q --build-dir build-p8192 > $R/verify-p8192.log 2>&1; echo "verify rc=$? left $(left)" >> $R/steps.txt
for pass in 1 2 3; do
  for b in $BINS; do
    for c in $CELLS; do
      IFS=: read hd m cfg sl <<< "$c"
      [ "$(left)" -lt 20 ] && break
      timeout 60 .device/$b bench --template hopper --head-dim $hd --mask $m --config-filter $cfg --seqlen $sl --budget-ms 100 -q --build-dir build-$b --json $R/$b-$pass-$hd-$m-$sl.json > /dev/null 2>> $R/bench.err
    done
    echo "$b pass $pass left $(left)" >> $R/steps.txt
  done
done
