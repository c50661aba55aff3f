#!/bin/bash
# The last call's tune built a new candidate without the finalists it joined, so ten
# keys kept one finalist's passes; this binary builds them and takes those keys' finals
# whole. Then every masked spec's new candidates, the grid beside FA2 and cuDNN (ours
# twice), the persistent tiles of the short causal cells side by side, and the finals
# not yet taken side by side; export returned.
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
B7="--buckets 128,256,512,1024,2048,4096,8192"
step tune-grid 40 $T --budget 90s --head-dim 64,128,256 --dtype bf16 --mask causal --features none
step tune-9a 40 $T --budget 90s --head-dim 128,256 --dtype bf16,fp16 --mask causal,local --features none,softcap
step tune-9b 30 $T --budget 40s --head-dim 192 --dtype bf16,fp16 --mask causal --features none,softcap
step tune-9c 30 $T --budget 40s --head-dim 64 --dtype bf16,fp16 --mask causal --features none,sinks,softcap
step tune-9d 30 $T --budget 30s --head-dim 64,192 --dtype bf16 --mask local --features softcap
step tune-7a 30 $T --budget 40s --head-dim 64,192 --dtype bf16,fp16 --mask local --features none $B7
step tune-7b 30 $T --budget 30s --head-dim 64 --dtype bf16,fp16 --mask local --features sinks $B7
step tune-7c 30 $T --budget 30s --head-dim 64,192 --dtype fp16 --mask local --features softcap $B7
step build 40 $B bench --db /tmp/db.sled --template hopper --build-dir build --seqlen 512 --budget-ms 5 -q
step peers 60 python3 .device/peers.py --backends flash,cudnn --json $R/grid-peers.json
step grid 30 $B bench --db /tmp/db.sled --template hopper --build-dir build --json $R/grid-hopper.json -q
step grid2 30 $B bench --db /tmp/db.sled --template hopper --build-dir build --json $R/grid-hopper2.json -q
python3 .device/compare.py $R/grid-peers.json $R/grid-hopper.json --ours fa4-gen-hopper-tuned --vs flash,cudnn > $R/grid-compare.txt 2>&1
python3 .device/compare.py $R/grid-peers.json $R/grid-hopper2.json --ours fa4-gen-hopper-tuned --vs flash,cudnn > $R/grid-compare2.txt 2>&1
step ab-causal 60 $B bench --template hopper --build-dir build --config-filter persistent1 --head-dim 64 128 256 --mask causal --seqlen 512 1024 2048 --budget-ms 100 --json $R/ab-causal.json -q
R2="$T --retake-finals"
step retake-d128 40 $R2 --budget 80s --head-dim 128 --dtype bf16,fp16 --mask local --features none,softcap
step retake-d128c 30 $R2 --budget 60s --head-dim 128 --dtype fp16 --mask causal --features none,softcap
step retake-d128cs 20 $R2 --budget 30s --head-dim 128 --dtype bf16 --mask causal --features softcap
step retake-d64n 20 $R2 --budget 20s --head-dim 64 --dtype fp16 --mask none --features none
