#!/bin/bash
# The d64 masked keys' finals taken again side by side (the last call's tune took only
# those a new pair joined), then what a launch costs beside what a tile costs: the
# served 512-key unmasked kernels and cuDNN at 512 to 16384 tokens (1 to 32 sequences),
# so a line through time against tiles separates the per-launch cost from the per-round one.
set -u
START=$(date +%s); LIMIT=${LIMIT:-400}
left() { echo $(( LIMIT - ($(date +%s) - START) )); }
R=$OUT/r; mkdir -p $R
step() {
  local name=$1 need=$2; shift 2
  if [ "$(left)" -lt "$need" ]; then echo "SKIP $name (left $(left))" | tee -a $R/steps.txt; return; fi
  local t0=$(date +%s)
  timeout $(( $(left) - 20 )) "$@" > $R/$name.log 2>&1
  echo "$name rc=$? $(( $(date +%s) - t0 ))s left $(left)" | tee -a $R/steps.txt
}
finish() { $B db export --db /tmp/db.sled --out $R/sm90-new.json > $R/export.log 2>&1; xz -T4 $R/sm90-new.json; cp $R/steps.txt $OUT/steps.txt; tar czf $OUT/r.tgz -C $OUT r; rm -rf $R; }
trap finish EXIT
B=$PWD/.device/fa4-gen
xz -dc .device/fa4-gen-head.xz > $B; chmod +x $B
xz -dc .device/sm90-head.json.xz > /tmp/sm90.json
$B db import /tmp/sm90.json --db /tmp/db.sled -q > $R/import.log 2>&1
nvidia-smi -q | grep -iE "serial" | head -1 > $R/gpu.txt
T="$B tune --arch sm90 --template hopper --db /tmp/db.sled --build-dir build --json --retake-finals"
B7="--buckets 128,256,512,1024,2048,4096,8192"
step retake-fp16-causal 30 $T --budget 60s --head-dim 64 --dtype fp16 --mask causal --features none,sinks,softcap
step retake-bf16-causal 30 $T --budget 40s --head-dim 64 --dtype bf16 --mask causal --features sinks,softcap
step retake-local 30 $T --budget 60s --head-dim 64 --dtype bf16,fp16 --mask local --features none,sinks $B7
step retake-local-sc-bf16 20 $T --budget 25s --head-dim 64 --dtype bf16 --mask local --features softcap
step retake-local-sc-fp16 20 $T --budget 25s --head-dim 64 --dtype fp16 --mask local --features softcap $B7
for TOK in 512 1024 2048 4096 8192 16384; do
  step icpt-peers-$TOK 15 python3 .device/peers.py --hdims 64,128,256 --seqlens 512 --total-tokens $TOK --causal 0 --backends cudnn --json $R/icpt-peers-$TOK.json
  step icpt-ours-$TOK 15 $B bench --db /tmp/db.sled --template hopper --build-dir build --head-dim 64,128,256 --seqlen 512 --total-tokens $TOK --mask none --budget-ms 100 --json $R/icpt-ours-$TOK.json -q
done
