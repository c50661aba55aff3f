#!/bin/bash
# Clusters of two blocks sharing K/V by TMA multicast (cluster2 tiles): verify every
# cluster tile (d64/d128/d256, bf16/fp16, unmasked; sinks and softcap at d128), then time
# them beside their twins, as the grid does and sustained with the clocks logged.
set -u
START=$(date +%s); LIMIT=${LIMIT:-560}
left() { echo $(( LIMIT - ($(date +%s) - START) )); }
R=$OUT/r; mkdir -p $R
step() {
  local name=$1 need=$2; shift 2
  if [ "$(left)" -lt "$need" ]; then echo "SKIP $name (left $(left))" | tee -a $R/steps.txt; return; fi
  local t0=$(date +%s)
  timeout $(( $(left) - 10 )) "$@" > $R/$name.log 2>&1
  echo "$name rc=$? $(( $(date +%s) - t0 ))s left $(left)" | tee -a $R/steps.txt
}
finish() { tar czf $OUT/r.tgz -C $OUT r; rm -rf $R; }
trap finish EXIT
B=$PWD/.device/fa4-gen
xz -dc .device/fa4-gen-cl.xz > $B; chmod +x $B
nvidia-smi -q | grep -iE "serial" | head -1 > $R/gpu.txt
stamp() { while IFS= read -r l; do echo "$(date +%s.%N) $l"; done; }
export -f stamp
step verify 200 $B verify --arch sm90 --template hopper --head-dim 64,128,256 --mask none --config-filter cluster2 -q --build-dir build --json $R/verify.json
step verify-feat 80 $B verify --arch sm90 --template hopper --head-dim 128 --dtype bf16 --mask none --features sinks,softcap,sinks+softcap --config-filter cluster2_overlap1_pingpong1 -q --build-dir build --json $R/verify-feat.json
S="--seqlen 512,1024,2048,4096,16384"
step grid-d128 100 $B bench --template hopper --head-dim 128 --mask none $S --config-filter m128n1 --build-dir build --json $R/grid-d128.json
step grid-d64 60 $B bench --template hopper --head-dim 64 --mask none $S --config-filter m192n128w16s --build-dir build --json $R/grid-d64.json
step grid-d256 60 $B bench --template hopper --head-dim 256 --mask none $S --config-filter m128n80w12s2 --build-dir build --json $R/grid-d256.json
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_event_reasons.active --format=csv -lms 20 > $R/clocks.csv 2>&1 &
SMI=$!
step long-d128 90 bash -c "$B bench --template hopper --head-dim 128 --mask none --seqlen 16384 --config-filter m128n1 --warmup-ms 2000 --budget-ms 1000 --build-dir build --json $R/long-d128.json 2>&1 | stamp"
step long-d64 30 bash -c "$B bench --template hopper --head-dim 64 --mask none --seqlen 16384 --config-filter m192n128w16s3 --warmup-ms 2000 --budget-ms 1000 --build-dir build --json $R/long-d64.json 2>&1 | stamp"
kill $SMI
echo "left $(left)" >> $R/steps.txt
