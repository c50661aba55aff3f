#!/bin/bash
# FA4, fa4-gen (Python binding, shipped cache) and cuDNN, each run back to back for 3 s
# on d128 and d64 unmasked 16k, twice, the SM clock and board power logged every 20 ms.
set -u
R=$OUT/r; mkdir -p $R
finish() { tar czf $OUT/r.tgz -C $OUT r; rm -rf $R; }
trap finish EXIT
nvidia-smi -q | grep -iE "serial" | head -1 > $R/gpu.txt
S=/tmp/stash/ir.so.xz
[ -f $S ] || echo "no stash: a fresh machine, FA4 cannot import" | tee $R/stash.txt
mkdir -p /tmp/site && tar xJf .whl/site-rest.tar.xz -C /tmp/site
IR=/tmp/site/nvidia_cutlass_dsl/dsl_packages/cutlass/_mlir/_mlir_libs/_cutlass_ir.cu13.cpython-312-x86_64-linux-gnu.so
[ -f $S ] && xz -dc $S > $IR
xz -dc .device/libfa4_gen.so.xz > python/fa4gen/libfa4_gen.so
tar xJf .device/gen-sm90.tar.xz
export PYTHONPATH=/tmp/site:/tmp/site/nvidia_cutlass_dsl/dsl_packages:$PWD/python
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_event_reasons.active --format=csv -lms 20 > $R/clocks.csv 2>&1 &
SMI=$!
timeout 400 python3 .device/sustained.py 3 $R/sustained.json > $R/sustained.log 2>&1
echo "rc=$?" >> $R/sustained.log
kill $SMI
