#!/bin/bash
# cuDNN's d256 layout: one K and one V slot over 128 keys, cuDNN's loop (no intra-warpgroup
# overlap, turns at the MUFU), two persistent consumers (also d128 over 128 and 192 keys).
# Verify, then beside the served picks, two passes, 100 ms a cell.
set -u
START=$(date +%s); LIMIT=${LIMIT:-500}
left() { echo $(( LIMIT - ($(date +%s) - START) )); }
R=$OUT/r; mkdir -p $R
finish() { cp $R/steps.txt $OUT/steps.txt 2>/dev/null; tar czf $OUT/r.tgz -C $OUT r; rm -rf $R; }
trap finish EXIT
nvidia-smi -q | grep -iE "serial" | head -1 > $R/gpu.txt
B=$PWD/.device/fa4-gen; xz -dc .device/fa4-gen-s1.xz > $B; chmod +x $B
t0=$(date +%s); timeout 150 $B verify --template hopper --head-dim 128,256 --dtype bf16 --mask none,causal --config-filter w12s1_mufuturn -q --build-dir build > $R/verify.log 2>&1; echo "verify rc=$? $(( $(date +%s) - t0 ))s left $(left)" >> $R/steps.txt
CELLS="256:none:w12s1_mufuturn:512,1024,2048,4096,16384
256:none:m128n64w12s2_lazy1_overlap1_persistent1_pingpong1_ws1:512,1024,2048,4096,16384
256:causal:w12s1_mufuturn:512,1024,2048,4096,16384
256:causal:m128n64w12s2_overlap1_persistent1_pingpong1_ws1:512,1024
256:causal:m128n64w12s2_lazy1_overlap1_persistent1_pingpong1_ws1:1024,2048
256:causal:m128n80w12s2_lazy1_overlap1_pingpong1_ws1:2048,4096,16384
128:none:w12s1_mufuturn:512,1024,2048
128:none:m128n128w12s2_lazy1_overlap1_persistent1_pingpong1_ws1:512,1024,2048
128:causal:w12s1_mufuturn:512,1024
128:causal:m128n128w12s2_mufuturn1_overlap1_persistent1_pingpong1_ws1:512
128:causal:m128n128w12s2_lazy1_mufuturn1_overlap1_persistent1_pingpong1_ws1:1024"
for pass in 1 2; do
  for c in $CELLS; do
    IFS=: read hd m cfg sl <<< "$c"
    [ "$(left)" -lt 25 ] && break
    timeout 90 $B bench --template hopper --head-dim $hd --mask $m --config-filter $cfg --seqlen $sl --budget-ms 100 -q --build-dir build --json $R/p$pass-$hd-$m-$(echo $cfg | cut -c1-40)-$sl.json > /dev/null 2>> $R/bench.err
  done
  echo "pass $pass left $(left)" >> $R/steps.txt
done
