#!/bin/bash
# The hidden first block skipped (`hidden`, masked tiles with MUFU turns past head dim 128):
# verify, then each hidden tile beside its twin and the served picks, d256 causal, two
# passes, 100 ms a cell.
set -u
START=$(date +%s); LIMIT=${LIMIT:-500}
left() { echo $(( LIMIT - ($(date +%s) - START) )); }
R=$OUT/r; mkdir -p $R
finish() { cp $R/steps.txt $OUT/steps.txt 2>/dev/null; tar czf $OUT/r.tgz -C $OUT r; rm -rf $R; }
trap finish EXIT
nvidia-smi -q | grep -iE "serial" | head -1 > $R/gpu.txt
B=$PWD/.device/fa4-gen; xz -dc .device/fa4-gen-hidden.xz > $B; chmod +x $B
t0=$(date +%s); timeout 200 $B verify --template hopper --head-dim 192,256 --dtype bf16,fp16 --mask causal,local --features none,sinks+softcap --config-filter hidden1 -q --build-dir build > $R/verify.log 2>&1; echo "verify rc=$? $(( $(date +%s) - t0 ))s left $(left)" >> $R/steps.txt
CELLS="256:causal:m128n64w12s2_hidden1_mufuturn1_overlap1_persistent1:512,1024,2048,4096,16384
256:causal:m128n64w12s2_mufuturn1_overlap1_persistent1:512,1024,2048,4096,16384
256:causal:m128n64w12s2_hidden1_lazy1_mufuturn1_overlap1_persistent1:512,1024,2048
256:causal:m128n64w12s2_lazy1_mufuturn1_overlap1_persistent1:512,1024,2048
256:causal:m128n64w12s2_hidden1_lazy1_mufuturn1_overlap1_pingpong1:1024,2048,4096
256:causal:m128n64w12s2_lazy1_mufuturn1_overlap1_pingpong1:1024,2048,4096
256:causal:m128n80w12s2_hidden1_lazy1_mufuturn1_overlap1_pingpong1:2048,4096,16384
256:causal:m128n80w12s2_lazy1_mufuturn1_overlap1_pingpong1:2048,4096,16384
256:causal:m128n64w12s2_overlap1_persistent1_pingpong1_ws1:512,1024
256:causal:m128n64w12s2_lazy1_overlap1_persistent1_pingpong1_ws1:512,1024
256:causal:m128n80w12s2_lazy1_overlap1_pingpong1_ws1:2048,4096,16384"
for pass in 1 2; do
  for c in $CELLS; do
    IFS=: read hd m cfg sl <<< "$c"
    [ "$(left)" -lt 25 ] && break
    timeout 90 $B bench --template hopper --head-dim $hd --mask $m --config-filter $cfg --seqlen $sl --budget-ms 100 -q --build-dir build --json $R/p$pass-$hd-$m-$(echo $cfg | cut -c1-50)-$sl.json > /dev/null 2>> $R/bench.err
  done
  echo "pass $pass left $(left)" >> $R/steps.txt
done
