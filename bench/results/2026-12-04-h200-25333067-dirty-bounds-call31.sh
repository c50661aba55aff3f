#!/bin/bash
# Probe (wrong only past a 2^64 growth of a row's max): exponentials after the first block
# on the old offset, the max beside them instead of before. Served unmasked picks (and
# the causal 16k ones without MUFU turns), base binary against probe, interleaved twice.
set -u
START=$(date +%s); LIMIT=${LIMIT:-400}
left() { echo $(( LIMIT - ($(date +%s) - START) )); }
R=$OUT/r; mkdir -p $R
finish() { tar czf $OUT/r.tgz -C $OUT r; rm -rf $R; }
trap finish EXIT
nvidia-smi -q | grep -iE "serial" | head -1 > $R/gpu.txt
for b in base spec; do xz -dc .device/fa4-gen-$b.xz > .device/$b; chmod +x .device/$b; done
CELLS="64:none:m128n128w12s2_overlap1_persistent1_pingpong1_ws1:512
64:none:m128n176w12s2_overlap1_persistent1_pingpong1_ws1:1024
64:none:m192n128w16s2_overlap1_pingpong1_ws1:2048
64:none:m192n128w16s3_lazy1_overlap1_pingpong1_ws1:16384
64:causal:m192n128w16s3_lazy1_overlap1_pingpong1_ws1:16384
128:none:m128n128w12s2_lazy1_overlap1_persistent1_pingpong1_ws1:512,1024,2048
128:none:m128n176w12s2_cluster2_lazy1_overlap1_pingpong1_ws1:16384
256:none:m128n64w12s2_lazy1_overlap1_persistent1_pingpong1_ws1:512,1024,2048
256:none:m128n64w12s2_cluster2_lazy1_overlap1_pingpong1_ws1:16384"
timeout 120 .device/spec verify --template hopper --head-dim 64,128,256 --dtype bf16 --mask none --config-filter m128n128w12s2_lazy1_overlap1_persistent1_pingpong1_ws1 -q --build-dir build-spec > $R/verify-spec.log 2>&1; echo "verify rc=$? left $(left)" >> $R/steps.txt
for pass in 1 2; do
  for b in base spec; do
    for c in $CELLS; do
      IFS=: read hd m cfg sl <<< "$c"
      [ "$(left)" -lt 20 ] && break
      timeout 60 .device/$b bench --template hopper --head-dim $hd --mask $m --config-filter $cfg --seqlen $sl --budget-ms 100 -q --build-dir build-$b --json $R/$b-$pass-$hd-$m-$sl.json > /dev/null 2>> $R/bench.err
    done
    echo "$b pass $pass left $(left)" >> $R/steps.txt
  done
done
