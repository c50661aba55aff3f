#!/bin/bash
# Probe: does L2 read traffic cost clock under the power cap? The d128 unmasked 16k tiles
# as committed and with only the first 64-column box of each K/V tile loaded (half the
# K/V bytes through L2, the same math: wrong results, a power probe), sustained (2 s,
# then 1 s), alternating, SM clock and board power logged every 20 ms.
set -u
START=$(date +%s); LIMIT=${LIMIT:-420}
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
for b in new halfkv; do xz -dc .device/fa4-gen-$b.xz > .device/bin-$b; chmod +x .device/bin-$b; done
nvidia-smi -q | grep -iE "serial" | head -1 > $R/gpu.txt
stamp() { while IFS= read -r l; do echo "$(date +%s.%N) $l"; done; }
export -f stamp
F=w12s2_overlap1_pingpong1_ws1
for b in new halfkv; do
  step build-$b 120 bash -c ".device/bin-$b bench --template hopper --head-dim 128 --mask none --seqlen 512 --config-filter $F --budget-ms 1 --warmup-ms 0 -q --build-dir build-$b > /dev/null"
done
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_event_reasons.active --format=csv -lms 20 > $R/clocks.csv 2>&1 &
SMI=$!
for p in 1 2; do
  for b in new halfkv; do
    step long-$b-$p 60 bash -c ".device/bin-$b bench --template hopper --head-dim 128 --mask none --seqlen 16384 --config-filter $F --warmup-ms 2000 --budget-ms 1000 --build-dir build-$b --json $R/long-$b-$p.json 2>&1 | stamp"
  done
done
kill $SMI
echo "left $(left)" >> $R/steps.txt
