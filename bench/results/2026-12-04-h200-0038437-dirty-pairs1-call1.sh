#!/bin/bash
# Persistent pairs without turns on masked specs: the grid's causal specs tuned first
# (the new candidates screened and checked; keys they reach the finals of take them
# again side by side), the grid beside FA2 and cuDNN (ours twice), then the other masked
# specs as far as the time goes (a tune resumes); export returned.
set -u
START=$(date +%s); LIMIT=${LIMIT:-560}
left() { echo $(( LIMIT - ($(date +%s) - START) )); }
R=$OUT/r; mkdir -p $R
step() {
  local name=$1 need=$2; shift 2
  if [ "$(left)" -lt "$need" ]; then echo "SKIP $name (left $(left))" | tee -a $R/steps.txt; return; fi
  local t0=$(date +%s)
  timeout $(( $(left) - 20 )) "$@" > $R/$name.log 2>&1
  echo "$name rc=$? $(( $(date +%s) - t0 ))s left $(left)" | tee -a $R/steps.txt
}
finish() { $B db export --db /tmp/db.sled --out $R/sm90-new.json > $R/export.log 2>&1; xz -T4 $R/sm90-new.json; cp $R/steps.txt $OUT/steps.txt; tar czf $OUT/r.tgz -C $OUT r; rm -rf $R; }
trap finish EXIT
B=$PWD/.device/fa4-gen
xz -dc .device/fa4-gen-head.xz > $B; chmod +x $B
xz -dc .device/sm90-head.json.xz > /tmp/sm90.json
$B db import /tmp/sm90.json --db /tmp/db.sled -q > $R/import.log 2>&1
nvidia-smi -q | grep -iE "serial" | head -1 > $R/gpu.txt
T="$B tune --arch sm90 --template hopper --db /tmp/db.sled --build-dir build --json"
step tune-grid 60 $T --budget 170s --head-dim 64,128,256 --dtype bf16 --mask causal --features none
step build 40 $B bench --db /tmp/db.sled --template hopper --build-dir build --seqlen 512 --budget-ms 5 -q
step peers 60 python3 .device/peers.py --backends flash,cudnn --json $R/grid-peers.json
step grid 30 $B bench --db /tmp/db.sled --template hopper --build-dir build --json $R/grid-hopper.json -q
step grid2 30 $B bench --db /tmp/db.sled --template hopper --build-dir build --json $R/grid-hopper2.json -q
python3 .device/compare.py $R/grid-peers.json $R/grid-hopper.json --ours fa4-gen-hopper-tuned --vs flash,cudnn > $R/grid-compare.txt 2>&1
python3 .device/compare.py $R/grid-peers.json $R/grid-hopper2.json --ours fa4-gen-hopper-tuned --vs flash,cudnn > $R/grid-compare2.txt 2>&1
step tune-local-128-256 40 $T --budget 90s --head-dim 128,256 --dtype bf16 --mask local --features none
step tune-d192-causal 40 $T --budget 60s --head-dim 192 --dtype bf16 --mask causal --features none
step tune-fp16-causal 40 $T --budget 100s --head-dim 64,128,192,256 --dtype fp16 --mask causal --features none
