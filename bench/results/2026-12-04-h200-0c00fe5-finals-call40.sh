#!/bin/bash
# Tuner finals against the bench at d64 bf16 1024/2048 unmasked: the 256-key tile, the
# 176-key pair, the 128-key pair and the three-consumer tile, three interleaved passes
# of the bench (L2 flushed, 100 ms a cell).
set -u
START=$(date +%s); LIMIT=${LIMIT:-240}
left() { echo $(( LIMIT - ($(date +%s) - START) )); }
R=$OUT/r; mkdir -p $R
finish() { cp $R/steps.txt $OUT/steps.txt 2>/dev/null; tar czf $OUT/r.tgz -C $OUT r; rm -rf $R; }
trap finish EXIT
nvidia-smi -q | grep -iE "serial" | head -1 > $R/gpu.txt
B=$PWD/.device/fa4-gen; xz -dc .device/fa4-gen-head.xz > $B; chmod +x $B
CFGS="m128n256w12s2_mufuturn1_overlap0_persistent1_pingpong1_ws1 m128n176w12s2_overlap1_persistent1_pingpong1_ws1 m128n128w12s2_overlap1_persistent1_pingpong1_ws1 m192n128w16s2_overlap1_pingpong1_ws1 m64n128w8s2_overlap1_persistent1_pingpong0_ws1"
for pass in 1 2 3; do
  for c in $CFGS; do
    [ "$(left)" -lt 20 ] && break
    timeout 60 $B bench --template hopper --head-dim 64 --mask none --config-filter $c --seqlen 512,1024,2048 --budget-ms 100 -q --build-dir build --json $R/p$pass-$c.json > /dev/null 2>> $R/bench.err
  done
  echo "pass $pass left $(left)" >> $R/steps.txt
done
