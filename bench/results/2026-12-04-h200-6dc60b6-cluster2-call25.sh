#!/bin/bash
# After the clusters landed (6dc60b6): FA4, fa4-gen (Python binding, shipped cache: the
# cluster pick at d128 16k) and cuDNN back to back for 3 s each on d128 and d64 unmasked
# 16k, twice, clocks logged; then the grid beside FA2, cuDNN and FA4 once more.
set -u
START=$(date +%s); LIMIT=${LIMIT:-400}
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
nvidia-smi -q | grep -iE "serial" | head -1 > $R/gpu.txt
S=/tmp/stash/ir.so.xz
[ -f $S ] || echo "no stash: a fresh machine, FA4 cannot import" | tee $R/stash.txt
mkdir -p /tmp/site && tar xJf .whl/site-rest.tar.xz -C /tmp/site
IR=/tmp/site/nvidia_cutlass_dsl/dsl_packages/cutlass/_mlir/_mlir_libs/_cutlass_ir.cu13.cpython-312-x86_64-linux-gnu.so
[ -f $S ] && xz -dc $S > $IR
B=$PWD/.device/fa4-gen
xz -dc .device/fa4-gen-cl.xz > $B; chmod +x $B
xz -dc .device/libfa4_gen.so.xz > python/fa4gen/libfa4_gen.so
tar xJf .device/gen-sm90.tar.xz
xz -dc .device/sm90-new.json.xz > /tmp/sm90.json
$B db import /tmp/sm90.json --db /tmp/db.sled -q > $R/import-db.log 2>&1
export PYTHONPATH=/tmp/site:/tmp/site/nvidia_cutlass_dsl/dsl_packages:$PWD/python
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_event_reasons.active --format=csv -lms 20 > $R/clocks.csv 2>&1 &
SMI=$!
step sustained 120 python3 .device/sustained.py 3 $R/sustained.json
kill $SMI
step peers 120 python3 .device/peers.py --backends flash,cudnn,fa4 --json $R/grid-peers.json
step grid 60 $B bench --db /tmp/db.sled --template hopper --build-dir build --json $R/grid-hopper.json
echo "left $(left)" >> $R/steps.txt
