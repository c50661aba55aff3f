#!/bin/bash
# The re-tuned database (cluster2 picks on long unmasked keys) beside FA2, cuDNN and FA4
# in one call; the rebuilt cache served through the Python binding (its check).
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
step pycheck 60 env PYTHONPATH=$PWD/python python3 -m fa4gen.check --head-dims 64,128,256 --json $R/pycheck.json
export PYTHONPATH=/tmp/site:/tmp/site/nvidia_cutlass_dsl/dsl_packages
step fa4-warm 150 python3 .device/peers.py --backends fa4 --seqlens 512 --json $R/fa4-warm.json
step peers 180 python3 .device/peers.py --backends flash,cudnn,fa4 --json $R/grid-peers.json
step grid 90 $B bench --db /tmp/db.sled --template hopper --build-dir build --json $R/grid-hopper.json
echo "left $(left)" >> $R/steps.txt
