#!/bin/bash
# Second form: the producer loads K one tile ahead of V, and s3 twins.
# QK ahead (qkahead): QK(j + 1) issued in the turn before softmax(j). Verify the new
# tiles, then time each beside its twin without the switch (same binary: every other
# kernel keeps its code hash) and the served pick, two passes, 100 ms a cell.
set -u
START=$(date +%s); LIMIT=${LIMIT:-500}
left() { echo $(( LIMIT - ($(date +%s) - START) )); }
R=$OUT/r; mkdir -p $R
finish() { cp $R/steps.txt $OUT/steps.txt 2>/dev/null; tar czf $OUT/r.tgz -C $OUT r; rm -rf $R; }
trap finish EXIT
nvidia-smi -q | grep -iE "serial" | head -1 > $R/gpu.txt
B=$PWD/.device/fa4-gen; xz -dc .device/fa4-gen-qkahead.xz > $B; chmod +x $B
t0=$(date +%s); timeout 200 $B verify --template hopper --head-dim 64,128 --dtype bf16 --mask none,causal --config-filter qkahead -q --build-dir build > $R/verify.log 2>&1; echo "verify rc=$? $(( $(date +%s) - t0 ))s left $(left)" >> $R/steps.txt
CELLS="64:none:m128n128w12s2_overlap1_persistent1_pingpong1_:512,1024,2048,16384
64:none:m128n128w12s3_overlap1_persistent1_pingpong1_qkahead1:512,1024,2048,16384
64:causal:m128n128w12s3_mufuturn1_overlap1_persistent1_pingpong1_qkahead1:512,1024,2048,16384
128:none:m128n80w12s3_lazy1_overlap1_persistent1_pingpong1_qkahead1:512,1024,16384
64:none:m128n176w12s2_overlap1_persistent1_pingpong1_ws1:1024,2048
64:causal:m128n128w12s2_mufuturn1_overlap1_persistent1_pingpong1_:512,1024,2048,16384
128:none:m128n80w12s2_lazy1_overlap1_persistent1_pingpong1_:512,1024,16384
128:none:m128n128w12s2_lazy1_overlap1_persistent1_pingpong1_ws1:512,1024,16384
128:causal:m128n80w12s2_mufuturn1_overlap1_persistent1_pingpong1_:512,1024
128:causal:m128n128w12s2_mufuturn1_overlap1_persistent1_pingpong1_ws1:512,1024"
for pass in 1 2; do
  for c in $CELLS; do
    IFS=: read hd m cfg sl <<< "$c"
    [ "$(left)" -lt 25 ] && break
    timeout 90 $B bench --template hopper --head-dim $hd --mask $m --config-filter $cfg --seqlen $sl --budget-ms 100 -q --build-dir build --json $R/p$pass-$hd-$m-$(echo $cfg | cut -c1-40)-$sl.json > /dev/null 2>> $R/bench.err
  done
  echo "pass $pass left $(left)" >> $R/steps.txt
done
