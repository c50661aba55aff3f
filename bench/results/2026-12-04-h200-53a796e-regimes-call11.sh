#!/bin/bash
# The tiles of d128 and d64 unmasked 16k in two regimes: as the tuner and the grid time
# them (50 ms of back-to-back runs, then 200 ms) and sustained (2 s, then 500 ms), the
# SM clock and board power logged every 20 ms, each line time-stamped.
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
B=$PWD/.device/fa4-gen
xz -dc .device/fa4-gen-new.xz > $B; chmod +x $B
nvidia-smi -q | grep -iE "serial" | head -1 > $R/gpu.txt
stamp() { while IFS= read -r l; do echo "$(date +%s.%N) $l"; done; }
export -f stamp
# compile first, off the clock log
step build 120 bash -c "$B bench --template hopper --head-dim 128 --mask none --seqlen 512 --config-filter w12s2 --budget-ms 1 --warmup-ms 0 -q --build-dir build > /dev/null; $B bench --template hopper --head-dim 64 --mask none --seqlen 512 --config-filter w16s --budget-ms 1 --warmup-ms 0 -q --build-dir build > /dev/null"
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_event_reasons.active --format=csv -lms 20 > $R/clocks.csv 2>&1 &
SMI=$!
for p in 1 2; do
  step short-d128-$p 40 bash -c "$B bench --template hopper --head-dim 128 --mask none --seqlen 16384 --config-filter w12s2_overlap1_p --build-dir build --json $R/short-d128-$p.json 2>&1 | stamp"
  step long-d128-$p 80 bash -c "$B bench --template hopper --head-dim 128 --mask none --seqlen 16384 --config-filter w12s2_overlap1_p --warmup-ms 2000 --budget-ms 500 --build-dir build --json $R/long-d128-$p.json 2>&1 | stamp"
  step short-d64-$p 30 bash -c "$B bench --template hopper --head-dim 64 --mask none --seqlen 16384 --config-filter w16s --build-dir build --json $R/short-d64-$p.json 2>&1 | stamp"
  step long-d64-$p 60 bash -c "$B bench --template hopper --head-dim 64 --mask none --seqlen 16384 --config-filter w16s --warmup-ms 2000 --budget-ms 500 --build-dir build --json $R/long-d64-$p.json 2>&1 | stamp"
done
kill $SMI
echo "left $(left)" >> $R/steps.txt
