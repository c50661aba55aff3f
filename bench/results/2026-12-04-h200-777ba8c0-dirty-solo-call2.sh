#!/bin/bash
# Turns on mbarriers for a pair on one tile (mbturns, the solo consumers' protocol) against
# the same pair on named barriers, and the solo twins again; two passes, 100 ms a cell.
set -u
START=$(date +%s); LIMIT=${LIMIT:-400}
left() { echo $(( LIMIT - ($(date +%s) - START) )); }
R=$OUT/r; mkdir -p $R
finish() { cp $R/steps.txt $OUT/steps.txt 2>/dev/null; tar czf $OUT/r.tgz -C $OUT r; rm -rf $R; }
trap finish EXIT
nvidia-smi -q | grep -iE "serial" | head -1 > $R/gpu.txt
B=$PWD/.device/fa4-gen; xz -dc .device/fa4-gen-solo.xz > $B; chmod +x $B
tar xJf .device/build.tar.xz
step() { echo "$1 rc=$2 $(( $(date +%s) - $3 ))s left $(left)" >> $R/steps.txt; }
t0=$(date +%s); timeout 60 $B verify --template hopper --head-dim 64,128 --dtype bf16 --mask none,causal --config-filter mbturns1 -q --build-dir build --json $R/verify.json > $R/verify.log 2>&1; step verify $? $t0
P=m128n128w12s2_
CELLS="64:none:mbturns1
64:none:${P}overlap1_persistent1_pingpong1_ws1
64:none:${P}lazy1_overlap1_persistent1_pingpong1_ws1
64:none:${P}overlap1_persistent1_pingpong1_solo1_ws1
64:causal:mbturns1
64:causal:${P}mufuturn1_overlap1_persistent1_pingpong1_ws1
64:causal:${P}overlap1_persistent1_pingpong1_ws1
64:causal:${P}lazy1_mufuturn1_overlap1_persistent1_pingpong1_ws1
64:causal:${P}mufuturn1_overlap1_persistent1_pingpong1_solo1_ws1
128:none:mbturns1
128:none:${P}lazy1_overlap1_persistent1_pingpong1_ws1
128:none:${P}overlap1_persistent1_pingpong1_ws1
128:causal:mbturns1
128:causal:${P}lazy1_overlap1_persistent1_pingpong1_ws1
128:causal:${P}overlap1_persistent1_pingpong1_ws1
128:causal:${P}lazy1_mufuturn1_overlap1_persistent1_pingpong1_ws1
128:causal:${P}mufuturn1_overlap1_persistent1_pingpong1_ws1"
for pass in 1 2; do
  t0=$(date +%s)
  for c in $CELLS; do
    IFS=: read hd m cfg <<< "$c"
    [ "$(left)" -lt 20 ] && break
    timeout 100 $B bench --template hopper --head-dim $hd --mask $m --config-filter $cfg --seqlen 512,1024,2048,4096 --budget-ms 100 -q --build-dir build --json $R/p$pass-$hd-$m-$(echo $cfg | cut -c1-50).json > /dev/null 2>> $R/bench.err
  done
  step pass$pass 0 $t0
done
