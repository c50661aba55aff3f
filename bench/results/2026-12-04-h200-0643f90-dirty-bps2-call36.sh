#!/bin/bash
# Two blocks per SM of two pingpong consumers (bps2), d64 over 64 keys without intra-
# warpgroup overlap (cuDNN's loop; the overlapped form has no registers at 104): verify,
# then beside the served picks, two passes, 100 ms a cell.
set -u
START=$(date +%s); LIMIT=${LIMIT:-400}
left() { echo $(( LIMIT - ($(date +%s) - START) )); }
R=$OUT/r; mkdir -p $R
finish() { cp $R/steps.txt $OUT/steps.txt 2>/dev/null; tar czf $OUT/r.tgz -C $OUT r; rm -rf $R; }
trap finish EXIT
nvidia-smi -q | grep -iE "serial" | head -1 > $R/gpu.txt
B=$PWD/.device/fa4-gen; xz -dc .device/fa4-gen-bps.xz > $B; chmod +x $B
t0=$(date +%s); timeout 150 $B verify --template hopper --head-dim 64 --dtype bf16,fp16 --mask none,causal,local --config-filter bps2 -q --build-dir build > $R/verify.log 2>&1; echo "verify rc=$? $(( $(date +%s) - t0 ))s left $(left)" >> $R/steps.txt
CELLS="64:none:bps2:512,1024,2048,16384
64:none:m128n128w12s2_overlap1_persistent1_pingpong1_ws1:512,1024,2048,16384
64:none:m128n176w12s2_overlap1_persistent1_pingpong1_ws1:1024,2048
64:causal:bps2:512,1024,2048,16384
64:causal:m128n128w12s2_mufuturn1_overlap1_persistent1_pingpong1_ws1:512,1024,2048,16384"
for pass in 1 2; do
  for c in $CELLS; do
    IFS=: read hd m cfg sl <<< "$c"
    [ "$(left)" -lt 25 ] && break
    timeout 90 $B bench --template hopper --head-dim $hd --mask $m --config-filter $cfg --seqlen $sl --budget-ms 100 -q --build-dir build --json $R/p$pass-$hd-$m-$(echo $cfg | cut -c1-40)-$sl.json > /dev/null 2>> $R/bench.err
  done
  echo "pass $pass left $(left)" >> $R/steps.txt
done
