#!/bin/bash
# Re-take the unmasked Hopper keys (the cluster2 tiles are new candidates there); every
# other record was carried here (`db carry`: same machine code). Export on exit.
set -u
START=$(date +%s); LIMIT=${LIMIT:-570}
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
xz -dc .device/fa4-gen-cl.xz > $B; chmod +x $B
xz -dc .device/sm90-carry.json.xz > /tmp/sm90.json
$B db import /tmp/sm90.json --db /tmp/db.sled -q > $R/import.log 2>&1
nvidia-smi -q | grep -iE "serial" | head -1 > $R/gpu.txt
T="$B tune --arch sm90 --template hopper --db /tmp/db.sled --build-dir build --json"
ALL=128,256,512,1024,2048,4096,8192,16384,32768
n=0
run() { n=$((n+1)); local b=$(( $(left) - 25 )); step t$n-$1 40 $T --budget ${b}s "${@:2}"; }
run bf16-d128 --dtype bf16 --features none --mask none --head-dim 128 --buckets $ALL
run bf16-d64 --dtype bf16 --features none --mask none --head-dim 64 --buckets $ALL
run bf16-d256 --dtype bf16 --features none --mask none --head-dim 256 --buckets $ALL
run fp16 --dtype fp16 --features none --mask none --head-dim 64,128,256 --buckets $ALL
run d192 --dtype bf16,fp16 --features none --mask none --head-dim 192 --buckets $ALL
echo "left $(left)" >> $R/steps.txt
