#!/bin/bash
# (.device/sustained.py is bench/sustained.py as committed with these files, whose --flush mode is new)
# The short cells in the grid's protocol stretched to 2 s a cell (every run after an L2
# flush, timed alone, median; bench/sustained.py --flush) and back to back, fa4-gen's served
# kernels through the Python binding beside cuDNN, the SM clock and power every 20 ms:
# is cuDNN's lead in the grid's regime clock or work per clock?
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
timeout 200 python3 .device/sustained.py 2 $R/flushed.json --flush > $R/flushed.log 2>&1; echo "flushed rc=$?" >> $R/steps.txt
timeout 150 python3 .device/sustained.py 2 $R/b2b.json > $R/b2b.log 2>&1; echo "b2b rc=$?" >> $R/steps.txt
kill $SMI
cat $R/steps.txt
