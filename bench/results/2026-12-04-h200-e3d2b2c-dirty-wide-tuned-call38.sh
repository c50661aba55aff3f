#!/bin/bash
# The 256-key tile without overlap (d64): verify it on every d64 spec the space gives it,
# re-tune d64 bf16 unmasked and causal (timings of unchanged kernels carried by code
# hash), export, then the grid with the new database beside FA2 and cuDNN.
set -u
START=$(date +%s); LIMIT=${LIMIT:-580}
left() { echo $(( LIMIT - ($(date +%s) - START) )); }
R=$OUT/r; mkdir -p $R
step() {
  local name=$1 need=$2; shift 2
  if [ "$(left)" -lt "$need" ]; then echo "SKIP $name (left $(left))" | tee -a $R/steps.txt; return; fi
  local t0=$(date +%s)
  timeout $(( $(left) - 10 )) "$@" > $R/$name.log 2>&1
  echo "$name rc=$? $(( $(date +%s) - t0 ))s left $(left)" | tee -a $R/steps.txt
}
finish() { $B db export --db /tmp/db.sled --out $R/sm90-new.json > $R/export.log 2>&1; xz -T4 $R/sm90-new.json; tar czf $OUT/r.tgz -C $OUT r; rm -rf $R; }
trap finish EXIT
B=$PWD/.device/fa4-gen
xz -dc .device/fa4-gen-wide.xz > $B; chmod +x $B
xz -dc .device/sm90-cur.json.xz > /tmp/sm90.json
$B db import /tmp/sm90.json --db /tmp/db.sled -q > $R/import.log 2>&1
nvidia-smi -q | grep -iE "serial" | head -1 > $R/gpu.txt
step verify 60 timeout 120 $B verify --template hopper --head-dim 64 --dtype bf16,fp16 --mask none,causal,local --features none,sinks+softcap,paged --config-filter n256w12 -q --build-dir build
T="$B tune --arch sm90 --template hopper --db /tmp/db.sled --build-dir build --json"
step tune 60 $T --budget 240s --dtype bf16 --features none --mask none,causal --head-dim 64
step peers 200 python3 .device/peers.py --backends flash,cudnn --json $R/grid-peers.json
step grid 60 $B bench --db /tmp/db.sled --template hopper --build-dir build --json $R/grid-hopper.json -q
python3 .device/compare.py $R/grid-peers.json $R/grid-hopper.json --ours fa4-gen-hopper-tuned --vs flash,cudnn > $R/grid-compare.txt 2>&1
