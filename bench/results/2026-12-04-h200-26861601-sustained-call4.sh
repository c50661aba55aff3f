#!/bin/bash
# The short cells under sustained load: fa4-gen (Python binding, the served kernels from
# the shipped cache) and cuDNN back to back for 2 s each, twice, the SM clock and board
# power logged every 20 ms: is the gap to cuDNN at 512 tokens clock (power) or work per clock?
set -u
R=$OUT/r; mkdir -p $R
finish() { tar czf $OUT/r.tgz -C $OUT r; rm -rf $R; }
trap finish EXIT
nvidia-smi -q | grep -iE "serial" | head -1 > $R/gpu.txt
xz -dc .device/libfa4_gen.so.xz > python/fa4gen/libfa4_gen.so
mkdir -p generated && (cd generated && xz -dc ../.device/gen-sm90.tar.xz | tar xf -)
export PYTHONPATH=$PWD/python
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_event_reasons.active --format=csv -lms 20 > $R/clocks.csv 2>&1 &
SMI=$!
timeout 300 python3 .device/sustained_short.py 2 $R/sustained.json > $R/sustained.log 2>&1
echo "rc=$?" >> $R/sustained.log
kill $SMI
