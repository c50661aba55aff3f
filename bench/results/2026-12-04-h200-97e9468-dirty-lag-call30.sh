#!/bin/bash
# Lagging consumers (switch `lag`): verify every lag tile, then time them beside the
# served picks (same machine code under the new template) and cuDNN, twice, interleaved.
set -u
START=$(date +%s); LIMIT=${LIMIT:-560}
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
B=$PWD/.device/fa4-gen
xz -dc .device/fa4-gen-lag.xz > $B; chmod +x $B
LAGF=${LAGF:-lag}
for f in $LAGF; do
[ -n "${SKIPV:-}" ] || step verify-$f 200 $B verify --template hopper --head-dim 64,128 --dtype bf16 --mask none,causal,local --config-filter $f -q --build-dir build --json $R/verify-$f.json
done
[ -n "${SKIPV:-}" ] || step verify-fp16 120 $B verify --template hopper --head-dim 64,128 --dtype fp16 --mask causal --features sinks+softcap --config-filter ${LAGF%% *} -q --build-dir build --json $R/verify-fp16.json
served() {  # pass hd mask config seqlens
  $B bench --template hopper --head-dim $2 --mask $3 --config-filter $4 --seqlen $5 --budget-ms 100 -q --build-dir build --json $R/served-$1-$2-$3-$5.json
}
pass() {
  served $1 64 none m128n128w12s2_overlap1_persistent1_pingpong1_ws1 512
  served $1 64 none m128n176w12s2_overlap1_persistent1_pingpong1_ws1 1024
  served $1 64 none m192n128w16s2_overlap1_pingpong1_ws1 2048
  served $1 64 none m192n128w16s3_lazy1_overlap1_pingpong1_ws1 16384
  served $1 64 causal m128n128w12s2_mufuturn1_overlap1_persistent1_pingpong1_ws1 512,1024
  served $1 64 causal m192n128w16s2_lazy1_overlap1_pingpong1_ws1 2048
  served $1 64 causal m192n128w16s3_lazy1_overlap1_pingpong1_ws1 16384
  served $1 128 none m128n128w12s2_lazy1_overlap1_persistent1_pingpong1_ws1 512,1024,2048
  served $1 128 none m128n176w12s2_cluster2_lazy1_overlap1_pingpong1_ws1 16384
  served $1 128 causal m128n128w12s2_mufuturn1_overlap1_persistent1_pingpong1_ws1 512
  served $1 128 causal m128n128w12s2_lazy1_mufuturn1_overlap1_persistent1_pingpong1_ws1 1024,2048
  served $1 128 causal m128n128w12s2_lazy1_mufuturn1_overlap1_pingpong1_ws1 16384
  for f in $LAGF; do
  $B bench --template hopper --head-dim 64,128 --mask none,causal --config-filter $f --seqlen 512,1024,2048,16384 --budget-ms 100 -q --build-dir build --json $R/lag-$1-$f.json
  done
}
pass 1 > $R/pass1.log 2>&1; echo "pass1 left $(left)" >> $R/steps.txt
step peers 60 python3 .device/peers.py --backends cudnn --hdims 64,128 --seqlens 512,1024,2048,16384 --json $R/peers.json
[ "$(left)" -gt 120 ] && pass 2 > $R/pass2.log 2>&1; echo "pass2 left $(left)" >> $R/steps.txt
echo "left $(left)" >> $R/steps.txt
