#!/bin/bash
# The split workspace checked before every launch: the Python calls (a too-small
# workspace refused), the split cases verified through the checked path; then the
# grid beside the peers once more (a second machine's reading of the same database).
set -u
START=$(date +%s); LIMIT=${LIMIT:-300}
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
xz -dc .device/libfa4_gen.so.xz > python/fa4gen/libfa4_gen.so
tar xJf .device/gen-sm90.tar.xz
xz -dc .device/sm90-cur.json.xz > /tmp/sm90.json
$B db import /tmp/sm90.json --db /tmp/db.sled -q > $R/import.log 2>&1
nvidia-smi -q | grep -iE "serial" | head -1 > $R/gpu.txt
step pycheck 60 env PYTHONPATH=$PWD/python python3 -m fa4gen.check --head-dims 64,128 --json $R/pycheck.json
step verify 60 $B verify --arch sm90 --template hopper --dtype bf16 --head-dim 64,128 --mask none --config-filter persistent1 --cases split_q2200_k4100,split_gqa4to1_q2600_k4400 --build-dir build --json $R/verify.json
step peers 120 python3 .device/peers.py --backends flash,cudnn --json $R/grid-peers.json
step grid 90 $B bench --db /tmp/db.sled --template hopper --build-dir build --json $R/grid-hopper.json
echo "left $(left)" >> $R/steps.txt
