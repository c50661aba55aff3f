#!/bin/bash
# The final picks (finals ranked by their passes' mean; d64 re-tuned with the 256-key tile
# on every spec): fp16 d64 local+sinks (the one spec whose tune the last call's budget
# stopped before the 256-key tile), then the grid beside FA2 and cuDNN, ours twice.
set -u
START=$(date +%s); LIMIT=${LIMIT:-400}
left() { echo $(( LIMIT - ($(date +%s) - START) )); }
R=$OUT/r; mkdir -p $R
step() {
  local name=$1 need=$2; shift 2
  if [ "$(left)" -lt "$need" ]; then echo "SKIP $name (left $(left))" | tee -a $R/steps.txt; return; fi
  local t0=$(date +%s)
  timeout $(( $(left) - 15 )) "$@" > $R/$name.log 2>&1
  echo "$name rc=$? $(( $(date +%s) - t0 ))s left $(left)" | tee -a $R/steps.txt
}
finish() { $B db export --db /tmp/db.sled --out $R/sm90-new.json > $R/export.log 2>&1; xz -T4 $R/sm90-new.json; cp $R/steps.txt $OUT/steps.txt; tar czf $OUT/r.tgz -C $OUT r; rm -rf $R; }
trap finish EXIT
B=$PWD/.device/fa4-gen
xz -dc .device/fa4-gen-head.xz > $B; chmod +x $B
xz -dc .device/sm90-head.json.xz > /tmp/sm90.json
$B db import /tmp/sm90.json --db /tmp/db.sled -q > $R/import.log 2>&1
nvidia-smi -q | grep -iE "serial" | head -1 > $R/gpu.txt
step tune-local-sinks 40 $B tune --arch sm90 --template hopper --db /tmp/db.sled --build-dir build --json --head-dim 64 --budget 120s --dtype fp16 --features sinks --mask local --buckets 128,256,512,1024,2048,4096,8192
step build 60 $B bench --db /tmp/db.sled --template hopper --build-dir build --seqlen 512 --budget-ms 5 -q
step peers 90 python3 .device/peers.py --backends flash,cudnn --json $R/grid-peers.json
step grid 40 $B bench --db /tmp/db.sled --template hopper --build-dir build --json $R/grid-hopper.json -q
step grid2 40 $B bench --db /tmp/db.sled --template hopper --build-dir build --json $R/grid-hopper2.json -q
python3 .device/compare.py $R/grid-peers.json $R/grid-hopper.json --ours fa4-gen-hopper-tuned --vs flash,cudnn > $R/grid-compare.txt 2>&1
python3 .device/compare.py $R/grid-peers.json $R/grid-hopper2.json --ours fa4-gen-hopper-tuned --vs flash,cudnn > $R/grid-compare2.txt 2>&1
