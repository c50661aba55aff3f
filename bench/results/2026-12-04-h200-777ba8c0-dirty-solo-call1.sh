#!/bin/bash
# Solo consumers (each consumer on 64-row tiles of its own, a K/V ring each, mbarrier
# turns): verify every solo tile, then time each beside the served picks and the shared
# pair twins, two passes, 100 ms a cell; cuDNN at the same cells.
set -u
START=$(date +%s); LIMIT=${LIMIT:-540}
left() { echo $(( LIMIT - ($(date +%s) - START) )); }
R=$OUT/r; mkdir -p $R
finish() { cp $R/steps.txt $OUT/steps.txt 2>/dev/null; tar czf $OUT/r.tgz -C $OUT r; rm -rf $R; }
trap finish EXIT
nvidia-smi -q | grep -iE "serial" | head -1 > $R/gpu.txt
B=$PWD/.device/fa4-gen; xz -dc .device/fa4-gen-solo.xz > $B; chmod +x $B
tar xJf .device/build.tar.xz
step() { echo "$1 rc=$2 $(( $(date +%s) - $3 ))s left $(left)" >> $R/steps.txt; }
t0=$(date +%s); timeout 150 $B verify --template hopper --head-dim 64,128 --dtype bf16 --mask none,causal --config-filter solo1 -q --build-dir build --json $R/verify-nc.json > $R/verify-nc.log 2>&1; step verify-nc $? $t0
t0=$(date +%s); timeout 60 $B verify --template hopper --head-dim 64,128 --dtype bf16 --mask local --config-filter solo1 -q --build-dir build --json $R/verify-local.json > $R/verify-local.log 2>&1; step verify-local $? $t0
CELLS="64:none:solo1
64:none:m128n256w12s2_mufuturn1_overlap0_persistent1_pingpong1_ws1
64:none:m192n128w16s3_lazy1_overlap1_pingpong1_ws1
64:none:m128n128w12s2_overlap1_persistent1_pingpong1_ws1
64:causal:solo1
64:causal:m128n128w12s2_mufuturn1_overlap1_persistent1_pingpong1_ws1
64:causal:m128n256w12s2_mufuturn1_overlap0_persistent1_pingpong1_ws1
128:none:solo1
128:none:m128n128w12s2_lazy1_overlap1_persistent1_pingpong1_ws1
128:none:m128n80w12s2_lazy1_overlap1_persistent1_pingpong1_ws1
128:causal:solo1
128:causal:m128n128w12s2_lazy1_overlap1_persistent1_pingpong1_ws1
128:causal:m128n128w12s2_overlap1_persistent1_pingpong1_ws1
128:causal:m128n128w12s2_lazy1_mufuturn1_overlap1_persistent1_pingpong1_ws1"
for pass in 1 2; do
  t0=$(date +%s)
  for c in $CELLS; do
    IFS=: read hd m cfg <<< "$c"
    [ "$(left)" -lt 40 ] && break
    timeout 120 $B bench --template hopper --head-dim $hd --mask $m --config-filter $cfg --seqlen 512,1024,2048,4096 --budget-ms 100 -q --build-dir build --json $R/p$pass-$hd-$m-$(echo $cfg | cut -c1-40).json > /dev/null 2>> $R/bench.err
  done
  step pass$pass 0 $t0
  if [ $pass = 1 ]; then
    t0=$(date +%s); timeout 90 python3 .device/peers.py --hdims 64,128 --seqlens 512,1024,2048,4096 --backends cudnn --json $R/peers.json > $R/peers.log 2>&1; step peers $? $t0
  fi
done
