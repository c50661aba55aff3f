#!/bin/bash
# Stash FA4's MLIR library for the next call; meanwhile every ncu counter (--set full,
# raw) of our d128 128x128 and d64 192x128 unmasked 16k tiles, one launch each.
set -u
R=$OUT/r; mkdir -p $R
finish() { tar czf $OUT/r.tgz -C $OUT r; rm -rf $R; }
trap finish EXIT
mkdir -p /tmp/stash && cp .whl/ir.so.xz /tmp/stash/ && echo stashed >> $R/steps.txt
B=$PWD/.device/fa4-gen
xz -dc .device/fa4-gen-new.xz > $B; chmod +x $B
nvidia-smi -q | grep -iE "serial" | head -1 > $R/gpu.txt
ncu --query-metrics 2>/dev/null | grep -E "^(lts|lrc|ltc|gpc|tpc)" > $R/metrics-list.txt
for dc in 128:m128n128w12s2_overlap1_pingpong1_ws1 64:m192n128w16s3_lazy1_overlap1_pingpong1_ws1; do
  d=${dc%%:*}; c=${dc#*:}
  $B bench --template hopper --head-dim $d --mask none --seqlen 16384 --config-filter $c --budget-ms 1 --warmup-ms 0 -q --build-dir build > /dev/null 2>&1
  timeout 200 ncu --clock-control none --set full -k regex:fa4_fwd -c 1 --page raw --csv $B bench --template hopper --head-dim $d --mask none --seqlen 16384 --config-filter $c --budget-ms 1 --warmup-ms 0 -q --build-dir build > $R/ncu-d$d.csv 2> $R/ncu-d$d.err
  echo "d$d rc=$?" >> $R/steps.txt
done
