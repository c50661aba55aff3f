#!/bin/bash
# ncu's counters for FA4's and fa4-gen's d128 and d64 unmasked 16k kernels (one launch
# each, clocks left alone): instructions by pipe, shared-memory wavefronts, L2 and DRAM
# traffic, tensor-pipe activity, what each costs in power.
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
M=x
for d in 128 64; do
  timeout 240 ncu --clock-control none --profile-from-start off --set full --page raw --csv python3 .device/ncu_pair.py $d > $R/ncu-d$d.csv 2> $R/ncu-d$d.err
  echo "d$d rc=$?" >> $R/steps.txt
done
