#!/bin/bash
# Probe: the consumer waits for its K tile before taking its turn at the tensor cores
# (FA4's order) instead of after (v1 binary), against the committed templates (base),
# on the tiles the long cells serve; verified first; interleaved, two passes.
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
B0=$PWD/.device/fa4-base; B1=$PWD/.device/fa4-v1
xz -dc .device/fa4-gen-new.xz > $B0; xz -dc .device/fa4-v1.xz > $B1; chmod +x $B0 $B1
nvidia-smi -q | grep -iE "serial" | head -1 > $R/gpu.txt
step verify 60 $B1 verify --arch sm90 --template hopper --dtype bf16 --head-dim 64,128 --mask none,causal --config-filter overlap1_p --cases s1,q77_k513,varlen_ragged,split_q2200_k4100 --build-dir build-v1 --json $R/verify.json
for p in 1 2; do
  for v in base v1; do
    B=$B0; [ $v = v1 ] && B=$B1
    step d128-$v-$p 40 $B bench --template hopper --head-dim 128 --mask none,causal --seqlen 2048,16384 --config-filter w12s2_overlap1_p --budget-ms 50 -q --build-dir build-$v --json $R/d128-$v-$p.json
    step d64-$v-$p 40 $B bench --template hopper --head-dim 64 --mask none,causal --seqlen 2048,16384 --config-filter m192n128w16s --budget-ms 50 -q --build-dir build-$v --json $R/d64-$v-$p.json
  done
done
echo "left $(left)" >> $R/steps.txt
