#!/bin/bash
# Wave quantization probe (tile counts that fill the last round vs the grid's), then
# the placement question with one buffer moved at a time.
set -u
START=$(date +%s); LIMIT=${LIMIT:-330}
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
xz -dc .device/fa4-gen-new.xz > $B; chmod +x $B
xz -dc .device/sm90-cur.json.xz > /tmp/sm90.json
$B db import /tmp/sm90.json --db /tmp/db.sled -q > $R/import.log 2>&1
nvidia-smi -q | grep -iE "serial" | head -1 > $R/gpu.txt
BB="$B bench --db /tmp/db.sled --template hopper --mask none --build-dir build --budget-ms 100 -q"
for pass in 1 2; do
step w64-grid-$pass 30 $BB --head-dim 64 --seqlen 16384 --hidden 2048 --json $R/w64-grid-$pass.json
step w64-full-$pass 30 $BB --head-dim 64 --seqlen 16384 --hidden 2112 --json $R/w64-full-$pass.json
step w128-grid-$pass 30 $BB --head-dim 128 --seqlen 8192 --total-tokens 8192 --hidden 4096 --json $R/w128-grid-$pass.json
step w128-full-$pass 30 $BB --head-dim 128 --seqlen 8192 --total-tokens 8192 --hidden 4224 --json $R/w128-full-$pass.json
step w256-grid-$pass 30 $BB --head-dim 256 --seqlen 4096 --total-tokens 4096 --hidden 8192 --json $R/w256-grid-$pass.json
step w256-full-$pass 30 $BB --head-dim 256 --seqlen 4096 --total-tokens 4096 --hidden 8448 --json $R/w256-full-$pass.json
done
P="$B bench --db /tmp/db.sled --template hopper --head-dim 128 --mask causal --seqlen 4096 --placements 4 --build-dir build --budget-ms 60"
for buf in k q v o; do
step move-$buf 40 $P --move-buffer $buf --json $R/move-$buf.json
done
step move-all 40 $P --json $R/move-all.json
echo "left $(left)" >> $R/steps.txt
