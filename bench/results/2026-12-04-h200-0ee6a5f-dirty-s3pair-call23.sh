#!/bin/bash
# Probe: a third K/V stage for the two-consumer 128x128 d128 tile, with and without a
# cluster (a pair waits for its slower block's slot: does a deeper ring absorb it?).
set -u
START=$(date +%s); LIMIT=${LIMIT:-400}
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
xz -dc .device/fa4-gen-s3.xz > $B; chmod +x $B
nvidia-smi -q | grep -iE "serial" | head -1 > $R/gpu.txt
stamp() { while IFS= read -r l; do echo "$(date +%s.%N) $l"; done; }
export -f stamp
step verify 90 $B verify --arch sm90 --template hopper --head-dim 128 --mask none --config-filter w12s3 -q --build-dir build --json $R/verify.json
step grid 60 $B bench --template hopper --head-dim 128 --mask none --seqlen 2048,4096,8192,16384 --config-filter m128n1 --build-dir build --json $R/grid.json
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_event_reasons.active --format=csv -lms 20 > $R/clocks.csv 2>&1 &
SMI=$!
for p in 1 2; do
step long-d128-$p 60 bash -c "$B bench --template hopper --head-dim 128 --mask none --seqlen 16384 --config-filter lazy1_overlap1_pingpong1_ws1 --warmup-ms 2000 --budget-ms 1000 --build-dir build --json $R/long-d128-$p.json 2>&1 | stamp"
done
kill $SMI
echo "left $(left)" >> $R/steps.txt
