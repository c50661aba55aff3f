#!/bin/bash
# FA4 (flash_attn.cute) and FlexAttention on sliding windows, sinks, softcap and the
# gpt-oss-20b layers (bench/peers_features.py) between two passes of ours (fa4-gen bench,
# tuned and default, both templates), in one call. The call before it only carried FA4's
# MLIR library into /tmp/stash (bench/fa4_wheels.sh); .device/ held the binary, the
# database export's d64/d128 bf16 causal and local records and a build folder of their
# picks and defaults (fa4-gen compile --config-filter, one run per pick).
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
finish() { tar czf $OUT/r.tgz -C $OUT r; rm -rf $R; }
trap finish EXIT
nvidia-smi -q | grep -iE "serial" | head -1 > $R/gpu.txt
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit --format=csv >> $R/gpu.txt
B=$PWD/.device/fa4-gen
xz -dc .device/fa4-gen-win.xz > $B; chmod +x $B
xz -dc .device/sm90-win.json.xz > /tmp/sm90-win.json
$B db import /tmp/sm90-win.json --db /tmp/db.sled -q > $R/import-db.log 2>&1
mkdir -p /tmp/wbx && tar xJf .device/wb.tar.xz -C /tmp/wbx
W=/tmp/wbx/wb
# Ours, tuned (the committed database) and default, both templates: causal with each
# feature, the windows, the gpt-oss-20b layers.
ours() {
  local p=$1 T="--db /tmp/db.sled --template hopper,portable --build-dir $W --head-dim 64,128 --seqlen 4096,16384 --budget-ms 100"
  step causal-$p 40 $B bench $T --mask causal --features none,sinks,softcap --json $R/causal-$p.json
  for w in 128 1024 4096; do
    step w$w-$p 30 $B bench $T --mask local --window $w,0 --json $R/w$w-$p.json
  done
  step layers-$p 30 $B bench --db /tmp/db.sled --template hopper,portable --build-dir $W --layers gpt-oss-20b --budget-ms 100 --json $R/layers-$p.json
}
# Call B: FA4 (flash_attn.cute) and FlexAttention on windows, sinks, softcap and the
# gpt-oss-20b layers, between two passes of ours, in one call.

S=/tmp/stash/ir.so.xz
[ -f $S ] || echo "no stash: a fresh machine, FA4 cannot import" | tee -a $R/steps.txt
mkdir -p /tmp/site && tar xJf .whl/site-rest.tar.xz -C /tmp/site
IR=/tmp/site/nvidia_cutlass_dsl/dsl_packages/cutlass/_mlir/_mlir_libs/_cutlass_ir.cu13.cpython-312-x86_64-linux-gnu.so
[ -f $S ] && xz -dc $S > $IR
export PYTHONPATH=/tmp/site:/tmp/site/nvidia_cutlass_dsl/dsl_packages
python3 -c "import flash_attn.cute as f, cutlass; print(f.__file__, cutlass.__file__)" > $R/import.log 2>&1
echo "import rc=$?" >> $R/steps.txt
ours 2
step peers 150 python3 bench/peers_features.py --layers --json $R/peers.json
ours 3
echo "left $(left)" >> $R/steps.txt
