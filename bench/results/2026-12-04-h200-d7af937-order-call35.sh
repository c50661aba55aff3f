#!/bin/bash
# Does the order of a call bias the short cells? Ours and cuDNN's short cells (512 to 2048
# keys) measured cold, then after a minute and a half of the long cells' load (hot), then
# again, with the SM clock, temperature and power logged every 200 ms.
set -u
START=$(date +%s); LIMIT=${LIMIT:-540}
left() { echo $(( LIMIT - ($(date +%s) - START) )); }
R=$OUT/r; mkdir -p $R
finish() { kill $SMI 2>/dev/null; cp $R/steps.txt $OUT/steps.txt 2>/dev/null; tar czf $OUT/r.tgz -C $OUT r; rm -rf $R; }
trap finish EXIT
nvidia-smi -q | grep -iE "serial" | head -1 > $R/gpu.txt
nvidia-smi --query-gpu=timestamp,clocks.sm,temperature.gpu,power.draw --format=csv,noheader -lms 200 > $R/clocks.csv &
SMI=$!
B=$PWD/.device/fa4-gen; xz -dc .device/fa4-gen-head.xz > $B; chmod +x $B
xz -dc .device/sm90-head.json.xz > /tmp/sm90.json
$B db import /tmp/sm90.json --db /tmp/db.sled -q > $R/import-db.log 2>&1
step() { local name=$1; shift; local t0=$(date +%s); echo "$name start $(( t0 - START ))" >> $R/steps.txt; "$@" > $R/$name.log 2>&1; echo "$name rc=$? $(( $(date +%s) - t0 ))s left $(left)" >> $R/steps.txt; }
# Compile first so that no build lands inside a timed phase.
step build timeout 120 $B bench --db /tmp/db.sled --template hopper --build-dir build --seqlen 512 --budget-ms 5 -q
sleep 20
step ours-cold timeout 60 $B bench --db /tmp/db.sled --template hopper --build-dir build --seqlen 512,1024,2048 -q --json $R/ours-cold.json
step cudnn-cold timeout 90 python3 .device/peers.py --backends cudnn --seqlens 512,1024,2048 --json $R/cudnn-cold.json
step heat timeout 150 python3 .device/peers.py --backends flash,cudnn --seqlens 4096,8192,16384 --json $R/heat.json
step ours-hot timeout 60 $B bench --db /tmp/db.sled --template hopper --build-dir build --seqlen 512,1024,2048 -q --json $R/ours-hot.json
step cudnn-hot timeout 90 python3 .device/peers.py --backends cudnn --seqlens 512,1024,2048 --json $R/cudnn-hot.json
[ "$(left)" -gt 80 ] && step ours-hot2 timeout 60 $B bench --db /tmp/db.sled --template hopper --build-dir build --seqlen 512,1024,2048 -q --json $R/ours-hot2.json
true
