#!/bin/bash
# Probe: each descriptor of a k-step as one 64-bit add to the tile's (v3 binary), against
# the committed templates (base); verified first; interleaved; the tuner's regime (50 ms
# settle) twice and the sustained one (2 s) once, clocks logged.
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
B0=$PWD/.device/fa4-base; B1=$PWD/.device/fa4-v3
xz -dc .device/fa4-gen-new.xz > $B0; xz -dc .device/fa4-v3.xz > $B1; chmod +x $B0 $B1
nvidia-smi -q | grep -iE "serial" | head -1 > $R/gpu.txt
step verify 90 $B1 verify --arch sm90 --template hopper --dtype bf16,fp16 --head-dim 64,128,256 --mask none,causal --config-filter overlap1_p --cases s1,q77_k513,varlen_ragged,split_q2200_k4100 --build-dir build-v3 --json $R/verify.json
step build 60 bash -c "$B0 bench --template hopper --head-dim 64,128 --mask none --seqlen 512 --config-filter overlap1_p --budget-ms 1 --warmup-ms 0 -q --build-dir build-base > /dev/null"
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_event_reasons.active --format=csv -lms 20 > $R/clocks.csv 2>&1 &
SMI=$!
for p in 1 2; do
  for v in base v3; do
    B=$B0; [ $v = v3 ] && B=$B1
    step d128-$v-$p 30 $B bench --template hopper --head-dim 128 --mask none,causal --seqlen 2048,16384 --config-filter w12s2_overlap1_p --budget-ms 50 -q --build-dir build-$v --json $R/d128-$v-$p.json
    step d64-$v-$p 30 $B bench --template hopper --head-dim 64 --mask none,causal --seqlen 2048,16384 --config-filter m192n128w16s --budget-ms 50 -q --build-dir build-$v --json $R/d64-$v-$p.json
  done
done
for v in base v3; do
  B=$B0; [ $v = v3 ] && B=$B1
  step long-d128-$v 40 $B bench --template hopper --head-dim 128 --mask none --seqlen 16384 --config-filter m128n128w12s2_overlap1_p --warmup-ms 2000 --budget-ms 500 -q --build-dir build-$v --json $R/long-d128-$v.json
  step long-d64-$v 30 $B bench --template hopper --head-dim 64 --mask none --seqlen 16384 --config-filter m192n128w16s3 --warmup-ms 2000 --budget-ms 500 -q --build-dir build-$v --json $R/long-d64-$v.json
done
kill $SMI
echo "left $(left)" >> $R/steps.txt
