#!/bin/bash
# The finals ranked by the mean of their passes, and the 256-key tile's lazy twin: verify
# the twin, re-tune d64 bf16 unmasked and causal (every other timing carried by code hash),
# the grid beside FA2 and cuDNN (ours twice), then the other d64 specs, export returned.
set -u
START=$(date +%s); LIMIT=${LIMIT:-540}
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
T="$B tune --arch sm90 --template hopper --db /tmp/db.sled --build-dir build --json --head-dim 64"
step verify 60 $B verify --template hopper --head-dim 64 --dtype bf16,fp16 --mask none,causal,local --features none,sinks+softcap --config-filter n256w12s2_lazy1 -q --build-dir build
step tune-bf16 60 $T --budget 150s --dtype bf16 --features none --mask none,causal
step build 60 $B bench --db /tmp/db.sled --template hopper --build-dir build --seqlen 512 --budget-ms 5 -q
step peers 90 python3 .device/peers.py --backends flash,cudnn --json $R/grid-peers.json
step grid 40 $B bench --db /tmp/db.sled --template hopper --build-dir build --json $R/grid-hopper.json -q
step grid2 40 $B bench --db /tmp/db.sled --template hopper --build-dir build --json $R/grid-hopper2.json -q
python3 .device/compare.py $R/grid-peers.json $R/grid-hopper.json --ours fa4-gen-hopper-tuned --vs flash,cudnn > $R/grid-compare.txt 2>&1
python3 .device/compare.py $R/grid-peers.json $R/grid-hopper2.json --ours fa4-gen-hopper-tuned --vs flash,cudnn > $R/grid-compare2.txt 2>&1
step tune-fp16 40 $T --budget 60s --dtype fp16 --features none --mask none,causal
step tune-local 40 $T --budget 60s --dtype bf16,fp16 --features none --mask local
step tune-sinks 40 $T --budget 60s --dtype bf16,fp16 --features sinks --mask causal,local
step tune-softcap 40 $T --budget 60s --dtype bf16,fp16 --features softcap --mask causal,local
