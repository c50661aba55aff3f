#!/bin/bash
# Which finals statistic predicts a kernel's speed over buffer sets it was not tuned on?
# The grid cells whose pick changed with the mean, both configs, on six buffer sets
# (0 to 2 are the tuner's finals sets, 3 to 5 are new), two passes, 100 ms a cell.
set -u
START=$(date +%s); LIMIT=${LIMIT:-480}
left() { echo $(( LIMIT - ($(date +%s) - START) )); }
R=$OUT/r; mkdir -p $R
finish() { cp $R/steps.txt $OUT/steps.txt 2>/dev/null; tar czf $OUT/r.tgz -C $OUT r; rm -rf $R; }
trap finish EXIT
nvidia-smi -q | grep -iE "serial" | head -1 > $R/gpu.txt
B=$PWD/.device/fa4-gen; xz -dc .device/fa4-gen-head.xz > $B; chmod +x $B
CELLS="64:none:512:m128n256w12s2_mufuturn1_overlap0_persistent1_pingpong1_ws1
64:none:512:m128n256w12s2_lazy1_mufuturn1_overlap0_persistent1_pingpong1_ws1
64:none:1024:m128n176w12s2_overlap1_persistent1_pingpong1_ws1
64:none:1024:m128n256w12s2_mufuturn1_overlap0_persistent1_pingpong1_ws1
64:none:1024:m128n256w12s2_lazy1_mufuturn1_overlap0_persistent1_pingpong1_ws1
64:causal:2048:m192n128w16s2_lazy1_overlap1_pingpong1_ws1
64:causal:2048:m192n128w16s2_overlap1_pingpong1_ws1
64:none:4096:m192n128w16s3_lazy1_overlap1_pingpong1_ws1
64:none:4096:m192n128w16s3_overlap1_pingpong1_ws1
128:none:8192:m128n176w12s2_cluster2_lazy1_overlap1_pingpong1_ws1
128:none:8192:m128n128w12s2_lazy1_overlap1_pingpong1_ws1
128:none:4096:m128n128w12s2_overlap1_persistent1_pingpong1_ws1
128:none:4096:m128n128w12s2_lazy1_overlap1_persistent1_pingpong1_ws1
256:causal:1024:m128n64w12s2_lazy1_overlap1_persistent1_pingpong1_ws1
256:causal:1024:m128n64w12s2_lazy1_mufuturn1_overlap1_pingpong1_ws1
256:causal:2048:m128n80w12s2_lazy1_overlap1_pingpong1_ws1
256:causal:2048:m128n64w12s2_lazy1_mufuturn1_overlap1_pingpong1_ws1
256:none:16384:m128n64w12s2_cluster2_lazy1_overlap1_pingpong1_ws1
256:none:16384:m128n64w12s2_lazy1_overlap1_persistent1_pingpong1_ws1"
for pass in 1 2; do
  for c in $CELLS; do
    IFS=: read hd m sl cfg <<< "$c"
    [ "$(left)" -lt 25 ] && break
    timeout 90 $B bench --template hopper --head-dim $hd --mask $m --config-filter $cfg --seqlen $sl --placements 6 --budget-ms 100 -q --build-dir build --json $R/p$pass-$hd-$m-$sl-$cfg.json > /dev/null 2>> $R/bench.err
  done
  echo "pass $pass left $(left)" >> $R/steps.txt
done
