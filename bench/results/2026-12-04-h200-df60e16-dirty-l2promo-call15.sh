#!/bin/bash
# Probe: the TMA maps' L2 promotion (256B today) at 128B, 64B and none: ncu's L2 sectors on
# one launch of the d128 plain 128x128 tile; then sustained timings (2 s settle, 500 ms)
# of the d128 and d64 leaders under each setting, interleaved, clocks logged.
set -u
START=$(date +%s); LIMIT=${LIMIT:-380}
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
xz -dc .device/fa4-l2.xz > $B; chmod +x $B
nvidia-smi -q | grep -iE "serial" | head -1 > $R/gpu.txt
C=m128n128w12s2_overlap1_pingpong1_ws1
step build 60 $B bench --template hopper --head-dim 64,128 --mask none --seqlen 512 --config-filter overlap1_p --budget-ms 1 --warmup-ms 0 -q --build-dir build
M=gpu__time_duration.sum,lts__t_sectors.sum,lts__t_requests.sum,lts__t_sector_hit_rate.pct,dram__bytes_read.sum
for l2 in 256 128 64 none; do
  step ncu-$l2 40 env FA4GEN_PROBE_L2=$l2 ncu --clock-control none -k regex:fa4_fwd -c 1 --metrics $M --csv $B bench --template hopper --head-dim 128 --mask none --seqlen 16384 --config-filter $C --budget-ms 1 --warmup-ms 0 -q --build-dir build
done
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,clocks_event_reasons.active --format=csv -lms 50 > $R/clocks.csv 2>&1 &
SMI=$!
for p in 1 2; do
  for l2 in 256 128; do
    step long-d128-$l2-$p 30 env FA4GEN_PROBE_L2=$l2 $B bench --template hopper --head-dim 128 --mask none --seqlen 16384 --config-filter m128n128w12s2_overlap1_p --warmup-ms 2000 --budget-ms 500 -q --build-dir build --json $R/long-d128-$l2-$p.json
    step long-d64-$l2-$p 20 env FA4GEN_PROBE_L2=$l2 $B bench --template hopper --head-dim 64 --mask none --seqlen 16384 --config-filter m192n128w16s3 --warmup-ms 2000 --budget-ms 500 -q --build-dir build --json $R/long-d64-$l2-$p.json
  done
done
kill $SMI
echo "left $(left)" >> $R/steps.txt
