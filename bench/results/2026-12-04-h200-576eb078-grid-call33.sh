#!/bin/bash
# The grid at HEAD (kernels unchanged since 97e9468) beside FA2 and cuDNN in one call.
set -u
START=$(date +%s); LIMIT=${LIMIT:-300}
left() { echo $(( LIMIT - ($(date +%s) - START) )); }
R=$OUT/r; mkdir -p $R
finish() { cp $R/steps.txt $OUT/steps.txt 2>/dev/null; tar czf $OUT/r.tgz -C $OUT r; rm -rf $R; }
trap finish EXIT
nvidia-smi -q | grep -iE "serial" | head -1 > $R/gpu.txt
B=$PWD/.device/fa4-gen; xz -dc .device/fa4-gen-head.xz > $B; chmod +x $B
xz -dc .device/sm90-head.json.xz > /tmp/sm90.json
$B db import /tmp/sm90.json --db /tmp/db.sled -q > $R/import-db.log 2>&1
t0=$(date +%s); timeout 150 python3 .device/peers.py --backends flash,cudnn --json $R/grid-peers.json > $R/peers.log 2>&1; echo "peers rc=$? $(( $(date +%s) - t0 ))s left $(left)" >> $R/steps.txt
t0=$(date +%s); timeout $(( $(left) - 10 )) $B bench --db /tmp/db.sled --template hopper --build-dir build --json $R/grid-hopper.json -q > $R/grid.log 2>&1; echo "grid rc=$? $(( $(date +%s) - t0 ))s left $(left)" >> $R/steps.txt
python3 .device/compare.py $R/grid-peers.json $R/grid-hopper.json --ours fa4-gen-hopper-tuned --vs flash,cudnn > $R/grid-compare.txt 2>&1
